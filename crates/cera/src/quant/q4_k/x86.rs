//! Q4_K × Q8_K dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors).
//!
//! Per super-block the integer sums `Σ sc·(q·a)` and `Σ m·bsum` are exact and the final float
//! formula is the scalar one, so these agree with `q4_k::vec_dot_scalar` bit for bit.

use std::arch::x86_64::*;

use super::BlockQ4_K;
use crate::kernels::x86::*;
use crate::quant::k_common::scales_mins_k4;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};

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

/// AVX-512 tier GEMM, one row × `NT` tokens: a super-block's nibbles, scales and mins are
/// unpacked once for all the tokens. Same integers and final formula as [`vec_dot_avx512`], so
/// each result is bit for bit the GEMV's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn gemm_avx512<const NT: usize>(
    k: usize,
    w: &[BlockQ4_K],
    acts: &crate::kernels::GemmActs<'_, BlockQ8_K>,
    out: &mut [f32],
    ldo: usize,
) {
    let nsb = k / QK_K;
    assert!(nsb > 0 && w.len().is_multiple_of(nsb) && acts.n == NT && NT <= 4);
    let n_rows = w.len() / nsb;
    assert!(out.len() >= (NT - 1) * ldo + n_rows);
    let a: [&[BlockQ8_K]; NT] = std::array::from_fn(|t| &acts.blocks[t][..nsb]);
    let m4 = _mm256_set1_epi8(0x0F);
    for (r, row) in w.chunks_exact(nsb).enumerate() {
        let mut sumf = [0f32; NT];
        for (i, b) in row.iter().enumerate() {
            let (sc, mn) = scales_mins_k4(&b.scales);
            let mut q = [_mm256_setzero_si256(); 8];
            for c in 0..4 {
                let x = ld256(&b.qs[32 * c..]);
                q[2 * c] = _mm256_and_si256(x, m4);
                q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4);
            }
            let s: [__m256i; 8] = std::array::from_fn(|j| _mm256_set1_epi16(sc[j] as i16));
            let (wd, wmin) = (f16(b.d), f16(b.dmin));
            for t in 0..NT {
                let y = &a[t][i];
                let msum = min_sum(mn, &y.bsums);
                let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                for c in 0..4 {
                    let p0 = _mm256_maddubs_epi16(q[2 * c], ld256(&y.qs[64 * c..]));
                    let p1 = _mm256_maddubs_epi16(q[2 * c + 1], ld256(&y.qs[64 * c + 32..]));
                    acc0 = _mm256_dpwssd_epi32(acc0, p0, s[2 * c]);
                    acc1 = _mm256_dpwssd_epi32(acc1, p1, s[2 * c + 1]);
                }
                let isum = hsum_epi32(_mm256_add_epi32(acc0, acc1));
                let ad = f32::from_le_bytes(y.d);
                let (d, dmin) = (wd * ad, wmin * ad);
                sumf[t] += d * isum as f32 - dmin * msum as f32;
            }
        }
        for (t, v) in sumf.iter().enumerate() {
            out[t * ldo + r] = *v;
        }
    }
}
