//! Q5_K × Q8_K dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors), Q4_K's
//! scheme with the fifth bits
//! or-ed in; bit for bit equal to `q5_k::vec_dot_scalar`.

use std::arch::x86_64::*;

use super::BlockQ5_K;
use crate::quant::k_common::scales_mins_k4;
use crate::quant::q4_k::x86::min_sum;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};
use crate::simd::x86::*;

/// The kernel body; `mac(acc, p, s)` adds the i16 pairs of `p` times the scales `s` to `acc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot(
    n: usize,
    w: &[BlockQ5_K],
    a: &[BlockQ8_K],
    mac: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m4 = _mm256_set1_epi8(0x0F);
    let m16 = _mm256_set1_epi8(0x10);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (sc, mn) = scales_mins_k4(&b.scales);
        let msum = min_sum(mn, &y.bsums);
        let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        // Bits 2c and 2c+1 of each qh byte are the fifth bits of chunk c; shift them down.
        let mut qh = ld256(&b.qh);
        for c in 0..4 {
            let q = ld256(&b.qs[32 * c..]);
            let h0 = _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m16);
            let h1 = _mm256_and_si256(_mm256_slli_epi16::<3>(qh), m16);
            qh = _mm256_srli_epi16::<2>(qh);
            let lo = _mm256_or_si256(_mm256_and_si256(q, m4), h0);
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q), m4), h1);
            let p0 = _mm256_maddubs_epi16(lo, ld256(&y.qs[64 * c..]));
            let p1 = _mm256_maddubs_epi16(hi, ld256(&y.qs[64 * c + 32..]));
            acc0 = mac(acc0, p0, _mm256_set1_epi16(sc[2 * c] as i16));
            acc1 = mac(acc1, p1, _mm256_set1_epi16(sc[2 * c + 1] as i16));
        }
        let isum = hsum_epi32(_mm256_add_epi32(acc0, acc1));
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16(b.d) * ad, f16(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ5_K], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
    })
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors with `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ5_K], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| _mm256_dpwssd_epi32(acc, p, s))
}

// AVX-512 tier GEMM over x8-packed weights: Q4_K's kernel with the fifth bits (see
// `q4_k::x86::gemm_k4x8`); bit for bit the GEMV's.
//
// AVX2 tier GEMM over x8-packed weights: the same kernel with `vpmaddubsw` (exact: the codes
// are below 32) and the fifth bits added through a byte compare.
kx8_gemm_entries!(BlockQ8_K;
    crate::quant::q4_k::x86::gemm_k4x8,
    [Vnni, true],
    [Maddubs, true]
);
