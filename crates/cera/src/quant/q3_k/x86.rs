//! Q3_K × Q8_K dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors).
//!
//! The codes are used unsigned, `u = low2 + 4·hbit` in 0..8 with `q = u − 4`, and the offset
//! comes off through the 16-sums: `Σ sc·(q·a) = Σ sc·(u·a) − 4·Σ sc·bsum`. Bit for bit equal to
//! `q3_k::vec_dot_scalar`.

use std::arch::x86_64::*;

use super::BlockQ3_K;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};
use crate::simd::x86::*;

/// The sixteen sub-block scales, unbiased (`-32..32`), as i8 in an xmm: the word operations of
/// `k_common::scales_q3k` on 128-bit vectors. (Written out: left scalar, LLVM vectorizes that
/// helper with 512-bit instructions inside the AVX-512 kernel, and any 512-bit instruction
/// slows the surrounding 256-bit code on Intel cores.)
#[inline]
#[target_feature(enable = "avx2")]
fn scales(q: &[u8; 12]) -> __m128i {
    let w = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let w01 = _mm_cvtsi64_si128((w(0) as u64 | (w(1) as u64) << 32) as i64);
    let lo = _mm_srlv_epi32(
        _mm_shuffle_epi32::<0b01_00_01_00>(w01),
        _mm_setr_epi32(0, 0, 4, 4),
    );
    let lo = _mm_and_si128(lo, _mm_set1_epi8(0x0F));
    let hi = _mm_srlv_epi32(_mm_set1_epi32(w(2) as i32), _mm_setr_epi32(0, 2, 4, 6));
    let hi = _mm_slli_epi32::<4>(_mm_and_si128(hi, _mm_set1_epi8(3)));
    _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32))
}

/// `Σ sc_is · bsum_is` over the sixteen unbiased scales.
#[inline]
#[target_feature(enable = "avx2")]
fn scale_bsum(sc: __m128i, bsums: &[u8]) -> i32 {
    hsum_epi32(_mm256_madd_epi16(
        _mm256_cvtepi8_epi16(sc),
        ld_i16x16(bsums),
    ))
}

