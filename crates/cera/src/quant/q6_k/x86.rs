//! Q6_K × Q8_K dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors).
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

/// The kernel body; `mac(acc, p, s)` adds the i16 pairs of `p` times the scales `s` to `acc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot(
    n: usize,
    w: &[BlockQ6_K],
    a: &[BlockQ8_K],
    mac: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> f32 {
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
        let sc16 = _mm256_cvtepi8_epi16(ld128(&b.scales));
        let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for (h, sc) in split_scales(sc16).into_iter().enumerate() {
            let ql0 = ld256(&b.ql[64 * h..]);
            let ql1 = ld256(&b.ql[64 * h + 32..]);
            let qh = ld256(&b.qh[32 * h..]);
            // Elements 128h + 32s + (0..32); the high bits land in bits 4..6 of each code.
            let q0 = _mm256_or_si256(
                _mm256_and_si256(ql0, m4),
                _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m03)),
            );
            let q1 = _mm256_or_si256(
                _mm256_and_si256(ql1, m4),
                _mm256_slli_epi16::<2>(_mm256_and_si256(qh, m0c)),
            );
            let q2 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                _mm256_and_si256(qh, m30),
            );
            let q3 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                _mm256_srli_epi16::<2>(_mm256_and_si256(qh, mc0)),
            );
            let yq = |s: usize| ld256(&y.qs[128 * h + 32 * s..]);
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
        let isum = hsum_epi32(_mm256_add_epi32(acc0, acc1)) - 32 * scale_bsum(&b.scales, &y.bsums);
        sumf += f16(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ6_K], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
    })
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors with `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ6_K], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| _mm256_dpwssd_epi32(acc, p, s))
}

/// AVX-512 tier GEMM, one row × `NT` tokens: a super-block's 6-bit codes and scale pairs are
/// unpacked once for all the tokens. Same integers and final formula as [`vec_dot_avx512`], so
/// each result is bit for bit the GEMV's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn gemm_avx512<const NT: usize>(
    k: usize,
    w: &[BlockQ6_K],
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
    let (m03, m0c, m30, mc0) = (
        _mm256_set1_epi8(0x03),
        _mm256_set1_epi8(0x0C),
        _mm256_set1_epi8(0x30),
        _mm256_set1_epi8(0xC0u8 as i8),
    );
    for (r, row) in w.chunks_exact(nsb).enumerate() {
        let mut sumf = [0f32; NT];
        for (i, b) in row.iter().enumerate() {
            let sc16 = _mm256_cvtepi8_epi16(ld128(&b.scales));
            let mut q = [_mm256_setzero_si256(); 8];
            let mut s = [_mm256_setzero_si256(); 8];
            for (h, sc) in split_scales(sc16).into_iter().enumerate() {
                let ql0 = ld256(&b.ql[64 * h..]);
                let ql1 = ld256(&b.ql[64 * h + 32..]);
                let qh = ld256(&b.qh[32 * h..]);
                q[4 * h] = _mm256_or_si256(
                    _mm256_and_si256(ql0, m4),
                    _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m03)),
                );
                q[4 * h + 1] = _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_slli_epi16::<2>(_mm256_and_si256(qh, m0c)),
                );
                q[4 * h + 2] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                    _mm256_and_si256(qh, m30),
                );
                q[4 * h + 3] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                    _mm256_srli_epi16::<2>(_mm256_and_si256(qh, mc0)),
                );
                for j in 0..4 {
                    s[4 * h + j] = pick_scale_pair(sc, j);
                }
            }
            let wd = f16(b.d);
            for t in 0..NT {
                let y = &a[t][i];
                let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                for h in 0..2 {
                    let yq = |j: usize| ld256(&y.qs[128 * h + 32 * j..]);
                    let p = |j: usize| _mm256_maddubs_epi16(q[4 * h + j], yq(j));
                    acc0 = _mm256_dpwssd_epi32(acc0, p(0), s[4 * h]);
                    acc1 = _mm256_dpwssd_epi32(acc1, p(1), s[4 * h + 1]);
                    acc0 = _mm256_dpwssd_epi32(acc0, p(2), s[4 * h + 2]);
                    acc1 = _mm256_dpwssd_epi32(acc1, p(3), s[4 * h + 3]);
                }
                let isum =
                    hsum_epi32(_mm256_add_epi32(acc0, acc1)) - 32 * scale_bsum(&b.scales, &y.bsums);
                sumf[t] += wd * f32::from_le_bytes(y.d) * isum as f32;
            }
        }
        for (t, v) in sumf.iter().enumerate() {
            out[t * ldo + r] = *v;
        }
    }
}
