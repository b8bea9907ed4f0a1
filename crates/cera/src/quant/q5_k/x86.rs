//! Q5_K × Q8_K dot products on x86-64 (AVX2, AVX-512 VNNI), Q4_K's scheme with the fifth bits
//! or-ed in; bit for bit equal to `q5_k::vec_dot_scalar`.

use std::arch::x86_64::*;

use super::BlockQ5_K;
use crate::kernels::x86::*;
use crate::quant::k_common::scales_mins_k4;
use crate::quant::q4_k::x86::min_sum;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ5_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m4 = _mm256_set1_epi8(0x0F);
    let m16 = _mm256_set1_epi8(0x10);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (sc, mn) = scales_mins_k4(&b.scales);
        let msum = min_sum(mn, &y.bsums);
        let mut acc = _mm256_setzero_si256();
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
            let p0 = _mm256_madd_epi16(p0, _mm256_set1_epi16(sc[2 * c] as i16));
            let p1 = _mm256_madd_epi16(p1, _mm256_set1_epi16(sc[2 * c + 1] as i16));
            acc = _mm256_add_epi32(acc, _mm256_add_epi32(p0, p1));
        }
        let isum = hsum_epi32(acc);
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16(b.d) * ad, f16(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}

/// AVX-512 `Σ w·a`: 64 elements per 512-bit vector; the fifth bits through a byte mask.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ5_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m4 = _mm512_set1_epi8(0x0F);
    let m16 = _mm512_set1_epi8(0x10);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (sc, mn) = scales_mins_k4(&b.scales);
        let msum = min_sum(mn, &y.bsums);
        let mut acc = _mm512_setzero_si512();
        let qh = _mm512_broadcast_i64x4(ld256(&b.qh));
        for c in 0..4 {
            let q = ld256(&b.qs[32 * c..]);
            let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q), _mm256_srli_epi16::<4>(q));
            let z = _mm512_and_si512(z, m4);
            // Low half: bit 2c of qh; high half: bit 2c+1.
            let sel = _mm512_inserti64x4::<1>(
                _mm512_set1_epi8((1u8 << (2 * c)) as i8),
                _mm256_set1_epi8((1u8 << (2 * c + 1)) as i8),
            );
            let z = _mm512_mask_add_epi8(z, _mm512_test_epi8_mask(qh, sel), z, m16);
            let p = _mm512_maddubs_epi16(z, ld512(&y.qs[64 * c..]));
            let s = scales_2x16(sc[2 * c] as i16, sc[2 * c + 1] as i16);
            acc = _mm512_dpwssd_epi32(acc, p, s);
        }
        let isum = hsum_epi32(fold_epi32(acc));
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16(b.d) * ad, f16(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}
