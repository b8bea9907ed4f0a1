//! Q4_0 × Q8_0 dot products on wasm32 `simd128`: the codes as i8, an exact integer sum per
//! block, then the scalar reference's float step (the scalar bits).

use super::{BlockQ4_0, QK};
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::{dot_blocks, f16_to_f32_fast};
use crate::simd::wasm::*;

/// `simd128` tier `Σ w·a`.
pub(crate) fn vec_dot(n: usize, w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let dot = |b: &BlockQ4_0, y: &BlockQ8_0| dot32_offset::<3>(nibbles(&b.qs), &y.qs);
    let term = |b: &BlockQ4_0, y: &BlockQ8_0, sumi: i32| {
        sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d))
    };
    let term4 = |w: &[BlockQ4_0], a: &[BlockQ8_0], isum| {
        term4_sym(
            std::array::from_fn(|i| w[i].d),
            std::array::from_fn(|i| a[i].d),
            isum,
        )
    };
    dot_blocks32(&w[..nb], &a[..nb], dot, term4, term)
}
