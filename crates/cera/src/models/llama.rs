//! `llama` (Llama 2/3, SmolLM2, classic Mistral) and `granite` (llama plus embedding, residual,
//! attention and logit multipliers): pre-norm, normal (adjacent-pair) RoPE, SwiGLU.

use std::sync::Arc;

use super::common::load::{LayerSpec, load_layers};
use super::common::{BaseHparams, Decoder, DecoderConfig, FfnAct, NormPlacement, QkNorm};
use super::loader::TensorLoader;
use super::names::{self as n, Arch, tensor};
use super::rope_config;
use crate::backend::RopeKind;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::keys::arch_key;

pub fn load(file: Arc<GgufFile>, arch: Arch) -> Result<Decoder> {
    let hp = BaseHparams::read(&file, arch.name())?;
    let ld = TensorLoader::new(file);
    let g = ld.file();
    let a = arch.name();
    // granite's multipliers; plain llama has none
    let (embed_scale, residual_scale, attn_scale, logit_divisor) = if arch == Arch::Granite {
        (
            g.get_opt(&arch_key(a, "embedding_scale"))?.unwrap_or(1.0),
            g.get_opt(&arch_key(a, "residual_scale"))?.unwrap_or(1.0),
            g.get_opt(&arch_key(a, "attention.scale"))?
                .unwrap_or(1.0 / (hp.head_dim as f32).sqrt()),
            g.get_opt(&arch_key(a, "logit_scale"))?.unwrap_or(1.0),
        )
    } else {
        (1.0, 1.0, 1.0 / (hp.head_dim as f32).sqrt(), 1.0)
    };
    let mut rope = rope_config(g, a, RopeKind::Normal, hp.n_rot, hp.rope_freq_base)?;
    // Llama 3 per-dimension frequency divisors (one tensor shared by all layers)
    rope.freq_factors = ld.vector_opt(&tensor(n::ROPE_FREQS, "weight"), hp.n_rot / 2)?;
    let layers = load_layers(
        &ld,
        &hp,
        LayerSpec {
            fused_qkv: false,
            fused_gate_up: false,
            pre_norms: true,
            post_norms: false,
            qk_norm: QkNorm::None,
        },
    )?;
    let token_embd = ld.matrix(&tensor(n::TOKEN_EMBD, "weight"), hp.n_embd, hp.n_vocab)?;
    // output is tied to the token embedding when absent
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
            qk_norm: QkNorm::None,
            ffn_act: FfnAct::SwiGlu,
            n_head_kv: hp.n_head_kv.clone(),
            rope: vec![rope; hp.n_layer],
            window: vec![None; hp.n_layer],
            embed_scale,
            residual_scale,
            attn_scale,
            attn_softcap: None,
            final_softcap: None,
            logit_divisor,
        },
        token_embd,
        output_norm: ld.vector(&tensor(n::OUTPUT_NORM, "weight"), hp.n_embd)?,
        layers,
        output,
    })
}
