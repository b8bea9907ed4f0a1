//! Loading a dense decoder's tensors: one declaration of which tensors exist and how (required,
//! optional, fused), shared by every dense architecture.

use super::decoder::{LayerWeights, QkNorm};
use super::hparams::BaseHparams;
use crate::backend::Weight;
use crate::error::{Error, Result};
use crate::models::loader::TensorLoader;
use crate::models::names::{self as n, layer_tensor, tensor};

/// What a dense architecture's layers contain.
#[derive(Clone, Copy, Debug)]
pub struct LayerSpec {
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
            // Q, K and V come fused in one `attn_qkv` (phi3, some conversions of the others) or
            // as three tensors; a fused one is split by rows without copying.
            let qkv_name = t(n::ATTN_QKV, "weight");
            let (wq, wk, wv, bq, bk, bv) = if ld.has(&qkv_name) {
                let qkv = ld.matrix(&qkv_name, d, qd + kd + vd)?;
                let (bq, bk, bv) = match ld.vector_opt(&t(n::ATTN_QKV, "bias"), qd + kd + vd)? {
                    Some(b) => (
                        Some(b[..qd].to_vec()),
                        Some(b[qd..qd + kd].to_vec()),
                        Some(b[qd + kd..].to_vec()),
                    ),
                    None => separate_qkv_biases(ld, &t, qd, kd, vd)?,
                };
                (
                    qkv.slice_rows(0, qd, &format!("{qkv_name}[q]")),
                    qkv.slice_rows(qd, kd, &format!("{qkv_name}[k]")),
                    qkv.slice_rows(qd + kd, vd, &format!("{qkv_name}[v]")),
                    bq,
                    bk,
                    bv,
                )
            } else {
                let (bq, bk, bv) = separate_qkv_biases(ld, &t, qd, kd, vd)?;
                (
                    ld.matrix(&t(n::ATTN_Q, "weight"), d, qd)?,
                    ld.matrix(&t(n::ATTN_K, "weight"), d, kd)?,
                    ld.matrix(&t(n::ATTN_V, "weight"), d, vd)?,
                    bq,
                    bk,
                    bv,
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
            // FFN biases exist in a few llama-family conversions; we have no use for them, so a
            // file that has them fails here rather than computing something else
            for name in [n::FFN_GATE, n::FFN_UP, n::FFN_DOWN] {
                if ld.has(&t(name, "bias")) {
                    return Err(Error::Model(format!(
                        "{}: FFN biases are not supported",
                        t(name, "bias")
                    )));
                }
            }
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
                bq,
                bk,
                bv,
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

type QkvBiases = (Option<Vec<f32>>, Option<Vec<f32>>, Option<Vec<f32>>);

/// Q/K/V biases as separate vectors: optional in every dense family (qwen2 has them).
fn separate_qkv_biases(
    ld: &TensorLoader,
    t: &dyn Fn(&str, &str) -> String,
    qd: usize,
    kd: usize,
    vd: usize,
) -> Result<QkvBiases> {
    Ok((
        ld.vector_opt(&t(n::ATTN_Q, "bias"), qd)?,
        ld.vector_opt(&t(n::ATTN_K, "bias"), kd)?,
        ld.vector_opt(&t(n::ATTN_V, "bias"), vd)?,
    ))
}

/// How an architecture's output projection relates to the token embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// `output.weight` if present, else the token embedding (most families).
    TiedIfAbsent,
    /// Always the token embedding, even when `output.weight` exists (gemma2).
    Tied,
    /// `output.weight` is required (olmo2).
    Required,
}

/// The model-level tensors: token embedding, final norm, output projection.
pub struct Embeddings {
    pub token_embd: Weight,
    pub output_norm: Vec<f32>,
    pub output: Weight,
}

pub fn load_embeddings(ld: &TensorLoader, hp: &BaseHparams, out: Output) -> Result<Embeddings> {
    // llama.cpp adds an optional `output.bias` for qwen2; no model we know has one, and
    // ignoring it would compute something else, so say so
    let bias = tensor(n::OUTPUT, "bias");
    if ld.has(&bias) {
        return Err(Error::Model(format!(
            "{bias}: output biases are not supported"
        )));
    }
    let token_embd = ld.matrix(&tensor(n::TOKEN_EMBD, "weight"), hp.n_embd, hp.n_vocab)?;
    let out_name = tensor(n::OUTPUT, "weight");
    let output = match out {
        Output::Tied => token_embd.clone(),
        Output::TiedIfAbsent => ld
            .matrix_opt(&out_name, hp.n_embd, hp.n_vocab)?
            .unwrap_or_else(|| token_embd.clone()),
        Output::Required => ld.matrix(&out_name, hp.n_embd, hp.n_vocab)?,
    };
    Ok(Embeddings {
        output_norm: ld.vector(&tensor(n::OUTPUT_NORM, "weight"), hp.n_embd)?,
        token_embd,
        output,
    })
}
