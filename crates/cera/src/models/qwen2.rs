//! `qwen2` (Qwen2, Qwen2.5, Qwen2.5-Coder): llama's layout with Q/K/V biases and NeoX RoPE.
//! `qwen3` adds per-head Q/K RMS norms (before RoPE) and a head size of its own
//! (`attention.key_length`, so `n_head * head_dim` may differ from `n_embd`).

use std::sync::Arc;

use super::common::load::{LayerSpec, Output, load_embeddings, load_layers};
use super::common::{BaseHparams, Decoder, DecoderConfig, QkNorm};
use super::loader::TensorLoader;
use super::names::Arch;
use super::rope_config;
use crate::backend::RopeKind;
use crate::error::Result;
use crate::gguf::GgufFile;

pub fn load(file: Arc<GgufFile>, arch: Arch) -> Result<Decoder> {
    let hp = BaseHparams::read(&file, arch.name())?;
    let ld = TensorLoader::new(file);
    let qk_norm = if arch == Arch::Qwen3 {
        QkNorm::PerHead
    } else {
        QkNorm::None
    };
    let rope = rope_config(
        ld.file(),
        arch.name(),
        RopeKind::Neox,
        hp.n_rot,
        hp.rope_freq_base,
    )?;
    let mut cfg = DecoderConfig::new(&hp, rope);
    cfg.qk_norm = qk_norm;
    let layers = load_layers(
        &ld,
        &hp,
        LayerSpec {
            fused_gate_up: false,
            pre_norms: true,
            post_norms: false,
            qk_norm,
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
