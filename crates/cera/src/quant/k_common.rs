//! Shared pieces of the K-quant and IQ4 reference quantizers: ggml's rounding, its scale (and
//! scale/min) searches, the 6-bit scale packing of Q4_K/Q5_K and the 2-bit packing of Q2_K/Q3_K.
//!
//! The searches follow ggml's float operation order (left to right, no fused multiply-add) so
//! that our quantizer picks the same codes as ggml's `quantize_row_*_ref` on the same input.

/// A group whose largest magnitude is below this is quantized as all zeros (ggml's
/// `GROUP_MAX_EPS`).
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// Rounds to the nearest integer, ties to even, as ggml's `nearest_int`: adding 1.5 * 2^23
/// leaves the rounded integer in the low mantissa bits. Exact for |x| < 2^22; larger values and
/// NaN give some value in [-2^22, 2^22) instead of panicking, and every caller clamps.
#[inline]
pub(super) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// The first element of largest magnitude, with its sign (`(amax, max)` in ggml's loops).
#[inline]
fn abs_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        let a = v.abs();
        if a > amax {
            amax = a;
            max = v;
        }
    }
    (amax, max)
}

/// Symmetric ("type-0") quantization of a group to levels `-nmax..nmax` with a weighted
/// least-squares scale, trying 19 candidate scales around `nmax / max`: ggml's `make_qx_quants`
/// with `rmse_type` 1. Weights default to x². Writes `level + nmax` (in `0..2*nmax`) to
/// `levels` and returns the scale.
pub(super) fn make_qx_quants(
    nmax: i32,
    x: &[f32],
    weights: Option<&[f32]>,
    levels: &mut [u8],
) -> f32 {
    let (amax, max) = abs_max(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let weight = |i: usize| weights.map_or(x[i] * x[i], |w| w[i]);
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    // Weighted sums of x*l and l*l for one candidate scale.
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for (i, &v) in x.iter().enumerate() {
            let l = level(iscale, v) as f32;
            let w = weight(i);
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let set_levels = |iscale: f32, levels: &mut [u8]| {
        for (q, &v) in levels.iter_mut().zip(x) {
            *q = (level(iscale, v) + nmax) as u8;
        }
    };

    let iscale = -(nmax as f32) / max;
    set_levels(iscale, levels);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            set_levels(iscale, levels);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric quantization of a 16-element group to levels `-nmax..nmax`, refining levels one at
/// a time to maximise the x²-weighted fit (up to 5 passes): ggml's `make_q3_quants` with
/// `do_rmse`. Writes `level + nmax` to `levels` and returns the scale.
pub(super) fn make_q3_quants(nmax: i32, x: &[f32; 16], levels: &mut [u8; 16]) -> f32 {
    let (amax, max) = abs_max(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut l = [0i32; 16];
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (li, &v) in l.iter_mut().zip(x) {
        *li = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        let w = v * v;
        sumlx += w * v * *li as f32;
        suml2 += w * *li as f32 * *li as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (li, &v) in l.iter_mut().zip(x) {
            let w = v * v;
            // The fit without this element; re-pick its level against that.
            let mut slx = sumlx - w * v * *li as f32;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * *li as f32 * *li as f32;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *li {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *li = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for (q, li) in levels.iter_mut().zip(l) {
        *q = (li + nmax) as u8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

/// Parameters of the scale/min grid search in [`make_qkx2_quants`].
pub(super) struct Qkx2Search {
    /// Offset of the first candidate from `nmax`.
    pub rmin: f32,
    /// Step between candidates.
    pub rdelta: f32,
    /// Number of steps (`nstep + 1` candidates).
    pub nstep: i32,
    /// Minimise weighted absolute error instead of squared error.
    pub use_mad: bool,
}

/// Asymmetric ("type-1") quantization of a group (at most 32 elements) to levels `0..=nmax` as
/// `x ≈ scale * l - min`: ggml's `make_qkx2_quants`. Starting from the min/max range, it tries
/// `nstep + 1` candidate inverse scales, fits scale and min by weighted least squares for each
/// and keeps the one with the smallest weighted error. Writes levels and returns
/// `(scale, min)`, with `min >= 0` the value subtracted.
pub(super) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
    p: &Qkx2Search,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for (&v, &w) in x.iter().zip(weights).skip(1) {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let err = |diff: f32| if p.use_mad { diff.abs() } else { diff * diff };

    let iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for ((q, &v), &w) in levels.iter_mut().zip(x).zip(weights) {
        *q = nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
        best_error += w * err(scale * *q as f32 + min - v);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..n];
    for is in 0..=p.nstep {
        let iscale = (p.rmin + p.rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for ((q, &v), &w) in aux.iter_mut().zip(x).zip(weights) {
            let l = nearest_int(iscale * (v - min)).clamp(0, nmax);
            *q = l as u8;
            let l = l as f32;
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                // The format cannot add an offset; refit the scale alone.
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for ((&q, &v), &w) in aux.iter().zip(x).zip(weights) {
                cur_error += w * err(this_scale * q as f32 + this_min - v);
            }
            if cur_error < best_error {
                levels.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Unpacks scale and min `j` (0..8) of the 12-byte Q4_K/Q5_K scale field. Bytes 0..4 hold
/// scales 0..4 and bytes 4..8 mins 0..4 in their low 6 bits; scales and mins 4..8 keep their
/// low nibbles in bytes 8..12 and their top 2 bits in the spare top bits of bytes 0..8.
#[inline]
pub(super) fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// All eight scales and mins of a Q4_K/Q5_K scale field at once (the same values as
/// [`get_scale_min_k4`] for `j` in 0..8), with 32-bit word operations.
#[inline]
pub(crate) fn scales_mins_k4(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let w = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (w0, w1, w2) = (w(0), w(1), w(2));
    let (low6, low4, top2) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
    let sc_lo = w0 & low6;
    let mn_lo = w1 & low6;
    let sc_hi = (w2 & low4) | (((w0 >> 6) & top2) << 4);
    let mn_hi = ((w2 >> 4) & low4) | (((w1 >> 6) & top2) << 4);
    let join = |a: u32, b: u32| (a as u64 | (b as u64) << 32).to_le_bytes();
    (join(sc_lo, sc_hi), join(mn_lo, mn_hi))
}

/// The sixteen Q3_K sub-block scales with the bias of 32 removed (`-32..32`), with 32-bit word
/// operations: bytes 0..8 hold the low nibbles, byte `8 + i` the top bits of scales `i`, `i + 4`,
/// `i + 8`, `i + 12`.
#[inline]
pub(crate) fn scales_q3k(q: &[u8; 12]) -> [i8; 16] {
    let w = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (w0, w1, w2) = (w(0), w(1), w(2));
    let (low4, top2) = (0x0f0f_0f0fu32, 0x0303_0303u32);
    let words = [
        (w0 & low4) | ((w2 & top2) << 4),
        (w1 & low4) | (((w2 >> 2) & top2) << 4),
        ((w0 >> 4) & low4) | (((w2 >> 4) & top2) << 4),
        ((w1 >> 4) & low4) | (((w2 >> 6) & top2) << 4),
    ];
    let mut out = [0i8; 16];
    for (o, word) in out.chunks_exact_mut(4).zip(words) {
        for (o, b) in o.iter_mut().zip(word.to_le_bytes()) {
            *o = b as i8 - 32;
        }
    }
    out
}

/// Packs eight 6-bit scales and mins the way [`get_scale_min_k4`] reads them.
pub(super) fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (ls[j] & 0x0F) | ((lm[j] & 0x0F) << 4);
            q[j - 4] |= (ls[j] >> 4) << 6;
            q[j] |= (lm[j] >> 4) << 6;
        }
    }
    q
}

/// Packs 256 2-bit levels as Q2_K/Q3_K store them: byte `32*h + l` holds elements
/// `128*h + l + 32*s` in bits `2s..2s+2`.
pub(super) fn pack_2bit(levels: &[u8; 256], qs: &mut [u8; 64]) {
    for (lv, q) in levels.chunks_exact(128).zip(qs.chunks_exact_mut(32)) {
        for (l, b) in q.iter_mut().enumerate() {
            *b = lv[l] | (lv[l + 32] << 2) | (lv[l + 64] << 4) | (lv[l + 96] << 6);
        }
    }
}

/// Index of the entry of the ascending table `values` nearest to `x` (ties go up): ggml's
/// `best_index_int8`. NaN lands on the last entry.
#[inline]
pub(super) fn best_index_int8(values: &[i8; 16], x: f32) -> usize {
    let n = values.len();
    if x <= values[0] as f32 {
        return 0;
    }
    if x >= values[n - 1] as f32 {
        return n - 1;
    }
    let (mut lo, mut hi) = (0usize, n - 1);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < values[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - (values[hi - 1] as f32) < values[hi] as f32 - x {
        hi - 1
    } else {
        hi
    }
}

/// Scale of one 32-element IQ4 block against the non-linear table `values`, without importance
/// weights (weight x²): the per-block search of ggml's `quantize_row_iq4_nl_impl`. Starts from
/// `max / values[0]`, refits by least squares, then tries the `2*ntry + 1` inverse scales
/// `(values[0] + t) / max` and keeps the best fit. 0 for an all-zero block.
pub(super) fn iq4_block_scale(values: &[i8; 16], x: &[f32], ntry: i32) -> f32 {
    let (amax, max) = abs_max(x);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = values[best_index_int8(values, id * v)] as f32;
            let w = v * v;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let v0 = values[0] as f32;
    let d = if ntry > 0 { -max / v0 } else { max / v0 };
    let (sumqx, sumq2) = sums(1.0 / d);
    let mut d = sumqx / sumq2;
    let mut best = d * sumqx;
    for itry in -ntry..=ntry {
        let id = (itry + values[0] as i32) as f32 / max;
        let (sumqx, sumq2) = sums(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-0.4), 0);
        assert_eq!(nearest_int(3.6), 4);
        // Out of range or NaN: no panic.
        let _ = nearest_int(f32::NAN);
        let _ = nearest_int(f32::INFINITY);
        let _ = nearest_int(-1e30);
    }

    #[test]
    fn scale_min_k4_round_trips() {
        let ls = [0, 1, 17, 63, 32, 5, 48, 63];
        let lm = [63, 2, 33, 0, 15, 16, 47, 1];
        let q = pack_scale_min_k4(&ls, &lm);
        for j in 0..8 {
            assert_eq!(get_scale_min_k4(j, &q), (ls[j], lm[j]), "j = {j}");
        }
    }

    #[test]
    fn scales_mins_k4_matches_per_index() {
        let mut q = [0u8; 12];
        for seed in 0..200u32 {
            for (i, b) in q.iter_mut().enumerate() {
                *b = (seed.wrapping_mul(2_654_435_761).rotate_left(i as u32 * 3) >> 7) as u8;
            }
            let (sc, mn) = scales_mins_k4(&q);
            for j in 0..8 {
                assert_eq!(get_scale_min_k4(j, &q), (sc[j], mn[j]), "j = {j}");
            }
        }
    }

    #[test]
    fn best_index_picks_nearest() {
        let v: [i8; 16] = [
            -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
        ];
        assert_eq!(best_index_int8(&v, -200.0), 0);
        assert_eq!(best_index_int8(&v, 200.0), 15);
        assert_eq!(best_index_int8(&v, 0.0), 8);
        assert_eq!(best_index_int8(&v, -4.6), 7);
        assert_eq!(best_index_int8(&v, -4.4), 8);
        assert_eq!(best_index_int8(&v, 100.0), 14);
        assert!(best_index_int8(&v, f32::NAN) < 16);
    }
}
