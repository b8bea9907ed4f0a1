//! Q2_K × Q8_K dot products on wasm32 `simd128`: the integer sums of a super-block exactly,
//! then the scalar reference's float formula (the scalar bits).

use core::arch::wasm32::*;

use super::BlockQ2_K;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::wasm::*;

/// `simd128` tier `Σ w·a`.
pub(crate) fn vec_dot(n: usize, w: &[BlockQ2_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let mut acc = i32x4_splat(0);
        for h in 0..2 {
            for k in 0..2 {
                // elements 128h + 32s + 16k + i: bits 2s..2s+2 of qs[32h + 16k + i]
                let x = ld(&b.qs[32 * h + 16 * k..]);
                let codes = [
                    v128_and(x, u8x16_splat(3)),
                    shr_mask(x, 2, 3),
                    shr_mask(x, 4, 3),
                    shr_mask(x, 6, 3),
                ];
                for (s, c) in codes.into_iter().enumerate() {
                    let e = 128 * h + 32 * s + 16 * k;
                    let d = dot_u7(i32x4_splat(0), c, ld(&y.qs[e..]));
                    acc = add_scaled(acc, d, (b.scales[e / 16] & 0x0F) as i32);
                }
            }
        }
        // the mins (high nibbles of the scales) against the sums of 16
        let mins = shr_mask(ld(&b.scales), 4, 0x0F);
        let m = i32x4_add(
            i32x4_dot_i16x8(u16x8_extend_low_u8x16(mins), ld(&y.bsums)),
            i32x4_dot_i16x8(u16x8_extend_high_u8x16(mins), ld(&y.bsums[16..])),
        );
        let (isum, msum) = (hsum_i32(acc), hsum_i32(m));
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16_to_f32_fast(b.d) * ad, f16_to_f32_fast(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}
