//! The mixture-of-experts FFN on the CPU: router logits, routing by the shared
//! [`choose`](crate::backend::moe) (every backend picks the same experts), the experts' SwiGLU.
//!
//! Dispatch: for a batch the tokens are grouped by expert, so each chosen expert's weights are
//! read once per batch (one matmul over its tokens) and the results scattered back weighted.
//! In a batched step the tokens of every sequence are grouped together, so an expert chosen by
//! several sequences is still read once. Per-token dispatch (every token reads its experts on
//! its own, as the original Cera did) is kept for measuring that gain: `CERA_MOE_DISPATCH=token`
//! or [`Cpu::set_moe_dispatch`].

use super::{Cpu, QuantizedActs, SyncPtr};
use crate::backend::moe::{MoeLora, MoeWeights, choose};
use crate::backend::{self, Weight};
use crate::error::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Dispatch {
    #[default]
    /// Tokens grouped by expert: one matmul per chosen expert and batch.
    Grouped,
    /// One matmul per (token, expert).
    PerToken,
}

impl Dispatch {
    /// `CERA_MOE_DISPATCH=token` selects per-token dispatch; the default is grouped.
    pub fn from_env() -> Dispatch {
        match std::env::var("CERA_MOE_DISPATCH").as_deref() {
            Ok("token") => Dispatch::PerToken,
            _ => Dispatch::Grouped,
        }
    }
}

/// Working buffers of the MoE block.
#[derive(Default)]
pub struct MoeScratch {
    logits: Vec<f32>,
    /// per token: n_used (expert, weight)
    chosen: Vec<(usize, f32)>,
    /// per expert: the (token * n_used + slot) entries routed to it
    groups: Vec<Vec<usize>>,
    xg: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    y: Vec<f32>,
    /// per (token, slot): that expert's weighted output, summed in slot order at the end
    slots: Vec<f32>,
    acts: QuantizedActs,
    lora: LoraScratch,
    /// The smallest selection-score gap between the last chosen expert and the first one left
    /// out, since it was last taken: how close routing came to choosing differently.
    min_gap: Option<f32>,
}

/// Buffers of the LoRA deltas: one group's input rows, their indices, their quantized form and
/// `A · x`.
#[derive(Default)]
struct LoraScratch {
    x: Vec<f32>,
    rows: Vec<usize>,
    acts: QuantizedActs,
    t: Vec<f32>,
}

/// Adds to `out` (`m` rows) the deltas each group of `lora` has on `w`, for the rows `i` of `x`
/// (`m` rows of `width`) whose step row `row_of(i)` belongs to the group.
#[allow(clippy::too_many_arguments)]
fn add_deltas(
    cpu: &Cpu,
    lora: &dyn MoeLora,
    w: &Weight,
    x: &[f32],
    width: usize,
    m: usize,
    row_of: &dyn Fn(usize) -> usize,
    out: &mut [f32],
    ls: &mut LoraScratch,
) -> Result<()> {
    let o = out.len() / m.max(1);
    let dst = SyncPtr(out.as_mut_ptr());
    for g in 0..lora.n_groups() {
        ls.rows.clear();
        ls.rows
            .extend((0..m).filter(|&i| lora.group_of(row_of(i)) == Some(g)));
        let cnt = ls.rows.len();
        if cnt == 0 {
            continue;
        }
        ls.x.resize(cnt * width, 0.0);
        for (j, &i) in ls.rows.iter().enumerate() {
            ls.x[j * width..(j + 1) * width].copy_from_slice(&x[i * width..(i + 1) * width]);
        }
        let rows = (cnt < m).then_some(&ls.rows[..]);
        let (xs, acts, t) = (&ls.x[..cnt * width], &mut ls.acts, &mut ls.t);
        lora.each(g, w, &mut |pair, s| {
            assert_eq!(pair.out, o, "{}: delta width", w.name);
            cpu.lora_delta(pair, xs, cnt, rows, dst, s, acts, t)
        })?;
    }
    Ok(())
}

impl MoeScratch {
    /// The routing margin since the last call (None: no routing happened).
    pub fn take_min_gap(&mut self) -> Option<f32> {
        self.min_gap.take()
    }
}

