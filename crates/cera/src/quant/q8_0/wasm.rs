//! Q8_0 on wasm32 `simd128`: the activation quantizer, and Q8_0 × Q8_0 dot products with an
//! exact integer sum per block, then the scalar reference's float step (the scalar bits).

use core::arch::wasm32::*;

use super::{BlockQ8_0, QK};
use crate::quant::{dot_blocks, f16_to_f32_fast, f32_to_f16};
use crate::simd::wasm::*;

/// One 32-element block, as `q8_0::quantize_act_block`: `d = amax / 127`,
/// `q = round_half_even(x · 127 / amax)` saturated to i8. Returns `d` (before rounding to f16)
/// and the sum of the quants.
#[inline]
pub(crate) fn quantize_block(x: &[f32], qs: &mut [u8; QK]) -> (f32, i32) {
    let amax = amax(&x[..QK]);
    let d = amax / 127.0;
    let id = f32x4_splat(if amax != 0.0 { 127.0 / amax } else { 0.0 });
    let mut sum = 0;
    for (x, qs) in x.chunks_exact(16).zip(qs.chunks_exact_mut(16)) {
        let q = round_i8(std::array::from_fn(|i| f32x4_mul(ld_f32(&x[4 * i..]), id)));
        st(qs, q);
        sum += sum_i8(q);
    }
    (d, sum)
}

/// `simd128` version of `q8_0::quantize_act`, byte for byte the same output.
pub(crate) fn quantize(src: &[f32], out: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (d, _) = quantize_block(x, &mut b.qs);
        b.d = f32_to_f16(d);
    }
}

/// The scalar reference's float step for one block with integer sum `sumi`.
#[inline(always)]
fn term(b: &BlockQ8_0, y: &BlockQ8_0, sumi: i32) -> f32 {
    sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d))
}

/// `simd128` tier `Σ w·a`.
pub(crate) fn vec_dot(n: usize, w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let dot = |b: &BlockQ8_0, y: &BlockQ8_0| dot32_i8([ld(&b.qs), ld(&b.qs[16..])], &y.qs);
    let term4 = |w: &[BlockQ8_0], a: &[BlockQ8_0], isum| {
        term4_sym(
            std::array::from_fn(|i| w[i].d),
            std::array::from_fn(|i| a[i].d),
            isum,
        )
    };
    dot_blocks32(&w[..nb], &a[..nb], dot, term4, term)
}
