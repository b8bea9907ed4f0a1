//! Q2_K × Q8_K dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors); bit for
//! bit equal to
//! `q2_k::vec_dot_scalar` (exact integer sums per super-block, the scalar's float formula).

use std::arch::x86_64::*;

use super::BlockQ2_K;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};
use crate::simd::x86::*;

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

// AVX-512 tier GEMM over x8-packed weights (`kernels::pack`): eight rows per vector, one per
// 32-bit lane; a 32-element group's 2-bit codes are one shift and mask of a packed byte
// vector, `vpdpbusd` against broadcast activation dwords gives eight rows' sums, and the
// sub-block scales and mins apply per lane. The integers and the float formula per
// super-block are the scalar reference's, so each result is bit for bit the GEMV's.
//
// AVX2 tier GEMM over x8-packed weights: the same kernel with `vpmaddubsw` (exact: the codes
// are below 4).
kx8_gemm_entries!(BlockQ8_K; gemm_x8, [Vnni], [Maddubs]);

/// The GEMM body, over the tier's dot-accumulate `D`; inlined into the tiers'
/// `#[target_feature]` wrappers.
#[inline(always)]
#[allow(unsafe_op_in_unsafe_fn)]
unsafe fn gemm_x8<D: Dp, const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &crate::simd::GemmActs<'_, BlockQ8_K>,
    out: &mut [f32],
    ldo: usize,
) {
    const SB: usize = 512 + 128 + 32;
    let nsb = k / QK_K;
    let groups = n_rows.div_ceil(8);
    assert!(nsb > 0 && acts.n == NT && NT <= 4 && w.len() >= groups * nsb * SB);
    assert!(out.len() >= (NT - 1) * ldo + n_rows);
    let a: [&[BlockQ8_K]; NT] = std::array::from_fn(|t| &acts.blocks[t][..nsb]);
    let m3 = _mm256_set1_epi8(3);
    for g in 0..groups {
        let mut sumf = [_mm256_setzero_ps(); NT];
        for (i, s) in w[g * nsb * SB..(g + 1) * nsb * SB]
            .chunks_exact(SB)
            .enumerate()
        {
            prefetch_l2(s.as_ptr().wrapping_add(PREFETCH_AHEAD), SB);
            // scale in the low nibble, min in the high one
            let m4 = _mm256_set1_epi32(0x0F);
            let (mut sc, mut mn) = ([_mm256_setzero_si256(); 16], [_mm256_setzero_si256(); 16]);
            for is in 0..16 {
                let v = _mm256_cvtepu8_epi32(ld_u64(&s[512 + 8 * is..]));
                sc[is] = _mm256_and_si256(v, m4);
                mn[is] = _mm256_srli_epi32::<4>(v);
            }
            // One group's codes at a time (group j = 4h + sh, elements 4q..4q+4: bits 2sh of
            // packed vector 8h + q), met by every token before the next: all 64 code vectors
            // of a super-block would not fit the registers. Plain loops: a closure would not
            // inherit the tier's target features.
            let mut isum = [_mm256_setzero_si256(); NT];
            for j in 0..8 {
                let shift = _mm_cvtsi32_si128(2 * (j % 4) as i32);
                let mut cj = [_mm256_setzero_si256(); 8];
                for (q, cq) in cj.iter_mut().enumerate() {
                    let x = ld256(&s[32 * (8 * (j / 4) + q)..]);
                    *cq = _mm256_and_si256(_mm256_srl_epi16(x, shift), m3);
                }
                for (t, isum) in isum.iter_mut().enumerate() {
                    let y = &a[t][i];
                    let (mut d0, mut d1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                    for q in 0..4 {
                        let at = 32 * j + 4 * q;
                        d0 = D::dp(d0, cj[q], bcast_dword(&y.qs[at..]));
                        d1 = D::dp(d1, cj[q + 4], bcast_dword(&y.qs[at + 16..]));
                    }
                    *isum = _mm256_add_epi32(*isum, _mm256_mullo_epi32(d0, sc[2 * j]));
                    *isum = _mm256_add_epi32(*isum, _mm256_mullo_epi32(d1, sc[2 * j + 1]));
                }
            }
            let dw = _mm256_cvtph_ps(ld128(&s[640..]));
            let dmw = _mm256_cvtph_ps(ld128(&s[656..]));
            for (t, sumf) in sumf.iter_mut().enumerate() {
                let y = &a[t][i];
                let (isum, mut msum) = (isum[t], _mm256_setzero_si256());
                for (is, mn) in mn.iter().enumerate() {
                    let b = _mm256_set1_epi32(y.bsum(is) as i32);
                    msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(*mn, b));
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
