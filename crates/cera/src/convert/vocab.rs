//! The tokenizer of a checkpoint as GGUF metadata, as convert_hf_to_gguf.py writes it.
//!
//! Byte-level BPE (`tokenizer.json` with a BPE model: GPT-2, Llama 3, Qwen, SmolLM, LFM2, ...):
//! the token list padded to the config's vocab size with `[PADi]` (unused), token types from
//! the added tokens, the merges, and the pre-tokenizer named the way the converter names it:
//! by hashing the ids the tokenizer gives a fixed check text. Here the ids come from our own
//! tokenizer built from the same vocabulary, tried with each pre-tokenizer we implement; the
//! hash table is the converter's, so a tokenizer it would not recognize is refused the same
//! way. Special tokens, add-BOS/EOS flags and the chat template follow gguf-py's SpecialVocab.

use std::path::Path;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use super::Kv;
use super::checkpoint::{bad, read_json};
use super::pre_hashes::{CHECK_TEXT, PRE_HASHES};
use crate::error::Result;
use crate::gguf::{Array, GgufFile, GgufWriter, Value};
use crate::tokenizer::Tokenizer;

const NORMAL: i32 = 1;
const UNUSED: i32 = 5;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

/// One distinct pre-tokenizer per configuration we implement (the hash picks the final name).
const PRE_CANDIDATES: &[&str] = &[
    "llama-bpe",
    "qwen2",
    "smollm",
    "gpt-2",
    "dbrx",
    "default",
    "qwen35",
    "deepseek-llm",
    "deepseek-coder",
    "deepseek-v3",
    "falcon",
    "roberta-bpe",
    "chatglm-bpe",
    "glm4",
    "laguna",
    "tekken",
    "bloom",
    "viking",
    "chameleon",
    "gpt-4o",
    "seed-coder",
    "bailingmoe",
    "ufakzeka",
    "minicpm5",
    "gemma4",
];

/// The added-token tests of the converter: text that marks a control token even when the
/// checkpoint does not flag it special.
pub(super) fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<｜") && t.ends_with("｜>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

struct Added {
    id: u64,
    content: String,
    special: bool,
}

/// Writes the byte-level BPE tokenizer keys of the checkpoint in `dir` into `kv`.
pub(super) fn gpt2(
    dir: &Path,
    config: &serde_json::Map<String, Json>,
    kv: &mut Kv,
) -> Result<String> {
    let tok = read_json(dir, "tokenizer.json")?
        .ok_or_else(|| bad(dir, "no tokenizer.json (byte-level BPE models need it)"))?;
    let model = tok
        .get("model")
        .filter(|m| m.get("type").and_then(Json::as_str) == Some("BPE"))
        .ok_or_else(|| bad(dir, "tokenizer.json's model is not BPE"))?;
    let (tokens, types) = vocab_base(dir, &tok, model, config)?;
    let merges = merges(dir, model)?;

    kv.set("tokenizer.ggml.model", "gpt2");
    kv.set("tokenizer.ggml.pre", "");
    kv.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    kv.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    let pre = detect_pre(dir, &tok, kv, &merges)?;
    kv.set("tokenizer.ggml.pre", pre.as_str());
    special_vocab(dir, config, merges, None, kv)?;
    Ok(pre)
}

