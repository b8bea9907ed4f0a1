//! IQ4_XS × Q8_K dot products on aarch64 (NEON; `sdot`): table lookups (`tbl`) for the codes,
//! the integer sum of a super-block exactly, then the scalar reference's float formula.

use std::arch::aarch64::*;

use super::{BlockIQ4_XS, sub_scales};
use crate::quant::iq4_nl::KVALUES_IQ4NL;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks, f16_to_f32_fast};
use crate::simd::neon::*;

#[inline]
#[target_feature(enable = "neon")]
fn dot<D: Dot>(dp: D, n: usize, w: &[BlockIQ4_XS], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    // SAFETY: the 16-entry code table.
    let table = unsafe { vld1q_s8(KVALUES_IQ4NL.as_ptr()) };
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let ls = sub_scales(b);
        let mut isum = 0i32;
        for (ib, &l) in ls.iter().enumerate() {
            let [lo, hi] = nibbles(&b.qs[16 * ib..]);
            let c = [vqtbl1q_s8(table, lo), vqtbl1q_s8(table, hi)];
            isum += l as i32 * dot32(dp, c, &y.qs[32 * ib..]);
        }
        sumf += f16_to_f32_fast(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}

neon_tiers!(BlockIQ4_XS, BlockQ8_K);
