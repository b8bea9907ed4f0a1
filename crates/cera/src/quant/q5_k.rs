//! Q5_K: 256-element super-blocks of 8 sub-blocks of 32, asymmetric 5-bit,
//! `x = d * sc * q - dmin * m` with a 6-bit scale `sc` and min `m` per sub-block.

use super::k_common::{Qkx2Search, get_scale_min_k4, scales_mins_k4};
use super::q4_k::{pack_super_scales, requantize, search_sub_blocks};
use super::q8_k::BlockQ8_K;
use super::{Block, GgmlType, QK_K, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast};

/// One Q5_K super-block (176 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct BlockQ5_K {
    /// Super-block scale for the sub-block scales, f16.
    pub d: [u8; 2],
    /// Super-block scale for the sub-block mins, f16.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and mins, packed as in Q4_K.
    pub scales: [u8; 12],
    /// Fifth bits: bit `j / 32` of byte `j % 32` belongs to element `j`.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits, laid out as Q4_K's quants: byte `32*c + l` holds element `64*c + l` in its
    /// low nibble and element `64*c + 32 + l` in its high nibble.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockQ5_K>() == 176);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ5_K {
    const TYPE: GgmlType = GgmlType::Q5_K;
    const ELEMS: usize = QK_K;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
pub fn dequantize(blocks: &[BlockQ5_K], out: &mut [f32]) {
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
            for (((&q, &qh), l), h) in q.iter().zip(&b.qh).zip(lo).zip(hi) {
                let h0 = ((qh >> (2 * c)) & 1) << 4;
                let h1 = ((qh >> (2 * c + 1)) & 1) << 4;
                *l = d0 * ((q & 0x0F) | h0) as f32 - dm0;
                *h = d1 * ((q >> 4) | h1) as f32 - dm1;
            }
        }
    }
}

/// ggml's `quantize_row_q5_K_ref`: Q4_K's algorithm with 31 levels and ggml's Q5_K search
/// grid (rmin -0.5, 15 steps).
pub fn quantize(src: &[f32], out: &mut [BlockQ5_K]) {
    const SEARCH: Qkx2Search = Qkx2Search {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let mut levels = [0u8; QK_K];
        let (scales, mins) = search_sub_blocks(x, &mut levels, 31, &SEARCH);
        let (d, dmin, packed) = pack_super_scales(&scales, &mins);
        b.d = d;
        b.dmin = dmin;
        b.scales = packed;
        requantize(x, &b.scales, b.d, b.dmin, 31, &mut levels);
        b.qh = [0; QK_K / 8];
        for (c, q) in b.qs.chunks_exact_mut(32).enumerate() {
            for (l, q) in q.iter_mut().enumerate() {
                let (l0, l1) = (levels[64 * c + l], levels[64 * c + 32 + l]);
                b.qh[l] |= ((l0 >> 4) << (2 * c)) | ((l1 >> 4) << (2 * c + 1));
                *q = (l0 & 0x0F) | ((l1 & 0x0F) << 4);
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_q5_K_q8_K`), with
/// Q4_K's final formula (see `q4_k::vec_dot_scalar`).
pub fn vec_dot_scalar(n: usize, w: &[BlockQ5_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (sc, mn) = scales_mins_k4(&b.scales);
        let mut q = [0i8; QK_K];
        for (c, (q, x)) in q
            .chunks_exact_mut(64)
            .zip(b.qs.chunks_exact(32))
            .enumerate()
        {
            let (lo, hi) = q.split_at_mut(32);
            for (((&x, &h), l), hq) in x.iter().zip(&b.qh).zip(lo).zip(hi) {
                *l = ((x & 0x0F) | (((h >> (2 * c)) & 1) << 4)) as i8;
                *hq = ((x >> 4) | (((h >> (2 * c + 1)) & 1) << 4)) as i8;
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
