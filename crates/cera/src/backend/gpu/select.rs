//! The top k of each row of logits on the device (`shaders/top_k.wgsl`): greedy decoding reads
//! back one (column, value) pair per row instead of the whole vocabulary, truncated sampling its
//! top-k candidates.

use super::kernels::Bind;
use super::{Gpu, GpuCtx, GpuTensor};

/// Columns a stage-1 workgroup takes when the row is long enough to spread.
const CHUNK: usize = 2048;
/// Items one workgroup can rank: 32 per invocation (one bit each of its mask), 256 invocations.
const MAX_ITEMS: usize = 32 * 256;

/// `(chunks, chunk)` for rows of `cols` and `k`: chunks of at most [`MAX_ITEMS`] columns whose
/// candidates (`chunks · k`) one workgroup can merge. None: beyond the shader.
fn plan(cols: usize, k: usize) -> Option<(usize, usize)> {
    if k == 0 || k > cols || k > MAX_ITEMS {
        return None;
    }
    let chunks = cols.div_ceil(CHUNK).min(MAX_ITEMS / k).max(1);
    let chunk = cols.div_ceil(chunks);
    (chunk <= MAX_ITEMS).then_some((chunks, chunk))
}

/// Whether [`top_k`] runs on the device for rows of `cols`.
pub(super) fn fits(cols: usize, k: usize) -> bool {
    plan(cols, k).is_some()
}

/// The top `k` of each row of `t` (see [`crate::backend::top_k_rows`]), appended to `out`;
/// the step is submitted and `rows · k` pairs read back.
pub(super) fn top_k(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    t: &GpuTensor,
    k: usize,
    out: &mut Vec<(u32, f32)>,
) {
    let (rows, cols) = (t.rows, t.cols);
    let (chunks, chunk) = plan(cols, k).expect("checked by the caller (fits)");
    if rows == 0 {
        gpu.flush(cx);
        return;
    }
    let mut part = std::mem::take(&mut cx.topk_part);
    let mut dst = std::mem::take(&mut cx.topk_out);
    // [rows][chunks][k] and [rows][k] pairs of (column, value bits): 2 words a pair, shaped as
    // f32 tensors of that many words
    gpu.shape_to(&mut part, rows * chunks, 2 * k);
    gpu.shape_to(&mut dst, rows, 2 * k);
    let params = [cols as u32, k as u32, chunks as u32, chunk as u32];
    let first = [
        Bind::Whole(t.buf()),
        Bind::Whole(part.buf()),
        Bind::Whole(&gpu.dummy),
    ];
    let stage = |fin: bool| {
        if fin {
            "const FINAL: bool = true;"
        } else {
            "const FINAL: bool = false;"
        }
    };
    gpu.dispatch(
        cx,
        "top_k",
        stage(false),
        None,
        &params,
        &first,
        (rows * chunks) as u32,
    );
    let last = [
        Bind::Whole(&gpu.dummy_in),
        Bind::Whole(part.buf()),
        Bind::Whole(dst.buf()),
    ];
    gpu.dispatch(cx, "top_k", stage(true), None, &params, &last, rows as u32);
    let bytes = gpu.read_back(cx, dst.buf(), 0, (rows * k * 8) as u64);
    out.extend(bytes.chunks_exact(8).map(|b| {
        let col = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        (col, f32::from_le_bytes([b[4], b[5], b[6], b[7]]))
    }));
    cx.topk_part = part;
    cx.topk_out = dst;
}
