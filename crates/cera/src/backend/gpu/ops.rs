//! The row-wise ops: norms, element-wise arithmetic, column and row copies, RoPE and LFM2's
//! short convolution. Each records one dispatch (shaders in `shaders/`, one op per file).

use super::kernels::{Bind, Slot, bytes_of, fbits};
use super::{Gpu, GpuCtx, GpuTensor};
use crate::backend::{Act, RopeConfig, RopeKind, SeqSpan};

/// Threads per workgroup of the element-wise shaders.
const EW: usize = 256;

fn groups(n: usize) -> u32 {
    n.div_ceil(EW) as u32
}

/// Writes host `data` into the start of `dst` (through the step's upload buffer, so it lands in
/// order with the step's other work).
pub(super) fn upload(gpu: &Gpu, cx: &mut GpuCtx, data: &[f32], dst: &wgpu::Buffer) {
    let n = data.len();
    let g = groups(n);
    let params = [n as u32, g, 0, 0];
    let (slots_p, slots) = gpu.stage_params(cx, &params, &[bytes_of(data)]);
    gpu.dispatch_staged(
        cx,
        "upload",
        "",
        None,
        &slots_p,
        &[slots[0].bind(), Bind::Whole(dst)],
        g,
    );
}

/// RMSNorm of `x` into `out`, or in place (`out` None: `x` is written, though borrowed
/// shared, as the in-place op's callers hold it mutably).
fn norm(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    x: &GpuTensor,
    w: &[f32],
    eps: f32,
    out: Option<&mut GpuTensor>,
) {
    let n = w.len();
    assert!(
        n > 0 && x.cols.is_multiple_of(n),
        "rms_norm: segments of {n}"
    );
    let segs = (x.len() / n) as u32;
    let g = gpu.param(w);
    let params = [n as u32, fbits(eps), segs];
    match out {
        Some(out) => {
            gpu.shape_to(out, x.rows, x.cols);
            let binds = [
                Bind::Whole(x.buf()),
                Bind::Whole(&g),
                Bind::Whole(out.buf()),
            ];
            gpu.dispatch(cx, "rms_norm", NORM_TO, None, &params, &binds, segs);
        }
        None => {
            let binds = [Bind::Whole(x.buf()), Bind::Whole(&g)];
            gpu.dispatch(cx, "rms_norm", NORM_IN_PLACE, None, &params, &binds, segs);
        }
    }
}

pub(super) fn rms_norm(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    x: &GpuTensor,
    w: &[f32],
    eps: f32,
    out: &mut GpuTensor,
) {
    norm(gpu, cx, x, w, eps, Some(out));
}

/// [`rms_norm`] in place: one dispatch.
pub(super) fn rms_norm_inplace(gpu: &Gpu, cx: &mut GpuCtx, x: &mut GpuTensor, w: &[f32], eps: f32) {
    norm(gpu, cx, x, w, eps, None);
}

/// rms_norm.wgsl's input and output: apart, one buffer, or two buffers in place.
const NORM_TO: &str = "@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
fn elem(s: u32, i: u32) -> f32 { return x[s * p.n + i]; }
fn gain(s: u32, i: u32) -> f32 { return g[i]; }
fn put(s: u32, i: u32, v: f32) { y[s * p.n + i] = v; }";
const NORM_IN_PLACE: &str = "@group(0) @binding(1) var<storage, read_write> x: array<f32>;
fn elem(s: u32, i: u32) -> f32 { return x[s * p.n + i]; }
fn gain(s: u32, i: u32) -> f32 { return g[i]; }
fn put(s: u32, i: u32, v: f32) { x[s * p.n + i] = v; }";
const NORM_PAIR: &str = "@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> x2: array<f32>;
@group(0) @binding(4) var<storage, read> g2: array<f32>;
fn elem(s: u32, i: u32) -> f32 {
    if (s < p.split) { return x[s * p.n + i]; }
    return x2[(s - p.split) * p.n + i];
}
fn gain(s: u32, i: u32) -> f32 { return select(g2[i], g[i], s < p.split); }
fn put(s: u32, i: u32, v: f32) {
    if (s < p.split) { x[s * p.n + i] = v; } else { x2[(s - p.split) * p.n + i] = v; }
}";

