//! `phi3` (Phi-3, Phi-3.5, Phi-4-mini): llama's pre-norm layer with Q, K and V usually fused in
//! one `attn_qkv` and gate and up fused in one `ffn_up` of `2*n_ff` outputs (gate first), NeoX
//! RoPE, head size n_embd/n_head, output tied when absent. llama.cpp ignores Phi's sliding window
//! (every layer attends to the whole context), and so do we.
//!
//! LongRoPE (Phi-3.5, Phi-4-mini): `rope_factors_short` divide the RoPE frequencies, and
//! `rope.scaling.attn_factor` multiplies cos/sin. llama.cpp switches to `rope_factors_long` when
//! the context is longer than `rope.scaling.original_context_length`; a model here is loaded
//! without knowing its context, so the short factors are used (exact up to that length).

use std::sync::Arc;

use super::common::load::{LayerSpec, Output, load_embeddings, load_layers};
use super::common::{BaseHparams, Decoder, DecoderConfig, QkNorm};
use super::loader::TensorLoader;
use super::names::{self as n, tensor};
use super::rope_config;
use crate::backend::RopeKind;
use crate::error::Result;
use crate::gguf::GgufFile;

const ARCH: &str = "phi3";

pub fn load(file: Arc<GgufFile>) -> Result<Decoder> {
    let hp = BaseHparams::read(&file, ARCH)?;
    let ld = TensorLoader::new(file);
    let mut rope = rope_config(ld.file(), ARCH, RopeKind::Neox, hp.n_rot, hp.rope_freq_base)?;
    rope.freq_factors = ld.vector_opt(&tensor(n::ROPE_FACTORS_SHORT, "weight"), hp.n_rot / 2)?;
    // present but unused: still checked, so a malformed file fails at load
    ld.vector_opt(&tensor(n::ROPE_FACTORS_LONG, "weight"), hp.n_rot / 2)?;
    let cfg = DecoderConfig::new(&hp, rope);
    let layers = load_layers(
        &ld,
        &hp,
        LayerSpec {
            fused_gate_up: true,
            pre_norms: true,
            post_norms: false,
            qk_norm: QkNorm::None,
        },
    )?;
    let e = load_embeddings(&ld, &hp, Output::TiedIfAbsent)?;
    Ok(Decoder {
        cfg,
        token_embd: e.token_embd,
        output_norm: e.output_norm,
        layers,
        output: e.output,
    })
}
