//! IQ4_XS × Q8_K dot products on x86-64 (AVX2, AVX-512 VNNI): code-book lookup with
//! `vpshufb`, signed × signed byte products, the sub-block scales applied in i32. Bit for bit
//! equal to `iq4_xs::vec_dot_scalar`.

use std::arch::x86_64::*;

use super::{BlockIQ4_XS, sub_scales};
use crate::kernels::x86::*;
use crate::quant::iq4_nl::x86::{table256, table512};
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockIQ4_XS], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let table = table256();
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let ls = sub_scales(b);
        let mut acc = _mm256_setzero_si256();
        for (ib, &ls) in ls.iter().enumerate() {
            let v = _mm256_shuffle_epi8(table, unpack_nibbles(&b.qs[16 * ib..]));
            let ay = ld256(&y.qs[32 * ib..]);
            let p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(ay, v));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(ls)));
        }
        let isum = hsum_epi32(acc);
        sumf += f16(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}

/// AVX-512 `Σ w·a`: two sub-blocks per 512-bit vector, `vpdpwssd` against their scales.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockIQ4_XS], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let table = table512();
    let zero = _mm512_setzero_si512();
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let ls = sub_scales(b);
        let mut acc = _mm512_setzero_si512();
        for t in 0..4 {
            let q = unpack_nibbles_x2(&b.qs[32 * t..], &b.qs[32 * t + 16..]);
            let v = _mm512_shuffle_epi8(table, q);
            let ay = ld512(&y.qs[64 * t..]);
            let ys = _mm512_mask_sub_epi8(ay, _mm512_movepi8_mask(v), zero, ay);
            let p = _mm512_maddubs_epi16(_mm512_abs_epi8(v), ys);
            acc = _mm512_dpwssd_epi32(acc, p, scales_2x16(ls[2 * t], ls[2 * t + 1]));
        }
        let isum = hsum_epi32(fold_epi32(acc));
        sumf += f16(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}
