//! Q5_1 × Q8_1 dot products on wasm32 `simd128`: the unsigned 5-bit codes (the fifth bits
//! spread over bytes with a swizzle), an exact integer sum per block, then the scalar
//! reference's float step (the scalar bits).

use core::arch::wasm32::*;

use super::{BlockQ5_1, QK};
use crate::quant::q8_1::BlockQ8_1;
use crate::quant::{dot_blocks, f16_to_f32_fast};
use crate::simd::wasm::*;

/// `simd128` tier `Σ w·a`.
pub(crate) fn vec_dot(n: usize, w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let dot = |b: &BlockQ5_1, y: &BlockQ8_1| {
        let ([lo, hi], [h0, h1]) = (nibbles(&b.qs), fifth_bits(b.qh));
        dot32_u7([v128_or(lo, h0), v128_or(hi, h1)], &y.qs)
    };
    let term = |b: &BlockQ5_1, y: &BlockQ8_1, sumi: i32| {
        sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d))
            + f16_to_f32_fast(b.m) * f16_to_f32_fast(y.s)
    };
    let term4 = |w: &[BlockQ5_1], a: &[BlockQ8_1], isum| {
        let d = std::array::from_fn(|i| if i < 4 { w[i].d } else { a[i - 4].d });
        let ms = std::array::from_fn(|i| if i < 4 { w[i].m } else { a[i - 4].s });
        term4_min(d, ms, isum)
    };
    dot_blocks32(&w[..nb], &a[..nb], dot, term4, term)
}
