//! The mixture-of-experts FFN on the GPU: the router's logits are read back and routed on the
//! host by the same code as the CPU ([`crate::backend::moe::choose`]), so both backends pick
//! the same experts; then, grouped by expert as on the CPU, each chosen expert runs once over
//! its tokens (gather, gate/up, SwiGLU, down: the backend's own ops) and its weighted rows are
//! scattered into per-(token, slot) rows, summed per token in slot order at the end.
//!
//! The read back is one synchronization per MoE layer and step: the price of routing on the
//! host (a GPU top-k would remove it). LoRA deltas on the router and the experts are added
//! after each product, per adapter group, in the CPU's order.

use super::kernels::{Bind, bytes_of};
use super::ops;
use super::{Gpu, GpuCtx, GpuTensor};
use crate::backend::moe::{MoeLora, MoeWeights, choose};
use crate::backend::{Act, Backend};
use crate::error::Result;

/// Working tensors of the MoE block, kept in the step's context.
#[derive(Default)]
pub(super) struct MoeTensors {
    logits: GpuTensor,
    xg: GpuTensor,
    gate: GpuTensor,
    up: GpuTensor,
    y: GpuTensor,
    /// `[n · n_used, d]`: each (token, slot)'s weighted expert output
    slots: GpuTensor,
    /// The rows of one adapter group (LoRA deltas on the router and the experts)
    lx: GpuTensor,
}

/// `out[i] += Σ s · B · A · x[i]` for the deltas of each adapter group on weight `w`, over the
/// rows `i` (of `m`) whose step row `row_of(i)` is in the group: the CPU's order (groups in
/// turn, each group's deltas in the order it lists them).
#[allow(clippy::too_many_arguments)]
fn add_deltas(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    lora: &dyn MoeLora,
    w: &crate::backend::Weight,
    x: &GpuTensor,
    row_of: &dyn Fn(usize) -> usize,
    lx: &mut GpuTensor,
    out: &mut GpuTensor,
) -> Result<()> {
    let m = x.rows;
    for g in 0..lora.n_groups() {
        let rows: Vec<usize> = (0..m)
            .filter(|&i| lora.group_of(row_of(i)) == Some(g))
            .collect();
        if rows.is_empty() {
            continue;
        }
        let (xs, sel) = if rows.len() == m {
            (x, None)
        } else {
            ops::gather_rows(gpu, cx, x, &rows, lx);
            (&*lx, Some(&rows[..]))
        };
        lora.each(g, w, &mut |pair, s| {
            super::lora::lora(gpu, cx, out, xs, sel, pair, s)
        })?;
    }
    Ok(())
}

pub(super) fn moe(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    w: &MoeWeights,
    h: &GpuTensor,
    lora: &dyn MoeLora,
    out: &mut GpuTensor,
) -> Result<()> {
    let d = w.gate_inp.cols;
    assert_eq!(h.cols, d, "moe: input width");
    let (n, ne, k) = (h.rows, w.n_expert(), w.n_used);
    gpu.shape_to(out, n, d);
    if n == 0 {
        return Ok(());
    }
    let mut t = std::mem::take(&mut cx.moe);
    let r = run(gpu, cx, w, h, lora, (n, ne, k), &mut t, out);
    cx.moe = t;
    r
}

#[allow(clippy::too_many_arguments)]
fn run(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    w: &MoeWeights,
    h: &GpuTensor,
    lora: &dyn MoeLora,
    (n, ne, k): (usize, usize, usize),
    t: &mut MoeTensors,
    out: &mut GpuTensor,
) -> Result<()> {
    let d = h.cols;
    gpu.matmul(cx, &mut [(&w.gate_inp, &mut t.logits)], h)?;
    if lora.n_groups() > 0 {
        add_deltas(
            gpu,
            cx,
            lora,
            &w.gate_inp,
            h,
            &|i| i,
            &mut t.lx,
            &mut t.logits,
        )?;
    }
    let mut logits = Vec::new();
    gpu.download(cx, &t.logits, &mut logits);
    let (mut sel, mut idx, mut chosen) = (vec![0f32; ne], Vec::new(), Vec::with_capacity(n * k));
    for probs in logits.chunks_exact_mut(ne) {
        if let Some(gap) = choose(w, probs, &mut sel, &mut idx, &mut chosen) {
            cx.min_gap = Some(cx.min_gap.map_or(gap, |g| g.min(gap)));
        }
    }
    // per expert: the (token · k + slot) entries routed to it
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); ne];
    for (slot, &(e, _)) in chosen.iter().enumerate() {
        groups[e].push(slot);
    }
    gpu.shape_to(&mut t.slots, n * k, d);
    for (e, slots) in groups.iter().enumerate() {
        if slots.is_empty() {
            continue;
        }
        let rows: Vec<usize> = slots.iter().map(|s| s / k).collect();
        ops::gather_rows(gpu, cx, h, &rows, &mut t.xg);
        gpu.matmul(
            cx,
            &mut [(&w.gate[e], &mut t.gate), (&w.up[e], &mut t.up)],
            &t.xg,
        )?;
        let row_of = |i: usize| slots[i] / k;
        if lora.n_groups() > 0 {
            let (xg, lx) = (&t.xg, &mut t.lx);
            add_deltas(gpu, cx, lora, &w.gate[e], xg, &row_of, lx, &mut t.gate)?;
            add_deltas(gpu, cx, lora, &w.up[e], xg, &row_of, lx, &mut t.up)?;
        }
        ops::glu(gpu, cx, &mut t.gate, &t.up, Act::Silu);
        gpu.matmul(cx, &mut [(&w.down[e], &mut t.y)], &t.gate)?;
        if lora.n_groups() > 0 {
            let (g, lx) = (&t.gate, &mut t.lx);
            add_deltas(gpu, cx, lora, &w.down[e], g, &row_of, lx, &mut t.y)?;
        }
        // slots[slot_i] = weight_i · y[i]
        let pairs: Vec<u32> = slots
            .iter()
            .flat_map(|&s| [s as u32, chosen[s].1.to_bits()])
            .collect();
        let total = slots.len() * d;
        let g = total.div_ceil(256) as u32;
        let params = [total as u32, d as u32, g, 0];
        let (st_p, st) = gpu.stage_params(cx, &params, &[bytes_of(&pairs)]);
        gpu.dispatch_staged(
            cx,
            "moe_scatter",
            "",
            None,
            &st_p,
            &[
                Bind::Whole(t.y.buf()),
                st[0].bind(),
                Bind::Whole(t.slots.buf()),
            ],
            g,
        );
    }
    // out[t] = Σ_slot slots[t · k + slot], in slot order (best expert first), as the CPU sums
    let total = n * d;
    gpu.dispatch(
        cx,
        "moe_sum",
        "",
        None,
        &[total as u32, d as u32, k as u32],
        &[Bind::Whole(t.slots.buf()), Bind::Whole(out.buf())],
        total.div_ceil(256) as u32,
    );
    Ok(())
}
