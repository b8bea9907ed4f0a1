//! Model architectures. Each family has one file declaring its hyperparameters and tensors;
//! shared blocks live in `common/`; names and keys come from [`names`] and [`crate::keys`].

pub mod common;
pub mod gemma2;
pub mod gemma3;
pub mod lfm2;
pub mod llama;
pub mod loader;
pub mod names;
pub mod olmo2;
pub mod phi3;
pub mod qwen2;

use std::sync::Arc;

use crate::backend::{Cpu, KvLayer, KvType, RopeConfig, RopeKind, RopeScaling};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::keys::{arch as k, arch_key};
pub use common::decoder::Scratch;
use common::shortconv::ConvState;
pub use names::Arch;

/// A loaded model: immutable, shareable between sessions.
pub enum Model {
    Decoder(common::Decoder),
    /// `lfm2` / `lfm2moe`: convolution and attention layers, dense or routed FFNs.
    Lfm2(lfm2::Lfm2),
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Model::Decoder(d) => write!(f, "Model::Decoder({} layers)", d.layers.len()),
            Model::Lfm2(m) => {
                let (conv, attn, routed) = m.layer_counts();
                write!(
                    f,
                    "Model::Lfm2({}: {conv} convolution, {attn} attention, {routed} routed)",
                    m.cfg.arch
                )
            }
        }
    }
}

/// The sequence state a model needs besides its weights; owned by a session.
pub struct ModelState {
    pub kv: Vec<KvLayer>,
    /// Rolling convolution inputs (LFM2); empty for attention-only models.
    pub conv: ConvState,
    pub scratch: Scratch,
    lfm2_scratch: lfm2::Scratch,
}

impl ModelState {
    /// Whether the state has a recurrent part (convolution inputs) that, unlike the KV cache,
    /// cannot be cut back to an earlier position: truncating needs a re-prefill.
    pub fn is_recurrent(&self) -> bool {
        !self.conv.is_empty()
    }

    /// For mixture-of-experts models: the smallest gap, since the last call, between the
    /// selection score of the last expert chosen and the best one left out (None: no routing).
    /// A tiny gap means rounding-level differences could have chosen other experts, which is
    /// what comparisons against another engine need to know.
    pub fn take_routing_margin(&mut self) -> Option<f32> {
        lfm2::Lfm2::take_routing_margin(&mut self.lfm2_scratch)
    }

    /// Bytes of KV cache and recurrent state.
    pub fn bytes(&self) -> usize {
        self.kv.iter().map(|l| l.bytes()).sum::<usize>() + self.conv.bytes()
    }
}

impl Model {
    /// Builds the model `general.architecture` names; an unsupported one is an error naming it.
    pub fn load(file: Arc<GgufFile>) -> Result<Model> {
        let arch = Arch::from_name(file.architecture()?)?;
        // every weight must be of a type we can compute with; say which one is not
        for t in &file.tensors {
            if t.shape.len() >= 2
                && t.shape[1] > 1
                && crate::kernels::KernelTable::vec_dot_type(t.ty).is_none()
            {
                return Err(Error::QuantUnsupported {
                    ty: t.ty,
                    op: "matrix multiplication (tensor in this model)",
                });
            }
        }
        Ok(match arch {
            Arch::Llama | Arch::Granite => Model::Decoder(llama::load(file, arch)?),
            Arch::Qwen2 | Arch::Qwen3 => Model::Decoder(qwen2::load(file, arch)?),
            Arch::Gemma2 => Model::Decoder(gemma2::load(file)?),
            Arch::Gemma3 => Model::Decoder(gemma3::load(file)?),
            Arch::Phi3 => Model::Decoder(phi3::load(file)?),
            Arch::Olmo2 => Model::Decoder(olmo2::load(file)?),
            Arch::Lfm2 | Arch::Lfm2Moe => Model::Lfm2(lfm2::load(file, arch)?),
        })
    }

