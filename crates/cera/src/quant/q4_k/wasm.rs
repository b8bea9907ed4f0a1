//! Q4_K × Q8_K dot products on wasm32 `simd128`: the integer sums of a super-block exactly,
//! then the scalar reference's float formula (the scalar bits).

use core::arch::wasm32::*;

use super::BlockQ4_K;
use crate::quant::k_common::scales_mins_k4;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::wasm::*;

/// `Σ_j m_j·(bsum_2j + bsum_2j+1)`: the eight sub-block mins of Q4_K/Q5_K against the
/// activation's sums of 16 (two per 32-element sub-block).
#[inline(always)]
pub(crate) fn mins_dot_bsums(mn: [u8; 8], bsums: &[u8; QK_K / 16 * 2]) -> i32 {
    let m = u64x2_splat(u64::from_le_bytes(mn));
    // i16 lanes m0 m0 m1 m1 m2 m2 m3 m3, then m4..m7 (swizzle indices ≥ 16 give zero bytes)
    let m03 = i8x16_swizzle(
        m,
        u8x16(0, 16, 0, 16, 1, 16, 1, 16, 2, 16, 2, 16, 3, 16, 3, 16),
    );
    let m47 = i8x16_swizzle(
        m,
        u8x16(4, 16, 4, 16, 5, 16, 5, 16, 6, 16, 6, 16, 7, 16, 7, 16),
    );
    let s = i32x4_add(
        i32x4_dot_i16x8(ld(bsums), m03),
        i32x4_dot_i16x8(ld(&bsums[16..]), m47),
    );
    hsum_i32(s)
}

/// `simd128` tier `Σ w·a`.
pub(crate) fn vec_dot(n: usize, w: &[BlockQ4_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (sc, mn) = scales_mins_k4(&b.scales);
        let mut acc = i32x4_splat(0);
        for c in 0..4 {
            // byte 32c + l: element 64c + l (low nibble), 64c + 32 + l (high nibble)
            let [l0, h0] = nibbles(&b.qs[32 * c..]);
            let [l1, h1] = nibbles(&b.qs[32 * c + 16..]);
            let yq = &y.qs[64 * c..];
            acc = add_scaled(acc, dot32_u7([l0, l1], yq), sc[2 * c] as i32);
            acc = add_scaled(acc, dot32_u7([h0, h1], &yq[32..]), sc[2 * c + 1] as i32);
        }
        let (isum, msum) = (hsum_i32(acc), mins_dot_bsums(mn, &y.bsums));
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16_to_f32_fast(b.d) * ad, f16_to_f32_fast(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}
