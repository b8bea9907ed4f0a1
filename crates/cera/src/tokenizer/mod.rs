//! Text ↔ token ids from a GGUF file's `tokenizer.ggml.*` metadata, matching llama.cpp token
//! for token.
//!
//! - `gpt2`: byte-level BPE, pre-tokenized as `tokenizer.ggml.pre` says (`pretokenize.rs`);
//!   `gemma4`: BPE over UTF-8 with `<0xXX>` byte fallback.
//! - `llama`: SentencePiece BPE with byte fallback (`spm.rs`).
//! - `bert`: WordPiece (`wordpiece.rs`).
//!
//! Special tokens are cut out of the text first (`special.rs`); decoding is per-token bytes,
//! with [`StreamDecoder`] for output that must not split UTF-8 characters.
//!
//! An unknown `tokenizer.ggml.pre` is not an error: it falls back to llama.cpp's "default"
//! pre-tokenizer (the one it uses when the key is absent) and records a warning, see
//! [`Tokenizer::warnings`].

mod bpe;
mod decode;
mod pretokenize;
mod special;
mod spm;
mod unicode;
mod unicode_data;
mod vocab;
mod wordpiece;

use crate::error::Result;
use crate::gguf::GgufFile;

pub use decode::StreamDecoder;
/// The Unicode version of the character tables (the one llama.cpp's tables use).
pub use unicode_data::UNICODE_VERSION;
pub use vocab::attr;

use bpe::{Bpe, Scratch};
use pretokenize::PreTokenizer;
use special::{Fragment, Specials};
use spm::Spm;
use vocab::{FxMap, Kind, Vocab};

enum Model {
    Spm(Spm),
    Bpe {
        bpe: Bpe,
        pre: PreTokenizer,
        escape_spaces: bool,
        /// Gemma 4: a run of newlines that is a token is taken whole.
        newline_runs: bool,
    },
    Wpm,
}

