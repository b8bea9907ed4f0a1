//! Q5_K × Q8_K dot products on aarch64 (NEON; `sdot`): the integer sums of a super-block
//! exactly, then the scalar reference's float formula, so every tier gives the same bits.

use std::arch::aarch64::*;

use super::BlockQ5_K;
use crate::quant::k_common::scales_mins_k4;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::neon::*;

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ5_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let sixteen = vdupq_n_u8(0x10);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (sc, mn) = scales_mins_k4(&b.scales);
        let qh = [ld_u8(&b.qh), ld_u8(&b.qh[16..])];
        // bit `k` of qh[l] as 0x10 (the fifth bit of element 32k + l)
        let fifth =
            |k: usize, half: usize| vandq_u8(vtstq_u8(qh[half], vdupq_n_u8(1 << k)), sixteen);
        let code =
            |x: uint8x16_t, k: usize, half: usize| vreinterpretq_s8_u8(vorrq_u8(x, fifth(k, half)));
        let (mut isum, mut msum) = (0i32, 0i32);
        for c in 0..4 {
            let [l0, h0] = nibbles(&b.qs[32 * c..]);
            let [l1, h1] = nibbles(&b.qs[32 * c + 16..]);
            let yq = &y.qs[64 * c..];
            let lo = [code(l0, 2 * c, 0), code(l1, 2 * c, 1)];
            let hi = [code(h0, 2 * c + 1, 0), code(h1, 2 * c + 1, 1)];
            isum += sc[2 * c] as i32 * dot32(dp, lo, yq);
            isum += sc[2 * c + 1] as i32 * dot32(dp, hi, &yq[32..]);
        }
        for (j, &m) in mn.iter().enumerate() {
            msum += m as i32 * (y.bsum(2 * j) as i32 + y.bsum(2 * j + 1) as i32);
        }
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16_to_f32_fast(b.d) * ad, f16_to_f32_fast(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}

neon_tiers!(BlockQ5_K, BlockQ8_K);
