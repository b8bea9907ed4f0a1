//! Model architectures. Each family has one file declaring its hyperparameters and tensors;
//! shared blocks live in `common/`; names and keys come from [`names`] and [`crate::keys`].

pub mod common;
pub mod llama;
pub mod loader;
pub mod names;
pub mod qwen2;

use std::sync::Arc;

use crate::backend::{Cpu, KvLayer, KvType, RopeConfig, RopeKind, RopeScaling};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::keys::arch_key;
pub use common::decoder::Scratch;
pub use names::Arch;

/// A loaded model: immutable, shareable between sessions.
pub enum Model {
    Decoder(common::Decoder),
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Model::Decoder(d) => write!(f, "Model::Decoder({} layers)", d.layers.len()),
        }
    }
}

/// The sequence state a model needs besides its weights; owned by a session.
pub struct ModelState {
    pub kv: Vec<KvLayer>,
    pub scratch: Scratch,
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
            other => {
                return Err(Error::UnsupportedArch {
                    arch: other.name().to_owned(),
                    supported: "llama, granite, qwen2, qwen3".into(),
                });
            }
        })
    }

    pub fn n_vocab(&self) -> usize {
        match self {
            Model::Decoder(d) => d.cfg.n_vocab,
        }
    }

    pub fn new_state(&self, n_ctx: usize, kv_type: KvType) -> ModelState {
        match self {
            Model::Decoder(d) => ModelState {
                kv: d.new_kv(n_ctx, kv_type),
                scratch: Scratch::default(),
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
        }
    }
}

/// RoPE settings from `{arch}.rope.*` (scaling type, factor, YaRN parameters).
pub(crate) fn rope_config(
    g: &GgufFile,
    arch: &str,
    kind: RopeKind,
    n_rot: usize,
    base: f32,
) -> Result<RopeConfig> {
    let mut cfg = RopeConfig::new(kind, n_rot, base);
    let scaling: Option<String> = g.get_opt(&arch_key(arch, "rope.scaling.type"))?;
    let factor: f32 = g
        .get_opt(&arch_key(arch, "rope.scaling.factor"))?
        .unwrap_or(0.0);
    match scaling.as_deref() {
        None | Some("none") => {}
        Some("linear") => {
            if factor > 0.0 {
                cfg.freq_scale = 1.0 / factor;
            }
        }
        Some("yarn") => {
            if factor > 0.0 {
                cfg.freq_scale = 1.0 / factor;
            }
            cfg.yarn = Some(RopeScaling {
                ext_factor: 1.0,
                attn_factor: g
                    .get_opt(&arch_key(arch, "rope.scaling.attn_factor"))?
                    .unwrap_or(1.0),
                beta_fast: g
                    .get_opt(&arch_key(arch, "rope.scaling.yarn_beta_fast"))?
                    .unwrap_or(32.0),
                beta_slow: g
                    .get_opt(&arch_key(arch, "rope.scaling.yarn_beta_slow"))?
                    .unwrap_or(1.0),
                n_ctx_orig: g
                    .get_opt(&arch_key(arch, "rope.scaling.original_context_length"))?
                    .unwrap_or(0),
            });
        }
        Some(other) => {
            return Err(Error::Model(format!(
                "{arch}.rope.scaling.type '{other}' is not supported"
            )));
        }
    }
    Ok(cfg)
}
