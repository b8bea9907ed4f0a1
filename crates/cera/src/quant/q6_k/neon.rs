//! Q6_K × Q8_K dot products and GEMMs on aarch64 (NEON; `sdot`; `smmla` GEMM): the integer
//! sum of a super-block exactly, then the scalar reference's float formula, so every tier,
//! GEMV or GEMM, gives the same bits.

use std::arch::aarch64::*;

use super::BlockQ6_K;
use crate::quant::i8mm::gemm256_i8mm;
use crate::quant::neon_gemm::gemm256_tiers;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::ActRows;
use crate::simd::neon::*;

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ6_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let (m4, m3, off) = (vdupq_n_u8(0x0F), vdupq_n_u8(0x30), vdupq_n_s8(32));
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let mut isum = 0i32;
        for h in 0..2 {
            let (ql, qh) = (&b.ql[64 * h..], &b.qh[32 * h..]);
            for k in 0..2 {
                // elements 128h + 32s + 16k + i, s = 0..4: low 4 bits from ql (byte l or
                // 32 + l, low or high nibble), high 2 bits from qh bits 2s..2s+2
                let (x0, x1, hb) = (
                    ld_u8(&ql[16 * k..]),
                    ld_u8(&ql[32 + 16 * k..]),
                    ld_u8(&qh[16 * k..]),
                );
                let codes = [
                    vorrq_u8(vandq_u8(x0, m4), vandq_u8(vshlq_n_u8::<4>(hb), m3)),
                    vorrq_u8(vandq_u8(x1, m4), vandq_u8(vshlq_n_u8::<2>(hb), m3)),
                    vorrq_u8(vshrq_n_u8::<4>(x0), vandq_u8(hb, m3)),
                    vorrq_u8(vshrq_n_u8::<4>(x1), vandq_u8(vshrq_n_u8::<2>(hb), m3)),
                ];
                for (s, c) in codes.into_iter().enumerate() {
                    let e = 128 * h + 32 * s + 16 * k;
                    let q = vsubq_s8(vreinterpretq_s8_u8(c), off);
                    isum += b.scales[e / 16] as i8 as i32 * dot16(dp, q, &y.qs[e..]);
                }
            }
        }
        sumf += term(b, y, isum);
    }
    sumf
}

/// The scalar reference's float step for one super-block with integer sum `isum`.
#[inline(always)]
fn term(b: &BlockQ6_K, y: &BlockQ8_K, isum: i32) -> f32 {
    f16_to_f32_fast(b.d) * f32::from_le_bytes(y.d) * isum as f32
}

neon_tiers!(BlockQ6_K, BlockQ8_K);

/// The super-block's 256 codes as i8 in element order (vector `q`: elements `16q..16q + 16`),
/// decoded as `dot` does.
#[inline]
#[target_feature(enable = "neon")]
fn codes(b: &BlockQ6_K) -> [int8x16_t; 16] {
    let (m4, m3, off) = (vdupq_n_u8(0x0F), vdupq_n_u8(0x30), vdupq_n_s8(32));
    let mut c = [vdupq_n_s8(0); 16];
    for h in 0..2 {
        let (ql, qh) = (&b.ql[64 * h..], &b.qh[32 * h..]);
        for k in 0..2 {
            // as in `dot`: elements 128h + 32s + 16k + i go to vector 8h + 2s + k
            let (x0, x1) = (ld_u8(&ql[16 * k..]), ld_u8(&ql[32 + 16 * k..]));
            let hb = ld_u8(&qh[16 * k..]);
            let codes = [
                vorrq_u8(vandq_u8(x0, m4), vandq_u8(vshlq_n_u8::<4>(hb), m3)),
                vorrq_u8(vandq_u8(x1, m4), vandq_u8(vshlq_n_u8::<2>(hb), m3)),
                vorrq_u8(vshrq_n_u8::<4>(x0), vandq_u8(hb, m3)),
                vorrq_u8(vshrq_n_u8::<4>(x1), vandq_u8(vshrq_n_u8::<2>(hb), m3)),
            ];
            for (s, v) in codes.into_iter().enumerate() {
                c[8 * h + 2 * s + k] = vsubq_s8(vreinterpretq_s8_u8(v), off);
            }
        }
    }
    c
}

/// The scale of each 16 elements.
#[inline]
fn scales(b: &BlockQ6_K) -> [i32; 16] {
    std::array::from_fn(|q| b.scales[q] as i8 as i32)
}

gemm256_tiers!(BlockQ6_K, 16);

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
    gemm256_i8mm::<BlockQ6_K, BlockQ8_K>(
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
