//! The central name table: architectures and GGUF tensor names, defined once.

use crate::error::{Error, Result};

/// Every architecture we can run, keyed by `general.architecture`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Granite,
    Gemma2,
    Gemma3,
    Phi3,
    Olmo2,
    Lfm2,
    Lfm2Moe,
    /// BERT encoders (bge, MiniLM, …): embeddings only.
    Bert,
}

impl Arch {
    pub const ALL: &'static [Arch] = &[
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Granite,
        Arch::Gemma2,
        Arch::Gemma3,
        Arch::Phi3,
        Arch::Olmo2,
        Arch::Lfm2,
        Arch::Lfm2Moe,
        Arch::Bert,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Granite => "granite",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
            Arch::Phi3 => "phi3",
            Arch::Olmo2 => "olmo2",
            Arch::Lfm2 => "lfm2",
            Arch::Lfm2Moe => "lfm2moe",
            Arch::Bert => "bert",
        }
    }

    pub fn from_name(name: &str) -> Result<Arch> {
        Arch::ALL
            .iter()
            .copied()
            .find(|a| a.name() == name)
            .ok_or_else(|| Error::UnsupportedArch {
                arch: name.to_owned(),
                supported: Arch::ALL
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Model-level tensors.
pub const TOKEN_EMBD: &str = "token_embd";
pub const OUTPUT_NORM: &str = "output_norm";
pub const OUTPUT: &str = "output";
pub const ROPE_FREQS: &str = "rope_freqs";
/// Phi-3 LongRoPE per-dimension frequency divisors beyond / within the original context.
pub const ROPE_FACTORS_LONG: &str = "rope_factors_long";
pub const ROPE_FACTORS_SHORT: &str = "rope_factors_short";

/// Per-layer tensors (`blk.N.<name>`).
pub const ATTN_NORM: &str = "attn_norm";
pub const ATTN_Q: &str = "attn_q";
pub const ATTN_K: &str = "attn_k";
pub const ATTN_V: &str = "attn_v";
pub const ATTN_QKV: &str = "attn_qkv";
pub const ATTN_OUT: &str = "attn_output";
pub const ATTN_Q_NORM: &str = "attn_q_norm";
pub const ATTN_K_NORM: &str = "attn_k_norm";
pub const ATTN_POST_NORM: &str = "post_attention_norm";
pub const FFN_NORM: &str = "ffn_norm";
pub const FFN_GATE: &str = "ffn_gate";
pub const FFN_UP: &str = "ffn_up";
pub const FFN_DOWN: &str = "ffn_down";
pub const FFN_POST_NORM: &str = "post_ffw_norm";

/// LFM2: the final norm (named so by the converter), the gated short convolution, and the
/// sentence-embedding projection of LFM2-ColBert.
pub const TOKEN_EMBD_NORM: &str = "token_embd_norm";
// BERT
pub const TOKEN_TYPES: &str = "token_types";
pub const POS_EMBD: &str = "position_embd";
pub const ATTN_OUT_NORM: &str = "attn_output_norm";
pub const LAYER_OUT_NORM: &str = "layer_output_norm";
pub const CLS: &str = "cls";
pub const CLS_OUT: &str = "cls.output";
pub const SHORTCONV_CONV: &str = "shortconv.conv";
pub const SHORTCONV_IN_PROJ: &str = "shortconv.in_proj";
pub const SHORTCONV_OUT_PROJ: &str = "shortconv.out_proj";
pub const DENSE_2: &str = "dense_2";

/// Mixture of experts: the router, the stacked expert matrices `[in, out, n_expert]`, and the
/// per-expert selection bias (`blk.N.exp_probs_b.bias`).
pub const FFN_GATE_INP: &str = "ffn_gate_inp";
pub const FFN_GATE_EXPS: &str = "ffn_gate_exps";
pub const FFN_UP_EXPS: &str = "ffn_up_exps";
pub const FFN_DOWN_EXPS: &str = "ffn_down_exps";
pub const FFN_EXP_PROBS_B: &str = "exp_probs_b";

/// `token_embd.weight`-style name of a model-level tensor.
pub fn tensor(name: &str, suffix: &str) -> String {
    format!("{name}.{suffix}")
}

/// `blk.{layer}.{name}.{suffix}`.
pub fn layer_tensor(layer: usize, name: &str, suffix: &str) -> String {
    format!("blk.{layer}.{name}.{suffix}")
}
