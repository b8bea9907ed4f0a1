//! The token table: texts, scores, attributes, the text→id map, the special ids and the
//! end-of-generation set, loaded from `tokenizer.ggml.*` with llama.cpp's defaults and fix-ups
//! (so that a GGUF file tokenizes and stops exactly as it does there).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::{Error, Result};
use crate::gguf::{Array, GgufFile};
use crate::keys::{GENERAL_ARCHITECTURE, GENERAL_NAME, tokenizer as k};

/// Token attributes (llama.cpp's `llama_token_attr` bits).
pub mod attr {
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const NORMALIZED: u16 = 1 << 6;
    /// Whitespace left of this special token is removed when it is parsed from text.
    pub const LSTRIP: u16 = 1 << 7;
    /// Whitespace right of this special token is removed when it is parsed from text.
    pub const RSTRIP: u16 = 1 << 8;
    pub const SINGLE_WORD: u16 = 1 << 9;
}

/// FxHash: a fast non-cryptographic hasher for the text and merge maps (hash flooding is not a
/// concern for tables built from a model file).
#[derive(Default, Clone, Copy)]
pub(super) struct FxHasher(u64);

const FX_K: u64 = 0x517c_c1b7_2722_0a95;

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(FX_K);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(super) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Which tokenization algorithm the vocabulary uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// SentencePiece BPE over characters with byte fallback (`llama`).
    Spm,
    /// Merge-rank BPE (`gpt2`, `gemma4`).
    Bpe,
    /// WordPiece (`bert`).
    Wpm,
}

