//! A routed mixture-of-experts FFN's description, shared by the backends: its weights and
//! options ([`MoeWeights`], lfm2moe's as llama.cpp's `build_moe_ffn` reads them), the LoRA
//! deltas a block applies ([`MoeLora`]) and the routing every backend runs ([`choose`]), so
//! all choose the same experts from the same router logits. The CPU's dispatch is
//! `cpu/moe.rs`, the GPU's `gpu/moe.rs`.

use crate::backend::{self, LowRank, Weight};
use crate::error::{Error, Result};

/// How router logits become probabilities (`{arch}.expert_gating_func`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    Softmax,
    Sigmoid,
}

impl Gating {
    /// From llama.cpp's `llama_expert_gating_func_type` numbering.
    pub fn from_gguf(v: u32) -> Result<Gating> {
        match v {
            1 => Ok(Gating::Softmax),
            2 => Ok(Gating::Sigmoid),
            _ => Err(Error::Model(format!(
                "expert gating function {v} is not supported (1 softmax, 2 sigmoid)"
            ))),
        }
    }
}

/// The LoRA deltas a MoE block applies in one step: groups of rows sharing a set of
/// adapters, and each group's deltas on a weight (the router or one expert's projection).
pub trait MoeLora {
    /// How many groups there are (0: no row applies an adapter).
    fn n_groups(&self) -> usize;
    /// The group of row `t` of the step, if it applies adapters.
    fn group_of(&self, t: usize) -> Option<usize>;
    /// Calls `f(pair, s)` for each delta group `g` adds to weight `w`, in the order they add.
    fn each(
        &self,
        g: usize,
        w: &Weight,
        f: &mut dyn FnMut(&LowRank, f32) -> Result<()>,
    ) -> Result<()>;
}

/// No adapters on any row.
pub struct NoLora;

impl MoeLora for NoLora {
    fn n_groups(&self) -> usize {
        0
    }
    fn group_of(&self, _t: usize) -> Option<usize> {
        None
    }
    fn each(
        &self,
        _g: usize,
        _w: &Weight,
        _f: &mut dyn FnMut(&LowRank, f32) -> Result<()>,
    ) -> Result<()> {
        Ok(())
    }
}

pub struct MoeWeights {
    /// `[n_embd, n_expert]`
    pub gate_inp: Weight,
    /// `[n_expert]`, added to the probabilities for choosing only
    pub probs_bias: Option<Vec<f32>>,
    /// Per expert: `[n_embd, n_ff_exp]`, `[n_embd, n_ff_exp]`, `[n_ff_exp, n_embd]` (row views of
    /// the 3-D `ffn_*_exps` tensors)
    pub gate: Vec<Weight>,
    pub up: Vec<Weight>,
    pub down: Vec<Weight>,
    pub n_used: usize,
    pub gating: Gating,
    /// Normalize the chosen weights to sum 1.
    pub norm_weights: bool,
    /// Multiplies the chosen weights (1: none).
    pub weights_scale: f32,
    /// Every expert's weights are packed for the GEMMs (see [`moe_ffn`]).
    pub packed_all: std::sync::atomic::AtomicBool,
}

impl MoeWeights {
    pub fn n_expert(&self) -> usize {
        self.gate.len()
    }
    pub fn n_ff(&self) -> usize {
        self.gate[0].rows
    }
}

/// One token's routing: its router logits `probs` become gate probabilities (in place), the
/// `n_used` experts with the best (biased) selection scores are appended to `chosen` with their
/// weights (normalized and scaled as the model asks). Returns the selection-score gap between
/// the last expert chosen and the best one left out (None when every expert is used). Every
/// backend routes through this, so all choose the same experts from the same logits.
pub(crate) fn choose(
    w: &MoeWeights,
    probs: &mut [f32],
    sel: &mut [f32],
    idx: &mut Vec<usize>,
    chosen: &mut Vec<(usize, f32)>,
) -> Option<f32> {
    let (ne, k) = (w.n_expert(), w.n_used);
    match w.gating {
        Gating::Sigmoid => {
            for p in probs.iter_mut() {
                *p = 1.0 / (1.0 + (-*p).exp());
            }
        }
        Gating::Softmax => {
            let mx = probs.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for p in probs.iter_mut() {
                *p = (*p - mx).exp();
                sum += *p;
            }
            for p in probs.iter_mut() {
                *p /= sum;
            }
        }
    }
    sel.copy_from_slice(probs);
    if let Some(b) = &w.probs_bias {
        backend::add_inplace(sel, b);
    }
    // top k by the (biased) selection score; equal scores keep the lower index first
    idx.clear();
    idx.extend(0..ne);
    idx.sort_by(|&a, &b| sel[b].total_cmp(&sel[a]).then(a.cmp(&b)));
    let gap = (k < ne).then(|| sel[idx[k - 1]] - sel[idx[k]]);
    let start = chosen.len();
    chosen.extend(idx[..k].iter().map(|&e| (e, probs[e])));
    let chosen = &mut chosen[start..];
    if w.norm_weights {
        let sum: f32 = chosen.iter().map(|c| c.1).sum();
        let sum = sum.max(6.103_515_6e-5);
        for c in chosen.iter_mut() {
            c.1 /= sum;
        }
    }
    if w.weights_scale != 1.0 {
        for c in chosen.iter_mut() {
            c.1 *= w.weights_scale;
        }
    }
    gap
}
