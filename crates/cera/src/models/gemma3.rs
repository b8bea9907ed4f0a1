//! `gemma3`: gemma2's layer (sandwich norms, GeGLU, sqrt(n_embd) embedding scale, NeoX RoPE) plus
//! per-head Q/K RMS norms before RoPE, no attention soft-capping, final soft-capping only when
//! `final_logit_softcapping` is set, and an optional untied output.
//!
//! Local and global layers, as llama.cpp does: with `attention.sliding_window` > 0, five of every
//! six layers are local (or as `attention.sliding_window_pattern` says); local layers attend to
//! that window and use RoPE base `rope.freq_base_swa` (default 10000) without frequency scaling,
//! while global layers use `rope.freq_base` and the model's RoPE scaling (linear 8 on 4B+).
//! Without a window every layer is global. Q is scaled by 1/sqrt(head_dim), or by
//! 1/sqrt(n_embd/n_head) for the 27B model (62 layers).

use std::sync::Arc;

use super::common::hparams::swa_layers;
use super::common::load::{LayerSpec, Output, load_embeddings, load_layers};
use super::common::{BaseHparams, Decoder, DecoderConfig, FfnAct, NormPlacement, QkNorm};
use super::loader::TensorLoader;
use super::rope_config;
use crate::backend::RopeKind;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::keys::{arch as k, arch_key};

const ARCH: &str = "gemma3";

pub fn load(file: Arc<GgufFile>) -> Result<Decoder> {
    let hp = BaseHparams::read(&file, ARCH)?;
    let ld = TensorLoader::new(file);
    let g = ld.file();
    let key = |s: &str| arch_key(ARCH, s);

    let rope = rope_config(g, ARCH, RopeKind::Neox, hp.n_rot, hp.rope_freq_base)?;
    let mut cfg = DecoderConfig::new(&hp, rope.clone());
    cfg.norm = NormPlacement::Sandwich;
    cfg.qk_norm = QkNorm::PerHead;
    cfg.ffn_act = FfnAct::GeGlu;
    cfg.embed_scale = (hp.n_embd as f32).sqrt();
    cfg.final_softcap = g
        .get_opt::<f32>(&key(k::FINAL_LOGIT_SOFTCAPPING))?
        .filter(|&c| c != 0.0);
    if hp.n_layer == 62 {
        cfg.attn_scale = 1.0 / ((hp.n_embd / hp.n_head) as f32).sqrt();
    }
    let window: usize = g.get_opt(&key(k::SLIDING_WINDOW))?.unwrap_or(0);
    if window > 0 {
        let mut local_rope = rope;
        local_rope.freq_base = g.get_opt(&key(k::ROPE_FREQ_BASE_SWA))?.unwrap_or(10000.0);
        local_rope.freq_scale = 1.0;
        for (il, local) in swa_layers(g, ARCH, hp.n_layer, 6)?.into_iter().enumerate() {
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
            pre_norms: true,
            post_norms: true,
            qk_norm: QkNorm::PerHead,
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
