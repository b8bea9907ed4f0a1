//! Q6_K × Q8_K dot products on x86-64 (AVX2, AVX-512 VNNI).
//!
//! The 6-bit codes are used unsigned (0..64) and the offset of 32 comes off through the
//! activation's 16-sums: `Σ sc·((q − 32)·a) = Σ sc·(q·a) − 32·Σ sc·bsum`. Exact integers per
//! super-block and the scalar's final formula: bit for bit equal to `q6_k::vec_dot_scalar`.

use std::arch::x86_64::*;

use super::BlockQ6_K;
use crate::kernels::x86::*;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};

/// `Σ sc_is · bsum_is` over the sixteen signed 8-bit sub-block scales.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn scale_bsum(scales: &[u8], bsums: &[u8]) -> i32 {
    let sc16 = _mm256_cvtepi8_epi16(ld128(scales));
    hsum_epi32(_mm256_madd_epi16(sc16, ld_i16x16(bsums)))
}

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ6_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m4 = _mm256_set1_epi8(0x0F);
    let (m03, m0c, m30, mc0) = (
        _mm256_set1_epi8(0x03),
        _mm256_set1_epi8(0x0C),
        _mm256_set1_epi8(0x30),
        _mm256_set1_epi8(0xC0u8 as i8),
    );
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sc = b.scales.map(|s| s as i8 as i16);
        let mut acc = _mm256_setzero_si256();
        for h in 0..2 {
            let ql0 = ld256(&b.ql[64 * h..]);
            let ql1 = ld256(&b.ql[64 * h + 32..]);
            let qh = ld256(&b.qh[32 * h..]);
            // The high bits land in bits 4..6 of each code.
            let q = [
                _mm256_or_si256(
                    _mm256_and_si256(ql0, m4),
                    _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m03)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_slli_epi16::<2>(_mm256_and_si256(qh, m0c)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                    _mm256_and_si256(qh, m30),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                    _mm256_srli_epi16::<2>(_mm256_and_si256(qh, mc0)),
                ),
            ];
            for (s, q) in q.into_iter().enumerate() {
                let p = _mm256_maddubs_epi16(q, ld256(&y.qs[128 * h + 32 * s..]));
                let is = 8 * h + 2 * s;
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scales_2x8(sc[is], sc[is + 1])));
            }
        }
        let isum = hsum_epi32(acc) - 32 * scale_bsum(&b.scales, &y.bsums);
        sumf += f16(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}

/// AVX-512 `Σ w·a`: 64 elements (four sub-blocks, one per 128-bit lane) per 512-bit vector,
/// `vpmaddubsw` then `vpdpwssd` against the four scales.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ6_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m4 = _mm512_set1_epi8(0x0F);
    let halves = |lo: i8, hi: i8| {
        _mm512_inserti64x4::<1>(_mm512_set1_epi8(lo), _mm256_set1_epi8(hi))
    };
    // Elements 0..64 of a half take qh bits 0-1 (low 256) and 2-3 (high 256), moved to bits
    // 4-5; elements 64..128 bits 4-5 and 6-7.
    let (mask0, mask1) = (halves(0x03, 0x0C), halves(0x30, 0xC0u8 as i8));
    let shl0 = _mm512_inserti64x4::<1>(_mm512_set1_epi16(4), _mm256_set1_epi16(2));
    let shr1 = _mm512_inserti64x4::<1>(_mm512_set1_epi16(0), _mm256_set1_epi16(2));
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sc = b.scales.map(|s| s as i8 as i16);
        let mut acc = _mm512_setzero_si512();
        for h in 0..2 {
            let ql = ld512(&b.ql[64 * h..]);
            let qh = _mm512_broadcast_i64x4(ld256(&b.qh[32 * h..]));
            let z0 = _mm512_or_si512(
                _mm512_and_si512(ql, m4),
                _mm512_sllv_epi16(_mm512_and_si512(qh, mask0), shl0),
            );
            let z1 = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                _mm512_srlv_epi16(_mm512_and_si512(qh, mask1), shr1),
            );
            let p0 = _mm512_maddubs_epi16(z0, ld512(&y.qs[128 * h..]));
            let p1 = _mm512_maddubs_epi16(z1, ld512(&y.qs[128 * h + 64..]));
            let i = 8 * h;
            acc = _mm512_dpwssd_epi32(acc, p0, scales_4x8(sc[i], sc[i + 1], sc[i + 2], sc[i + 3]));
            let i = i + 4;
            acc = _mm512_dpwssd_epi32(acc, p1, scales_4x8(sc[i], sc[i + 1], sc[i + 2], sc[i + 3]));
        }
        let isum = hsum_epi32(fold_epi32(acc)) - 32 * scale_bsum(&b.scales, &y.bsums);
        sumf += f16(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}