/// BERT's WordPiece vocabulary (`tokenizer.json` with a WordPiece model) in the GGUF's
/// "phantom space" form: a word-initial piece gets a leading U+2581, a `##` continuation
/// loses its `##`, control tokens stay as they are.
pub(super) fn wordpiece(
    dir: &Path,
    config: &serde_json::Map<String, Json>,
    kv: &mut Kv,
    token_type_count: u64,
) -> Result<String> {
    let tok = read_json(dir, "tokenizer.json")?
        .ok_or_else(|| bad(dir, "no tokenizer.json (WordPiece models need it)"))?;
    let model = tok
        .get("model")
        .filter(|m| m.get("type").and_then(Json::as_str) == Some("WordPiece"))
        .ok_or_else(|| bad(dir, "tokenizer.json's model is not WordPiece"))?;
    let (tokens, types) = vocab_base(dir, &tok, model, config)?;
    let tokens: Vec<String> = tokens
        .into_iter()
        .zip(&types)
        .map(|(t, &ty)| {
            if ty == CONTROL {
                return t;
            }
            match t.strip_prefix("##") {
                Some(rest) => rest.to_owned(),
                None => format!("\u{2581}{t}"),
            }
        })
        .collect();
    let n = tokens.len();
    kv.set(
        "tokenizer.ggml.token_type_count",
        Value::U32(token_type_count as u32),
    );
    kv.set("tokenizer.ggml.model", "bert");
    kv.set("tokenizer.ggml.pre", "");
    kv.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    kv.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    let pre = detect_pre(dir, &tok, kv, &[])?;
    kv.set("tokenizer.ggml.pre", pre.as_str());
    special_vocab(dir, config, Vec::new(), Some(n), kv)?;
    Ok(pre)
}

/// convert_hf_to_gguf.py's `get_vocab_base`: the model's vocabulary and added tokens by id,
/// padded to the config's vocab size with unused `[PADi]`, with token types.
fn vocab_base(
    dir: &Path,
    tok: &Json,
    model: &Json,
    config: &serde_json::Map<String, Json>,
) -> Result<(Vec<String>, Vec<i32>)> {
    let vocab = model
        .get("vocab")
        .and_then(Json::as_object)
        .ok_or_else(|| bad(dir, "tokenizer.json has no model.vocab"))?;
    let added: Vec<Added> = tok
        .get("added_tokens")
        .and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| {
                    Some(Added {
                        id: t.get("id")?.as_u64()?,
                        content: t.get("content")?.as_str()?.to_owned(),
                        special: t.get("special").and_then(Json::as_bool).unwrap_or(false),
                    })
                })
                .collect()
        })
        .unwrap_or_default();

    // id -> text; added tokens take their ids (they may extend the model's vocabulary)
    let mut by_id: std::collections::BTreeMap<u64, &str> = std::collections::BTreeMap::new();
    for (text, id) in vocab {
        let id = id.as_u64().ok_or_else(|| {
            bad(
                dir,
                format!("tokenizer.json: the id of '{text}' is not a number"),
            )
        })?;
        by_id.insert(id, text);
    }
    for a in &added {
        by_id.insert(a.id, &a.content);
    }
    let max_id = by_id.keys().next_back().copied().unwrap_or(0);
    let n_vocab = match config.get("vocab_size").and_then(Json::as_u64) {
        Some(n) => n,
        None => by_id.len() as u64,
    };
    if max_id >= n_vocab {
        return Err(bad(
            dir,
            format!(
                "tokenizer.json has token id {max_id}, beyond config.json's vocab_size {n_vocab}"
            ),
        ));
    }
    let mut tokens = Vec::with_capacity(n_vocab as usize);
    let mut types = Vec::with_capacity(n_vocab as usize);
    for i in 0..n_vocab {
        let Some(&text) = by_id.get(&i) else {
            tokens.push(format!("[PAD{i}]"));
            types.push(UNUSED);
            continue;
        };
        // the converter looks an added token up by its text
        match added.iter().find(|a| a.content == text) {
            Some(_) => {
                let special = added.iter().find(|a| a.id == i).is_some_and(|a| a.special);
                if special || looks_special(text) {
                    tokens.push(text.to_owned());
                    types.push(CONTROL);
                } else {
                    tokens.push(text.replace('\u{2581}', " "));
                    types.push(USER_DEFINED);
                }
            }
            None => {
                tokens.push(text.to_owned());
                types.push(NORMAL);
            }
        }
    }
    Ok((tokens, types))
}