/// Per-head RMSNorms of `q` (gains `wq`) and `k` (gains `wk`, as long) in place, one
/// dispatch.
pub(super) fn rms_norm_pair(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    q: &mut GpuTensor,
    wq: &[f32],
    k: &mut GpuTensor,
    wk: &[f32],
    eps: f32,
) {
    let n = wq.len();
    assert!(
        n > 0 && wk.len() == n && q.cols.is_multiple_of(n) && k.cols.is_multiple_of(n),
        "rms_norm_pair: segments of {n}"
    );
    let split = (q.len() / n) as u32;
    let segs = split + (k.len() / n) as u32;
    let (gq, gk) = (gpu.param(wq), gpu.param(wk));
    let params = [n as u32, fbits(eps), split];
    let binds = [
        Bind::Whole(q.buf()),
        Bind::Whole(&gq),
        Bind::Whole(k.buf()),
        Bind::Whole(&gk),
    ];
    gpu.dispatch(cx, "rms_norm", NORM_PAIR, None, &params, &binds, segs);
}

pub(super) fn layer_norm(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    x: &GpuTensor,
    w: &[f32],
    b: &[f32],
    eps: f32,
    out: &mut GpuTensor,
) {
    assert!(w.len() == x.cols && b.len() == x.cols, "layer_norm: width");
    gpu.shape_to(out, x.rows, x.cols);
    let (gw, gb) = (gpu.param(w), gpu.param(b));
    gpu.dispatch(
        cx,
        "layer_norm",
        "",
        None,
        &[x.cols as u32, fbits(eps)],
        &[
            Bind::Whole(x.buf()),
            Bind::Whole(&gw),
            Bind::Whole(&gb),
            Bind::Whole(out.buf()),
        ],
        x.rows as u32,
    );
}

fn act_def(act: Act) -> &'static str {
    match act {
        Act::Silu => "const ACT: u32 = 0u;",
        Act::Gelu => "const ACT: u32 = 1u;",
    }
}

pub(super) fn activate(gpu: &Gpu, cx: &mut GpuCtx, x: &mut GpuTensor, act: Act) {
    let n = x.len();
    if n > 0 {
        gpu.dispatch(
            cx,
            "activate",
            act_def(act),
            None,
            &[n as u32],
            &[Bind::Whole(x.buf())],
            groups(n),
        );
    }
}

pub(super) fn glu(gpu: &Gpu, cx: &mut GpuCtx, gate: &mut GpuTensor, up: &GpuTensor, act: Act) {
    assert_eq!(gate.len(), up.len(), "glu: shapes differ");
    let n = gate.len();
    if n > 0 {
        gpu.dispatch(
            cx,
            "glu",
            act_def(act),
            None,
            &[n as u32],
            &[Bind::Whole(gate.buf()), Bind::Whole(up.buf())],
            groups(n),
        );
    }
}

pub(super) fn add(gpu: &Gpu, cx: &mut GpuCtx, x: &mut GpuTensor, y: &GpuTensor) {
    assert_eq!((x.rows, x.cols), (y.rows, y.cols), "add: shapes differ");
    let n = x.len();
    if n > 0 {
        gpu.dispatch(
            cx,
            "add",
            "",
            None,
            &[n as u32],
            &[Bind::Whole(x.buf()), Bind::Whole(y.buf())],
            groups(n),
        );
    }
}

pub(super) fn scale(gpu: &Gpu, cx: &mut GpuCtx, x: &mut GpuTensor, s: f32) {
    let n = x.len();
    if n > 0 {
        gpu.dispatch(
            cx,
            "scale",
            "",
            None,
            &[n as u32, fbits(s)],
            &[Bind::Whole(x.buf())],
            groups(n),
        );
    }
}

