//! `fast-mse`: quantizers for the 32-element formats that search each block's scale (and
//! minimum) for the least squared error, instead of deriving it from the largest element as
//! ggml's reference quantizers do.
//!
//! The reference maps the block's extreme to the end of the code range. Here a block tries
//! scales within ±8% of the reference's (the reference's own among them), each stored as the
//! f16 the file will hold, snaps the elements to it, refits the scale to those codes by least
//! squares, and keeps the candidate whose reconstruction is closest, the error of each element
//! weighted by its square (as ggml weights its own searches). The reference's scale with
//! nearest rounding is one of the candidates, so no block is worse than the reference's in
//! that error. The blocks are the same format: any reader, llama.cpp included, reads them
//! unchanged.

use super::q4_0::BlockQ4_0;
use super::q4_1::BlockQ4_1;
use super::q5_0::BlockQ5_0;
use super::q5_1::BlockQ5_1;
use super::q8_0::BlockQ8_0;
use super::{GgmlType, as_blocks_mut, f16_to_f32, f32_to_f16};

const QK: usize = 32;

/// The scale multipliers tried around the reference's. A narrow band: a step much finer than
/// the reference's clips the block's largest elements.
const FACTORS: [f32; 17] = [
    0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1.00, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07,
    1.08,
];

/// Nearest integer of `r`, clamped to `lo..=hi`, without a libm call (`f32::round` is one on
/// baseline x86-64): after the clamp, adding 1.5·2²³ leaves no fraction bits.
#[inline(always)]
fn nearest(r: f32, lo: i32, hi: i32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    let r = r.clamp(lo as f32 - 1.0, hi as f32 + 1.0);
    (((r + MAGIC) - MAGIC) as i32).clamp(lo, hi)
}

/// f32 through f16, as the block stores it.
fn f16r(x: f32) -> f32 {
    f16_to_f32(f32_to_f16(x))
}

/// Codes in `lo..=hi` for `x ≈ d·q`, and their weighted squared error.
fn snap_sym(x: &[f32], w: &[f32; QK], d: f32, lo: i32, hi: i32, q: &mut [i32; QK]) -> f32 {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut err = 0.0f32;
    for ((c, &v), &w) in q.iter_mut().zip(x).zip(w) {
        *c = nearest(v * id, lo, hi);
        let e = v - d * *c as f32;
        err += w * e * e;
    }
    err
}

/// The weighted least-squares scale for fixed codes: `Σ w x q / Σ w q²`.
fn refit_sym(x: &[f32], w: &[f32; QK], q: &[i32; QK]) -> Option<f32> {
    let (mut xq, mut qq) = (0.0f32, 0.0f32);
    for ((&v, &c), &w) in x.iter().zip(q).zip(w) {
        xq += w * v * c as f32;
        qq += w * (c * c) as f32;
    }
    (qq > 0.0).then(|| xq / qq)
}

/// Each element's weight in the error: its square, the weighting ggml's own scale searches
/// use when no importance matrix is given. Large weights are where a model is most sensitive:
/// with plain squared error the search clips them to fit the bulk better, which lowers the
/// error and raised the perplexity (benchmarks/README.md).
fn weights(x: &[f32]) -> [f32; QK] {
    let mut w = [0.0f32; QK];
    for (w, &v) in w.iter_mut().zip(x) {
        *w = v * v;
    }
    w
}

/// Symmetric blocks `x ≈ d·q`, `q` in `lo..=hi`, the reference scale being `max / lo` (the
/// element of largest magnitude at the far end, `lo`, as ggml's Q4_0/Q5_0; `lo = -hi` for Q8_0).
fn search_sym(x: &[f32], lo: i32, hi: i32, q: &mut [i32; QK]) -> f32 {
    let w = weights(x);
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let d_ref = if lo == -hi {
        amax / hi as f32
    } else {
        max / lo as f32
    };
    let mut best = (f32::INFINITY, 0.0f32);
    let mut trial = [0i32; QK];
    for f in FACTORS {
        let d = f16r(d_ref * f);
        let err = snap_sym(x, &w, d, lo, hi, &mut trial);
        if err < best.0 {
            best = (err, d);
        }
        // Refit to the codes this scale chose, and snap once more.
        if let Some(d2) = refit_sym(x, &w, &trial).map(f16r)
            && d2 != d
        {
            let err = snap_sym(x, &w, d2, lo, hi, &mut trial);
            if err < best.0 {
                best = (err, d2);
            }
        }
    }
    snap_sym(x, &w, best.1, lo, hi, q);
    best.1
}

