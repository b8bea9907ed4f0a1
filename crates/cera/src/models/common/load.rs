//! Loading a dense decoder's tensors: one declaration of which tensors exist and how (required,
//! optional, fused), shared by every dense architecture.

use super::decoder::{LayerWeights, QkNorm};
use super::hparams::BaseHparams;
use crate::error::Result;
use crate::models::loader::TensorLoader;
use crate::models::names::{self as n, layer_tensor};

/// What a dense architecture's layers contain.
#[derive(Clone, Copy, Debug)]
pub struct LayerSpec {
    /// Q, K, V in one `attn_qkv` tensor (phi3).
    pub fused_qkv: bool,
    /// gate and up in one `ffn_up` tensor of `2*n_ff` outputs (phi3).
    pub fused_gate_up: bool,
    /// Pre-attention and pre-FFN norms present (false for olmo2).
    pub pre_norms: bool,
    /// Post-attention and post-FFN norms present (gemma2/3, olmo2).
    pub post_norms: bool,
    pub qk_norm: QkNorm,
}

pub fn load_layers(
    ld: &TensorLoader,
    hp: &BaseHparams,
    spec: LayerSpec,
) -> Result<Vec<LayerWeights>> {
    let d = hp.n_embd;
    let qd = hp.n_head * hp.head_dim;
    (0..hp.n_layer)
        .map(|il| {
            let t = |name: &str, suffix: &str| layer_tensor(il, name, suffix);
            let kd = hp.n_head_kv[il] * hp.head_dim;
            let vd = hp.n_head_kv[il] * hp.head_dim_v;
            let (wq, wk, wv) = if spec.fused_qkv {
                let _qkv = ld.matrix(&t(n::ATTN_QKV, "weight"), d, qd + kd + vd)?;
                return Err(crate::error::Error::Model(format!(
                    "{}: fused QKV tensors are not supported yet",
                    t(n::ATTN_QKV, "weight")
                )));
            } else {
                (
                    ld.matrix(&t(n::ATTN_Q, "weight"), d, qd)?,
                    ld.matrix(&t(n::ATTN_K, "weight"), d, kd)?,
                    ld.matrix(&t(n::ATTN_V, "weight"), d, vd)?,
                )
            };
            let (q_norm, k_norm) = match spec.qk_norm {
                QkNorm::None => (None, None),
                QkNorm::PerHead => (
                    Some(ld.vector(&t(n::ATTN_Q_NORM, "weight"), hp.head_dim)?),
                    Some(ld.vector(&t(n::ATTN_K_NORM, "weight"), hp.head_dim)?),
                ),
                QkNorm::Full => (
                    Some(ld.vector(&t(n::ATTN_Q_NORM, "weight"), qd)?),
                    Some(ld.vector(&t(n::ATTN_K_NORM, "weight"), kd)?),
                ),
            };
            let norm = |name: &str| -> Result<Option<Vec<f32>>> {
                ld.vector(&t(name, "weight"), d).map(Some)
            };
            let (ffn_gate, ffn_up) = if spec.fused_gate_up {
                (None, ld.matrix(&t(n::FFN_UP, "weight"), d, 2 * hp.n_ff)?)
            } else {
                (
                    Some(ld.matrix(&t(n::FFN_GATE, "weight"), d, hp.n_ff)?),
                    ld.matrix(&t(n::FFN_UP, "weight"), d, hp.n_ff)?,
                )
            };
            Ok(LayerWeights {
                attn_norm: if spec.pre_norms {
                    norm(n::ATTN_NORM)?
                } else {
                    None
                },
                wq,
                wk,
                wv,
                // biases are optional in every dense family (qwen2 has them)
                bq: ld.vector_opt(&t(n::ATTN_Q, "bias"), qd)?,
                bk: ld.vector_opt(&t(n::ATTN_K, "bias"), kd)?,
                bv: ld.vector_opt(&t(n::ATTN_V, "bias"), vd)?,
                q_norm,
                k_norm,
                wo: ld.matrix(&t(n::ATTN_OUT, "weight"), hp.n_head * hp.head_dim_v, d)?,
                bo: ld.vector_opt(&t(n::ATTN_OUT, "bias"), d)?,
                attn_post_norm: if spec.post_norms {
                    norm(n::ATTN_POST_NORM)?
                } else {
                    None
                },
                ffn_norm: if spec.pre_norms {
                    norm(n::FFN_NORM)?
                } else {
                    None
                },
                ffn_gate,
                ffn_up,
                ffn_down: ld.matrix(&t(n::FFN_DOWN, "weight"), hp.n_ff, d)?,
                ffn_post_norm: if spec.post_norms {
                    norm(n::FFN_POST_NORM)?
                } else {
                    None
                },
            })
        })
        .collect()
}
