//! Q3_K × Q8_K dot products on wasm32 `simd128`: the integer sum of a super-block exactly,
//! then the scalar reference's float formula (the scalar bits).

use core::arch::wasm32::*;

use super::BlockQ3_K;
use crate::quant::k_common::scales_q3k;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::wasm::*;

/// `simd128` tier `Σ w·a`. The codes are taken unsigned, `u = low + 4·bit` in 0..8 (a
/// cheaper widening), and the offset of 4 comes off at the end through the activation's sums
/// of 16: `Σ sc·(u − 4)·a = Σ sc·u·a − 4·Σ sc·bsum`, the same integer.
pub(crate) fn vec_dot(n: usize, w: &[BlockQ3_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sc = scales_q3k(&b.scales);
        let mut acc = i32x4_splat(0);
        for k in 0..2 {
            let hm = ld(&b.hmask[16 * k..]);
            for h in 0..2 {
                // elements 128h + 32s + 16k + i: low bits 2s..2s+2 of qs[32h + 16k + i],
                // high bit 4h + s of hmask[16k + i]
                let x = ld(&b.qs[32 * h + 16 * k..]);
                let low = [
                    v128_and(x, u8x16_splat(3)),
                    shr_mask(x, 2, 3),
                    shr_mask(x, 4, 3),
                    shr_mask(x, 6, 3),
                ];
                for (s, l) in low.into_iter().enumerate() {
                    // bit p of hm as 4
                    let p = (4 * h + s) as u32;
                    let high = if p < 2 {
                        shl_mask(hm, 2 - p, 4)
                    } else {
                        shr_mask(hm, p - 2, 4)
                    };
                    let e = 128 * h + 32 * s + 16 * k;
                    let d = dot_u7(i32x4_splat(0), v128_or(l, high), ld(&y.qs[e..]));
                    acc = add_scaled(acc, d, sc[e / 16] as i32);
                }
            }
        }
        let scv = ld(&sc.map(|s| s as u8));
        let off = i32x4_add(
            i32x4_dot_i16x8(i16x8_extend_low_i8x16(scv), ld(&y.bsums)),
            i32x4_dot_i16x8(i16x8_extend_high_i8x16(scv), ld(&y.bsums[16..])),
        );
        let isum = hsum_i32(i32x4_sub(acc, i32x4_shl(off, 2)));
        sumf += f16_to_f32_fast(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}