/// Codes in `0..=hi` for `x ≈ d·q + m`, and their weighted squared error.
fn snap_asym(x: &[f32], w: &[f32; QK], d: f32, m: f32, hi: i32, q: &mut [i32; QK]) -> f32 {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut err = 0.0f32;
    for ((c, &v), &w) in q.iter_mut().zip(x).zip(w) {
        *c = nearest((v - m) * id, 0, hi);
        let e = v - (d * *c as f32 + m);
        err += w * e * e;
    }
    err
}

/// The weighted least-squares `(d, m)` for fixed codes (the normal equations of
/// `x ≈ d·q + m`).
fn refit_asym(x: &[f32], w: &[f32; QK], q: &[i32; QK]) -> Option<(f32, f32)> {
    let (mut n, mut sq, mut sqq, mut sx, mut sxq) = (0.0f32, 0.0f32, 0.0f32, 0.0f32, 0.0f32);
    for ((&v, &c), &w) in x.iter().zip(q).zip(w) {
        let c = c as f32;
        n += w;
        sq += w * c;
        sqq += w * c * c;
        sx += w * v;
        sxq += w * v * c;
    }
    let det = n * sqq - sq * sq;
    if det <= 0.0 {
        return None;
    }
    let d = (n * sxq - sq * sx) / det;
    let m = (sx - d * sq) / n;
    (d > 0.0).then_some((d, m))
}

/// Asymmetric blocks `x ≈ d·q + m`, `q` in `0..=hi` (Q4_1, Q5_1); the reference is
/// `m = min`, `d = (max - min) / hi`. Returns `(d, m)` as stored.
fn search_asym(x: &[f32], hi: i32, q: &mut [i32; QK]) -> (f32, f32) {
    let w = weights(x);
    let (min, max) = x
        .iter()
        .fold((f32::MAX, -f32::MAX), |(a, b), &v| (a.min(v), b.max(v)));
    let range = max - min;
    if range == 0.0 {
        q.fill(0);
        return (0.0, f16r(min));
    }
    let d_ref = range / hi as f32;
    let mut trial = [0i32; QK];
    // The reference's own (d, m), snapped to nearest: never worse than its codes.
    let (d0, m0) = (f16r(d_ref), f16r(min));
    let mut best = (snap_asym(x, &w, d0, m0, hi, &mut trial), d0, m0);
    for f in FACTORS {
        // Shrink the step, and centre the grid on the block's range.
        let d = f16r(d_ref * f);
        let m = f16r(min + 0.5 * (range - d * hi as f32));
        let err = snap_asym(x, &w, d, m, hi, &mut trial);
        if err < best.0 {
            best = (err, d, m);
        }
        if let Some((d2, m2)) = refit_asym(x, &w, &trial) {
            let (d2, m2) = (f16r(d2), f16r(m2));
            let err = snap_asym(x, &w, d2, m2, hi, &mut trial);
            if err < best.0 {
                best = (err, d2, m2);
            }
        }
    }
    snap_asym(x, &w, best.1, best.2, hi, q);
    (best.1, best.2)
}

/// Low nibbles of elements `j` and `j + 16` in byte `j`; the fifth bits in `qh` (bit `i` for
/// element `i`), as the 32-element formats pack them.
fn pack_nibbles(q: &[i32; QK], qs: &mut [u8; QK / 2]) -> u32 {
    let mut qh = 0u32;
    for (j, byte) in qs.iter_mut().enumerate() {
        let (a, b) = (q[j] as u32, q[j + QK / 2] as u32);
        *byte = ((a & 0x0F) | ((b & 0x0F) << 4)) as u8;
        qh |= ((a >> 4) & 1) << j | ((b >> 4) & 1) << (j + QK / 2);
    }
    qh
}

/// Whether [`quantize`] has a fast-mse quantizer for `ty`.
pub fn supports(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0
    )
}

