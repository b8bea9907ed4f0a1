//! Q5_K × Q8_K dot products on wasm32 `simd128`: the integer sums of a super-block exactly,
//! then the scalar reference's float formula (the scalar bits).

use core::arch::wasm32::*;

use super::BlockQ5_K;
use crate::quant::k_common::scales_mins_k4;
use crate::quant::q4_k::wasm::mins_dot_bsums;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::wasm::*;

/// Bit `k` of each byte of `qh` as `0x10`.
#[inline(always)]
fn fifth(qh: v128, k: u32) -> v128 {
    if k < 4 {
        shl_mask(qh, 4 - k, 0x10)
    } else {
        shr_mask(qh, k - 4, 0x10)
    }
}

/// `simd128` tier `Σ w·a`.
pub(crate) fn vec_dot(n: usize, w: &[BlockQ5_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (sc, mn) = scales_mins_k4(&b.scales);
        // bit `k` of qh[l] is the fifth bit of element 32k + l
        let qh = [ld(&b.qh), ld(&b.qh[16..])];
        let mut acc = i32x4_splat(0);
        for c in 0..4 {
            let [l0, h0] = nibbles(&b.qs[32 * c..]);
            let [l1, h1] = nibbles(&b.qs[32 * c + 16..]);
            let (kl, kh) = (2 * c as u32, 2 * c as u32 + 1);
            let lo = [v128_or(l0, fifth(qh[0], kl)), v128_or(l1, fifth(qh[1], kl))];
            let hi = [v128_or(h0, fifth(qh[0], kh)), v128_or(h1, fifth(qh[1], kh))];
            let yq = &y.qs[64 * c..];
            acc = add_scaled(acc, dot32_u7(lo, yq), sc[2 * c] as i32);
            acc = add_scaled(acc, dot32_u7(hi, &yq[32..]), sc[2 * c + 1] as i32);
        }
        let (isum, msum) = (hsum_i32(acc), mins_dot_bsums(mn, &y.bsums));
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16_to_f32_fast(b.d) * ad, f16_to_f32_fast(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}