    pub fn n_vocab(&self) -> usize {
        match self {
            Model::Decoder(d) => d.cfg.n_vocab,
            Model::Lfm2(m) => m.cfg.n_vocab,
        }
    }

    /// A fresh sequence state: KV cache of `n_ctx` positions with keys of `k_type` and values
    /// of `v_type`.
    pub fn new_state(&self, n_ctx: usize, k_type: KvType, v_type: KvType) -> ModelState {
        match self {
            Model::Decoder(d) => ModelState {
                kv: d.new_kv(n_ctx, k_type, v_type),
                conv: ConvState::default(),
                scratch: Scratch::default(),
                lfm2_scratch: Default::default(),
            },
            Model::Lfm2(m) => ModelState {
                kv: m.new_kv(n_ctx, k_type, v_type),
                conv: m.new_conv_state(),
                scratch: Scratch::default(),
                lfm2_scratch: Default::default(),
            },
        }
    }

    /// Runs `tokens` at positions `pos0..`; logits for the last token (or all) go to `logits`.
    pub fn forward(
        &self,
        cpu: &Cpu,
        st: &mut ModelState,
        tokens: &[u32],
        pos0: usize,
        all_logits: bool,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        match self {
            Model::Decoder(d) => d.forward(
                cpu,
                &mut st.kv,
                tokens,
                pos0,
                all_logits,
                &mut st.scratch,
                logits,
            ),
            Model::Lfm2(m) => m.forward(
                cpu,
                &mut st.kv,
                &mut st.conv,
                tokens,
                pos0,
                all_logits,
                &mut st.lfm2_scratch,
                logits,
            ),
        }
    }
}

/// RoPE settings from `{arch}.rope.*`, as llama.cpp reads them: the scaling type defaults to
/// linear (a factor alone scales positions), `longrope` scales like linear (its per-dimension
/// factors are tensors the architecture loads), YaRN's correction range defaults to the
/// training context, and `rope.scaling.attn_factor` multiplies cos/sin for every type.
pub(crate) fn rope_config(
    g: &GgufFile,
    arch: &str,
    kind: RopeKind,
    n_rot: usize,
    base: f32,
) -> Result<RopeConfig> {
    let key = |s: &str| arch_key(arch, s);
    let mut cfg = RopeConfig::new(kind, n_rot, base);
    let scaling: Option<String> = g.get_opt(&key(k::ROPE_SCALING_TYPE))?;
    let factor: f32 = match g.get_opt(&key(k::ROPE_SCALING_FACTOR))? {
        Some(f) => f,
        None => g.get_opt(&key(k::ROPE_SCALE_LINEAR))?.unwrap_or(0.0),
    };
    let attn_factor: f32 = g.get_opt(&key(k::ROPE_SCALING_ATTN_FACTOR))?.unwrap_or(1.0);
    let freq_scale = if factor == 0.0 { 1.0 } else { 1.0 / factor };
    let yarn = |ext_factor: f32| -> Result<RopeScaling> {
        Ok(RopeScaling {
            ext_factor,
            attn_factor,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: match g.get_opt(&key(k::ROPE_SCALING_ORIG_CTX_LEN))? {
                Some(n) if n != 0 => n,
                _ => g.get_opt(&key(k::CONTEXT_LENGTH))?.unwrap_or(0),
            },
        })
    };
    match scaling.as_deref().unwrap_or("linear") {
        "none" => {}
        "linear" | "longrope" => cfg.freq_scale = freq_scale,
        "yarn" => {
            cfg.freq_scale = freq_scale;
            cfg.yarn = Some(yarn(1.0)?);
        }
        other => {
            return Err(Error::Model(format!(
                "{} '{other}' is not supported",
                key(k::ROPE_SCALING_TYPE)
            )));
        }
    }
    if cfg.yarn.is_none() && attn_factor != 1.0 {
        // no extrapolation mix, only the cos/sin multiplier
        cfg.yarn = Some(yarn(0.0)?);
    }
    Ok(cfg)
}
