//! Q2_K × Q8_K dot products on aarch64 (NEON; `sdot`): the integer sums of a super-block
//! exactly, then the scalar reference's float formula, so every tier gives the same bits.

use std::arch::aarch64::*;

use super::BlockQ2_K;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::neon::*;

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ2_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m2 = vdupq_n_u8(3);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (mut isum, mut msum) = (0i32, 0i32);
        for h in 0..2 {
            for k in 0..2 {
                // elements 128h + 32s + 16k + i: bits 2s..2s+2 of qs[32h + 16k + i]
                let x = ld_u8(&b.qs[32 * h + 16 * k..]);
                let codes = [
                    vandq_u8(x, m2),
                    vandq_u8(vshrq_n_u8::<2>(x), m2),
                    vandq_u8(vshrq_n_u8::<4>(x), m2),
                    vshrq_n_u8::<6>(x),
                ];
                for (s, c) in codes.into_iter().enumerate() {
                    let e = 128 * h + 32 * s + 16 * k;
                    let sc = (b.scales[e / 16] & 0x0F) as i32;
                    isum += sc * dot16(dp, vreinterpretq_s8_u8(c), &y.qs[e..]);
                }
            }
        }
        for (is, &sc) in b.scales.iter().enumerate() {
            msum += (sc >> 4) as i32 * y.bsum(is) as i32;
        }
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16_to_f32_fast(b.d) * ad, f16_to_f32_fast(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}

neon_tiers!(BlockQ2_K, BlockQ8_K);
