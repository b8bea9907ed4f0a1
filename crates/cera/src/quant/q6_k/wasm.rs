//! Q6_K × Q8_K dot products on wasm32 `simd128`: the integer sum of a super-block exactly,
//! then the scalar reference's float formula (the scalar bits).

use core::arch::wasm32::*;

use super::BlockQ6_K;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::wasm::*;

/// `simd128` tier `Σ w·a`. The codes stay unsigned (0..64, a cheaper widening) and the offset
/// of 32 comes off at the end through the activation's sums of 16: `Σ sc·(q − 32)·a =
/// Σ sc·q·a − 32·Σ sc·bsum`, the same integer.
pub(crate) fn vec_dot(n: usize, w: &[BlockQ6_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m4 = u8x16_splat(0x0F);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let mut acc = i32x4_splat(0);
        for h in 0..2 {
            let (ql, qh) = (&b.ql[64 * h..], &b.qh[32 * h..]);
            for k in 0..2 {
                // elements 128h + 32s + 16k + i, s = 0..4: low 4 bits from ql (byte l or
                // 32 + l, low or high nibble), high 2 bits from qh bits 2s..2s+2
                let (x0, x1, hb) = (ld(&ql[16 * k..]), ld(&ql[32 + 16 * k..]), ld(&qh[16 * k..]));
                let codes = [
                    v128_or(v128_and(x0, m4), shl_mask(hb, 4, 0x30)),
                    v128_or(v128_and(x1, m4), shl_mask(hb, 2, 0x30)),
                    v128_or(shr_mask(x0, 4, 0x0F), v128_and(hb, u8x16_splat(0x30))),
                    v128_or(shr_mask(x1, 4, 0x0F), shr_mask(hb, 2, 0x30)),
                ];
                for (s, c) in codes.into_iter().enumerate() {
                    let e = 128 * h + 32 * s + 16 * k;
                    let d = dot_u7(i32x4_splat(0), c, ld(&y.qs[e..]));
                    acc = add_scaled(acc, d, b.scales[e / 16] as i8 as i32);
                }
            }
        }
        let sc = ld(&b.scales);
        let off = i32x4_add(
            i32x4_dot_i16x8(i16x8_extend_low_i8x16(sc), ld(&y.bsums)),
            i32x4_dot_i16x8(i16x8_extend_high_i8x16(sc), ld(&y.bsums[16..])),
        );
        let isum = hsum_i32(i32x4_sub(acc, i32x4_shl(off, 5)));
        sumf += f16_to_f32_fast(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}
