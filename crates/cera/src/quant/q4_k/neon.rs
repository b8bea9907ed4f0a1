//! Q4_K × Q8_K dot products and GEMMs on aarch64 (NEON; `sdot`; `smmla` GEMM): the integer
//! sums of a super-block exactly, then the scalar reference's float formula, so every tier,
//! GEMV or GEMM, gives the same bits.

use std::arch::aarch64::*;

use super::BlockQ4_K;
use crate::quant::i8mm::gemm256_i8mm;
use crate::quant::k_common::scales_mins_k4;
use crate::quant::neon_gemm::gemm256_tiers;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::ActRows;
use crate::simd::neon::*;

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ4_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (sc, _) = scales_mins_k4(&b.scales);
        let mut isum = 0i32;
        for c in 0..4 {
            // byte 32c + l: element 64c + l (low nibble), 64c + 32 + l (high nibble)
            let [l0, h0] = nibbles(&b.qs[32 * c..]);
            let [l1, h1] = nibbles(&b.qs[32 * c + 16..]);
            let s = |x: uint8x16_t| vreinterpretq_s8_u8(x);
            let yq = &y.qs[64 * c..];
            isum += sc[2 * c] as i32 * dot32(dp, [s(l0), s(l1)], yq);
            isum += sc[2 * c + 1] as i32 * dot32(dp, [s(h0), s(h1)], &yq[32..]);
        }
        sumf += term(b, y, isum);
    }
    sumf
}

/// The scalar reference's float step for one super-block with integer sum `isum` (the mins'
/// integer sum, `msum`, from the activation's `bsums`).
#[inline(always)]
fn term(b: &BlockQ4_K, y: &BlockQ8_K, isum: i32) -> f32 {
    let (_, mn) = scales_mins_k4(&b.scales);
    let mut msum = 0i32;
    for (j, &m) in mn.iter().enumerate() {
        msum += m as i32 * (y.bsum(2 * j) as i32 + y.bsum(2 * j + 1) as i32);
    }
    let ad = f32::from_le_bytes(y.d);
    let (d, dmin) = (f16_to_f32_fast(b.d) * ad, f16_to_f32_fast(b.dmin) * ad);
    d * isum as f32 - dmin * msum as f32
}

neon_tiers!(BlockQ4_K, BlockQ8_K);

/// The super-block's 256 codes as i8 in element order (vector `q`: elements `16q..16q + 16`).
#[inline]
#[target_feature(enable = "neon")]
fn codes(b: &BlockQ4_K) -> [int8x16_t; 16] {
    let mut c = [vdupq_n_s8(0); 16];
    for q in 0..4 {
        // byte 32q + l: element 64q + l (low nibble), 64q + 32 + l (high nibble)
        let [l0, h0] = nibbles(&b.qs[32 * q..]);
        let [l1, h1] = nibbles(&b.qs[32 * q + 16..]);
        c[4 * q] = vreinterpretq_s8_u8(l0);
        c[4 * q + 1] = vreinterpretq_s8_u8(l1);
        c[4 * q + 2] = vreinterpretq_s8_u8(h0);
        c[4 * q + 3] = vreinterpretq_s8_u8(h1);
    }
    c
}

/// The scale of each 16 elements (a 32-element sub-block's twice).
#[inline]
fn scales(b: &BlockQ4_K) -> [i32; 16] {
    let (sc, _) = scales_mins_k4(&b.scales);
    std::array::from_fn(|q| sc[q / 2] as i32)
}

gemm256_tiers!(BlockQ4_K, 32);

/// `NeonI8mm` tier GEMM over plain rows (see `quant::i8mm::gemm256_i8mm`).
#[target_feature(enable = "neon,dotprod,i8mm")]
pub(crate) fn gemm_i8mm(
    k: usize,
    n_rows: usize,
    w: &[u8],
    a: &ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    gemm256_i8mm::<BlockQ4_K, BlockQ8_K>(
        k,
        n_rows,
        w,
        a,
        out,
        ldo,
        |b| codes(b),
        scales,
        |y| &y.qs,
        term,
    )
}
