//! Q3_K × Q8_K dot products on x86-64 (AVX2, AVX-512 VNNI).
//!
//! The codes are used unsigned, `u = low2 + 4·hbit` in 0..8 with `q = u − 4`, and the offset
//! comes off through the 16-sums: `Σ sc·(q·a) = Σ sc·(u·a) − 4·Σ sc·bsum`. Bit for bit equal to
//! `q3_k::vec_dot_scalar`.

use std::arch::x86_64::*;

use super::BlockQ3_K;
use crate::kernels::x86::*;
use crate::quant::k_common::scales_q3k;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};

/// `Σ sc_is · bsum_is` over the sixteen unbiased scales.
#[inline]
#[target_feature(enable = "avx2")]
fn scale_bsum(sc: &[i8; 16], bsums: &[u8]) -> i32 {
    // SAFETY: `sc` is 16 bytes.
    let s = unsafe { _mm_loadu_si128(sc.as_ptr().cast()) };
    hsum_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(s), ld_i16x16(bsums)))
}

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ3_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm256_set1_epi8(4);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sc8 = scales_q3k(&b.scales);
        let sc = sc8.map(|s| s as i16);
        let mut acc = _mm256_setzero_si256();
        // Bit j of hmask byte l is the high bit of element 32j + l; shifted down one per step.
        let mut hm = ld256(&b.hmask);
        for h in 0..2 {
            let mut qs = ld256(&b.qs[32 * h..]);
            for s in 0..4 {
                let low = _mm256_and_si256(qs, m3);
                qs = _mm256_srli_epi16::<2>(qs);
                let hb = _mm256_and_si256(_mm256_slli_epi16::<2>(hm), m4);
                hm = _mm256_srli_epi16::<1>(hm);
                let u = _mm256_or_si256(low, hb);
                let p = _mm256_maddubs_epi16(u, ld256(&y.qs[128 * h + 32 * s..]));
                let is = 8 * h + 2 * s;
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scales_2x8(sc[is], sc[is + 1])));
            }
        }
        let isum = hsum_epi32(acc) - 4 * scale_bsum(&sc8, &y.bsums);
        sumf += f16(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}

/// AVX-512 `Σ w·a`: 64 elements per 512-bit vector (four sub-blocks of 16, one per 128-bit
/// lane); the high bits through a byte mask, `vpdpwssd` against the four scales.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ3_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m3 = _mm512_set1_epi8(3);
    let m4 = _mm512_set1_epi8(4);
    let shifts = |lo: i16, hi: i16| {
        _mm512_inserti64x4::<1>(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi))
    };
    let sh = [shifts(0, 2), shifts(4, 6)];
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sc8 = scales_q3k(&b.scales);
        let sc = sc8.map(|s| s as i16);
        let mut acc = _mm512_setzero_si512();
        let hm = _mm512_broadcast_i64x4(ld256(&b.hmask));
        for h in 0..2 {
            let qs = _mm512_broadcast_i64x4(ld256(&b.qs[32 * h..]));
            for (t, sh) in sh.iter().enumerate() {
                // Elements 128h + 64t + (0..64): shifts 2s for s = 2t, 2t+1.
                let low = _mm512_and_si512(_mm512_srlv_epi16(qs, *sh), m3);
                let j = 4 * h + 2 * t;
                let sel = _mm512_inserti64x4::<1>(
                    _mm512_set1_epi8((1u8 << j) as i8),
                    _mm256_set1_epi8((1u8 << (j + 1)) as i8),
                );
                let u = _mm512_mask_add_epi8(low, _mm512_test_epi8_mask(hm, sel), low, m4);
                let p = _mm512_maddubs_epi16(u, ld512(&y.qs[128 * h + 64 * t..]));
                let i = 8 * h + 4 * t;
                let s = scales_4x8(sc[i], sc[i + 1], sc[i + 2], sc[i + 3]);
                acc = _mm512_dpwssd_epi32(acc, p, s);
            }
        }
        let isum = hsum_epi32(fold_epi32(acc)) - 4 * scale_bsum(&sc8, &y.bsums);
        sumf += f16(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}
