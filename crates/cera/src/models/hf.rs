//! Hugging Face ↔ GGUF, once for the converter (`convert/`) and PEFT adapters
//! ([`super::peft`]): the module names of each family's checkpoints per layer, and llama's
//! Q/K row permutation (Hugging Face stores the two halves of each head's rotary dimensions
//! apart; GGUF interleaves them, as `convert_hf_to_gguf.py`'s `permute` does).

use super::Arch;
use super::names as n;

/// A name table: Hugging Face module (after `model.layers.N.`) → GGUF name (after `blk.N.`).
pub type Table = &'static [(&'static str, &'static str)];

/// The names most families share.
pub const LAYER: Table = &[
    ("input_layernorm", n::ATTN_NORM),
    ("post_attention_layernorm", n::FFN_NORM),
    ("self_attn.q_proj", n::ATTN_Q),
    ("self_attn.k_proj", n::ATTN_K),
    ("self_attn.v_proj", n::ATTN_V),
    ("self_attn.o_proj", n::ATTN_OUT),
    ("self_attn.q_norm", n::ATTN_Q_NORM),
    ("self_attn.k_norm", n::ATTN_K_NORM),
    ("mlp.gate_proj", n::FFN_GATE),
    ("mlp.up_proj", n::FFN_UP),
    ("mlp.down_proj", n::FFN_DOWN),
];

/// OLMo 2's norms sit after the attention and the FFN.
const OLMO2: Table = &[
    ("post_attention_layernorm", n::ATTN_POST_NORM),
    ("post_feedforward_layernorm", n::FFN_POST_NORM),
];

/// LFM2: short-convolution blocks and attention blocks with their own names.
const LFM2: Table = &[
    ("operator_norm", n::ATTN_NORM),
    ("ffn_norm", n::FFN_NORM),
    ("self_attn.out_proj", n::ATTN_OUT),
    ("self_attn.q_layernorm", n::ATTN_Q_NORM),
    ("self_attn.k_layernorm", n::ATTN_K_NORM),
    ("conv.in_proj", n::SHORTCONV_IN_PROJ),
    ("conv.out_proj", n::SHORTCONV_OUT_PROJ),
    ("conv.conv", n::SHORTCONV_CONV),
    ("feed_forward.w1", n::FFN_GATE),
    ("feed_forward.w3", n::FFN_UP),
    ("feed_forward.w2", n::FFN_DOWN),
    ("feed_forward.gate", n::FFN_GATE_INP),
    ("feed_forward.expert_bias", n::FFN_EXP_PROBS_B),
    ("feed_forward.experts.w1", n::FFN_GATE_EXPS),
    ("feed_forward.experts.w3", n::FFN_UP_EXPS),
    ("feed_forward.experts.w2", n::FFN_DOWN_EXPS),
];

/// Gemma 2/3: a norm before and after both the attention and the FFN.
const GEMMA: Table = &[
    ("post_attention_layernorm", n::ATTN_POST_NORM),
    ("pre_feedforward_layernorm", n::FFN_NORM),
    ("post_feedforward_layernorm", n::FFN_POST_NORM),
];

/// Phi-3 keeps Q, K, V fused and gate/up fused (as `ffn_up`, twice as wide).
const PHI3: Table = &[
    ("self_attn.qkv_proj", n::ATTN_QKV),
    ("mlp.gate_up_proj", n::FFN_UP),
];

/// Tensors outside the layers (Hugging Face name without `.weight`).
pub const GLOBAL: Table = &[
    ("model.embed_tokens", n::TOKEN_EMBD),
    ("model.norm", n::OUTPUT_NORM),
    ("model.embedding_norm", n::TOKEN_EMBD_NORM),
    ("lm_head", n::OUTPUT),
];

/// The tables `arch`'s layers are named by, the family's own first.
pub fn layer_tables(arch: Arch) -> &'static [Table] {
    match arch {
        Arch::Olmo2 => &[OLMO2, LAYER],
        Arch::Lfm2 | Arch::Lfm2Moe => &[LFM2, LAYER],
        Arch::Gemma2 | Arch::Gemma3 => &[GEMMA, LAYER],
        Arch::Phi3 => &[PHI3, LAYER],
        _ => &[LAYER],
    }
}

/// The GGUF name (after `blk.N.`) of layer module `part` of `arch`.
pub fn layer_name(arch: Arch, part: &str) -> Option<&'static str> {
    layer_tables(arch)
        .iter()
        .find_map(|t| t.iter().find(|(h, _)| *h == part).map(|&(_, g)| g))
}

/// Whether the converter permutes `arch`'s Q and K rows (llama's interleaved RoPE).
pub fn permutes_qk(arch: Arch) -> bool {
    matches!(arch, Arch::Llama | Arch::Granite)
}

/// `data`'s `rows` rows of `row_len` values, reordered within each of `heads` heads as the
/// converter's `reshape(heads, 2, d/2, …).swapaxes(1, 2)`: the row at (half j, i) of a head
/// moves to (i, j).
pub fn permute_head_rows<T: Copy>(
    data: &[T],
    rows: usize,
    row_len: usize,
    heads: usize,
) -> Result<Vec<T>, String> {
    if heads == 0 || !rows.is_multiple_of(heads * 2) || data.len() != rows * row_len {
        return Err(format!(
            "{rows} rows do not split into {heads} heads of pairs"
        ));
    }
    let half = rows / heads / 2;
    let mut out = data.to_vec();
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let dst = h * 2 * half + i * 2 + j;
                let src = h * 2 * half + j * half + i;
                out[dst * row_len..(dst + 1) * row_len]
                    .copy_from_slice(&data[src * row_len..(src + 1) * row_len]);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_interleaves_each_heads_halves() {
        // 2 heads of 4 rows, one value each: [a0 a1 b0 b1] per head -> [a0 b0 a1 b1]
        let v: Vec<u8> = (0..8).collect();
        assert_eq!(
            permute_head_rows(&v, 8, 1, 2).unwrap(),
            [0, 2, 1, 3, 4, 6, 5, 7]
        );
        assert!(permute_head_rows(&v, 8, 1, 3).is_err());
        // rows of two values move together
        let w: Vec<u8> = (0..8).collect();
        assert_eq!(
            permute_head_rows(&w, 4, 2, 1).unwrap(),
            [0, 1, 4, 5, 2, 3, 6, 7]
        );
    }

    #[test]
    fn families_name_their_layers() {
        assert_eq!(layer_name(Arch::Llama, "self_attn.q_proj"), Some("attn_q"));
        assert_eq!(
            layer_name(Arch::Lfm2, "conv.in_proj"),
            Some("shortconv.in_proj")
        );
        assert_eq!(layer_name(Arch::Llama, "conv.in_proj"), None);
        assert_eq!(
            layer_name(Arch::Gemma3, "pre_feedforward_layernorm"),
            Some("ffn_norm")
        );
        assert_eq!(layer_name(Arch::Phi3, "mlp.gate_up_proj"), Some("ffn_up"));
    }
}