/// Special token ids; `None` where the vocabulary has none.
#[derive(Clone, Debug, Default)]
pub(super) struct Specials {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// Picks one of the special ids.
type Slot = fn(&mut Specials) -> &mut Option<u32>;

pub(super) struct Vocab {
    pub kind: Kind,
    pub model: String,
    pub pre: String,
    pub texts: Vec<String>,
    pub scores: Vec<f32>,
    pub attrs: Vec<u16>,
    /// Text (as bytes) → id; on duplicate texts the last id wins, as in llama.cpp.
    pub by_text: FxMap<Box<[u8]>, u32>,
    pub specials: Specials,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_sep: bool,
    pub add_space_prefix: bool,
    pub lowercase: bool,
    pub strip_accents: bool,
    pub max_token_len: usize,
    /// Sorted.
    pub eog: Vec<u32>,
    /// Ids that special-token parsing looks for, longest text first (ties: lower id first).
    pub special_tokens: Vec<u32>,
}

/// Token texts that end a turn, as llama.cpp recognises them (an id from the metadata is not
/// needed: `<|im_end|>` stops Qwen even though its eos id is `<|endoftext|>`).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];

fn tok_err(reason: impl Into<String>) -> Error {
    Error::Tokenizer {
        reason: reason.into(),
    }
}

impl Vocab {
    /// Loads the table; `warn` collects what llama.cpp would log as a warning.
    pub fn load(g: &GgufFile, warn: &mut Vec<String>) -> Result<Vocab> {
        let model = g.get_str(k::MODEL)?.to_owned();
        let mut pre = g.get_opt::<String>(k::PRE)?.unwrap_or_default();
        let mut s = Specials::default();
        let (kind, mut add_bos, add_eos, mut add_sep, mut add_space_prefix) = match model.as_str() {
            "llama" => {
                (s.bos, s.eos, s.unk) = (Some(1), Some(2), Some(0));
                (Kind::Spm, true, false, false, true)
            }
            "bert" => {
                (s.bos, s.unk, s.sep, s.pad, s.mask) =
                    (Some(101), Some(100), Some(102), Some(0), Some(103));
                (Kind::Wpm, true, false, true, false)
            }
            "gpt2" => {
                (s.bos, s.eos) = (Some(11), Some(11));
                (Kind::Bpe, false, false, false, false)
            }
            "gemma4" => {
                pre = "gemma4".to_owned();
                (Kind::Bpe, false, false, false, false)
            }
            _ => return Err(Error::TokenizerUnsupported { model }),
        };
        if kind == Kind::Bpe {
            let cfg = super::pretokenize::lookup(&pre).unwrap_or(super::pretokenize::FALLBACK);
            add_bos |= cfg.add_bos;
            add_sep |= cfg.add_sep;
            if cfg.no_bos {
                s.bos = None;
            }
        }
        if let Some(v) = g.get_opt::<bool>(k::ADD_SPACE_PREFIX)? {
            add_space_prefix = v;
        }

        let texts_in = g.get_str_array(k::TOKENS)?;
        let n = texts_in.len();
        let scores = match g.get(k::SCORES) {
            None => vec![0.0; n],
            Some(_) => {
                let v = g.get_f32_array(k::SCORES)?;
                if v.len() < n {
                    return Err(tok_err(format!(
                        "{} has {} entries for {n} tokens",
                        k::SCORES,
                        v.len()
                    )));
                }
                v
            }
        };
        let types = match g.get(k::TOKEN_TYPE) {
            None => None,
            Some(_) => {
                let v = g.get_i64_array(k::TOKEN_TYPE)?;
                if v.len() < n {
                    return Err(tok_err(format!(
                        "{} has {} entries for {n} tokens",
                        k::TOKEN_TYPE,
                        v.len()
                    )));
                }
                Some(v)
            }
        };

        let mut texts = Vec::with_capacity(n);
        let mut attrs = Vec::with_capacity(n);
        let mut by_text = FxMap::default();
        by_text.reserve(n);
        let mut max_token_len = 0;
        for (i, t) in texts_in.iter().enumerate() {
            let text = if t.is_empty() {
                warn.push(format!("empty token at index {i}"));
                format!("[EMPTY_{i}]")
            } else {
                t.clone()
            };
            by_text.insert(text.as_bytes().into(), i as u32);
            max_token_len = max_token_len.max(text.len());
            texts.push(text);
            attrs.push(match types.as_ref().map(|t| t[i]) {
                None | Some(1) => attr::NORMAL,
                Some(2) => attr::UNKNOWN,
                Some(3) => attr::CONTROL,
                Some(4) => attr::USER_DEFINED,
                Some(5) => attr::UNUSED,
                Some(6) => attr::BYTE,
                Some(_) => 0, // undefined
            });
        }

        // Special ids: a default outside the table is dropped; a bad metadata id keeps it.
        let slots: [(&str, Slot); 17] = [
            (k::BOS_ID, |s| &mut s.bos),
            (k::EOS_ID, |s| &mut s.eos),
            (k::EOT_ID, |s| &mut s.eot),
            (k::EOM_ID, |s| &mut s.eom),
            (k::UNK_ID, |s| &mut s.unk),
            (k::SEP_ID, |s| &mut s.sep),
            (k::PAD_ID, |s| &mut s.pad),
            (k::MASK_ID, |s| &mut s.mask),
            (k::FIM_PRE_ID, |s| &mut s.fim_pre),
            (k::FIM_SUF_ID, |s| &mut s.fim_suf),
            (k::FIM_MID_ID, |s| &mut s.fim_mid),
            (k::FIM_PAD_ID, |s| &mut s.fim_pad),
            (k::FIM_REP_ID, |s| &mut s.fim_rep),
            (k::FIM_SEP_ID, |s| &mut s.fim_sep),
            (k::PREFIX_ID, |s| &mut s.fim_pre),
            (k::SUFFIX_ID, |s| &mut s.fim_suf),
            (k::MIDDLE_ID, |s| &mut s.fim_mid),
        ];
        for (key, slot) in slots {
            let id = slot(&mut s);
            if id.is_some_and(|i| i as usize >= n) {
                warn.push(format!("default {key} = {} is out of range", id.unwrap()));
                *id = None;
            }
            if let Some(v) = g.get_opt::<i64>(key)? {
                if v >= 0 && (v as usize) < n {
                    *id = Some(v as u32);
                } else {
                    warn.push(format!("bad special token {key} = {v}, keeping {id:?}"));
                }
            }
        }

        let mut add_bos = g.get_opt::<bool>(k::ADD_BOS)?.unwrap_or(add_bos);
        let add_eos = g.get_opt::<bool>(k::ADD_EOS)?.unwrap_or(add_eos);
        add_sep = g.get_opt::<bool>(k::ADD_SEP)?.unwrap_or(add_sep);
        if pre == "gemma4" && !add_bos {
            add_bos = true; // llama.cpp forces it for Gemma 4
        }
        let lowercase = g.get_opt::<bool>(k::NORMALIZER_LOWERCASE)?.unwrap_or(true);
        let strip_accents = g
            .get_opt::<bool>(k::NORMALIZER_STRIP_ACCENTS)?
            .unwrap_or(lowercase);

        let mut v = Vocab {
            kind,
            model,
            pre,
            texts,
            scores,
            attrs,
            by_text,
            specials: s,
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix,
            lowercase,
            strip_accents,
            max_token_len,
            eog: Vec::new(),
            special_tokens: Vec::new(),
        };
        v.detect_by_text(warn);
        v.build_eog(warn);
        v.special_tokens = (0..n as u32)
            .filter(|&i| {
                v.attrs[i as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            })
            .collect();
        v.special_tokens
            .sort_by_key(|&i| (std::cmp::Reverse(v.texts[i as usize].len()), i));
        v.strip_attrs(g)?;
        Ok(v)
    }

    pub fn n(&self) -> usize {
        self.texts.len()
    }

    pub fn id(&self, text: &[u8]) -> Option<u32> {
        self.by_text.get(text).copied()
    }

    fn mark_control(&mut self, id: u32, warn: &mut Vec<String>) {
        let a = &mut self.attrs[id as usize];
        if *a & attr::CONTROL == 0 {
            warn.push(format!(
                "control-looking token {id} '{}' was not control-type; treating it as control",
                self.texts[id as usize]
            ));
            *a |= attr::CONTROL;
        }
    }

    /// EOT/EOM/FIM ids by well-known texts when the metadata has none, and the `unused` flag
    /// on control tokens named so. Where several texts of one list are present, llama.cpp
    /// takes whichever its hash map yields first; we take the one listed first (so
    /// `<|eot_id|>`/`<|im_end|>` win over `<|endoftext|>`).
    fn detect_by_text(&mut self, warn: &mut Vec<String>) {
        let lists: [(Slot, &[&str]); 8] = [
            (|s| &mut s.eot, EOT_TEXTS),
            (|s| &mut s.eom, &["<|eom_id|>"]),
            (|s| &mut s.fim_pre, FIM_PRE_TEXTS),
            (|s| &mut s.fim_suf, FIM_SUF_TEXTS),
            (|s| &mut s.fim_mid, FIM_MID_TEXTS),
            (|s| &mut s.fim_pad, FIM_PAD_TEXTS),
            (|s| &mut s.fim_rep, FIM_REP_TEXTS),
            (|s| &mut s.fim_sep, &["<|file_sep|>"]),
        ];
        for (slot, names) in lists {
            if slot(&mut self.specials).is_some() {
                continue;
            }
            let found = names.iter().find_map(|t| self.id(t.as_bytes()));
            if let Some(id) = found {
                *slot(&mut self.specials) = Some(id);
                self.mark_control(id, warn);
            }
        }
        for i in 0..self.n() {
            if self.attrs[i] & attr::CONTROL != 0 && self.texts[i].contains("unused") {
                self.attrs[i] |= attr::UNUSED;
            }
        }
    }

    fn build_eog(&mut self, warn: &mut Vec<String>) {
        let s = &self.specials;
        let mut eog: Vec<u32> = [s.fim_pad, s.fim_rep, s.fim_sep]
            .into_iter()
            .flatten()
            .collect();
        for i in 0..self.n() as u32 {
            let text = self.texts[i as usize].as_str();
            // gpt-oss: these are always rendered
            let gpt_oss = matches!(
                text,
                "<|channel|>" | "<|message|>" | "<|start|>" | "<|constrain|>"
            );
            if EOG_TEXTS.contains(&text) {
                eog.push(i);
                self.mark_control(i, warn);
            }
            if gpt_oss {
                self.attrs[i as usize] = attr::USER_DEFINED;
            }
        }
        let s = &self.specials;
        for (name, id) in [("eos", s.eos), ("eot", s.eot), ("eom", s.eom)] {
            if let Some(id) = id
                && !eog.contains(&id)
            {
                warn.push(format!(
                    "special {name} id {id} is not an end-of-generation token by text; adding it"
                ));
                eog.push(id);
            }
        }
        eog.sort_unstable();
        eog.dedup();
        let find = |eog: &[u32], names: &[&str]| {
            eog.iter()
                .copied()
                .find(|&i| names.contains(&self.texts[i as usize].as_str()))
        };
        // o200k_harmony and solar-open: "<|end|>" ends a message, not the generation.
        let has = |names: &[&str]| find(&eog, names).is_some();
        if let Some(end) = find(&eog, &["<|end|>"])
            && ((has(&["<|return|>"]) && has(&["<|call|>", "<|calls|>"]))
                || (has(&["<|call|>", "<|calls|>"]) && has(&["<|flush|>"])))
        {
            eog.retain(|&i| i != end);
            self.attrs[end as usize] = attr::USER_DEFINED;
        }
        // Gemma 4 and PLaMo have an ordinary "</s>".
        if let Some(s_id) = find(&eog, &["</s>"])
            && find(&eog, &["<|tool_response>", "<|plamo:eos|>"]).is_some()
        {
            eog.retain(|&i| i != s_id);
            self.attrs[s_id as usize] = attr::NORMAL;
        }
        self.eog = eog;
    }

    /// Per-model LSTRIP/RSTRIP attributes, which GGUF does not carry.
    fn strip_attrs(&mut self, g: &GgufFile) -> Result<()> {
        let name = g
            .get_opt::<String>(GENERAL_NAME)?
            .unwrap_or_default()
            .to_ascii_lowercase();
        let arch = g
            .get_opt::<String>(GENERAL_ARCHITECTURE)?
            .unwrap_or_default();
        let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
        let set = |v: &mut Vocab, text: &str, a: u16, on: bool| {
            if let Some(id) = v.id(text.as_bytes()) {
                let cur = &mut v.attrs[id as usize];
                *cur = if on { *cur | a } else { *cur & !a };
            }
        };
        if any(
            &self.pre,
            &["jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert"],
        ) || any(&arch, &["nomic-bert-moe", "jina-bert-v3"])
        {
            set(self, "<mask>", attr::LSTRIP, true);
        } else if any(&name, &["phi-3", "phi3"]) {
            for id in self.special_tokens.clone() {
                self.attrs[id as usize] |= attr::RSTRIP;
            }
            set(self, "</s>", attr::RSTRIP, true);
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                set(self, t, attr::RSTRIP, false);
            }
        } else if any(&name, &["modern-bert"]) {
            set(self, "[MASK]", attr::LSTRIP, true);
        }
        Ok(())
    }

