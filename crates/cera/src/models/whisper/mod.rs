//! OpenAI Whisper (speech recognition), from a GGUF `cera convert` writes (`general.architecture`
//! `whisper`, whisper.cpp's tensor names: see `convert/whisper.rs`), over the backend ops so it
//! runs on the CPU and the GPU.
//!
//! ```text
//! mod.rs      the hyperparameters, the special tokens, loading
//! encoder.rs  log-mel [n_mel, 3000] → two convolutions (GELU) → + positions → pre-norm blocks
//!             (non-causal attention, GELU MLP) → LayerNorm: [1500, d]
//! decoder.rs  tokens → + positions → pre-norm blocks (causal self-attention over its cache,
//!             cross-attention over the encoder's keys and values, MLP) → LayerNorm → logits
//!             (the token embedding, tied)
//! ```

pub mod decoder;
pub mod encoder;

use std::sync::Arc;

use crate::backend::{AttentionParams, Backend, Weight};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::models::loader::TensorLoader;
use crate::tokenizer::Tokenizer;

/// One side's hyperparameters (`whisper.encoder.*`, `whisper.decoder.*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SideHparams {
    /// Positions: 1500 audio frames after the stride-2 convolution, 448 text tokens.
    pub n_ctx: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_layer: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WhisperHparams {
    pub encoder: SideHparams,
    pub decoder: SideHparams,
    pub n_mels: usize,
    pub n_vocab: usize,
}

/// `[in, out]` weight and its bias (a key projection has none).
pub struct Linear {
    pub w: Weight,
    pub b: Option<Vec<f32>>,
}

impl Linear {
    /// `out = x · wᵀ + b`; `many_rows`: the encoder's product (1500 rows a window), else the
    /// decoder's (a token a sequence).
    pub(crate) fn forward<B: Backend>(
        &self,
        be: &B,
        cx: &mut B::Ctx,
        x: &B::Tensor,
        out: &mut B::Tensor,
        many_rows: bool,
    ) -> Result<()> {
        if many_rows {
            be.matmul_encoder(cx, &mut [(&self.w, out)], x)?;
        } else {
            be.matmul(cx, &mut [(&self.w, out)], x)?;
        }
        self.add_bias(be, cx, out);
        Ok(())
    }

    /// `x += b` (nothing for a key projection).
    pub(crate) fn add_bias<B: Backend>(&self, be: &B, cx: &mut B::Ctx, x: &mut B::Tensor) {
        if let Some(b) = &self.b {
            be.add_bias(cx, x, b);
        }
    }
}

impl SideHparams {
    /// Multi-head attention over this side's width: as many key and value heads as query
    /// heads, scaled by `1 / sqrt(head_dim)`.
    pub(crate) fn attention(&self, causal: bool) -> AttentionParams {
        let hd = self.n_embd / self.n_head;
        AttentionParams {
            n_head: self.n_head,
            n_kv_head: self.n_head,
            head_dim: hd,
            head_dim_v: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            softcap: None,
            window: None,
            causal,
        }
    }
}

/// LayerNorm's scale and shift.
pub struct Norm {
    pub w: Vec<f32>,
    pub b: Vec<f32>,
}

/// Multi-head attention's four projections.
pub struct Attention {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
}

/// A pre-norm block: attention (and for the decoder, cross-attention), then the MLP.
pub struct Block {
    pub attn_ln: Norm,
    pub attn: Attention,
    pub cross: Option<(Norm, Attention)>,
    pub mlp_ln: Norm,
    pub mlp_up: Linear,
    pub mlp_down: Linear,
}

/// The special tokens of the vocabulary (found by their text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecialTokens {
    pub eot: u32,
    pub sot: u32,
    pub translate: u32,
    pub transcribe: u32,
    pub solm: u32,
    pub prev: u32,
    pub nosp: u32,
    pub no_timestamps: u32,
    /// `<|0.00|>`: the first timestamp token (each next one 20 ms later).
    pub timestamp_begin: u32,
    /// The language tokens, `(code, id)` in id order (an English-only model has them too,
    /// never sampled).
    pub languages: Vec<(String, u32)>,
    /// Whether the model reads many languages (whisper.cpp's rule: 51865 tokens or more).
    pub multilingual: bool,
}

impl SpecialTokens {
    fn find(tok: &Tokenizer) -> Result<SpecialTokens> {
        let id = |t: &str| -> Result<u32> {
            tok.token_id(t)
                .ok_or_else(|| Error::Model(format!("whisper: the vocabulary has no {t}")))
        };
        let sot = id("<|startoftranscript|>")?;
        let translate = id("<|translate|>")?;
        let languages = (sot + 1..translate)
            .filter_map(|i| {
                let t = tok.token_text(i)?;
                let code = t.strip_prefix("<|")?.strip_suffix("|>")?;
                Some((code.to_owned(), i))
            })
            .collect();
        Ok(SpecialTokens {
            eot: id("<|endoftext|>")?,
            sot,
            translate,
            transcribe: id("<|transcribe|>")?,
            solm: id("<|startoflm|>")?,
            prev: id("<|startofprev|>")?,
            nosp: id("<|nocaptions|>").or_else(|_| id("<|nospeech|>"))?,
            no_timestamps: id("<|notimestamps|>")?,
            timestamp_begin: id("<|0.00|>")?,
            languages,
            multilingual: tok.n_vocab() >= 51865,
        })
    }

