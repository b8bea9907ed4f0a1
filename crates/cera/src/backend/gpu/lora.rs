//! LoRA deltas on the GPU: `t = A · x` through the matrix product (or, for token embeddings,
//! the lookup of A's rows), then `out[row] += s · B · t` with the sum over the rank in rank
//! order, as every backend sums it. B is uploaded once per pair, row-major (`[out][rank]`).

use std::sync::Arc;

use super::kernels::{Bind, bytes_of, fbits};
use super::{Gpu, GpuCtx, GpuTensor, weights};
use crate::backend::LowRank;
use crate::error::Result;

/// B of `w` on the device, `[out][rank]` f32, uploaded on first use.
fn b_matrix(gpu: &Gpu, w: &LowRank) -> wgpu::Buffer {
    let key = (w.a.resident_key(), w.bt.key(), w.out);
    let mut map = gpu.lora_b.lock().expect("lora B");
    if let Some((_, b)) = map.get(&key) {
        return b.clone();
    }
    let mut v = Vec::with_capacity(w.out * w.rank);
    for c in 0..w.out {
        v.extend((0..w.rank).map(|j| w.bt.b(w.rank, j, c)));
    }
    let buf = gpu.buffer_with(bytes_of(&v), wgpu::BufferUsages::STORAGE);
    // the weak handle keeps A's file address (part of the key) from being reused
    map.insert(key, (Arc::new(w.a.file_handle()), buf.clone()));
    buf
}

/// `out[rows[i]] += s · B · t[i]` for each row `i` of `t` (`[n, rank]`).
fn add_delta(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    out: &mut GpuTensor,
    t: &GpuTensor,
    rows: Option<&[usize]>,
    w: &LowRank,
    s: f32,
) {
    assert_eq!(out.cols, w.out, "lora: output width");
    let n = t.rows;
    if n == 0 {
        return;
    }
    if let Some(r) = rows {
        assert!(
            r.len() == n && r.iter().all(|&x| x < out.rows),
            "lora: rows"
        );
    } else {
        assert!(n <= out.rows, "lora: rows");
    }
    let b = b_matrix(gpu, w);
    let idx: Vec<u32> = match rows {
        Some(r) => r.iter().map(|&x| x as u32).collect(),
        None => (0..n as u32).collect(),
    };
    let total = n * w.out;
    let g = total.div_ceil(256) as u32;
    let params = [
        total as u32,
        w.out as u32,
        w.rank as u32,
        fbits(s),
        g,
        0,
        0,
        0,
    ];
    let (st_p, st) = gpu.stage_params(cx, &params, &[bytes_of(&idx)]);
    gpu.dispatch_staged(
        cx,
        "lora_delta",
        "",
        None,
        &st_p,
        &[
            Bind::Whole(t.buf()),
            Bind::Whole(&b),
            st[0].bind(),
            Bind::Whole(out.buf()),
        ],
        g,
    );
}

/// `t` by `first` (into the context's scratch), then the delta of `t` added to `out`.
#[allow(clippy::too_many_arguments)]
fn apply(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    out: &mut GpuTensor,
    rows: Option<&[usize]>,
    w: &LowRank,
    s: f32,
    first: impl FnOnce(&mut GpuCtx, &mut GpuTensor) -> Result<()>,
) -> Result<()> {
    let mut t = std::mem::take(&mut cx.lora_t);
    let r = first(cx, &mut t);
    if r.is_ok() {
        add_delta(gpu, cx, out, &t, rows, w, s);
    }
    cx.lora_t = t;
    r
}

/// `out[rows[i]] += s · B(A · x[i])`.
pub(super) fn lora(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    out: &mut GpuTensor,
    x: &GpuTensor,
    rows: Option<&[usize]>,
    w: &LowRank,
    s: f32,
) -> Result<()> {
    apply(gpu, cx, out, rows, w, s, |cx, t| {
        weights::matmul(gpu, cx, &[&w.a], x, weights::Input::Plain, &mut [t], false)
    })
}

/// `out[rows[i]] += s · B · A[tokens[i]]` (A holds a row per token).
pub(super) fn lora_embed(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    out: &mut GpuTensor,
    tokens: &[u32],
    rows: Option<&[usize]>,
    w: &LowRank,
    s: f32,
) -> Result<()> {
    apply(gpu, cx, out, rows, w, s, |cx, t| {
        weights::embed(gpu, cx, &w.a, tokens, t)
    })
}
