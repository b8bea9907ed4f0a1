//! Q6_K × Q8_K dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors).
//!
//! The 6-bit codes are used unsigned (0..64) and the offset of 32 comes off through the
//! activation's 16-sums: `Σ sc·((q − 32)·a) = Σ sc·(q·a) − 32·Σ sc·bsum`. Exact integers per
//! super-block and the scalar's final formula: bit for bit equal to `q6_k::vec_dot_scalar`.

use std::arch::x86_64::*;

use super::BlockQ6_K;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};
use crate::simd::x86::*;

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

// AVX-512 tier GEMM over x8-packed weights (`kernels::pack`): eight rows per vector, one per
// 32-bit lane; the 6-bit codes are rebuilt from the interleaved `ql`/`qh` once per super-block
// for all the tokens. The integers and the float formula per super-block are the scalar
// reference's, so each result is bit for bit the GEMV's.
//
// AVX2 tier GEMM over x8-packed weights: the same kernel with `vpmaddubsw` (exact: the codes
// are below 64).
kx8_gemm_entries!(BlockQ8_K; gemm_x8, [Vnni], [Maddubs]);

/// The GEMM body, inlined into the tiers' `#[target_feature]` wrappers.
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
    const SB: usize = 1680;
    let nsb = k / QK_K;
    let groups = n_rows.div_ceil(8);
    assert!(nsb > 0 && acts.n == NT && NT <= 4 && w.len() >= groups * nsb * SB);
    assert!(out.len() >= (NT - 1) * ldo + n_rows);
    let a: [&[BlockQ8_K]; NT] = std::array::from_fn(|t| &acts.blocks[t][..nsb]);
    let (m4, m3) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x03));
    for g in 0..groups {
        let mut sumf = [_mm256_setzero_ps(); NT];
        for (i, s) in w[g * nsb * SB..(g + 1) * nsb * SB]
            .chunks_exact(SB)
            .enumerate()
        {
            prefetch_l2(s.as_ptr().wrapping_add(PREFETCH_AHEAD), SB);
            // One chunk of 32 elements' codes at a time (chunk 4h + sub: elements
            // 128h + 32sub + 4q..+4 of every row in vector q), met by every token before the
            // next: all 64 code vectors of a super-block would not fit the registers, and
            // spilling them costs more than the dot products with four tokens.
            let mut isum = [_mm256_setzero_si256(); NT];
            for c in 0..8 {
                let (h, sub) = (c / 4, c % 4);
                let half = sub % 2;
                // (a plain loop: a closure would not inherit the tier's target features)
                let mut cj = [_mm256_setzero_si256(); 8];
                for (q, cq) in cj.iter_mut().enumerate() {
                    let qh = ld256(&s[1024 + 32 * (8 * h + q)..]);
                    let ql = ld256(&s[32 * (8 * (2 * h + half) + q)..]);
                    let lo = if sub < 2 {
                        _mm256_and_si256(ql, m4)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql), m4)
                    };
                    let hb = match sub {
                        0 => qh,
                        1 => _mm256_srli_epi16::<2>(qh),
                        2 => _mm256_srli_epi16::<4>(qh),
                        _ => _mm256_srli_epi16::<6>(qh),
                    };
                    *cq = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(_mm256_and_si256(hb, m3)));
                }
                // 32 elements: sub-blocks 2c (q < 4) and 2c + 1 (q >= 4) of 16
                let sc0 = _mm256_cvtepi8_epi32(ld_u64(&s[1536 + 16 * c..]));
                let sc1 = _mm256_cvtepi8_epi32(ld_u64(&s[1544 + 16 * c..]));
                for (t, isum) in isum.iter_mut().enumerate() {
                    let y = &a[t][i];
                    let (mut d0, mut d1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                    for q in 0..4 {
                        let at = 32 * c + 4 * q;
                        d0 = D::dp(d0, cj[q], bcast_dword(&y.qs[at..]));
                        d1 = D::dp(d1, cj[q + 4], bcast_dword(&y.qs[at + 16..]));
                    }
                    *isum = _mm256_add_epi32(*isum, _mm256_mullo_epi32(d0, sc0));
                    *isum = _mm256_add_epi32(*isum, _mm256_mullo_epi32(d1, sc1));
                }
            }
            // scales of sub-blocks 2p and 2p+1 as the i16 halves of each lane
            let sc2: [__m256i; 8] = std::array::from_fn(|p| {
                let lo = _mm_cvtepi8_epi16(ld_u64(&s[1536 + 16 * p..]));
                let hi = _mm_cvtepi8_epi16(ld_u64(&s[1544 + 16 * p..]));
                _mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi))
            });
            let dw = _mm256_cvtph_ps(ld128(&s[1664..]));
            for (t, sumf) in sumf.iter_mut().enumerate() {
                let y = &a[t][i];
                let isum = isum[t];
                // 32 · Σ_j sc_j bsum_j comes off: the 16-sums pair up as i16 dwords
                let mut sbs = _mm256_setzero_si256();
                for (p, scp) in sc2.iter().enumerate() {
                    sbs = _mm256_add_epi32(
                        sbs,
                        _mm256_madd_epi16(*scp, bcast_dword(&y.bsums[4 * p..])),
                    );
                }
                let isum = _mm256_sub_epi32(isum, _mm256_slli_epi32::<5>(sbs));
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(f32::from_le_bytes(y.d)));
                *sumf = _mm256_add_ps(*sumf, _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
            }
        }
        store_rows8(&sumf, out, ldo, 8 * g, n_rows);
    }
}