pub(super) fn softcap(gpu: &Gpu, cx: &mut GpuCtx, x: &mut GpuTensor, cap: f32) {
    let n = x.len();
    if n > 0 {
        gpu.dispatch(
            cx,
            "softcap",
            "",
            None,
            &[n as u32, fbits(cap)],
            &[Bind::Whole(x.buf())],
            groups(n),
        );
    }
}

pub(super) fn add_bias(gpu: &Gpu, cx: &mut GpuCtx, x: &mut GpuTensor, bias: &[f32]) {
    assert_eq!(bias.len(), x.cols, "add_bias: width");
    let n = x.len();
    if n > 0 {
        let b = gpu.param(bias);
        gpu.dispatch(
            cx,
            "add_bias",
            "",
            None,
            &[n as u32, x.cols as u32],
            &[Bind::Whole(x.buf()), Bind::Whole(&b)],
            groups(n),
        );
    }
}

pub(super) fn copy_cols(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    src: &GpuTensor,
    col0: usize,
    n: usize,
    dst: &mut GpuTensor,
) {
    assert!(col0 + n <= src.cols, "copy_cols: columns past the row");
    gpu.shape_to(dst, src.rows, n);
    let total = src.rows * n;
    if total > 0 {
        gpu.dispatch(
            cx,
            "copy_cols",
            "",
            None,
            &[total as u32, n as u32, src.cols as u32, col0 as u32],
            &[Bind::Whole(src.buf()), Bind::Whole(dst.buf())],
            groups(total),
        );
    }
}

pub(super) fn gather_rows(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    src: &GpuTensor,
    rows: &[usize],
    dst: &mut GpuTensor,
) {
    assert!(
        rows.iter().all(|&r| r < src.rows),
        "gather_rows: a row past the tensor"
    );
    gpu.shape_to(dst, rows.len(), src.cols);
    let total = rows.len() * src.cols;
    if total == 0 {
        return;
    }
    let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
    let g = groups(total);
    let params = [total as u32, src.cols as u32, g, 0];
    let (slots_p, slots) = gpu.stage_params(cx, &params, &[bytes_of(&idx)]);
    gpu.dispatch_staged(
        cx,
        "gather_rows",
        "",
        None,
        &slots_p,
        &[
            Bind::Whole(src.buf()),
            slots[0].bind(),
            Bind::Whole(dst.buf()),
        ],
        g,
    );
}

/// RoPE with the angles computed on the host (the same `cos_sin` as the CPU, so every
/// variant — NeoX, YaRN, frequency factors — rotates identically), one row of `(cos, sin)`
/// pairs per distinct position of the step.
#[allow(clippy::too_many_arguments)]
pub(super) fn rope(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    x: &mut GpuTensor,
    n_head: usize,
    // a second tensor rotated in the same dispatch (the keys), with its head count
    mut second: Option<(&mut GpuTensor, usize)>,
    head_dim: usize,
    pos: &[usize],
    cfg: &RopeConfig,
) {
    for (t, heads) in std::iter::once((&*x, n_head)).chain(second.as_ref().map(|(t, h)| (&**t, *h)))
    {
        assert_eq!(pos.len(), t.rows, "rope: one position per row");
        assert!(
            heads * head_dim <= t.cols && cfg.n_rot <= head_dim,
            "rope: heads past the row"
        );
    }
    let half = cfg.n_rot / 2;
    if x.rows == 0 || half == 0 {
        return;
    }
    let table = rope_table(gpu, cx, cfg, pos);
    let total_a = x.rows * n_head * half;
    let (total_b, heads_b, cols_b) = match &second {
        Some((k, h)) => (k.rows * h * half, *h, k.cols),
        None => (0, 0, 0),
    };
    let neox = u32::from(cfg.kind == RopeKind::Neox);
    let b_buf = match &mut second {
        Some((k, _)) => k.buf().clone(),
        None => gpu.dummy.clone(),
    };
    gpu.dispatch(
        cx,
        "rope",
        "",
        None,
        &[
            total_a as u32,
            total_b as u32,
            n_head as u32,
            heads_b as u32,
            head_dim as u32,
            half as u32,
            neox,
            x.cols as u32,
            cols_b as u32,
        ],
        &[Bind::Whole(x.buf()), Bind::Whole(&b_buf), table.bind()],
        groups(total_a + total_b),
    );
}

