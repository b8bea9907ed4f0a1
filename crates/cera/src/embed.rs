//! Embeddings: the hidden states of texts (the output of the model's final norm, llama.cpp's
//! `result_norm`), per token or pooled (mean, first token, last token) and normalized as
//! `llama-embedding --embd-normalize` does. Many texts run together: they are packed into
//! batched steps of up to [`EmbedOptions::batch_tokens`] tokens, each text with its own fresh
//! sequence state, so embedding 64 short texts is one or a few forward passes. LoRA adapters
//! in [`EmbedOptions::lora`] apply as they do to generation.
//!
//! ```no_run
//! # use cera::engine::{Engine, EngineOptions};
//! # use cera::embed::{EmbedOptions, Pooling};
//! # fn main() -> cera::Result<()> {
//! let engine = Engine::load("model.gguf", EngineOptions::default())?;
//! let mut opts = EmbedOptions::default();
//! opts.pooling = Some(Pooling::Mean);
//! let e = engine.embed(&["a cat", "a dog"], &opts)?;
//! let (a, b) = (&e.items[0].vectors[0], &e.items[1].vectors[0]);
//! let cosine: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum(); // L2-normalized by default
//! # let _ = cosine; Ok(()) }
//! ```

use crate::backend::{KvSpec, KvType};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::lora::LoraSet;
use crate::models::{Logits, SeqInput, SeqState};

/// How a text's per-token hidden states become its embedding (llama.cpp's `--pooling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pooling {
    /// One vector per token.
    None,
    /// The mean over the text's tokens.
    Mean,
    /// The first token's (BERT's `[CLS]`).
    Cls,
    /// The last token's.
    Last,
    /// A reranker's relevance score(s): the classifier head over the first token (a model with
    /// `cls` / `cls.output` tensors).
    Rank,
}

impl Pooling {
    pub const ALL: &'static [Pooling] = &[
        Pooling::None,
        Pooling::Mean,
        Pooling::Cls,
        Pooling::Last,
        Pooling::Rank,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    /// `none`, `mean`, `cls` or `last`; anything else is an error listing them.
    pub fn from_name(s: &str) -> Result<Pooling> {
        Pooling::ALL
            .iter()
            .copied()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                Error::Model(format!(
                    "unknown pooling '{s}' (choices: none, mean, cls, last, rank)"
                ))
            })
    }

    /// GGUF's `{arch}.pooling_type` ids: 0 none, 1 mean, 2 cls, 3 last, 4 rank (anything
    /// else: `None`).
    pub fn from_gguf(id: u64) -> Option<Pooling> {
        Some(match id {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => return None,
        })
    }
}

/// Normalization of each output vector (llama.cpp's `--embd-normalize`).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Normalize {
    /// `-1`: as computed.
    None,
    /// `0`: scaled so the largest magnitude is 32760 (int16 range).
    MaxAbs,
    /// `1`: unit L1 norm.
    Taxicab,
    /// `2`: unit L2 norm (the default).
    Euclidean,
    /// `p > 2`: unit p-norm.
    PNorm(u32),
}

impl Normalize {
    /// From llama.cpp's integer: -1 none, 0 max-abs, 1 taxicab, 2 euclidean, >2 p-norm.
    pub fn from_llama(n: i32) -> Result<Normalize> {
        Ok(match n {
            -1 => Normalize::None,
            0 => Normalize::MaxAbs,
            1 => Normalize::Taxicab,
            2 => Normalize::Euclidean,
            p if p > 2 => Normalize::PNorm(p as u32),
            other => {
                return Err(Error::Model(format!(
                    "--embd-normalize {other}: expected -1 (none), 0 (max absolute), 1 \
                     (taxicab), 2 (euclidean) or a p-norm above 2"
                )));
            }
        })
    }

    /// Normalizes `v` in place (sums in f64, as llama.cpp's `common_embd_normalize`).
    pub fn apply(self, v: &mut [f32]) {
        let sum: f64 = match self {
            Normalize::None => return,
            Normalize::MaxAbs => v.iter().map(|&x| (x as f64).abs()).fold(0.0, f64::max) / 32760.0,
            Normalize::Taxicab => v.iter().map(|&x| (x as f64).abs()).sum(),
            Normalize::Euclidean => v
                .iter()
                .map(|&x| (x as f64) * (x as f64))
                .sum::<f64>()
                .sqrt(),
            Normalize::PNorm(p) => v
                .iter()
                .map(|&x| (x as f64).abs().powi(p as i32))
                .sum::<f64>()
                .powf(1.0 / p as f64),
        };
        let norm = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
        for x in v {
            *x *= norm;
        }
    }
}

