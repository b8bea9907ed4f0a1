//! Q2_K × Q8_K dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors); bit for
//! bit equal to
//! `q2_k::vec_dot_scalar` (exact integer sums per super-block, the scalar's float formula).

use std::arch::x86_64::*;

use super::BlockQ2_K;
use crate::kernels::x86::*;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};

/// `Σ m_is · bsum_is` with the 4-bit mins in the high nibbles of `scales`.
#[inline]
#[target_feature(enable = "avx2")]
fn min_sum(scales: &[u8], bsums: &[u8]) -> i32 {
    let m = _mm_and_si128(_mm_srli_epi16::<4>(ld128(scales)), _mm_set1_epi8(0x0F));
    hsum_epi32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(m), ld_i16x16(bsums)))
}

/// The kernel body; `mac(acc, p, s)` adds the i16 pairs of `p` times the scales `s` to `acc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot(
    n: usize,
    w: &[BlockQ2_K],
    a: &[BlockQ8_K],
    mac: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m3 = _mm256_set1_epi8(3);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let msum = min_sum(&b.scales, &y.bsums);
        let sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(ld128(&b.scales), _mm_set1_epi8(0x0F)));
        let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for (h, sc) in split_scales(sc16).into_iter().enumerate() {
            let qs = ld256(&b.qs[32 * h..]);
            let yq = |s: usize| ld256(&y.qs[128 * h + 32 * s..]);
            let q0 = _mm256_and_si256(qs, m3);
            let q1 = _mm256_and_si256(_mm256_srli_epi16::<2>(qs), m3);
            let q2 = _mm256_and_si256(_mm256_srli_epi16::<4>(qs), m3);
            let q3 = _mm256_and_si256(_mm256_srli_epi16::<6>(qs), m3);
            acc0 = mac(
                acc0,
                _mm256_maddubs_epi16(q0, yq(0)),
                pick_scale_pair(sc, 0),
            );
            acc1 = mac(
                acc1,
                _mm256_maddubs_epi16(q1, yq(1)),
                pick_scale_pair(sc, 1),
            );
            acc0 = mac(
                acc0,
                _mm256_maddubs_epi16(q2, yq(2)),
                pick_scale_pair(sc, 2),
            );
            acc1 = mac(
                acc1,
                _mm256_maddubs_epi16(q3, yq(3)),
                pick_scale_pair(sc, 3),
            );
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
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ2_K], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
    })
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors with `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ2_K], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| _mm256_dpwssd_epi32(acc, p, s))
}
