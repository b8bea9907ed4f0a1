//! Whisper from Hugging Face's layout (`openai/whisper-*`, and fine-tunes saved by
//! transformers' `WhisperForConditionalGeneration`): `model.safetensors` (or shards),
//! `config.json`, `generation_config.json` (the decoding tables; optional) and `tokenizer.json`.
//!
//! Names map one to one (`model.encoder.layers.N.self_attn.q_proj` is whisper.cpp's
//! `encoder.blocks.N.attn.query`); every tensor of the checkpoint is used or checked:
//! `proj_out.weight`, where saved, must equal the token embedding (Whisper ties them), a
//! `k_proj.bias` must be zeros, and anything else is an error naming it.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value as Json;

use super::{Dims, Side, Tables, check_side, json_ints, json_pairs, out_type, tensor_names, write};
use crate::convert::checkpoint::{Checkpoint, bad, read_json};
use crate::convert::{ConvertOptions, ConvertReport};
use crate::error::Result;

/// Whether the checkpoint's config is a Whisper's.
pub(in crate::convert) fn is_hf_whisper(ck: &Checkpoint) -> bool {
    ck.config.get("model_type").and_then(Json::as_str) == Some("whisper")
        || ck
            .config
            .get("architectures")
            .and_then(|a| a.get(0))
            .and_then(Json::as_str)
            .is_some_and(|a| a.starts_with("Whisper"))
}

/// The transformers name of a GGUF tensor (without the `model.` prefix).
fn hf_name(name: &str) -> Option<String> {
    match name {
        "encoder.positional_embedding" => return Some("encoder.embed_positions.weight".into()),
        "decoder.positional_embedding" => return Some("decoder.embed_positions.weight".into()),
        "decoder.token_embedding.weight" => return Some("decoder.embed_tokens.weight".into()),
        _ => {}
    }
    if name.starts_with("encoder.conv") {
        return Some(name.to_owned());
    }
    if let Some(p) = name.strip_prefix("encoder.ln_post.") {
        return Some(format!("encoder.layer_norm.{p}"));
    }
    if let Some(p) = name.strip_prefix("decoder.ln.") {
        return Some(format!("decoder.layer_norm.{p}"));
    }
    let (side, rest) = name.split_once(".blocks.")?;
    let (l, rest) = rest.split_once('.')?;
    let (module, param) = rest.rsplit_once('.')?;
    let proj = |p: &str| match p {
        "query" => Some("q_proj"),
        "key" => Some("k_proj"),
        "value" => Some("v_proj"),
        "out" => Some("out_proj"),
        _ => None,
    };
    let m = match module {
        "attn_ln" => "self_attn_layer_norm".to_owned(),
        "cross_attn_ln" => "encoder_attn_layer_norm".to_owned(),
        "mlp_ln" => "final_layer_norm".to_owned(),
        "mlp.0" => "fc1".to_owned(),
        "mlp.2" => "fc2".to_owned(),
        _ => match module.split_once('.')? {
            ("attn", p) => format!("self_attn.{}", proj(p)?),
            ("cross_attn", p) => format!("encoder_attn.{}", proj(p)?),
            _ => return None,
        },
    };
    Some(format!("{side}.layers.{l}.{m}.{param}"))
}

