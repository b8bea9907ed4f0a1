//! Q4_K: 256-element super-blocks of 8 sub-blocks of 32, asymmetric 4-bit,
//! `x = d * sc * q - dmin * m` with a 6-bit scale `sc` and min `m` per sub-block.

use super::k_common::{
    Qkx2Search, get_scale_min_k4, make_qkx2_quants, nearest_int, pack_scale_min_k4, scales_mins_k4,
};
use super::q8_k::BlockQ8_K;
use super::{
    Block, GgmlType, QK_K, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast, f32_to_f16,
};

/// One Q4_K super-block (144 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct BlockQ4_K {
    /// Super-block scale for the sub-block scales, f16.
    pub d: [u8; 2],
    /// Super-block scale for the sub-block mins, f16.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and mins, packed as `k_common::get_scale_min_k4` reads them.
    pub scales: [u8; 12],
    /// 4-bit quants: byte `32*c + l` holds element `64*c + l` in its low nibble and element
    /// `64*c + 32 + l` in its high nibble.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockQ4_K>() == 144);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ4_K {
    const TYPE: GgmlType = GgmlType::Q4_K;
    const ELEMS: usize = QK_K;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
pub fn dequantize(blocks: &[BlockQ4_K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        let dmin = f16_to_f32(b.dmin);
        for (c, (y, q)) in y
            .chunks_exact_mut(64)
            .zip(b.qs.chunks_exact(32))
            .enumerate()
        {
            let (sc0, m0) = get_scale_min_k4(2 * c, &b.scales);
            let (sc1, m1) = get_scale_min_k4(2 * c + 1, &b.scales);
            let (d0, dm0) = (d * sc0 as f32, dmin * m0 as f32);
            let (d1, dm1) = (d * sc1 as f32, dmin * m1 as f32);
            let (lo, hi) = y.split_at_mut(32);
            for ((&q, l), h) in q.iter().zip(lo).zip(hi) {
                *l = d0 * (q & 0x0F) as f32 - dm0;
                *h = d1 * (q >> 4) as f32 - dm1;
            }
        }
    }
}

/// ggml's `quantize_row_q4_K_ref`: a scale/min search per sub-block (weights
/// `rms(x) + |x|`), scales and mins quantized to 6 bits against their maxima, and the quants
/// recomputed with the rounded values.
pub fn quantize(src: &[f32], out: &mut [BlockQ4_K]) {
    const SEARCH: Qkx2Search = Qkx2Search {
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let mut levels = [0u8; QK_K];
        let (scales, mins) = search_sub_blocks(x, &mut levels, 15, &SEARCH);
        let (d, dmin, packed) = pack_super_scales(&scales, &mins);
        b.d = d;
        b.dmin = dmin;
        b.scales = packed;
        requantize(x, &b.scales, b.d, b.dmin, 15, &mut levels);
        for (c, q) in b.qs.chunks_exact_mut(32).enumerate() {
            for (l, q) in q.iter_mut().enumerate() {
                *q = levels[64 * c + l] | (levels[64 * c + 32 + l] << 4);
            }
        }
    }
}

/// The per-sub-block scale/min search shared with Q5_K: returns the eight scales and mins
/// and leaves the levels of the search in `levels`.
pub(super) fn search_sub_blocks(
    x: &[f32],
    levels: &mut [u8; QK_K],
    nmax: i32,
    search: &Qkx2Search,
) -> ([f32; 8], [f32; 8]) {
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    for (j, (xs, lv)) in x
        .chunks_exact(32)
        .zip(levels.chunks_exact_mut(32))
        .enumerate()
    {
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut weights = [0.0f32; 32];
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xs, &weights, lv, search);
    }
    (scales, mins)
}

/// Quantizes the sub-block scales and mins to 6 bits against their maxima: returns `d`,
/// `dmin` (f16) and the packed 12-byte field.
pub(super) fn pack_super_scales(
    scales: &[f32; 8],
    mins: &[f32; 8],
) -> ([u8; 2], [u8; 2], [u8; 12]) {
    let max_scale = scales.iter().fold(0.0f32, |a, &s| a.max(s));
    let max_min = mins.iter().fold(0.0f32, |a, &m| a.max(m));
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        // ggml truncates to u8 before clamping; for valid input the value is in 0..=63.
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    (
        f32_to_f16(max_scale / 63.0),
        f32_to_f16(max_min / 63.0),
        pack_scale_min_k4(&ls, &lm),
    )
}

/// Recomputes the levels (0..=nmax) with the scales and mins as stored.
pub(super) fn requantize(
    x: &[f32],
    packed: &[u8; 12],
    d: [u8; 2],
    dmin: [u8; 2],
    nmax: i32,
    levels: &mut [u8; QK_K],
) {
    let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
    for (j, (xs, lv)) in x
        .chunks_exact(32)
        .zip(levels.chunks_exact_mut(32))
        .enumerate()
    {
        let (sc, m) = get_scale_min_k4(j, packed);
        let dl = d * sc as f32;
        if dl == 0.0 {
            continue;
        }
        let dm = dmin * m as f32;
        for (l, &v) in lv.iter_mut().zip(xs) {
            *l = nearest_int((v + dm) / dl).clamp(0, nmax) as u8;
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_q4_K_q8_K`). Per
/// super-block the integer sums `Σ sc·(q·a)` and `Σ m·bsum` are exact, then
/// `sumf += d·d_a·isum − dmin·d_a·msum` in f32; the SIMD kernels use the same final formula, so
/// they agree with this one bit for bit.
pub fn vec_dot_scalar(n: usize, w: &[BlockQ4_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (sc, mn) = scales_mins_k4(&b.scales);
        let mut q = [0i8; QK_K];
        for (q, x) in q.chunks_exact_mut(64).zip(b.qs.chunks_exact(32)) {
            let (lo, hi) = q.split_at_mut(32);
            for ((&x, l), h) in x.iter().zip(lo).zip(hi) {
                *l = (x & 0x0F) as i8;
                *h = (x >> 4) as i8;
            }
        }
        let (mut isum, mut msum) = (0i32, 0i32);
        for j in 0..8 {
            isum += sc[j] as i32 * dot_codes(&q[32 * j..32 * j + 32], &y.qs[32 * j..32 * j + 32]);
            msum += mn[j] as i32 * (y.bsum(2 * j) as i32 + y.bsum(2 * j + 1) as i32);
        }
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16_to_f32_fast(b.d) * ad, f16_to_f32_fast(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}
