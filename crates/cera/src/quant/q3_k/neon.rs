//! Q3_K × Q8_K dot products and GEMMs on aarch64 (NEON; `sdot`; `smmla` GEMM): the integer
//! sum of a super-block exactly, then the scalar reference's float formula, so every tier,
//! GEMV or GEMM, gives the same bits.

use std::arch::aarch64::*;

use super::BlockQ3_K;
use crate::quant::i8mm::gemm256_i8mm;
use crate::quant::k_common::scales_q3k;
use crate::quant::neon_gemm::gemm256_tiers;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::ActRows;
use crate::simd::neon::*;

/// The super-block's 256 codes (-4..4) as i8 in element order (vector `q`: elements
/// `16q..16q + 16`).
#[inline]
#[target_feature(enable = "neon")]
fn codes(b: &BlockQ3_K) -> [int8x16_t; 16] {
    let (m2, four) = (vdupq_n_u8(3), vdupq_n_u8(4));
    let mut c = [vdupq_n_s8(0); 16];
    for k in 0..2 {
        let hm = ld_u8(&b.hmask[16 * k..]);
        for h in 0..2 {
            // elements 128h + 32s + 16k + i: low bits 2s..2s+2 of qs[32h + 16k + i],
            // minus 4 where bit 4h + s of hmask[16k + i] is clear
            let x = ld_u8(&b.qs[32 * h + 16 * k..]);
            let low = [
                vandq_u8(x, m2),
                vandq_u8(vshrq_n_u8::<2>(x), m2),
                vandq_u8(vshrq_n_u8::<4>(x), m2),
                vshrq_n_u8::<6>(x),
            ];
            for (s, l) in low.into_iter().enumerate() {
                let set = vtstq_u8(hm, vdupq_n_u8(1 << (4 * h + s)));
                c[8 * h + 2 * s + k] = vsubq_s8(
                    vreinterpretq_s8_u8(l),
                    vreinterpretq_s8_u8(vbicq_u8(four, set)),
                );
            }
        }
    }
    c
}

/// The scale of each 16 elements.
#[inline]
fn scales(b: &BlockQ3_K) -> [i32; 16] {
    scales_q3k(&b.scales).map(i32::from)
}

/// The scalar reference's float step for one super-block with integer sum `isum`.
#[inline(always)]
fn term(b: &BlockQ3_K, y: &BlockQ8_K, isum: i32) -> f32 {
    f16_to_f32_fast(b.d) * f32::from_le_bytes(y.d) * isum as f32
}

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ3_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        sumf += term(b, y, isum256::<D, 16>(dp, &codes(b), &scales(b), &y.qs));
    }
    sumf
}

neon_tiers!(BlockQ3_K, BlockQ8_K);
gemm256_tiers!(BlockQ3_K, 16);

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
    gemm256_i8mm::<BlockQ3_K, BlockQ8_K>(
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
