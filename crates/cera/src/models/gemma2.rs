//! `gemma2`: sandwich norms (pre and post RMS norms around attention and the FFN), GeGLU with
//! tanh-approximate GELU, NeoX RoPE, embeddings scaled by sqrt(n_embd), output tied to the token
//! embedding, attention and final logit soft-capping (defaults 50 and 30), and sliding-window
//! attention on every other layer (even layers local; window default 4096).
//!
//! As llama.cpp does: Q is scaled by 1/sqrt(head_dim) — or 1/sqrt(n_embd/n_head) for the 27B
//! model (46 layers), matching its `query_pre_attn_scalar` — and soft-capping applies to the
//! scaled scores. Local layers may have their own RoPE base (`rope.freq_base_swa`).

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

const ARCH: &str = "gemma2";

pub fn load(file: Arc<GgufFile>) -> Result<Decoder> {
    let hp = BaseHparams::read(&file, ARCH)?;
    let ld = TensorLoader::new(file);
    let g = ld.file();
    let key = |s: &str| arch_key(ARCH, s);

    let rope = rope_config(g, ARCH, RopeKind::Neox, hp.n_rot, hp.rope_freq_base)?;
    let mut cfg = DecoderConfig::new(&hp, rope.clone());
    cfg.norm = NormPlacement::Sandwich;
    cfg.ffn_act = FfnAct::GeGlu;
    cfg.embed_scale = (hp.n_embd as f32).sqrt();
    cfg.attn_softcap = Some(g.get_opt(&key(k::ATTN_LOGIT_SOFTCAPPING))?.unwrap_or(50.0));
    cfg.final_softcap = Some(g.get_opt(&key(k::FINAL_LOGIT_SOFTCAPPING))?.unwrap_or(30.0));
    if hp.n_layer == 46 {
        cfg.attn_scale = 1.0 / ((hp.n_embd / hp.n_head) as f32).sqrt();
    }
    let window: usize = g.get_opt(&key(k::SLIDING_WINDOW))?.unwrap_or(4096);
    // local layers: same scaling as the global ones, own base if given
    let mut local_rope = rope;
    if let Some(base) = g.get_opt(&key(k::ROPE_FREQ_BASE_SWA))? {
        local_rope.freq_base = base;
    }
    for (il, local) in swa_layers(g, ARCH, hp.n_layer, 2)?.into_iter().enumerate() {
        if local {
            cfg.window[il] = Some(window);
            cfg.rope[il] = local_rope.clone();
        }
    }
    let layers = load_layers(
        &ld,
        &hp,
        LayerSpec {
            fused_gate_up: false,
            pre_norms: true,
            post_norms: true,
            qk_norm: QkNorm::None,
        },
    )?;
    let e = load_embeddings(&ld, &hp, Output::Tied)?;
    Ok(Decoder {
        cfg,
        token_embd: e.token_embd,
        output_norm: e.output_norm,
        layers,
        output: e.output,
    })
}