pub(in crate::convert) fn convert(
    ck: &Checkpoint,
    output: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport> {
    let dir = ck.dir.as_path();
    let out_ty = out_type(dir, opts)?;
    let u = |k: &str| ck.need_u64(&[k]).map(|v| v as usize);
    let act = ck
        .config
        .get("activation_function")
        .and_then(Json::as_str)
        .unwrap_or("gelu");
    if act != "gelu" {
        return Err(bad(
            dir,
            format!("activation_function '{act}': Whisper's is gelu"),
        ));
    }
    let side = |s: &str, ctx: &str| -> Result<Side> {
        let side = Side {
            n_ctx: u(ctx)?,
            n_embd: u("d_model")?,
            n_head: u(&format!("{s}_attention_heads"))?,
            n_layer: u(&format!("{s}_layers"))?,
        };
        check_side(dir, s, &side)?;
        let ffn = ck.hparam_u64(&[&format!("{s}_ffn_dim")]).unwrap_or(0) as usize;
        if ffn != 4 * side.n_embd {
            return Err(bad(
                dir,
                format!(
                    "{s}_ffn_dim {ffn}: Whisper's MLP is 4 × d_model = {}",
                    4 * side.n_embd
                ),
            ));
        }
        Ok(side)
    };
    let dims = Dims {
        enc: side("encoder", "max_source_positions")?,
        dec: side("decoder", "max_target_positions")?,
        n_mels: u("num_mel_bins")?,
        n_vocab: u("vocab_size")?,
    };

    // the checkpoint's names, with or without `model.` (WhisperModel saves none)
    let index: HashMap<&str, usize> = ck
        .tensors
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.strip_prefix("model.").unwrap_or(n), i))
        .collect();
    let mut used = vec![false; ck.tensors.len()];
    let mut plan: HashMap<String, usize> = HashMap::new();
    for (name, shape) in tensor_names(&dims) {
        let hf = hf_name(&name).expect("every GGUF name maps");
        let &i = index
            .get(hf.as_str())
            .ok_or_else(|| bad(dir, format!("no tensor model.{hf} (whisper.cpp's {name})")))?;
        if ck.shape(i) != shape.as_slice() {
            return Err(bad(
                dir,
                format!(
                    "{}: {:?}, where config.json's sizes make {shape:?}",
                    ck.tensors[i].0,
                    ck.shape(i)
                ),
            ));
        }
        used[i] = true;
        plan.insert(name, i);
    }
    // what is left: a tied output projection, zero key biases; nothing else
    let embd = plan["decoder.token_embedding.weight"];
    for (i, (name, _)) in ck.tensors.iter().enumerate() {
        if used[i] {
            continue;
        }
        let short = name.strip_prefix("model.").unwrap_or(name);
        if short == "proj_out.weight" {
            if ck.values(i)? != ck.values(embd)? {
                return Err(bad(
                    dir,
                    "proj_out.weight differs from the token embedding (Whisper ties them)",
                ));
            }
        } else if short.ends_with("k_proj.bias") {
            if ck.values(i)?.iter().any(|&b| b != 0.0) {
                return Err(bad(
                    dir,
                    format!("{name} is not zero (Whisper's keys have no bias)"),
                ));
            }
        } else {
            return Err(bad(
                dir,
                format!("tensor '{name}': nothing in Whisper uses it"),
            ));
        }
    }

    let tokens = vocabulary(dir, dims.n_vocab)?;
    let generation = read_json(dir, "generation_config.json")?.unwrap_or(Json::Null);
    let ints = |k: &str| json_ints(generation.get(k).or_else(|| ck.config.get(k)));
    let lang_ids: Vec<i32> = match generation.get("lang_to_id").and_then(Json::as_object) {
        Some(m) => {
            let mut ids: Vec<i32> = m
                .values()
                .filter_map(Json::as_i64)
                .map(|v| v as i32)
                .collect();
            ids.sort_unstable();
            ids
        }
        // a multilingual model's language tokens lie between <|startoftranscript|> and
        // <|translate|>
        None if dims.n_vocab >= 51865 => {
            let pos = |t: &str| tokens.iter().position(|x| x == t);
            match (pos("<|startoftranscript|>"), pos("<|translate|>")) {
                (Some(a), Some(b)) if a < b => (a as i32 + 1..b as i32).collect(),
                _ => Vec::new(),
            }
        }
        None => Vec::new(),
    };
    let alignment_heads = json_pairs(generation.get("alignment_heads"));
    let tables = Tables {
        suppress: ints("suppress_tokens"),
        suppress_begin: ints("begin_suppress_tokens"),
        lang_ids,
        alignment_heads,
        tokens,
        merges: super::merges(dir)?,
    };
    write(dir, output, opts, out_ty, &dims, tables, |name| {
        ck.values(plan[name])
    })
}

/// Every id's text from `tokenizer.json` (`model.vocab` and `added_tokens`). Older files stop
/// at `<|notimestamps|>`: the ids after it are the timestamps `<|0.00|>`… every 20 ms, named
/// here as transformers names them; any other missing id is an error.
fn vocabulary(dir: &Path, n_vocab: usize) -> Result<Vec<String>> {
    let tok = read_json(dir, "tokenizer.json")?.ok_or_else(|| {
        bad(
            dir,
            "no tokenizer.json (save the processor's WhisperTokenizerFast beside the model)",
        )
    })?;
    let mut tokens: Vec<Option<String>> = vec![None; n_vocab];
    let mut put = |text: &str, id: Option<u64>| -> Result<()> {
        let id = id.ok_or_else(|| bad(dir, format!("tokenizer.json: {text:?} has no id")))?;
        let slot = tokens.get_mut(id as usize).ok_or_else(|| {
            bad(
                dir,
                format!("tokenizer.json: {text:?} has id {id}, past the {n_vocab} embeddings"),
            )
        })?;
        *slot = Some(text.to_owned());
        Ok(())
    };
    let vocab = tok
        .get("model")
        .and_then(|m| m.get("vocab"))
        .and_then(Json::as_object)
        .ok_or_else(|| bad(dir, "tokenizer.json has no model.vocab"))?;
    for (text, id) in vocab {
        put(text, id.as_u64())?;
    }
    for t in tok
        .get("added_tokens")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        let text = t.get("content").and_then(Json::as_str).unwrap_or_default();
        put(text, t.get("id").and_then(Json::as_u64))?;
    }
    let no_ts = tokens
        .iter()
        .position(|t| t.as_deref() == Some("<|notimestamps|>"))
        .ok_or_else(|| bad(dir, "tokenizer.json has no <|notimestamps|>"))?;
    tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| match t {
            Some(t) => Ok(t),
            None if i > no_ts => Ok(format!("<|{:.2}|>", (i - no_ts - 1) as f64 * 0.02)),
            None => Err(bad(dir, format!("tokenizer.json has no token of id {i}"))),
        })
        .collect()
}
