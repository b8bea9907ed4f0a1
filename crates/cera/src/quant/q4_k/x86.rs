//! Q4_K × Q8_K dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors).
//!
//! Per super-block the integer sums `Σ sc·(q·a)` and `Σ m·bsum` are exact and the final float
//! formula is the scalar one, so these agree with `q4_k::vec_dot_scalar` bit for bit.

use std::arch::x86_64::*;

use super::BlockQ4_K;
use crate::quant::k_common::scales_mins_k4;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};
use crate::simd::x86::*;

/// `Σ_j m_j · (bsum_{2j} + bsum_{2j+1})`: each 6-bit min against its two 16-sums.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn min_sum(mn: [u8; 8], bsums: &[u8]) -> i32 {
    let m = _mm_cvtsi64_si128(u64::from_le_bytes(mn) as i64);
    let m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
    hsum_epi32(_mm256_madd_epi16(m16, ld_i16x16(bsums)))
}

/// The kernel body; `mac(acc, p, s)` adds the i16 pairs of `p` times the scales `s` to `acc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot(
    n: usize,
    w: &[BlockQ4_K],
    a: &[BlockQ8_K],
    mac: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m4 = _mm256_set1_epi8(0x0F);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let (sc, mn) = scales_mins_k4(&b.scales);
        let msum = min_sum(mn, &y.bsums);
        // Sub-blocks alternate between two accumulators (`vpdpwssd` has some latency).
        let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for c in 0..4 {
            let q = ld256(&b.qs[32 * c..]);
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
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
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ4_K], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
    })
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors with `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ4_K], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| _mm256_dpwssd_epi32(acc, p, s))
}

// AVX-512 tier GEMM over x8-packed weights (`kernels::pack`): eight rows per vector, one per
// 32-bit lane, so each sub-block's integer dot products for eight rows come from eight
// `vpdpbusd` against broadcast activation dwords, and the scales and mins apply per lane. The
// integers and the float formula per super-block are the scalar reference's, so each result
// is bit for bit the GEMV's.
//
// AVX2 tier GEMM over x8-packed weights: the same kernel with `vpmaddubsw` (exact: the codes
// are below 16).
kx8_gemm_entries!(BlockQ8_K; gemm_k4x8, [Vnni, false], [Maddubs, false]);

/// The Q4_K GEMM, and with `Q5` the Q5_K one: its x8 layout is Q4_K's with the fifth bits
/// appended (`kernels::pack`), added to the codes before the dot products ([`Dp::add_where`]).
/// Inlined into the tiers' `#[target_feature]` wrappers.
#[inline(always)]
#[allow(unsafe_op_in_unsafe_fn)]
pub(crate) unsafe fn gemm_k4x8<D: Dp, const Q5: bool, const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &crate::simd::GemmActs<'_, BlockQ8_K>,
    out: &mut [f32],
    ldo: usize,
) {
    let sb_bytes: usize = if Q5 { 1184 + 256 } else { 1184 };
    let nsb = k / QK_K;
    let groups = n_rows.div_ceil(8);
    assert!(nsb > 0 && acts.n == NT && NT <= 4 && w.len() >= groups * nsb * sb_bytes);
    assert!(out.len() >= (NT - 1) * ldo + n_rows);
    let a: [&[BlockQ8_K]; NT] = std::array::from_fn(|t| &acts.blocks[t][..nsb]);
    let m4 = _mm256_set1_epi8(0x0F);
    for g in 0..groups {
        let mut sumf = [_mm256_setzero_ps(); NT];
        for (i, s) in w[g * nsb * sb_bytes..(g + 1) * nsb * sb_bytes]
            .chunks_exact(sb_bytes)
            .enumerate()
        {
            prefetch_l2(s.as_ptr().wrapping_add(PREFETCH_AHEAD), sb_bytes);
            // One sub-block's codes at a time (eight vectors, elements 4q..4q+4 of every row in
            // vector q), met by every token before the next: all 64 code vectors of a
            // super-block would not fit the registers, and spilling them costs more than the
            // dot products with four tokens.
            let mut isum = [_mm256_setzero_si256(); NT];
            for c in 0..4 {
                // (plain loops: a closure would not inherit the tier's target features)
                let mut x = [_mm256_setzero_si256(); 8];
                for (q, xq) in x.iter_mut().enumerate() {
                    *xq = ld256(&s[32 * (8 * c + q)..]);
                }
                for nib in 0..2 {
                    let j = 2 * c + nib;
                    let mut cj = x;
                    for cq in cj.iter_mut() {
                        if nib == 1 {
                            *cq = _mm256_srli_epi16::<4>(*cq);
                        }
                        *cq = _mm256_and_si256(*cq, m4);
                    }
                    if Q5 {
                        // vector q lane i: row i's qh[4q..4q+4], bit j = sub-block j's fifth bit
                        let (sixteen, bit) = (_mm256_set1_epi8(0x10), _mm256_set1_epi8(1 << j));
                        for (q, cq) in cj.iter_mut().enumerate() {
                            *cq = D::add_where(*cq, ld256(&s[1184 + 32 * q..]), bit, sixteen);
                        }
                    }
                    let scj = _mm256_cvtepu8_epi32(ld_u64(&s[1024 + 8 * j..]));
                    for (t, isum) in isum.iter_mut().enumerate() {
                        let y = &a[t][i];
                        let (mut d0, mut d1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                        for q in (0..8).step_by(2) {
                            let at = 32 * j + 4 * q;
                            d0 = D::dp(d0, cj[q], bcast_dword(&y.qs[at..]));
                            d1 = D::dp(d1, cj[q + 1], bcast_dword(&y.qs[at + 4..]));
                        }
                        *isum = _mm256_add_epi32(
                            *isum,
                            _mm256_mullo_epi32(_mm256_add_epi32(d0, d1), scj),
                        );
                    }
                }
            }
            // mins of sub-blocks 2p and 2p+1 as the i16 halves of each lane
            let mn: [__m256i; 4] = std::array::from_fn(|p| {
                let lo = _mm_cvtepu8_epi16(ld_u64(&s[1088 + 16 * p..]));
                let hi = _mm_cvtepu8_epi16(ld_u64(&s[1096 + 16 * p..]));
                _mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi))
            });
            let dw = _mm256_cvtph_ps(ld128(&s[1152..]));
            let dmw = _mm256_cvtph_ps(ld128(&s[1168..]));
            for (t, sumf) in sumf.iter_mut().enumerate() {
                let y = &a[t][i];
                let isum = isum[t];
                // Σ_j m_j (bsum_2j + bsum_2j+1): pair sums of the 16-sums, two sub-blocks per
                // `vpmaddwd`
                let bs = ld_i16x16(&y.bsums);
                let pairs = _mm256_hadd_epi16(bs, bs); // dwords 0,1 | 4,5: (p0|p1),(p2|p3) | (p4|p5),(p6|p7)
                let mut msum = _mm256_setzero_si256();
                for (p, idx) in [0, 1, 4, 5].into_iter().enumerate() {
                    let b = _mm256_permutevar8x32_epi32(pairs, _mm256_set1_epi32(idx));
                    msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mn[p], b));
                }
                let ad = _mm256_set1_ps(f32::from_le_bytes(y.d));
                let (d, dmin) = (_mm256_mul_ps(dw, ad), _mm256_mul_ps(dmw, ad));
                let v = _mm256_sub_ps(
                    _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)),
                    _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(msum)),
                );
                *sumf = _mm256_add_ps(*sumf, v);
            }
        }
        store_rows8(&sumf, out, ldo, 8 * g, n_rows);
    }
}