    /// The byte of a `<0xXX>` token.
    pub fn byte_of(&self, id: u32) -> Option<u8> {
        let t = self.texts[id as usize].as_bytes();
        if t.len() == 6 && t.starts_with(b"<0x") && t[5] == b'>' {
            u8::from_str_radix(std::str::from_utf8(&t[3..5]).ok()?, 16).ok()
        } else {
            None
        }
    }

    /// The id of the `<0xXX>` token for a byte.
    pub fn byte_token(&self, b: u8) -> Option<u32> {
        self.id(format!("<0x{b:02X}>").as_bytes())
    }
}

/// Reads a merges array (`tokenizer.ggml.merges`) as `(left, right)` pairs split at the first
/// space after the first byte, as llama.cpp does; entries without a space give empty halves.
pub(super) fn merges(g: &GgufFile) -> Result<Vec<(String, String)>> {
    let arr = match g.get(k::MERGES) {
        None => return Err(tok_err(format!("BPE vocabulary without {}", k::MERGES))),
        Some(_) => g.get_array(k::MERGES)?,
    };
    let Array::String(list) = arr else {
        return Err(tok_err(format!("{} is not an array of strings", k::MERGES)));
    };
    Ok(list
        .iter()
        .map(|m| match m.bytes().skip(1).position(|b| b == b' ') {
            Some(p) => (m[..p + 1].to_owned(), m[p + 2..].to_owned()),
            None => (String::new(), String::new()),
        })
        .collect())
}
