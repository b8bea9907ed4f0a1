//! Q8_0 on aarch64: the activation quantizer, and Q8_0 × Q8_0 dot products and GEMMs (NEON;
//! `sdot`; `smmla` GEMM) with an exact integer sum per block, then the scalar reference's float
//! step (so every tier, GEMV or GEMM, gives the same bits).

use std::arch::aarch64::*;

use super::{BlockQ8_0, QK};
use crate::quant::i8mm::gemm32_i8mm;
use crate::quant::neon_gemm::gemm32_tiers;
use crate::quant::{dot_blocks, f16_to_f32_fast, f32_to_f16};
use crate::simd::ActRows;
use crate::simd::neon::*;

/// One 32-element block, as `q8_0::quantize_act_block`: `d = amax / 127`,
/// `q = round_half_even(x · 127 / amax)` saturated to i8. Returns `d` (before rounding to f16)
/// and the sum of the quants.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn quantize_block(x: &[f32], qs: &mut [u8; QK]) -> (f32, i32) {
    let v: [float32x4_t; 8] = std::array::from_fn(|i| ld_f32(&x[4 * i..]));
    // `maxnm` ignores NaN lanes, like `f32::max` in the reference.
    let mut m = vdupq_n_f32(0.0);
    for v in v {
        m = vmaxnmq_f32(m, vabsq_f32(v));
    }
    let amax = vmaxnmvq_f32(m);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    // `fcvtns` rounds half to even and saturates (NaN to 0); the saturating narrows then
    // clamp to i8 as the reference's `clamp(-128, 127)` does.
    let q: [int32x4_t; 8] = std::array::from_fn(|i| vcvtnq_s32_f32(vmulq_n_f32(v[i], id)));
    let h: [int16x8_t; 4] =
        std::array::from_fn(|i| vcombine_s16(vqmovn_s32(q[2 * i]), vqmovn_s32(q[2 * i + 1])));
    let b = [
        vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])),
        vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])),
    ];
    // SAFETY: `qs` holds 32 writable bytes.
    unsafe {
        vst1q_s8(qs.as_mut_ptr().cast(), b[0]);
        vst1q_s8(qs.as_mut_ptr().add(16).cast(), b[1]);
    }
    // sums of the stored (saturated) quants
    let sum = vaddlvq_s8(b[0]) as i32 + vaddlvq_s8(b[1]) as i32;
    (d, sum)
}

/// NEON version of `q8_0::quantize_act`, byte for byte the same output.
#[target_feature(enable = "neon")]
pub(crate) fn quantize_neon(src: &[f32], out: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (d, _) = quantize_block(x, &mut b.qs);
        b.d = f32_to_f16(d);
    }
}

/// The block's 32 codes as i8 (elements 0..16, then 16..32).
#[inline]
#[target_feature(enable = "neon")]
fn codes(b: &BlockQ8_0) -> [int8x16_t; 2] {
    [ld_s8(&b.qs), ld_s8(&b.qs[16..])]
}

/// The scalar reference's float step for one block with integer sum `sumi`.
#[inline(always)]
fn term(b: &BlockQ8_0, y: &BlockQ8_0, sumi: i32) -> f32 {
    sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d))
}

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        sumf += term(b, y, dot32(dp, codes(b), &y.qs));
    }
    sumf
}

neon_tiers!(BlockQ8_0, BlockQ8_0);
gemm32_tiers!(BlockQ8_0, BlockQ8_0);

/// `NeonI8mm` tier GEMM over plain rows (see `quant::i8mm::gemm32_i8mm`).
#[target_feature(enable = "neon,dotprod,i8mm")]
pub(crate) fn gemm_i8mm(
    k: usize,
    n_rows: usize,
    w: &[u8],
    a: &ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    gemm32_i8mm::<BlockQ8_0, BlockQ8_0>(k, n_rows, w, a, out, ldo, |b| codes(b), |y| &y.qs, term)
}
