//! Q2_K × Q8_K dot products on x86-64 (AVX2, AVX-512 VNNI); bit for bit equal to
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

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ2_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m3 = _mm256_set1_epi8(3);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sc = b.scales.map(|s| (s & 0x0F) as i16);
        let msum = min_sum(&b.scales, &y.bsums);
        let mut acc = _mm256_setzero_si256();
        for h in 0..2 {
            let mut qs = ld256(&b.qs[32 * h..]);
            for s in 0..4 {
                let q = _mm256_and_si256(qs, m3);
                qs = _mm256_srli_epi16::<2>(qs);
                let p = _mm256_maddubs_epi16(q, ld256(&y.qs[128 * h + 32 * s..]));
                let is = 8 * h + 2 * s;
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scales_2x8(sc[is], sc[is + 1])));
            }
        }
        let isum = hsum_epi32(acc);
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16(b.d) * ad, f16(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}

/// AVX-512 `Σ w·a`: 64 elements (four sub-blocks of 16) per 512-bit vector, `vpdpwssd` against
/// the four scales.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ2_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m3 = _mm512_set1_epi8(3);
    let shifts = |lo: i16, hi: i16| {
        _mm512_inserti64x4::<1>(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi))
    };
    let sh = [shifts(0, 2), shifts(4, 6)];
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sc = b.scales.map(|s| (s & 0x0F) as i16);
        let msum = min_sum(&b.scales, &y.bsums);
        let mut acc = _mm512_setzero_si512();
        for h in 0..2 {
            let qs = _mm512_broadcast_i64x4(ld256(&b.qs[32 * h..]));
            for (t, sh) in sh.iter().enumerate() {
                let q = _mm512_and_si512(_mm512_srlv_epi16(qs, *sh), m3);
                let p = _mm512_maddubs_epi16(q, ld512(&y.qs[128 * h + 64 * t..]));
                let i = 8 * h + 4 * t;
                let s = scales_4x8(sc[i], sc[i + 1], sc[i + 2], sc[i + 3]);
                acc = _mm512_dpwssd_epi32(acc, p, s);
            }
        }
        let isum = hsum_epi32(fold_epi32(acc));
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16(b.d) * ad, f16(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}
