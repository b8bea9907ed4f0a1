//! Q8_K on wasm32 `simd128`: the activation quantizer.

use core::arch::wasm32::*;

use super::BlockQ8_K;
use crate::quant::QK_K;
use crate::simd::wasm::{amax, ld_f32, round_i8, st, sum_i8};

/// `simd128` version of `q8_k::quantize`, byte for byte the same output: the first element of
/// largest magnitude maps to -127, the rest round half to even (which is what `nearest_int`
/// computes in range), with the sums of each 16 quants alongside.
pub(crate) fn quantize(src: &[f32], out: &mut [BlockQ8_K]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let amax = amax(x);
        if amax == 0.0 {
            b.d = 0.0f32.to_le_bytes();
            b.qs = [0; QK_K];
            b.bsums = [0; QK_K / 16 * 2];
            continue;
        }
        // The first element whose magnitude is `amax` gives the sign.
        let max = *x.iter().find(|v| v.abs() == amax).unwrap_or(&amax);
        let iscale = -127.0 / max;
        let is = f32x4_splat(iscale);
        for (j, (c, qs)) in x
            .chunks_exact(16)
            .zip(b.qs.chunks_exact_mut(16))
            .enumerate()
        {
            let v = round_i8(std::array::from_fn(|i| f32x4_mul(ld_f32(&c[4 * i..]), is)));
            st(qs, v);
            let s = sum_i8(v) as i16;
            b.bsums[2 * j..2 * j + 2].copy_from_slice(&s.to_le_bytes());
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}
