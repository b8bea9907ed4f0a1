//! Q8_K on aarch64: the activation quantizer (NEON).

use std::arch::aarch64::*;

use super::BlockQ8_K;
use crate::quant::QK_K;
use crate::simd::neon::ld_f32;

/// NEON version of `q8_k::quantize`, byte for byte the same output: the first element of
/// largest magnitude maps to -127, the rest round half to even (`fcvtns`, which is what
/// `nearest_int` computes in range), with the sums of each 16 quants alongside.
#[target_feature(enable = "neon")]
pub(crate) fn quantize_neon(src: &[f32], out: &mut [BlockQ8_K]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        // `maxnm` skips NaN lanes, as the reference's `>` does.
        let mut m = vdupq_n_f32(0.0);
        for c in x.chunks_exact(4) {
            m = vmaxnmq_f32(m, vabsq_f32(ld_f32(c)));
        }
        let amax = vmaxnmvq_f32(m);
        if amax == 0.0 {
            b.d = 0.0f32.to_le_bytes();
            b.qs = [0; QK_K];
            b.bsums = [0; QK_K / 16 * 2];
            continue;
        }
        // The first element whose magnitude is `amax` gives the sign.
        let max = *x.iter().find(|v| v.abs() == amax).unwrap_or(&amax);
        let iscale = -127.0 / max;
        for (j, (c, qs)) in x
            .chunks_exact(16)
            .zip(b.qs.chunks_exact_mut(16))
            .enumerate()
        {
            // `fcvtns` saturates and maps NaN to 0; the saturating narrows clamp to i8.
            let q: [int32x4_t; 4] =
                std::array::from_fn(|i| vcvtnq_s32_f32(vmulq_n_f32(ld_f32(&c[4 * i..]), iscale)));
            let h0 = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
            let h1 = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
            let v = vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1));
            // SAFETY: `qs` is a 16-byte chunk.
            unsafe { vst1q_s8(qs.as_mut_ptr().cast(), v) };
            let s = vaddlvq_s8(v);
            b.bsums[2 * j..2 * j + 2].copy_from_slice(&s.to_le_bytes());
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}