/// `out` (n × d) = the MoE FFN of `h` (n × d).
#[allow(clippy::too_many_arguments)]
pub fn moe_ffn(
    cpu: &Cpu,
    w: &MoeWeights,
    h: &[f32],
    n: usize,
    dispatch: Dispatch,
    lora: &dyn MoeLora,
    sc: &mut MoeScratch,
    out: &mut [f32],
) -> Result<()> {
    let d = w.gate_inp.cols;
    let ne = w.n_expert();
    let ff = w.n_ff();
    // The packed kernels repack a weight on its first use. Expert by expert, that put the
    // packing of a few experts into every early decode step (random routing on LFM2-8B-A1B's
    // shape: the first 64 tokens at 38 t/s, later ones at 57); all of a layer's experts are
    // packed at its first call instead, as an engine that repacks at load has them.
    if !w.packed_all.load(std::sync::atomic::Ordering::Acquire) {
        for e in w.gate.iter().chain(&w.up).chain(&w.down) {
            e.prepack(cpu);
        }
        w.packed_all
            .store(true, std::sync::atomic::Ordering::Release);
    }
    route(cpu, w, h, n, lora, sc)?;
    let k = w.n_used;
    sc.slots.resize(n * k * d, 0.0);
    match dispatch {
        Dispatch::Grouped => {
            sc.groups.resize_with(ne, Vec::new);
            for g in &mut sc.groups {
                g.clear();
            }
            // a group entry is the (token, slot) pair; its weight is in `chosen`
            for t in 0..n {
                for (j, &(e, _)) in sc.chosen[t * k..(t + 1) * k].iter().enumerate() {
                    sc.groups[e].push(t * k + j);
                }
            }
            for e in 0..ne {
                let m = sc.groups[e].len();
                if m == 0 {
                    continue;
                }
                sc.xg.resize(m * d, 0.0);
                for (i, &slot) in sc.groups[e].iter().enumerate() {
                    let t = slot / k;
                    sc.xg[i * d..(i + 1) * d].copy_from_slice(&h[t * d..(t + 1) * d]);
                }
                let slots = std::mem::take(&mut sc.groups[e]);
                let r = expert(cpu, w, e, m, ff, &|i| slots[i] / k, lora, sc);
                sc.groups[e] = slots;
                r?;
                for (i, &slot) in sc.groups[e].iter().enumerate() {
                    let wt = sc.chosen[slot].1;
                    scaled(
                        &mut sc.slots[slot * d..(slot + 1) * d],
                        wt,
                        &sc.y[i * d..(i + 1) * d],
                    );
                }
            }
        }
        Dispatch::PerToken => {
            for slot in 0..n * k {
                let (e, wt) = sc.chosen[slot];
                let t = slot / k;
                sc.xg.resize(d, 0.0);
                sc.xg.copy_from_slice(&h[t * d..(t + 1) * d]);
                expert(cpu, w, e, 1, ff, &|_| t, lora, sc)?;
                scaled(&mut sc.slots[slot * d..(slot + 1) * d], wt, &sc.y[..d]);
            }
        }
    }
    // sum each token's experts in slot order (best first), as llama.cpp does, so both
    // dispatches give the same bits
    for t in 0..n {
        let o = &mut out[t * d..(t + 1) * d];
        o.copy_from_slice(&sc.slots[t * k * d..(t * k + 1) * d]);
        for j in 1..k {
            backend::add_inplace(o, &sc.slots[(t * k + j) * d..(t * k + j + 1) * d]);
        }
    }
    Ok(())
}

/// `dst = a * src`.
fn scaled(dst: &mut [f32], a: f32, src: &[f32]) {
    for (o, &v) in dst.iter_mut().zip(src) {
        *o = a * v;
    }
}

/// Expert `e` on the `m` rows of `sc.xg` (row `i` is the step's row `row_of(i)`), into `sc.y`.
#[allow(clippy::too_many_arguments)]
fn expert(
    cpu: &Cpu,
    w: &MoeWeights,
    e: usize,
    m: usize,
    ff: usize,
    row_of: &dyn Fn(usize) -> usize,
    lora: &dyn MoeLora,
    sc: &mut MoeScratch,
) -> Result<()> {
    let d = w.gate_inp.cols;
    sc.gate.resize(m * ff, 0.0);
    sc.up.resize(m * ff, 0.0);
    cpu.matmul_many(
        &mut [
            (&w.gate[e], &mut sc.gate[..m * ff]),
            (&w.up[e], &mut sc.up[..m * ff]),
        ],
        &sc.xg[..m * d],
        m,
        &mut sc.acts,
    )?;
    if lora.n_groups() > 0 {
        let (x, ls) = (&sc.xg[..m * d], &mut sc.lora);
        add_deltas(
            cpu,
            lora,
            &w.gate[e],
            x,
            d,
            m,
            row_of,
            &mut sc.gate[..m * ff],
            ls,
        )?;
        add_deltas(
            cpu,
            lora,
            &w.up[e],
            x,
            d,
            m,
            row_of,
            &mut sc.up[..m * ff],
            ls,
        )?;
    }
    cpu.glu(&mut sc.gate[..m * ff], &sc.up[..m * ff], backend::Act::Silu);
    sc.y.resize(m * d, 0.0);
    cpu.matmul(
        &w.down[e],
        &sc.gate[..m * ff],
        m,
        &mut sc.acts,
        &mut sc.y[..m * d],
    )?;
    if lora.n_groups() > 0 {
        let x = &sc.gate[..m * ff];
        add_deltas(
            cpu,
            lora,
            &w.down[e],
            x,
            ff,
            m,
            row_of,
            &mut sc.y[..m * d],
            &mut sc.lora,
        )?;
    }
    Ok(())
}

/// Fills `sc.chosen` with each token's `n_used` (expert, weight), best first.
fn route(
    cpu: &Cpu,
    w: &MoeWeights,
    h: &[f32],
    n: usize,
    lora: &dyn MoeLora,
    sc: &mut MoeScratch,
) -> Result<()> {
    let ne = w.n_expert();
    sc.logits.resize(n * ne, 0.0);
    cpu.matmul(&w.gate_inp, h, n, &mut sc.acts, &mut sc.logits[..n * ne])?;
    if lora.n_groups() > 0 {
        let d = w.gate_inp.cols;
        let logits = &mut sc.logits[..n * ne];
        add_deltas(
            cpu,
            lora,
            &w.gate_inp,
            h,
            d,
            n,
            &|t| t,
            logits,
            &mut sc.lora,
        )?;
    }
    sc.chosen.clear();
    let mut sel = vec![0f32; ne];
    let mut idx: Vec<usize> = Vec::with_capacity(ne);
    for t in 0..n {
        let probs = &mut sc.logits[t * ne..(t + 1) * ne];
        if let Some(gap) = choose(w, probs, &mut sel, &mut idx, &mut sc.chosen) {
            sc.min_gap = Some(sc.min_gap.map_or(gap, |g| g.min(gap)));
        }
    }
    Ok(())
}
