//! Norms and element-wise ops on rows of f32.

/// RMS norm of each `dim`-sized row of `x`, times `weight`, into `out`. The sum of squares is
/// accumulated in f64, as ggml does, so long rows lose nothing.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let sum: f64 = xr.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let mean = (sum / dim as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for ((o, &v), &w) in or.iter_mut().zip(xr).zip(weight) {
            *o = (v * scale) * w;
        }
    }
}

/// LayerNorm of each `weight.len()`-sized row as ggml's `norm` followed by the weight and bias:
/// the mean and the variance are summed in f64, the rest runs in f32 op by op.
pub fn layer_norm(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let mean = (xr.iter().map(|&v| v as f64).sum::<f64>() / dim as f64) as f32;
        let mut sum2 = 0f64;
        for (o, &v) in or.iter_mut().zip(xr) {
            *o = v - mean;
            sum2 += (*o as f64) * (*o as f64);
        }
        let scale = 1.0 / ((sum2 / dim as f64) as f32 + eps).sqrt();
        for ((o, &w), &b) in or.iter_mut().zip(weight).zip(bias) {
            *o = (*o * scale) * w + b;
        }
    }
}

/// RMS norm in place, row by row (per-head Q/K norms).
pub fn rms_norm_inplace(x: &mut [f32], weight: &[f32], eps: f32) {
    let dim = weight.len();
    for xr in x.chunks_exact_mut(dim) {
        let sum: f64 = xr.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let mean = (sum / dim as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for (v, &w) in xr.iter_mut().zip(weight) {
            *v = (*v * scale) * w;
        }
    }
}

/// `x += y`.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Adds `bias` to every row of `x`.
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        add_inplace(row, bias);
    }
}

/// `x *= s`.
pub fn scale_inplace(x: &mut [f32], s: f32) {
    for v in x {
        *v *= s;
    }
}

/// Index of the largest value (first on ties).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// The `k` largest values of each `cols`-wide row of `x` with their columns, largest first
/// and the lower column first among equals (so the first is [`argmax`]'s pick); NaN ranks
/// below every number. `k` pairs per row are appended to `out` (k ≤ cols).
pub fn top_k_rows(x: &[f32], cols: usize, k: usize, out: &mut Vec<(u32, f32)>) {
    assert!(k <= cols, "top_k: k = {k} of {cols} columns");
    if k == 0 {
        return;
    }
    // NaN as -inf for ranking; among equal values the lower column wins
    let key = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
    let ahead = |a: &(u32, f32), b: &(u32, f32)| {
        let (ka, kb) = (key(a.1), key(b.1));
        ka > kb || (ka == kb && a.0 < b.0)
    };
    for row in x.chunks_exact(cols) {
        let start = out.len();
        // the best k so far, sorted; a value enters only when it beats the k-th
        for (i, &v) in row.iter().enumerate() {
            let c = (i as u32, v);
            let top = &out[start..];
            if top.len() == k && !ahead(&c, &top[k - 1]) {
                continue;
            }
            let at = start + top.partition_point(|t| ahead(t, &c));
            if out.len() - start == k {
                out.pop();
            }
            out.insert(at, c);
        }
    }
}