/// Merges as "a b" strings; the list-of-pairs form (transformers 4.45+) encodes a space inside
/// a part as U+0120 + 0x100, as gguf-py does.
pub(super) fn merges(dir: &Path, model: &Json) -> Result<Vec<String>> {
    let Some(list) = model.get("merges").and_then(Json::as_array) else {
        return Ok(Vec::new());
    };
    list.iter()
        .map(|m| match m {
            Json::String(s) => Ok(s.clone()),
            Json::Array(pair) if pair.len() == 2 => {
                let part = |p: &Json| {
                    p.as_str().map(|s| {
                        s.chars()
                            .map(|c| if c == ' ' { '\u{120}' } else { c })
                            .collect::<String>()
                    })
                };
                match (part(&pair[0]), part(&pair[1])) {
                    (Some(a), Some(b)) => Ok(format!("{a} {b}")),
                    _ => Err(bad(dir, "tokenizer.json: a merge is not a pair of strings")),
                }
            }
            _ => Err(bad(dir, "tokenizer.json: unknown merges format")),
        })
        .collect()
}

/// The special tokens a `TemplateProcessing` post-processor puts around a single sequence.
fn template_ends(tok: &Json) -> (Option<String>, Option<String>) {
    let Some(pp) = tok.get("post_processor").filter(|p| !p.is_null()) else {
        return (None, None);
    };
    let procs: Vec<&Json> = match pp.get("processors").and_then(Json::as_array) {
        Some(a) => a.iter().collect(),
        None => vec![pp],
    };
    for p in procs {
        if p.get("type").and_then(Json::as_str) != Some("TemplateProcessing") {
            continue;
        }
        let single = p.get("single").and_then(Json::as_array);
        let id = |e: Option<&Json>| {
            e.and_then(|e| e.get("SpecialToken"))
                .and_then(|s| s.get("id"))
                .and_then(Json::as_str)
                .map(str::to_owned)
        };
        if let Some(s) = single.filter(|s| s.len() > 1) {
            return (id(s.first()), id(s.last()));
        }
    }
    (None, None)
}

/// Names the pre-tokenizer by the converter's fingerprint of the check text's ids.
fn detect_pre(dir: &Path, tok: &Json, kv: &Kv, merges: &[String]) -> Result<String> {
    let mut w = GgufWriter::new();
    for (k, v) in &kv.0 {
        if k.starts_with("tokenizer.") {
            w.set(k.clone(), v.clone());
        }
    }
    if !merges.is_empty() {
        w.set(
            "tokenizer.ggml.merges",
            Value::Array(Array::String(merges.to_vec())),
        );
    }
    // the normalizer flags matter to WordPiece (lowercasing, accents)
    let mut norm = (None, None);
    if let Some(n) = tok.get("normalizer") {
        parse_normalizer(n, &mut norm);
    }
    if let Some(l) = norm.0 {
        w.set("tokenizer.ggml.normalizer.lowercase", l);
    }
    if let Some(a) = norm.1 {
        w.set("tokenizer.ggml.normalizer.strip_accents", a);
    }
    w.set("tokenizer.ggml.add_bos_token", false);
    let mut g = GgufFile::from_bytes(w.to_bytes()?)?;
    let pre_at = g
        .metadata
        .iter()
        .position(|(k, _)| k == "tokenizer.ggml.pre")
        .expect("set above");
    let (first, last) = template_ends(tok);
    let id_of = |t: &Tokenizer, s: &Option<String>| s.as_deref().and_then(|s| t.token_id(s));
    let mut tried = Vec::new();
    for cand in PRE_CANDIDATES {
        g.metadata[pre_at].1 = Value::String((*cand).into());
        let t = Tokenizer::from_gguf(&g)?;
        let mut ids: Vec<u32> = Vec::new();
        ids.extend(id_of(&t, &first));
        ids.extend(t.encode(CHECK_TEXT, false, true));
        ids.extend(id_of(&t, &last));
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        let hash = Sha256::digest(format!("[{}]", list.join(", ")).as_bytes());
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        // the converter's chain of `if`s: the last entry for a hash wins
        if let Some((_, name)) = PRE_HASHES.iter().rev().find(|(h, _)| *h == hex) {
            return Ok((*name).to_owned());
        }
        tried.push(hex);
    }
    Err(bad(
        dir,
        "the BPE pre-tokenizer is not one llama.cpp knows (its fingerprint of the check text \
         matches none in convert_hf_to_gguf.py's table, with any pre-tokenizer we implement)",
    ))
}

