//! Q8_K on x86-64: the activation quantizer (AVX2).

use std::arch::x86_64::*;

use super::BlockQ8_K;
use crate::quant::QK_K;
use crate::simd::x86::{abs_ps, hmax_ps, hsum_epi32, ld_ps, pack_i32x32_to_i8};

/// AVX2 version of `q8_k::quantize`, byte for byte the same output: the first element of
/// largest magnitude maps to -127, the rest round half to even (`vroundps` in nearest mode,
/// which is what `nearest_int` computes), sums of each 16 quants alongside.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize_avx2(src: &[f32], out: &mut [BlockQ8_K]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        // `max(|v|, acc)` keeps `acc` for NaN lanes, which the reference's `>` skips too.
        let mut m = _mm256_setzero_ps();
        for c in x.chunks_exact(8) {
            m = _mm256_max_ps(abs_ps(ld_ps(c)), m);
        }
        let amax = hmax_ps(m);
        if amax == 0.0 {
            b.d = 0.0f32.to_le_bytes();
            b.qs = [0; QK_K];
            b.bsums = [0; QK_K / 16 * 2];
            continue;
        }
        // The first element whose magnitude is `amax` gives the sign.
        let target = _mm256_set1_ps(amax);
        let mut max = amax;
        for (i, c) in x.chunks_exact(8).enumerate() {
            let eq = _mm256_cmp_ps::<_CMP_EQ_OQ>(abs_ps(ld_ps(c)), target);
            let bits = _mm256_movemask_ps(eq);
            if bits != 0 {
                max = x[8 * i + bits.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let mul = _mm256_set1_ps(iscale);
        for (g, (c, qs)) in x
            .chunks_exact(32)
            .zip(b.qs.chunks_exact_mut(32))
            .enumerate()
        {
            let conv = |k: usize| {
                let v = _mm256_mul_ps(ld_ps(&c[8 * k..]), mul);
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
                // NaN lanes to 0 (what `nearest_int` gives for the canonical NaN).
                let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(v, v));
                _mm256_cvtps_epi32(r)
            };
            let q = [conv(0), conv(1), conv(2), conv(3)];
            let packed = pack_i32x32_to_i8(q[0], q[1], q[2], q[3]);
            // SAFETY: `qs` is a 32-byte chunk; unaligned store.
            unsafe { _mm256_storeu_si256(qs.as_mut_ptr().cast(), packed) };
            // Sums of the saturated bytes, as the reference sums the stored quants.
            let s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), packed);
            let s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            let lo = hsum_epi32(_mm256_and_si256(
                s32,
                _mm256_setr_epi32(-1, -1, -1, -1, 0, 0, 0, 0),
            ));
            let hi = hsum_epi32(s32) - lo;
            b.bsums[4 * g..4 * g + 2].copy_from_slice(&(lo as i16).to_le_bytes());
            b.bsums[4 * g + 2..4 * g + 4].copy_from_slice(&(hi as i16).to_le_bytes());
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}
