//! Q5_0 × Q8_0 dot products and GEMMs on aarch64 (NEON; `sdot`; `smmla` GEMM): the codes as
//! i8, an exact integer sum per block, then the scalar reference's float step (so every tier,
//! GEMV or GEMM, gives the same bits).

use std::arch::aarch64::*;

use super::{BlockQ5_0, QK};
use crate::quant::i8mm::gemm32_i8mm;
use crate::quant::neon_gemm::gemm32_tiers;
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::{dot_blocks, f16_to_f32_fast};
use crate::simd::ActRows;
use crate::simd::neon::*;

/// The block's 32 codes as i8 (elements 0..16, then 16..32).
#[inline]
#[target_feature(enable = "neon")]
fn codes(b: &BlockQ5_0) -> [int8x16_t; 2] {
    let ([lo, hi], [h0, h1]) = (nibbles(&b.qs), fifth_bits(b.qh));
    let sixteen = vdupq_n_s8(16);
    [
        vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, h0)), sixteen),
        vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, h1)), sixteen),
    ]
}

/// The scalar reference's float step for one block with integer sum `sumi`.
#[inline(always)]
fn term(b: &BlockQ5_0, y: &BlockQ8_0, sumi: i32) -> f32 {
    sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d))
}

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        sumf += term(b, y, dot32(dp, codes(b), &y.qs));
    }
    sumf
}

neon_tiers!(BlockQ5_0, BlockQ8_0);
gemm32_tiers!(BlockQ5_0, BlockQ8_0);

/// `NeonI8mm` tier GEMM over plain rows (see `quant::i8mm::gemm32_i8mm`).
#[target_feature(enable = "neon,dotprod,i8mm")]
pub(crate) fn gemm_i8mm(
    k: usize,
    n_rows: usize,
    w: &[u8],
    a: &ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    gemm32_i8mm::<BlockQ5_0, BlockQ8_0>(k, n_rows, w, a, out, ldo, |b| codes(b), |y| &y.qs, term)
}
