//! `qwen2` (Qwen2, Qwen2.5, Qwen2.5-Coder): llama's layout with Q/K/V biases and NeoX RoPE.
//! `qwen3` adds per-head Q/K RMS norms and a head size of its own (`attention.key_length`).

use std::sync::Arc;

use super::common::load::{LayerSpec, load_layers};
use super::common::{BaseHparams, Decoder, DecoderConfig, FfnAct, NormPlacement, QkNorm};
use super::loader::TensorLoader;
use super::names::{self as n, Arch, tensor};
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
    let layers = load_layers(
        &ld,
        &hp,
        LayerSpec {
            fused_qkv: false,
            fused_gate_up: false,
            pre_norms: true,
            post_norms: false,
            qk_norm,
        },
    )?;
    let token_embd = ld.matrix(&tensor(n::TOKEN_EMBD, "weight"), hp.n_embd, hp.n_vocab)?;
    let output = ld
        .matrix_opt(&tensor(n::OUTPUT, "weight"), hp.n_embd, hp.n_vocab)?
        .unwrap_or_else(|| token_embd.clone());
    Ok(Decoder {
        cfg: DecoderConfig {
            n_vocab: hp.n_vocab,
            n_embd: hp.n_embd,
            n_head: hp.n_head,
            head_dim: hp.head_dim,
            head_dim_v: hp.head_dim_v,
            n_ff: hp.n_ff,
            rms_eps: hp.rms_eps,
            norm: NormPlacement::Pre,
            qk_norm,
            ffn_act: FfnAct::SwiGlu,
            n_head_kv: hp.n_head_kv.clone(),
            rope: vec![rope; hp.n_layer],
            window: vec![None; hp.n_layer],
            embed_scale: 1.0,
            residual_scale: 1.0,
            attn_scale: 1.0 / (hp.head_dim as f32).sqrt(),
            attn_softcap: None,
            final_softcap: None,
            logit_divisor: 1.0,
        },
        token_embd,
        output_norm: ld.vector(&tensor(n::OUTPUT_NORM, "weight"), hp.n_embd)?,
        layers,
        output,
    })
}