/// The step's (cos, sin) table for `pos` under `cfg`, staged once per step.
pub(super) fn rope_table(gpu: &Gpu, cx: &mut GpuCtx, cfg: &RopeConfig, pos: &[usize]) -> Slot {
    let half = cfg.n_rot / 2;
    // the angles depend on the positions and the config only: every layer of a step shares
    // one table, staged with the step's parameters (at the same arena offset every decode
    // step, so the dispatch's bind group is reused; a buffer of its own per step cost a
    // buffer creation and a new bind group per token)
    match cx.rope_tables.iter().find(|(c, p, _)| c == cfg && p == pos) {
        Some((_, _, slot)) => slot.clone(),
        None => {
            let mut cs = vec![(0f32, 0f32); half];
            let mut t: Vec<f32> = Vec::with_capacity(pos.len() * half * 2);
            for &p in pos {
                cfg.cos_sin(p as i64, &mut cs);
                t.extend(cs.iter().flat_map(|&(c, s)| [c, s]));
            }
            let slot = gpu.stage(cx, &[bytes_of(&t)]).pop().expect("one slot");
            if cx.rope_tables.len() >= ROPE_TABLES {
                cx.rope_tables.remove(0);
            }
            cx.rope_tables
                .push((cfg.clone(), pos.to_vec(), slot.clone()));
            slot
        }
    }
}

/// RoPE tables a step keeps (a model has one or two configs: local and global layers).
const ROPE_TABLES: usize = 4;

/// Taps per channel the shader keeps in registers.
const MAX_CONV_TAPS: usize = 8;

pub(super) fn short_conv(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    bcx: &GpuTensor,
    kernel: &[f32],
    state: &mut GpuTensor,
    s: SeqSpan,
    out: &mut GpuTensor,
) {
    let d = bcx.cols / 3;
    assert_eq!(bcx.cols, 3 * d, "short_conv: rows are [B | C | x]");
    let l = kernel.len() / d.max(1);
    assert!(
        (1..=MAX_CONV_TAPS).contains(&l) && kernel.len() == l * d,
        "short_conv: kernel of {d} x {l} (at most {MAX_CONV_TAPS} taps)"
    );
    assert_eq!(
        (out.rows, out.cols),
        (bcx.rows, d),
        "short_conv: output shape"
    );
    assert_eq!(
        (state.rows, state.cols),
        (l - 1, d),
        "short_conv: state shape"
    );
    assert!(s.row0 + s.n <= bcx.rows, "short_conv: span past the rows");
    if d == 0 || s.n == 0 {
        return;
    }
    let k = gpu.param(kernel);
    // a zero-row state still needs a buffer to bind
    if state.buf.is_none() {
        gpu.shape_to(state, l - 1, d);
    }
    let params = [d as u32, l as u32, s.row0 as u32, s.n as u32];
    gpu.dispatch(
        cx,
        "short_conv",
        "",
        None,
        &params,
        &[
            Bind::Whole(bcx.buf()),
            Bind::Whole(&k),
            Bind::Seq(state.buf(), &state.binds),
            Bind::Whole(out.buf()),
        ],
        groups(s.n * d),
    );
    // (a single token's state moved on by short_conv itself)
    if l > 1 && s.n > 1 {
        gpu.dispatch(
            cx,
            "short_conv_state",
            "",
            None,
            &params,
            &[Bind::Whole(bcx.buf()), Bind::Seq(state.buf(), &state.binds)],
            groups(d),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::kernels::check_wgsl;

    /// The norm's variants, and the convolution's, compile (naga) on any machine.
    #[test]
    fn norm_and_conv_variants_validate() {
        for defs in [super::NORM_TO, super::NORM_IN_PLACE, super::NORM_PAIR] {
            check_wgsl("rms_norm", defs, None);
        }
        check_wgsl("short_conv", "", None);
        check_wgsl("short_conv_state", "", None);
    }
}