/// The kernel body; `mac(acc, p, s)` adds the i16 pairs of `p` times the scales `s` to `acc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot(
    n: usize,
    w: &[BlockQ3_K],
    a: &[BlockQ8_K],
    mac: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm256_set1_epi8(4);
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sc8 = scales(&b.scales);
        let sc16 = _mm256_cvtepi8_epi16(sc8);
        let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        // Bit j of hmask byte l is the high bit of element 32j + l; shifted down one per step.
        let mut hm = ld256(&b.hmask);
        for (h, sc) in split_scales(sc16).into_iter().enumerate() {
            let mut qs = ld256(&b.qs[32 * h..]);
            let mut code = || {
                let low = _mm256_and_si256(qs, m3);
                qs = _mm256_srli_epi16::<2>(qs);
                let hb = _mm256_and_si256(_mm256_slli_epi16::<2>(hm), m4);
                hm = _mm256_srli_epi16::<1>(hm);
                _mm256_or_si256(low, hb)
            };
            let yq = |s: usize| ld256(&y.qs[128 * h + 32 * s..]);
            for s in [0, 2] {
                let p = _mm256_maddubs_epi16(code(), yq(s));
                acc0 = mac(acc0, p, pick_scale_pair(sc, s));
                let p = _mm256_maddubs_epi16(code(), yq(s + 1));
                acc1 = mac(acc1, p, pick_scale_pair(sc, s + 1));
            }
        }
        let isum = hsum_epi32(_mm256_add_epi32(acc0, acc1)) - 4 * scale_bsum(sc8, &y.bsums);
        sumf += f16(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ3_K], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
    })
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors with `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ3_K], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| _mm256_dpwssd_epi32(acc, p, s))
}

// AVX-512 tier GEMM over x8-packed weights (`kernels::pack`): Q2_K's scheme with the high bits
// added (`u = low2 + 4·hbit`), `4·bsum` taken off per 16-element sub-block before its scale.
// The integers and the float formula per super-block are the scalar reference's, so each
// result is bit for bit the GEMV's.
//
// AVX2 tier GEMM over x8-packed weights: the same kernel with `vpmaddubsw` (exact: the
// unsigned codes `u` are below 8) and the high bits added through a byte compare.
kx8_gemm_entries!(BlockQ8_K; gemm_x8, [Vnni], [Maddubs]);

/// The GEMM body, over the tier's dot-accumulate and high-bit add `D`; inlined into the tiers'
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
    const SB: usize = 512 + 256 + 128 + 16;
    let nsb = k / QK_K;
    let groups = n_rows.div_ceil(8);
    assert!(nsb > 0 && acts.n == NT && NT <= 4 && w.len() >= groups * nsb * SB);
    assert!(out.len() >= (NT - 1) * ldo + n_rows);
    let a: [&[BlockQ8_K]; NT] = std::array::from_fn(|t| &acts.blocks[t][..nsb]);
    let (m3, four) = (_mm256_set1_epi8(3), _mm256_set1_epi8(4));
    for g in 0..groups {
        let mut sumf = [_mm256_setzero_ps(); NT];
        for (i, s) in w[g * nsb * SB..(g + 1) * nsb * SB]
            .chunks_exact(SB)
            .enumerate()
        {
            prefetch_l2(s.as_ptr().wrapping_add(PREFETCH_AHEAD), SB);
            let mut sc = [_mm256_setzero_si256(); 16];
            for (is, v) in sc.iter_mut().enumerate() {
                *v = _mm256_cvtepi8_epi32(ld_u64(&s[768 + 8 * is..]));
            }
            // One group's codes at a time (group j = 4h + sh, elements 4q..4q+4: bits 2sh of
            // packed vector 8h + q, plus 4 where bit j of the high-bit vector q is set), met by
            // every token before the next: all 64 code vectors of a super-block would not fit
            // the registers. Plain loops: a closure would not inherit the tier's target
            // features.
            let mut isum = [_mm256_setzero_si256(); NT];
            for j in 0..8 {
                let shift = _mm_cvtsi32_si128(2 * (j % 4) as i32);
                let bit = _mm256_set1_epi8(1 << j);
                let mut cj = [_mm256_setzero_si256(); 8];
                for (q, cq) in cj.iter_mut().enumerate() {
                    let x = ld256(&s[32 * (8 * (j / 4) + q)..]);
                    let low = _mm256_and_si256(_mm256_srl_epi16(x, shift), m3);
                    let hv = ld256(&s[512 + 32 * q..]);
                    *cq = D::add_where(low, hv, bit, four);
                }
                for (t, isum) in isum.iter_mut().enumerate() {
                    let y = &a[t][i];
                    let (mut d0, mut d1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                    for q in 0..4 {
                        let at = 32 * j + 4 * q;
                        d0 = D::dp(d0, cj[q], bcast_dword(&y.qs[at..]));
                        d1 = D::dp(d1, cj[q + 4], bcast_dword(&y.qs[at + 16..]));
                    }
                    let d0 = _mm256_sub_epi32(d0, _mm256_set1_epi32(4 * y.bsum(2 * j) as i32));
                    let d1 = _mm256_sub_epi32(d1, _mm256_set1_epi32(4 * y.bsum(2 * j + 1) as i32));
                    *isum = _mm256_add_epi32(*isum, _mm256_mullo_epi32(d0, sc[2 * j]));
                    *isum = _mm256_add_epi32(*isum, _mm256_mullo_epi32(d1, sc[2 * j + 1]));
                }
            }
            let dw = _mm256_cvtph_ps(ld128(&s[896..]));
            for (t, sumf) in sumf.iter_mut().enumerate() {
                let y = &a[t][i];
                let isum = isum[t];
                let ad = _mm256_set1_ps(f32::from_le_bytes(y.d));
                let v = _mm256_mul_ps(_mm256_mul_ps(dw, ad), _mm256_cvtepi32_ps(isum));
                *sumf = _mm256_add_ps(*sumf, v);
            }
        }
        store_rows8(&sumf, out, ldo, 8 * g, n_rows);
    }
}
