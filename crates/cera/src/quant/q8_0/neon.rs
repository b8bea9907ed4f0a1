//! Q8_0 on aarch64: the activation quantizer and Q8_0 × Q8_0 dot products (NEON; `sdot`).

use std::arch::aarch64::*;

use super::{BlockQ8_0, QK};
use crate::kernels::neon::*;
use crate::quant::{dot_blocks, f16_to_f32_fast, f32_to_f16};

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

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sumi = dot32(dp, [ld_s8(&b.qs), ld_s8(&b.qs[16..])], &y.qs);
        sumf += sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d));
    }
    sumf
}

/// `Neon` tier `Σ w·a`.
#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_neon(n: usize, w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    dot(Emul, n, w, a)
}

/// `NeonDotprod` tier `Σ w·a`.
#[target_feature(enable = "neon,dotprod")]
pub(crate) fn vec_dot_dotprod(n: usize, w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    // SAFETY: this function only runs where `dotprod` is enabled.
    dot(unsafe { Sdot::new() }, n, w, a)
}
