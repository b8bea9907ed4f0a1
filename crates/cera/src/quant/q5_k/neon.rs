//! Q5_K × Q8_K dot products and GEMMs on aarch64 (NEON; `sdot`; `smmla` GEMM): the integer
//! sums of a super-block exactly, then the scalar reference's float formula, so every tier,
//! GEMV or GEMM, gives the same bits.

use std::arch::aarch64::*;

use super::BlockQ5_K;
use crate::quant::i8mm::gemm256_i8mm;
use crate::quant::k_common::scales_mins_k4;
use crate::quant::neon_gemm::gemm256_tiers;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::ActRows;
use crate::simd::neon::*;

/// The super-block's 256 codes (0..32) as i8 in element order (vector `q`: elements
/// `16q..16q + 16`).
#[inline]
#[target_feature(enable = "neon")]
fn codes(b: &BlockQ5_K) -> [int8x16_t; 16] {
    let sixteen = vdupq_n_u8(0x10);
    let qh = [ld_u8(&b.qh), ld_u8(&b.qh[16..])];
    // the nibbles of elements 32j + 16half + i, with bit `j` of qh[16half + i] as 0x10
    let code = |x: uint8x16_t, j: usize, half: usize| {
        let fifth = vandq_u8(vtstq_u8(qh[half], vdupq_n_u8(1 << j)), sixteen);
        vreinterpretq_s8_u8(vorrq_u8(x, fifth))
    };
    let mut c = [vdupq_n_s8(0); 16];
    for q in 0..4 {
        // byte 32q + l: element 64q + l (low nibble), 64q + 32 + l (high nibble)
        let [l0, h0] = nibbles(&b.qs[32 * q..]);
        let [l1, h1] = nibbles(&b.qs[32 * q + 16..]);
        c[4 * q] = code(l0, 2 * q, 0);
        c[4 * q + 1] = code(l1, 2 * q, 1);
        c[4 * q + 2] = code(h0, 2 * q + 1, 0);
        c[4 * q + 3] = code(h1, 2 * q + 1, 1);
    }
    c
}

/// The scale of each 16 elements (a 32-element sub-block's twice).
#[inline]
fn scales(b: &BlockQ5_K) -> [i32; 16] {
    let (sc, _) = scales_mins_k4(&b.scales);
    std::array::from_fn(|q| sc[q / 2] as i32)
}

/// The scalar reference's float step for one super-block with integer sum `isum` (the mins'
/// integer sum, `msum`, from the activation's `bsums`).
#[inline(always)]
fn term(b: &BlockQ5_K, y: &BlockQ8_K, isum: i32) -> f32 {
    let (_, mn) = scales_mins_k4(&b.scales);
    let mut msum = 0i32;
    for (j, &m) in mn.iter().enumerate() {
        msum += m as i32 * (y.bsum(2 * j) as i32 + y.bsum(2 * j + 1) as i32);
    }
    let ad = f32::from_le_bytes(y.d);
    let (d, dmin) = (f16_to_f32_fast(b.d) * ad, f16_to_f32_fast(b.dmin) * ad);
    d * isum as f32 - dmin * msum as f32
}

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ5_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        sumf += term(b, y, isum256::<D, 32>(dp, &codes(b), &scales(b), &y.qs));
    }
    sumf
}

neon_tiers!(BlockQ5_K, BlockQ8_K);
gemm256_tiers!(BlockQ5_K, 32);

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
    gemm256_i8mm::<BlockQ5_K, BlockQ8_K>(
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
