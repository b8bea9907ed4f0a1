//! Q2_K × Q8_K dot products and GEMMs on aarch64 (NEON; `sdot`; `smmla` GEMM): the integer
//! sums of a super-block exactly, then the scalar reference's float formula, so every tier,
//! GEMV or GEMM, gives the same bits.

use std::arch::aarch64::*;

use super::BlockQ2_K;
use crate::quant::i8mm::gemm256_i8mm;
use crate::quant::neon_gemm::gemm256_tiers;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::ActRows;
use crate::simd::neon::*;

/// The super-block's 256 codes (0..4) as i8 in element order (vector `q`: elements
/// `16q..16q + 16`).
#[inline]
#[target_feature(enable = "neon")]
fn codes(b: &BlockQ2_K) -> [int8x16_t; 16] {
    let m2 = vdupq_n_u8(3);
    let mut c = [vdupq_n_s8(0); 16];
    for h in 0..2 {
        for k in 0..2 {
            // elements 128h + 32s + 16k + i: bits 2s..2s+2 of qs[32h + 16k + i]
            let x = ld_u8(&b.qs[32 * h + 16 * k..]);
            let v = [
                vandq_u8(x, m2),
                vandq_u8(vshrq_n_u8::<2>(x), m2),
                vandq_u8(vshrq_n_u8::<4>(x), m2),
                vshrq_n_u8::<6>(x),
            ];
            for (s, v) in v.into_iter().enumerate() {
                c[8 * h + 2 * s + k] = vreinterpretq_s8_u8(v);
            }
        }
    }
    c
}

/// The scale of each 16 elements (the low nibbles; the high ones are the mins, in `term`).
#[inline]
fn scales(b: &BlockQ2_K) -> [i32; 16] {
    std::array::from_fn(|q| (b.scales[q] & 0x0F) as i32)
}

/// The scalar reference's float step for one super-block with integer sum `isum` (the mins'
/// integer sum, `msum`, from the activation's `bsums`).
#[inline(always)]
fn term(b: &BlockQ2_K, y: &BlockQ8_K, isum: i32) -> f32 {
    let mut msum = 0i32;
    for (is, &sc) in b.scales.iter().enumerate() {
        msum += (sc >> 4) as i32 * y.bsum(is) as i32;
    }
    let ad = f32::from_le_bytes(y.d);
    let (d, dmin) = (f16_to_f32_fast(b.d) * ad, f16_to_f32_fast(b.dmin) * ad);
    d * isum as f32 - dmin * msum as f32
}

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ2_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        sumf += term(b, y, isum256::<D, 16>(dp, &codes(b), &scales(b), &y.qs));
    }
    sumf
}

neon_tiers!(BlockQ2_K, BlockQ8_K);
gemm256_tiers!(BlockQ2_K, 16);

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
    gemm256_i8mm::<BlockQ2_K, BlockQ8_K>(
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
