//! IQ4_XS × Q8_K dot products and GEMMs on aarch64 (NEON; `sdot`; `smmla` GEMM): table
//! lookups (`tbl`) for the codes, the integer sum of a super-block exactly, then the scalar
//! reference's float formula, so every tier, GEMV or GEMM, gives the same bits.

use std::arch::aarch64::*;

use super::{BlockIQ4_XS, sub_scales};
use crate::quant::i8mm::gemm256_i8mm;
use crate::quant::iq4_nl::KVALUES_IQ4NL;
use crate::quant::neon_gemm::gemm256_tiers;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::ActRows;
use crate::simd::neon::*;

/// The super-block's 256 codes as i8 in element order (vector `q`: elements `16q..16q + 16`).
#[inline]
#[target_feature(enable = "neon")]
fn codes(b: &BlockIQ4_XS) -> [int8x16_t; 16] {
    // SAFETY: the 16-entry code table.
    let table = unsafe { vld1q_s8(KVALUES_IQ4NL.as_ptr()) };
    let mut c = [vdupq_n_s8(0); 16];
    for ib in 0..8 {
        // sub-block ib: low nibbles are elements 32ib..32ib + 16, high ones the next 16
        let [lo, hi] = nibbles(&b.qs[16 * ib..]);
        c[2 * ib] = vqtbl1q_s8(table, lo);
        c[2 * ib + 1] = vqtbl1q_s8(table, hi);
    }
    c
}

/// The scale of each 16 elements (a 32-element sub-block's twice).
#[inline]
fn scales(b: &BlockIQ4_XS) -> [i32; 16] {
    let ls = sub_scales(b);
    std::array::from_fn(|q| ls[q / 2] as i32)
}

/// The scalar reference's float step for one super-block with integer sum `isum`.
#[inline(always)]
fn term(b: &BlockIQ4_XS, y: &BlockQ8_K, isum: i32) -> f32 {
    f16_to_f32_fast(b.d) * f32::from_le_bytes(y.d) * isum as f32
}

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockIQ4_XS], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        sumf += term(b, y, isum256::<D, 32>(dp, &codes(b), &scales(b), &y.qs));
    }
    sumf
}

neon_tiers!(BlockIQ4_XS, BlockQ8_K);
gemm256_tiers!(BlockIQ4_XS, 32);

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
    gemm256_i8mm::<BlockIQ4_XS, BlockQ8_K>(
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