/// gguf-py's SpecialVocab: special token ids (below `n_vocab` when given), add-BOS/EOS/SEP
/// flags, chat template, merges.
pub(super) fn special_vocab(
    dir: &Path,
    config: &serde_json::Map<String, Json>,
    merges: Vec<String>,
    n_vocab: Option<usize>,
    kv: &mut Kv,
) -> Result<()> {
    let tok = read_json(dir, "tokenizer.json")?.unwrap_or(Json::Null);
    let tok = &tok;
    let mut types: Vec<&str> = vec!["bos", "eos", "unk", "sep", "pad", "cls", "mask"];
    let mut ids: Vec<(String, u64)> = Vec::new();
    let mut add: Vec<(String, bool)> = Vec::new();
    let set_id = |ids: &mut Vec<(String, u64)>, typ: &str, id: Option<u64>| {
        if let Some(id) = id
            && n_vocab.is_none_or(|n| (id as usize) < n)
            && !ids.iter().any(|(t, _)| t == typ)
        {
            ids.push((typ.to_owned(), id));
        }
    };
    let set_add = |add: &mut Vec<(String, bool)>, typ: &str, v: bool, overwrite: bool| match add
        .iter_mut()
        .find(|(t, _)| t == typ)
    {
        Some(e) if overwrite => e.1 = v,
        Some(_) => {}
        None => add.push((typ.to_owned(), v)),
    };
    let mut tcfg = match read_json(dir, "tokenizer_config.json")? {
        Some(Json::Object(m)) => Some(m),
        _ => None,
    };
    let added = tok
        .get("added_tokens")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    let content = |v: Option<&Json>| -> Option<String> {
        match v? {
            Json::String(s) => Some(s.clone()),
            Json::Object(o) => o.get("content")?.as_str().map(str::to_owned),
            _ => None,
        }
    };
    let mut normalizer = (None, None);
    if let Some(n) = tok.get("normalizer") {
        parse_normalizer(n, &mut normalizer);
    }

    // the post-processor's view of BOS/EOS
    if let Some(tc) = tcfg.as_mut() {
        let special_bos = content(tc.get("bos_token"));
        let special_cls = content(tc.get("cls_token"));
        let special_eos = content(tc.get("eos_token"));
        let special_sep = content(tc.get("sep_token"));
        if special_bos.is_none()
            && let Some(c) = &special_cls
        {
            tc.insert("bos_token".into(), Json::String(c.clone()));
        }
        if special_eos.is_none()
            && let Some(s) = &special_sep
        {
            tc.insert("eos_token".into(), Json::String(s.clone()));
        }
    }
    if let Some(pp) = tok.get("post_processor").filter(|p| !p.is_null()) {
        let procs: Vec<&Json> = match pp.get("processors").and_then(Json::as_array) {
            Some(a) => a.iter().collect(),
            None => vec![pp],
        };
        for p in procs {
            match p.get("type").and_then(Json::as_str) {
                Some("ByteLevel") => {
                    set_add(&mut add, "bos", false, false);
                    set_add(&mut add, "eos", false, false);
                }
                Some("RobertaProcessing") => {
                    set_add(&mut add, "bos", true, true);
                    set_add(&mut add, "eos", true, true);
                    set_add(&mut add, "sep", true, true);
                }
                Some("TemplateProcessing") => {
                    template_flags(p, tcfg.as_mut(), &mut types, &mut add);
                }
                _ => {}
            }
        }
    }
    let mut chat_template = None;
    if let Some(tc) = &tcfg {
        chat_template = match tc.get("chat_template") {
            Some(Json::String(s)) => Some(s.clone()),
            Some(Json::Array(list)) => named_templates(list),
            _ => std::fs::read_to_string(dir.join("chat_template.jinja"))
                .ok()
                .or_else(|| {
                    read_json(dir, "chat_template.json")
                        .ok()
                        .flatten()
                        .and_then(|j| j.get("chat_template")?.as_str().map(str::to_owned))
                }),
        };
        for typ in &types {
            if let Some(Json::Bool(b)) = tc.get(&format!("add_{typ}_token")) {
                set_add(&mut add, typ, *b, false);
            }
            let Some(c) = content(tc.get(&format!("{typ}_token"))) else {
                continue;
            };
            let id = added
                .iter()
                .find(|a| a.get("content").and_then(Json::as_str) == Some(c.as_str()))
                .and_then(|a| a.get("id")?.as_u64());
            set_id(&mut ids, typ, id);
        }
    }
    for typ in &types {
        set_id(
            &mut ids,
            typ,
            config
                .get(&format!("{typ}_token_id"))
                .and_then(Json::as_u64),
        );
    }

    if !merges.is_empty() {
        kv.set("tokenizer.ggml.merges", Value::Array(Array::String(merges)));
    }
    for (typ, id) in ids {
        let key = match typ.as_str() {
            "bos" => "bos_token_id",
            "eos" => "eos_token_id",
            "unk" => "unknown_token_id",
            "sep" => "seperator_token_id",
            "pad" => "padding_token_id",
            "mask" => "mask_token_id",
            "eot" => "eot_token_id",
            "eom" => "eom_token_id",
            _ => continue, // gguf-py has no key for it (cls)
        };
        kv.set(format!("tokenizer.ggml.{key}"), Value::U32(id as u32));
    }
    for (typ, v) in add {
        if matches!(typ.as_str(), "bos" | "eos" | "sep") {
            kv.set(format!("tokenizer.ggml.add_{typ}_token"), v);
        }
    }
    if let Some(t) = chat_template {
        kv.set("tokenizer.chat_template", t);
    }
    if let Some(l) = normalizer.0 {
        kv.set("tokenizer.ggml.normalizer.lowercase", l);
    }
    if let Some(s) = normalizer.1 {
        kv.set("tokenizer.ggml.normalizer.strip_accents", s);
    }
    Ok(())
}

