//! Q4_1 × Q8_1 dot products on aarch64 (NEON; `sdot`): the codes as i8, an exact integer sum per block,
//! then the scalar reference's float step (so every tier gives the same bits).

use std::arch::aarch64::*;

use super::{BlockQ4_1, QK};
use crate::kernels::neon::*;
use crate::quant::q8_1::BlockQ8_1;
use crate::quant::{dot_blocks, f16_to_f32_fast};

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());

    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let [lo, hi] = nibbles(&b.qs);
        let c = [vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi)];
        let sumi = dot32(dp, c, &y.qs);
        sumf += sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d))
            + f16_to_f32_fast(b.m) * f16_to_f32_fast(y.s);
    }
    sumf
}

/// `Neon` tier `Σ w·a`.
#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_neon(n: usize, w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    dot(Emul, n, w, a)
}

/// `NeonDotprod` tier `Σ w·a`.
#[target_feature(enable = "neon,dotprod")]
pub(crate) fn vec_dot_dotprod(n: usize, w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    // SAFETY: this function only runs where `dotprod` is enabled.
    dot(unsafe { Sdot::new() }, n, w, a)
}
