//! IQ4_NL × Q8_0 dot products on aarch64 (NEON; `sdot`): the codes as i8, an exact integer sum per block,
//! then the scalar reference's float step (so every tier gives the same bits).

use std::arch::aarch64::*;

use super::{BlockIQ4_NL, QK};
use crate::kernels::neon::*;
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::{dot_blocks, f16_to_f32_fast};

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockIQ4_NL], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    // SAFETY: the 16-entry code table.
    let table = unsafe { vld1q_s8(super::KVALUES_IQ4NL.as_ptr()) };
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let [lo, hi] = nibbles(&b.qs);
        let c = [vqtbl1q_s8(table, lo), vqtbl1q_s8(table, hi)];
        let sumi = dot32(dp, c, &y.qs);
        sumf += sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d));
    }
    sumf
}

/// `Neon` tier `Σ w·a`.
#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_neon(n: usize, w: &[BlockIQ4_NL], a: &[BlockQ8_0]) -> f32 {
    dot(Emul, n, w, a)
}

/// `NeonDotprod` tier `Σ w·a`.
#[target_feature(enable = "neon,dotprod")]
pub(crate) fn vec_dot_dotprod(n: usize, w: &[BlockIQ4_NL], a: &[BlockQ8_0]) -> f32 {
    // SAFETY: this function only runs where `dotprod` is enabled.
    dot(unsafe { Sdot::new() }, n, w, a)
}
