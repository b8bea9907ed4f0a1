//! `olmo2` (OLMo 2; OLMo 3 shares the graph): post-norm layers — `x + norm(attn(x))` and
//! `x + norm(ffn(x))`, no norm before attention or the FFN — with RMS norms over all of Q and
//! all of K (weights of `n_head*head_dim` and `n_kv*head_dim`) before NeoX RoPE, SwiGLU, and an
//! untied output.
//!
//! With `attention.sliding_window` > 0 (OLMo 3), three of every four layers are local (or as
//! `attention.sliding_window_pattern` says); local layers use plain RoPE (the global base, no
//! scaling), as llama.cpp does.

use std::sync::Arc;

use super::common::hparams::swa_layers;
use super::common::load::{LayerSpec, Output, load_embeddings, load_layers};
use super::common::{BaseHparams, Decoder, DecoderConfig, NormPlacement, QkNorm};
use super::loader::TensorLoader;
use super::rope_config;
use crate::backend::{RopeConfig, RopeKind};
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::keys::{arch as k, arch_key};

const ARCH: &str = "olmo2";

pub fn load(file: Arc<GgufFile>) -> Result<Decoder> {
    let hp = BaseHparams::read(&file, ARCH)?;
    let ld = TensorLoader::new(file);
    let g = ld.file();
    let key = |s: &str| arch_key(ARCH, s);

    let rope = rope_config(g, ARCH, RopeKind::Neox, hp.n_rot, hp.rope_freq_base)?;
    let mut cfg = DecoderConfig::new(&hp, rope);
    cfg.norm = NormPlacement::Post;
    cfg.qk_norm = QkNorm::Full;
    let window: usize = g.get_opt(&key(k::SLIDING_WINDOW))?.unwrap_or(0);
    if window > 0 {
        // llama.cpp reads `rope.freq_base_swa` for OLMo 3 but its graph rotates local layers
        // with the global base; so do we
        let local_rope = RopeConfig::new(RopeKind::Neox, hp.n_rot, hp.rope_freq_base);
        for (il, local) in swa_layers(g, ARCH, hp.n_layer, 4)?.into_iter().enumerate() {
            if local {
                cfg.window[il] = Some(window);
                cfg.rope[il] = local_rope.clone();
            }
        }
    }
    let layers = load_layers(
        &ld,
        &hp,
        LayerSpec {
            fused_gate_up: false,
            pre_norms: false,
            post_norms: true,
            qk_norm: QkNorm::Full,
        },
    )?;
    let e = load_embeddings(&ld, &hp, Output::Required)?;
    Ok(Decoder {
        cfg,
        token_embd: e.token_embd,
        output_norm: e.output_norm,
        layers,
        output: e.output,
    })
}