#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EmbedOptions {
    /// `None`: the model's own (`{arch}.pooling_type`), else per-token vectors.
    pub pooling: Option<Pooling>,
    pub normalize: Normalize,
    /// Add BOS/EOS as the model asks when tokenizing texts.
    pub add_special: bool,
    /// Tokens processed per forward pass (texts are packed up to this; a longer text runs
    /// alone in chunks of it).
    pub batch_tokens: usize,
    /// LoRA adapters to apply.
    pub lora: LoraSet,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions {
            pooling: None,
            normalize: Normalize::Euclidean,
            add_special: true,
            batch_tokens: 2048,
            lora: LoraSet::default(),
        }
    }
}

/// One input's embedding.
#[derive(Clone, Debug)]
pub struct EmbeddingItem {
    /// Tokens the input had.
    pub tokens: usize,
    /// One pooled vector, or one per token for [`Pooling::None`]; `n_embd` values each.
    pub vectors: Vec<Vec<f32>>,
}

#[derive(Clone, Debug)]
pub struct Embeddings {
    pub n_embd: usize,
    pub pooling: Pooling,
    /// In input order.
    pub items: Vec<EmbeddingItem>,
    /// Forward passes run.
    pub steps: usize,
}

impl Engine {
    /// The pooling the model file asks for (`{arch}.pooling_type`), else per-token.
    pub fn default_pooling(&self) -> Pooling {
        let g = self.gguf();
        let key = g
            .architecture()
            .map(|a| crate::keys::arch_key(a, "pooling_type"))
            .unwrap_or_default();
        g.get_opt::<u64>(&key)
            .ok()
            .flatten()
            .and_then(Pooling::from_gguf)
            .unwrap_or(Pooling::None)
    }

    /// Relevance scores of `documents` for `query` with a reranker (rank pooling): each pair
    /// is tokenized as llama.cpp joins it, `query`, EOS and SEP where the vocabulary appends
    /// them, `document`, then scored by the classifier head. The raw scores (the first output
    /// of the head) in document order.
    pub fn rerank(&self, query: &str, documents: &[&str], opts: &EmbedOptions) -> Result<Vec<f32>> {
        let tok = self.tokenizer();
        let mut glue = String::new();
        for (add, id) in [(tok.add_eos(), tok.eos()), (tok.add_sep(), tok.sep())] {
            if let (true, Some(id)) = (add, id)
                && let Some(t) = tok.token_text(id)
            {
                glue.push_str(t);
            }
        }
        let texts: Vec<String> = documents
            .iter()
            .map(|d| format!("{query}{glue}{d}"))
            .collect();
        let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
        let mut o = opts.clone();
        o.pooling = Some(Pooling::Rank);
        o.normalize = Normalize::None;
        let e = self.embed(&refs, &o)?;
        Ok(e.items.iter().map(|i| i.vectors[0][0]).collect())
    }

    /// Embeds texts (tokenized with special tokens parsed, BOS/EOS as `opts.add_special`).
    pub fn embed(&self, texts: &[&str], opts: &EmbedOptions) -> Result<Embeddings> {
        let toks: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| self.tokenizer().encode(t, opts.add_special, true))
            .collect();
        self.embed_tokens(&toks, opts)
    }

    /// Embeds token sequences. An empty one, or one longer than the model's training
    /// context, is an error naming it; nothing runs then.
    pub fn embed_tokens(&self, inputs: &[Vec<u32>], opts: &EmbedOptions) -> Result<Embeddings> {
        let pooling = opts.pooling.unwrap_or_else(|| self.default_pooling());
        if pooling == Pooling::Rank && !self.inner.model.has_rank_head() {
            return Err(Error::Model(
                "rank pooling needs a reranker: a model with a classifier head (cls, \
                 cls.output tensors); this one has none"
                    .into(),
            ));
        }
        let n_ctx = self.n_ctx_train();
        for (i, t) in inputs.iter().enumerate() {
            if t.is_empty() {
                return Err(Error::Model(format!("embedding input {i} has no tokens")));
            }
            if t.len() > n_ctx {
                return Err(Error::ContextOverflow {
                    n_ctx,
                    needed: t.len(),
                });
            }
        }
        let inner = &self.inner;
        let model = &inner.model;
        let n_embd = model.n_embd();
        let budget = opts.batch_tokens.max(1);
        let logits = match pooling {
            Pooling::Last => Logits::Last,
            _ => Logits::All,
        };
        let mut items = Vec::with_capacity(inputs.len());
        let mut steps = 0;
        let mut ws = inner.take_workspace();
        let mut out = Vec::new();
        let mut run = |group: &[&Vec<u32>], items: &mut Vec<EmbeddingItem>| -> Result<()> {
            let mut states: Vec<SeqState> = group
                .iter()
                .map(|t| model.new_seq(&inner.dev, t.len(), KvSpec::same(KvType::F16)))
                .collect();
            // a text longer than the budget runs alone, in chunks
            let chunk = if group.len() == 1 { budget } else { usize::MAX };
            let mut hidden: Vec<Vec<f32>> = vec![Vec::new(); group.len()];
            let longest = group.iter().map(|t| t.len()).max().unwrap_or(0);
            let mut at = 0;
            while at < longest {
                let end = at.saturating_add(chunk).min(longest);
                let mut seqs: Vec<SeqInput> = states
                    .iter_mut()
                    .zip(group)
                    .map(|(st, t)| SeqInput {
                        state: st,
                        tokens: &t[at..end.min(t.len())],
                        embd: None,
                        pos0: at,
                        logits: if logits == Logits::Last && end < t.len() {
                            Logits::None
                        } else {
                            logits
                        },
                        lora: &opts.lora,
                    })
                    .collect();
                model.forward_batch_hidden(&inner.dev, &mut ws, &mut seqs, &mut out)?;
                steps += 1;
                let mut off = 0;
                for (h, s) in hidden.iter_mut().zip(&seqs) {
                    let rows = match s.logits {
                        Logits::None => 0,
                        Logits::Last => 1,
                        _ => s.tokens.len(),
                    };
                    h.extend_from_slice(&out[off..off + rows * n_embd]);
                    off += rows * n_embd;
                }
                at = end;
            }
            for (h, t) in hidden.into_iter().zip(group) {
                let vectors = if pooling == Pooling::Rank {
                    let mut v = model.rank_head(&h[..n_embd])?;
                    opts.normalize.apply(&mut v);
                    vec![v]
                } else {
                    pool(&h, n_embd, pooling, opts.normalize)
                };
                items.push(EmbeddingItem {
                    tokens: t.len(),
                    vectors,
                });
            }
            Ok(())
        };
        let mut group: Vec<&Vec<u32>> = Vec::new();
        let mut n = 0;
        let mut result = Ok(());
        for t in inputs {
            if !group.is_empty() && n + t.len() > budget {
                result = run(&group, &mut items);
                if result.is_err() {
                    break;
                }
                group.clear();
                n = 0;
            }
            group.push(t);
            n += t.len();
        }
        if result.is_ok() && !group.is_empty() {
            result = run(&group, &mut items);
        }
        inner.put_workspace(ws);
        result?;
        Ok(Embeddings {
            n_embd,
            pooling,
            items,
            steps,
        })
    }
}