/// Quantizes whole blocks of `src` into `dst` (`ty`'s layout). Returns false, writing nothing,
/// for a type [`supports`] refuses. Lengths as for [`super::quantize`].
pub fn quantize(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> bool {
    let mut q = [0i32; QK];
    let blocks = src.chunks_exact(QK);
    match ty {
        GgmlType::Q4_0 => {
            for (x, b) in blocks.zip(as_blocks_mut::<BlockQ4_0>(dst)) {
                let d = search_sym(x, -8, 7, &mut q);
                b.d = f32_to_f16(d);
                q.iter_mut().for_each(|c| *c += 8);
                pack_nibbles(&q, &mut b.qs);
            }
        }
        GgmlType::Q5_0 => {
            for (x, b) in blocks.zip(as_blocks_mut::<BlockQ5_0>(dst)) {
                let d = search_sym(x, -16, 15, &mut q);
                b.d = f32_to_f16(d);
                q.iter_mut().for_each(|c| *c += 16);
                b.qh = pack_nibbles(&q, &mut b.qs).to_le_bytes();
            }
        }
        GgmlType::Q8_0 => {
            for (x, b) in blocks.zip(as_blocks_mut::<BlockQ8_0>(dst)) {
                let d = search_sym(x, -127, 127, &mut q);
                b.d = f32_to_f16(d);
                for (o, &c) in b.qs.iter_mut().zip(&q) {
                    *o = c as i8 as u8;
                }
            }
        }
        GgmlType::Q4_1 => {
            for (x, b) in blocks.zip(as_blocks_mut::<BlockQ4_1>(dst)) {
                let (d, m) = search_asym(x, 15, &mut q);
                b.d = f32_to_f16(d);
                b.m = f32_to_f16(m);
                pack_nibbles(&q, &mut b.qs);
            }
        }
        GgmlType::Q5_1 => {
            for (x, b) in blocks.zip(as_blocks_mut::<BlockQ5_1>(dst)) {
                let (d, m) = search_asym(x, 31, &mut q);
                b.d = f32_to_f16(d);
                b.m = f32_to_f16(m);
                b.qh = pack_nibbles(&q, &mut b.qs).to_le_bytes();
            }
        }
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Squared reconstruction error of `x` through `ty`'s blocks `bytes`, each element's
    /// weighted by its square (the search's objective).
    fn sse(ty: GgmlType, bytes: &[u8], x: &[f32]) -> f64 {
        let y = crate::quant::dequantize_to_vec(ty, bytes, x.len()).unwrap();
        x.iter()
            .zip(&y)
            .map(|(a, b)| (*a as f64).powi(2) * ((a - b) as f64).powi(2))
            .sum()
    }

    /// Weight-like data: mostly small values with heavy-tailed outliers.
    fn data(n: usize) -> Vec<f32> {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                if s.is_multiple_of(29) {
                    u * 8.0
                } else {
                    u * 0.1
                }
            })
            .collect()
    }

    #[test]
    fn never_worse_than_the_reference_per_block_and_better_overall() {
        let x = data(QK * 2048);
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q8_0,
        ] {
            let n = ty.bytes_for(x.len() as u64).unwrap() as usize;
            let (mut r, mut m) = (vec![0u8; n], vec![0u8; n]);
            crate::quant::quantize(ty, &x, &mut r).unwrap();
            assert!(quantize(ty, &x, &mut m));
            let bb = ty.block_bytes().unwrap();
            let (mut tr, mut tm) = (0.0, 0.0);
            for (i, xb) in x.chunks(QK).enumerate() {
                let (er, em) = (
                    sse(ty, &r[i * bb..(i + 1) * bb], xb),
                    sse(ty, &m[i * bb..(i + 1) * bb], xb),
                );
                // The reference's scale is a candidate, snapped to nearest: allow f32 noise.
                assert!(
                    em <= er * (1.0 + 1e-5) + 1e-12,
                    "{ty} block {i}: {em} > {er}"
                );
                tr += er;
                tm += em;
            }
            // 8-bit codes leave little to win; 4 and 5 bits more.
            let gain = if ty == GgmlType::Q8_0 { 0.995 } else { 0.97 };
            eprintln!("{ty}: fast-mse error {:.4} of the reference's", tm / tr);
            assert!(tm < tr * gain, "{ty}: {tm} against the reference's {tr}");
        }
        assert!(!quantize(GgmlType::Q4_K, &x, &mut [0u8; 0]));
    }

    #[test]
    fn zero_and_constant_blocks() {
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_1,
            GgmlType::Q8_0,
        ] {
            for v in [0.0f32, 0.25, -3.0] {
                let x = vec![v; QK];
                let mut b = vec![0u8; ty.block_bytes().unwrap()];
                assert!(quantize(ty, &x, &mut b));
                let y = crate::quant::dequantize_to_vec(ty, &b, QK).unwrap();
                for (a, c) in x.iter().zip(&y) {
                    assert!((a - c).abs() <= a.abs() * 1e-3, "{ty} {v}: {c}");
                }
            }
        }
    }
}
