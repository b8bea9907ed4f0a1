//! `llama` (Llama 2/3, SmolLM2, classic Mistral) and `granite` (llama plus embedding, residual,
//! attention and logit multipliers): pre-norm, normal (adjacent-pair) RoPE, SwiGLU.

use std::sync::Arc;

use super::common::load::{LayerSpec, Output, load_embeddings, load_layers};
use super::common::{BaseHparams, Decoder, DecoderConfig, QkNorm};
use super::loader::TensorLoader;
use super::names::{self as n, Arch, tensor};
use super::rope_config;
use crate::backend::RopeKind;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::keys::{arch as k, arch_key};

pub fn load(file: Arc<GgufFile>, arch: Arch) -> Result<Decoder> {
    let hp = BaseHparams::read(&file, arch.name())?;
    let ld = TensorLoader::new(file);
    let g = ld.file();
    let a = arch.name();
    let key = |s: &str| arch_key(a, s);

    let mut rope = rope_config(g, a, RopeKind::Normal, hp.n_rot, hp.rope_freq_base)?;
    // per-dimension frequency divisors, one tensor shared by all layers: Llama 3's
    // `rope_freqs`, or with LongRoPE the factors for contexts up to the original length
    let longrope = g.get_opt::<String>(&key(k::ROPE_SCALING_TYPE))?.as_deref() == Some("longrope");
    let factors = if longrope {
        n::ROPE_FACTORS_SHORT
    } else {
        n::ROPE_FREQS
    };
    rope.freq_factors = ld.vector_opt(&tensor(factors, "weight"), hp.n_rot / 2)?;
    if arch == Arch::Granite && !g.get_opt(&key(k::ROPE_SCALING_FINETUNED))?.unwrap_or(true) {
        // granite uses `rope.scaling.finetuned = false` to switch RoPE off
        rope.n_rot = 0;
    }
    let mut cfg = DecoderConfig::new(&hp, rope);
    if arch == Arch::Granite {
        // llama.cpp treats a zero multiplier as absent
        let nonzero = |s: &str| -> Result<Option<f32>> {
            Ok(g.get_opt::<f32>(&key(s))?.filter(|&v| v != 0.0))
        };
        cfg.embed_scale = nonzero(k::EMBEDDING_SCALE)?.unwrap_or(1.0);
        cfg.residual_scale = nonzero(k::RESIDUAL_SCALE)?.unwrap_or(1.0);
        cfg.logit_divisor = nonzero(k::LOGIT_SCALE)?.unwrap_or(1.0);
        if let Some(s) = nonzero(k::ATTENTION_SCALE)? {
            cfg.attn_scale = s;
        }
    }
    let layers = load_layers(
        &ld,
        &hp,
        LayerSpec {
            fused_gate_up: false,
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
