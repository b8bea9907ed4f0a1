//! IQ4_XS × Q8_K dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors): code-book
//! lookup with
//! `vpshufb`, signed × signed byte products, the sub-block scales applied in i32. Bit for bit
//! equal to `iq4_xs::vec_dot_scalar`.

use std::arch::x86_64::*;

use super::{BlockIQ4_XS, sub_scales};
use crate::kernels::x86::*;
use crate::quant::iq4_nl::x86::table256;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};

/// The kernel body; `mac(acc, p, s)` adds the i16 pairs of `p` times the scales `s` to `acc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot(
    n: usize,
    w: &[BlockIQ4_XS],
    a: &[BlockQ8_K],
    mac: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let table = table256();
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let ls = sub_scales(b);
        let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let sub = |ib: usize| {
            let v = _mm256_shuffle_epi8(table, unpack_nibbles(&b.qs[16 * ib..]));
            let ay = ld256(&y.qs[32 * ib..]);
            // |v| · (a * sign(v)): pair sums stay below 127·127·2.
            let p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(ay, v));
            (p, _mm256_set1_epi16(ls[ib]))
        };
        for ib in [0, 2, 4, 6] {
            let (p, s) = sub(ib);
            acc0 = mac(acc0, p, s);
            let (p, s) = sub(ib + 1);
            acc1 = mac(acc1, p, s);
        }
        let isum = hsum_epi32(_mm256_add_epi32(acc0, acc1));
        sumf += f16(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockIQ4_XS], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
    })
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors with `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockIQ4_XS], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| _mm256_dpwssd_epi32(acc, p, s))
}