/// A tokenizer loaded from GGUF metadata.
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    specials: Specials,
    pieces: Vec<Box<[u8]>>,
    pre_name: &'static str,
    warnings: Vec<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &self.vocab.model)
            .field("pre", &self.vocab.pre)
            .field("n_vocab", &self.n_vocab())
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    pub fn from_gguf(g: &GgufFile) -> Result<Tokenizer> {
        let mut warnings = Vec::new();
        let vocab = Vocab::load(g, &mut warnings)?;
        let (model, pre_name, byte_level) = match vocab.kind {
            Kind::Spm => (Model::Spm(Spm::new(&vocab)), "spm", false),
            Kind::Wpm => (Model::Wpm, "wpm", false),
            Kind::Bpe => {
                let cfg = match pretokenize::lookup(&vocab.pre) {
                    Some(c) => c,
                    None => {
                        warnings.push(format!(
                            "unknown pre-tokenizer '{}'; falling back to 'default' (llama.cpp's \
                             choice when tokenizer.ggml.pre is missing): tokens may differ \
                             from the model's own tokenizer",
                            vocab.pre
                        ));
                        pretokenize::FALLBACK
                    }
                };
                if vocab.pre.is_empty() {
                    warnings.push(
                        "tokenizer.ggml.pre is missing; using the 'default' pre-tokenizer".into(),
                    );
                }
                let mut bpe = Bpe::new(&vocab, &vocab::merges(g)?, cfg.byte_level);
                bpe.ignore_merges = cfg.ignore_merges;
                let model = Model::Bpe {
                    bpe,
                    pre: PreTokenizer::new(&cfg)?,
                    escape_spaces: cfg.escape_spaces,
                    newline_runs: cfg.name == "gemma4",
                };
                (model, cfg.name, cfg.byte_level)
            }
        };
        let specials = Specials::new(&vocab);
        let pieces = decode::pieces(&vocab, byte_level);
        Ok(Tokenizer {
            vocab,
            model,
            specials,
            pieces,
            pre_name,
            warnings,
        })
    }

    /// Tokenizes `text`. `add_special` adds BOS/EOS as the model asks ([`Self::add_bos`],
    /// [`Self::add_eos`]; WordPiece: CLS and SEP); `parse_special` turns the text of control
    /// tokens such as `<|im_start|>` into those tokens (user-defined tokens always are).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let v = &self.vocab;
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        let frags = self.specials.split(text, parse_special);
        match &self.model {
            Model::Spm(spm) => {
                let mut prev_special = true; // the text start gets the space prefix
                if add_special && v.add_bos {
                    out.extend(v.specials.bos);
                }
                let mut buf = String::new();
                for f in frags {
                    match f {
                        Fragment::Text(t) => {
                            buf.clear();
                            if v.add_space_prefix && prev_special {
                                buf.push(' ');
                            }
                            buf.push_str(t);
                            let escaped = buf.replace(' ', "\u{2581}");
                            spm.encode(v, &escaped, &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
                if add_special && v.add_eos {
                    out.extend(v.specials.eos);
                }
            }
            Model::Bpe {
                bpe,
                pre,
                escape_spaces,
                newline_runs,
            } => {
                if add_special && v.add_bos {
                    out.extend(v.specials.bos);
                }
                let mut words = Vec::new();
                let mut scratch = Scratch::default();
                for f in frags {
                    match f {
                        Fragment::Text(t) => {
                            let escaped;
                            let t = if *escape_spaces {
                                escaped = t.replace(' ', "\u{2581}");
                                escaped.as_str()
                            } else {
                                t
                            };
                            words.clear();
                            pre.split(t, &mut words);
                            // Long texts repeat words: reuse the ids of a word seen before.
                            let use_cache = words.len() > 64;
                            let mut cache: FxMap<&[u8], (u32, u32)> = FxMap::default();
                            for &(s, e) in &words {
                                let w = &t.as_bytes()[s as usize..e as usize];
                                if use_cache && let Some(&(at, n)) = cache.get(w) {
                                    out.extend_from_within(at as usize..(at + n) as usize);
                                    continue;
                                }
                                let at = out.len();
                                if *newline_runs
                                    && w.iter().all(|&b| b == b'\n')
                                    && let Some(id) = bpe.token(w)
                                {
                                    out.push(id);
                                } else {
                                    bpe.encode_word(w, &mut out, &mut scratch);
                                }
                                if use_cache && w.len() <= 48 {
                                    cache.insert(w, (at as u32, (out.len() - at) as u32));
                                }
                            }
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
                if add_special && v.add_eos {
                    out.extend(v.specials.eos);
                }
            }
            Model::Wpm => {
                if add_special {
                    out.extend(v.specials.bos);
                }
                for f in frags {
                    match f {
                        Fragment::Text(t) => wordpiece::encode(v, t, &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
                if add_special {
                    out.extend(v.specials.sep);
                }
            }
        }
        out
    }

    /// The text of a sequence of tokens: their pieces ([`Self::token_bytes`]) concatenated,
    /// special tokens included, invalid UTF-8 replaced by U+FFFD. Ids past the vocabulary
    /// are skipped.
    pub fn decode(&self, ids: &[u32]) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids)).into_owned()
    }

    /// As [`Self::decode`], without the UTF-8 check.
    pub fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        for &id in ids {
            out.extend_from_slice(self.token_bytes(id));
        }
        out
    }

    /// A decoder for tokens arriving one at a time.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }

    /// The bytes a token stands for (empty for ids past the vocabulary).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.pieces.get(id as usize).map_or(&[], |p| p)
    }

    /// The token's text as stored in the vocabulary (GPT-2 byte characters, U+2581 spaces).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.texts.get(id as usize).map(String::as_str)
    }

    /// The id of a token text as stored in the vocabulary.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text.as_bytes())
    }

    /// Attribute bits of a token (see [`attr`]); 0 for ids past the vocabulary.
    pub fn token_attr(&self, id: u32) -> u16 {
        self.vocab.attrs.get(id as usize).copied().unwrap_or(0)
    }

    pub fn token_score(&self, id: u32) -> f32 {
        self.vocab.scores.get(id as usize).copied().unwrap_or(0.0)
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.n()
    }

    pub fn bos(&self) -> Option<u32> {
        self.vocab.specials.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.vocab.specials.eos
    }

    pub fn eot(&self) -> Option<u32> {
        self.vocab.specials.eot
    }

    pub fn unk(&self) -> Option<u32> {
        self.vocab.specials.unk
    }

    pub fn pad(&self) -> Option<u32> {
        self.vocab.specials.pad
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// The separator token (BERT's `[SEP]`).
    pub fn sep(&self) -> Option<u32> {
        self.vocab.specials.sep
    }

    /// Whether the model wants a separator token appended (embedding models).
    pub fn add_sep(&self) -> bool {
        self.vocab.add_sep
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    /// Whether generation stops at this token: eos, eot, eom and the FIM pad/repo/separator
    /// ids from the metadata, plus tokens whose text marks an end of turn (`<|im_end|>`,
    /// `<|eot_id|>`, `<|endoftext|>`, `<end_of_turn>`, `<|end|>`, ...), as llama.cpp decides.
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.binary_search(&id).is_ok()
    }

    /// The end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.vocab.eog
    }

    pub fn is_control(&self, id: u32) -> bool {
        self.token_attr(id) & attr::CONTROL != 0
    }

    pub fn is_unknown(&self, id: u32) -> bool {
        self.token_attr(id) & attr::UNKNOWN != 0
    }

    pub fn is_byte(&self, id: u32) -> bool {
        self.token_attr(id) & attr::BYTE != 0
    }

    /// `tokenizer.ggml.model`.
    pub fn model_name(&self) -> &str {
        &self.vocab.model
    }

    /// `tokenizer.ggml.pre` as written in the file.
    pub fn pre_name(&self) -> &str {
        &self.vocab.pre
    }

    /// The pre-tokenizer in use (canonical name; `spm`/`wpm` for those models).
    pub fn pre_tokenizer(&self) -> &'static str {
        self.pre_name
    }

    /// What llama.cpp would have logged as warnings while loading (unknown pre-tokenizer,
    /// fixed-up token types, bad special ids).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

#[cfg(test)]
mod tests;
