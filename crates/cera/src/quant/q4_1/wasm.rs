//! Q4_1 × Q8_1 dot products on wasm32 `simd128`: the unsigned codes widened with zero
//! extension, an exact integer sum per block, then the scalar reference's float step (the
//! scalar bits).

use super::{BlockQ4_1, QK};
use crate::quant::q8_1::BlockQ8_1;
use crate::quant::{dot_blocks, f16_to_f32_fast};
use crate::simd::wasm::*;

/// `simd128` tier `Σ w·a`.
pub(crate) fn vec_dot(n: usize, w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let dot = |b: &BlockQ4_1, y: &BlockQ8_1| dot32_u7(nibbles(&b.qs), &y.qs);
    let term = |b: &BlockQ4_1, y: &BlockQ8_1, sumi: i32| {
        sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d))
            + f16_to_f32_fast(b.m) * f16_to_f32_fast(y.s)
    };
    let term4 = |w: &[BlockQ4_1], a: &[BlockQ8_1], isum| {
        let d = std::array::from_fn(|i| if i < 4 { w[i].d } else { a[i - 4].d });
        let ms = std::array::from_fn(|i| if i < 4 { w[i].m } else { a[i - 4].s });
        term4_min(d, ms, isum)
    };
    dot_blocks32(&w[..nb], &a[..nb], dot, term4, term)
}