    /// Whether the model reads many languages.
    pub fn multilingual(&self) -> bool {
        self.multilingual
    }
}

/// A loaded Whisper model.
pub struct Whisper {
    pub hp: WhisperHparams,
    pub encoder: encoder::Encoder,
    pub decoder: decoder::Decoder,
    pub tokenizer: Tokenizer,
    pub special: SpecialTokens,
    /// Tokens never sampled (CTranslate2's `suppress_ids`: symbols and non-speech marks).
    pub suppress: Vec<u32>,
    /// Tokens not sampled first (`suppress_ids_begin`: the space and end of text).
    pub suppress_begin: Vec<u32>,
}

fn key(k: &str) -> String {
    format!("whisper.{k}")
}

impl Whisper {
    /// The model of a Whisper GGUF; what it lacks or holds in the wrong shape is named.
    pub fn load(file: Arc<GgufFile>) -> Result<Whisper> {
        let arch = file.architecture()?;
        if arch != "whisper" {
            return Err(Error::Model(format!(
                "general.architecture is '{arch}', not 'whisper' (cera transcribe takes a \
                 Whisper model: `cera convert` makes one from faster-whisper's folder)"
            )));
        }
        let u = |k: &str| -> Result<usize> { Ok(file.get_u32(&key(k))? as usize) };
        let side = |s: &str| -> Result<SideHparams> {
            let h = SideHparams {
                n_ctx: u(&format!("{s}.context_length"))?,
                n_embd: u(&format!("{s}.embedding_length"))?,
                n_head: u(&format!("{s}.attention.head_count"))?,
                n_layer: u(&format!("{s}.block_count"))?,
            };
            if h.n_head == 0 || !h.n_embd.is_multiple_of(h.n_head) || h.n_ctx == 0 {
                return Err(Error::Model(format!(
                    "whisper.{s}: {} heads for a width of {} (context {})",
                    h.n_head, h.n_embd, h.n_ctx
                )));
            }
            Ok(h)
        };
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let n_vocab = tokenizer.n_vocab();
        let hp = WhisperHparams {
            encoder: side("encoder")?,
            decoder: side("decoder")?,
            n_mels: u("audio.num_mel_bins")?,
            n_vocab,
        };
        let special = SpecialTokens::find(&tokenizer)?;
        let ld = TensorLoader::new(Arc::clone(&file));
        let encoder = encoder::Encoder::load(&ld, &hp)?;
        let decoder = decoder::Decoder::load(&ld, &hp)?;
        let ids = |k: &str| -> Result<Vec<u32>> {
            if file.get(&key(k)).is_none() {
                return Ok(Vec::new());
            }
            Ok(file
                .get_i64_array(&key(k))?
                .into_iter()
                .filter(|&i| i >= 0 && (i as usize) < n_vocab)
                .map(|i| i as u32)
                .collect())
        };
        Ok(Whisper {
            suppress: ids("suppress_tokens")?,
            suppress_begin: ids("suppress_tokens_begin")?,
            hp,
            encoder,
            decoder,
            tokenizer,
            special,
        })
    }
}

/// The tensors of blocks `prefix.blocks.N` (`cross` for the decoder's).
pub(crate) fn load_blocks(
    ld: &TensorLoader,
    prefix: &str,
    h: &SideHparams,
    cross: bool,
) -> Result<Vec<Block>> {
    let d = h.n_embd;
    let norm = |n: String| -> Result<Norm> {
        Ok(Norm {
            w: ld.vector(&format!("{n}.weight"), d)?,
            b: ld.vector(&format!("{n}.bias"), d)?,
        })
    };
    let lin = |n: String, cols: usize, rows: usize, bias: bool| -> Result<Linear> {
        Ok(Linear {
            w: ld.matrix(&format!("{n}.weight"), cols, rows)?,
            b: if bias {
                Some(ld.vector(&format!("{n}.bias"), rows)?)
            } else {
                None
            },
        })
    };
    let attention = |n: String| -> Result<Attention> {
        Ok(Attention {
            q: lin(format!("{n}.query"), d, d, true)?,
            k: lin(format!("{n}.key"), d, d, false)?,
            v: lin(format!("{n}.value"), d, d, true)?,
            o: lin(format!("{n}.out"), d, d, true)?,
        })
    };
    (0..h.n_layer)
        .map(|l| {
            let b = format!("{prefix}.blocks.{l}");
            Ok(Block {
                attn_ln: norm(format!("{b}.attn_ln"))?,
                attn: attention(format!("{b}.attn"))?,
                cross: if cross {
                    Some((
                        norm(format!("{b}.cross_attn_ln"))?,
                        attention(format!("{b}.cross_attn"))?,
                    ))
                } else {
                    None
                },
                mlp_ln: norm(format!("{b}.mlp_ln"))?,
                mlp_up: lin(format!("{b}.mlp.0"), d, 4 * d, true)?,
                mlp_down: lin(format!("{b}.mlp.2"), 4 * d, d, true)?,
            })
        })
        .collect()
}
