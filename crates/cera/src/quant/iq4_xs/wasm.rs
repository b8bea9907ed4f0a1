//! IQ4_XS × Q8_K dot products on wasm32 `simd128`: table lookups (swizzles) for the codes,
//! the integer sum of a super-block exactly, then the scalar reference's float formula.

use core::arch::wasm32::*;

use super::{BlockIQ4_XS, sub_scales};
use crate::quant::iq4_nl::KVALUES_IQ4NL;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::wasm::*;

/// `simd128` tier `Σ w·a`.
pub(crate) fn vec_dot(n: usize, w: &[BlockIQ4_XS], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let table = ld(&KVALUES_IQ4NL.map(|v| v as u8));
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let ls = sub_scales(b);
        let mut acc = i32x4_splat(0);
        for (ib, &l) in ls.iter().enumerate() {
            let [lo, hi] = nibbles(&b.qs[16 * ib..]);
            let c = [i8x16_swizzle(table, lo), i8x16_swizzle(table, hi)];
            acc = add_scaled(acc, dot32_i8(c, &y.qs[32 * ib..]), l as i32);
        }
        sumf += f16_to_f32_fast(b.d) * f32::from_le_bytes(y.d) * hsum_i32(acc) as f32;
    }
    sumf
}