/// Pools one text's hidden rows (`n_embd` each: all of them, or only the last for
/// [`Pooling::Last`]) and normalizes the result.
fn pool(h: &[f32], n_embd: usize, pooling: Pooling, norm: Normalize) -> Vec<Vec<f32>> {
    let rows: Vec<&[f32]> = h.chunks_exact(n_embd).collect();
    let mut out: Vec<Vec<f32>> = match pooling {
        Pooling::None => rows.iter().map(|r| r.to_vec()).collect(),
        Pooling::Cls => vec![rows[0].to_vec()],
        Pooling::Last => vec![rows[rows.len() - 1].to_vec()],
        Pooling::Rank => unreachable!("rank pooling runs the classifier head"),
        Pooling::Mean => {
            let mut m = vec![0f64; n_embd];
            for r in &rows {
                for (a, &b) in m.iter_mut().zip(r.iter()) {
                    *a += b as f64;
                }
            }
            let k = rows.len() as f64;
            vec![m.into_iter().map(|v| (v / k) as f32).collect()]
        }
    };
    for v in &mut out {
        norm.apply(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizations_follow_llama_cpp() {
        let v = [3.0f32, -4.0];
        let n = |m: Normalize| {
            let mut x = v;
            m.apply(&mut x);
            x
        };
        let close = |a: [f32; 2], b: [f64; 2]| {
            a.iter()
                .zip(b)
                .all(|(&x, y)| (x as f64 - y).abs() <= 1e-6 * y.abs().max(1.0))
        };
        assert_eq!(n(Normalize::None), v);
        assert!(close(n(Normalize::Euclidean), [0.6, -0.8]));
        assert!(close(n(Normalize::Taxicab), [3.0 / 7.0, -4.0 / 7.0]));
        assert!(close(n(Normalize::MaxAbs), [24570.0, -32760.0]));
        let p3 = n(Normalize::PNorm(3));
        let s = (27.0f64 + 64.0).powf(1.0 / 3.0);
        assert!((p3[0] as f64 - 3.0 / s).abs() < 1e-6);
        assert_eq!(Normalize::from_llama(2).unwrap(), Normalize::Euclidean);
        assert!(Normalize::from_llama(-2).is_err());
        let mut z = [0.0f32; 3];
        Normalize::Euclidean.apply(&mut z);
        assert_eq!(z, [0.0; 3]);
    }

    #[test]
    fn pooling_names() {
        for &p in Pooling::ALL {
            assert_eq!(Pooling::from_name(p.name()).unwrap(), p);
        }
        assert!(
            Pooling::from_name("max")
                .unwrap_err()
                .to_string()
                .contains("rank")
        );
        assert_eq!(Pooling::from_gguf(1), Some(Pooling::Mean));
        assert_eq!(Pooling::from_gguf(4), Some(Pooling::Rank));
        assert_eq!(Pooling::from_gguf(5), None);
    }
}