/// A list of named templates: the default one (gguf-py writes named lists as separate keys
/// only through its own writer; the default is what runs).
fn named_templates(list: &[Json]) -> Option<String> {
    list.iter()
        .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
        .or(list.first())
        .and_then(|t| t.get("template")?.as_str().map(str::to_owned))
}

fn parse_normalizer(n: &Json, out: &mut (Option<bool>, Option<bool>)) {
    match n.get("type").and_then(Json::as_str) {
        Some("Lowercase") => out.0 = Some(true),
        Some("StripAccents") => out.1 = Some(true),
        Some("BertNormalizer") => {
            if let Some(l) = n.get("lowercase").and_then(Json::as_bool) {
                out.0 = Some(l);
            }
            if let Some(s) = n.get("strip_accents").and_then(Json::as_bool) {
                out.1 = Some(s);
            }
        }
        Some("Sequence") => {
            for m in n
                .get("normalizers")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                parse_normalizer(m, out);
            }
        }
        _ => {}
    }
}

/// The single-sequence template's leading/trailing special tokens as add-BOS/EOS flags.
fn template_flags(
    p: &Json,
    tcfg: Option<&mut serde_json::Map<String, Json>>,
    types: &mut Vec<&str>,
    add: &mut Vec<(String, bool)>,
) {
    let single = p
        .get("single")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    if single.len() <= 1 {
        return;
    }
    let sid = |e: &Json| {
        e.get("SpecialToken")
            .and_then(|s| s.get("id"))
            .and_then(Json::as_str)
            .map(str::to_owned)
    };
    let Some(tc) = tcfg else {
        // without a tokenizer_config.json the template's ends are BOS and EOS
        for (typ, e) in [("bos", &single[0]), ("eos", &single[single.len() - 1])] {
            if sid(e).is_some() {
                match add.iter_mut().find(|(t, _)| t == typ) {
                    Some(a) => a.1 = true,
                    None => add.push((typ.to_owned(), true)),
                }
            }
        }
        return;
    };
    let content = |tc: &serde_json::Map<String, Json>, k: &str| match tc.get(k) {
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Object(o)) => o.get("content").and_then(Json::as_str).map(str::to_owned),
        _ => None,
    };
    let mut put = |typ: &str, v: bool| match add.iter_mut().find(|(t, _)| t == typ) {
        Some(e) => e.1 = v,
        None => add.push((typ.to_owned(), v)),
    };
    if let Some(first) = sid(&single[0]) {
        let bos = content(tc, "bos_token");
        let cls = content(tc, "cls_token");
        let known = bos.as_deref() == Some(&first) || cls.as_deref() == Some(&first);
        if !known {
            if bos.is_none() {
                tc.insert("bos_token".into(), Json::String(first.clone()));
            }
            if cls.is_none() {
                tc.insert("cls_token".into(), Json::String(first.clone()));
            }
        }
        let bos = content(tc, "bos_token");
        let cls = content(tc, "cls_token");
        put(
            "bos",
            bos.as_deref() == Some(&first) || cls.as_deref() == Some(&first),
        );
    }
    if let Some(last) = sid(&single[single.len() - 1]) {
        let eos = content(tc, "eos_token");
        if eos.as_deref() != Some(&last) {
            if let Some(e) = &eos {
                if !types.contains(&"eot") {
                    types.push("eot");
                    tc.insert("eot_token".into(), Json::String(e.clone()));
                } else if !types.contains(&"eom") {
                    types.push("eom");
                    tc.insert("eom_token".into(), Json::String(e.clone()));
                }
            }
            tc.insert("eos_token".into(), Json::String(last.clone()));
        }
        put("eos", true);
    }
    // the pair template `A [SEP] B`: whether a separator goes between two sequences
    let pair = p
        .get("pair")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    if pair.is_empty() {
        return;
    }
    let first = sid(&single[0]);
    let last = sid(&single[single.len() - 1]);
    let start = usize::from(first.is_some() && sid(&pair[0]) == first);
    let stop = pair.len() - usize::from(last.is_some() && sid(&pair[pair.len() - 1]) == last);
    if start >= stop {
        return;
    }
    let inner = &pair[start..stop];
    let seq = |e: &Json| {
        e.get("Sequence")
            .and_then(|s| s.get("id"))
            .and_then(Json::as_str)
            .map(str::to_owned)
    };
    if seq(&inner[0]).as_deref() != Some("A")
        || seq(&inner[inner.len() - 1]).as_deref() != Some("B")
        || inner.len() <= 2
    {
        return;
    }
    let middle = &inner[1..inner.len() - 1];
    let sep = content(tc, "sep_token");
    let eos = content(tc, "eos_token");
    let is_sep = |t: &Option<String>| t.is_some() && (*t == sep || *t == eos);
    let mut add_sep = is_sep(&sid(&middle[0])) && last.is_none();
    if middle.len() == 2 && is_sep(&sid(&middle[1])) {
        add_sep = true;
    }
    put("sep", add_sep);
    if add_sep
        && sep.is_none()
        && let Some(e) = eos
    {
        tc.insert("sep_token".into(), Json::String(e));
    }
}
