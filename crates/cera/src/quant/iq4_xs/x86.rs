//! IQ4_XS × Q8_K dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors): code-book
//! lookup with
//! `vpshufb`, signed × signed byte products, the sub-block scales applied in i32. Bit for bit
//! equal to `iq4_xs::vec_dot_scalar`.

use std::arch::x86_64::*;

use super::{BlockIQ4_XS, sub_scales};
use crate::quant::iq4_nl::x86::table256;
use crate::quant::q8_k::BlockQ8_K;
use crate::quant::{QK_K, dot_blocks};
use crate::simd::x86::*;

/// The kernel body; `mac(acc, p, s)` adds the i16 pairs of `p` times the scales `s` to `acc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot(
    n: usize,
    w: &[BlockIQ4_XS],
    a: &[BlockQ8_K],
    mac: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let table = table256();
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let ls = sub_scales(b);
        let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let sub = |ib: usize| {
            let v = _mm256_shuffle_epi8(table, unpack_nibbles(&b.qs[16 * ib..]));
            let ay = ld256(&y.qs[32 * ib..]);
            // |v| · (a * sign(v)): pair sums stay below 127·127·2.
            let p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(ay, v));
            (p, _mm256_set1_epi16(ls[ib]))
        };
        for ib in [0, 2, 4, 6] {
            let (p, s) = sub(ib);
            acc0 = mac(acc0, p, s);
            let (p, s) = sub(ib + 1);
            acc1 = mac(acc1, p, s);
        }
        let isum = hsum_epi32(_mm256_add_epi32(acc0, acc1));
        sumf += f16(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockIQ4_XS], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
    })
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors with `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockIQ4_XS], a: &[BlockQ8_K]) -> f32 {
    dot(n, w, a, |acc, p, s| _mm256_dpwssd_epi32(acc, p, s))
}

// AVX-512 tier GEMM over x8-packed weights (`kernels::pack`): each 32-element sub-block is
// laid out as an IQ4_NL block of eight rows, so `vpdpbusd` against broadcast activation dwords
// gives eight rows' sums per instruction; the code book is biased by +128 and `128·Σa` (from
// the Q8_K 16-sums) comes off. The integers and the float formula per super-block are the
// scalar reference's, so each result is bit for bit the GEMV's.
//
// AVX2 tier GEMM over x8-packed weights: the same kernel on the signed code-book values
// through the sign trick (`vpmaddubsw(|w|, a·sign w)`: the values and the Q8_K activations
// lie in −127..=127, so a pair of products cannot saturate; biased codes up to 241 could), with
// no bias to take off.
kx8_gemm_entries!(BlockQ8_K; gemm_x8, [Vnni, false], [SignedMaddubs, true]);

/// The GEMM body: `D` takes the code-book values as they are (`SIGNED`) or biased by +128.
/// Inlined into the tiers' `#[target_feature]` wrappers.
#[inline(always)]
#[allow(unsafe_op_in_unsafe_fn)]
unsafe fn gemm_x8<D: Dp, const SIGNED: bool, const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &crate::simd::GemmActs<'_, BlockQ8_K>,
    out: &mut [f32],
    ldo: usize,
) {
    const SB: usize = 1024 + 64 + 16;
    let nsb = k / QK_K;
    let groups = n_rows.div_ceil(8);
    assert!(nsb > 0 && acts.n == NT && NT <= 4 && w.len() >= groups * nsb * SB);
    assert!(out.len() >= (NT - 1) * ldo + n_rows);
    let a: [&[BlockQ8_K]; NT] = std::array::from_fn(|t| &acts.blocks[t][..nsb]);
    let table = if SIGNED {
        table256()
    } else {
        _mm256_xor_si256(table256(), _mm256_set1_epi8(0x80u8 as i8))
    };
    let bias_unit = if SIGNED { 0 } else { 128 };
    for g in 0..groups {
        let mut sumf = [_mm256_setzero_ps(); NT];
        for (i, s) in w[g * nsb * SB..(g + 1) * nsb * SB]
            .chunks_exact(SB)
            .enumerate()
        {
            prefetch_l2(s.as_ptr().wrapping_add(PREFETCH_AHEAD), SB);
            // One sub-block's codes at a time (sub-block j, elements 4q..4q+4 in vector q, as
            // signed values or unsigned values + 128), met by every token before the next: all 64 code vectors
            // of a super-block would not fit the registers.
            let mut isum = [_mm256_setzero_si256(); NT];
            for j in 0..8 {
                let mut cj = unpack_x8_nibbles(&s[128 * j..]);
                for c in cj.iter_mut() {
                    *c = _mm256_shuffle_epi8(table, *c);
                }
                let lsj = _mm256_cvtepi8_epi32(ld_u64(&s[1024 + 8 * j..]));
                for (t, isum) in isum.iter_mut().enumerate() {
                    let y = &a[t][i];
                    let (mut d0, mut d1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                    for q in (0..8).step_by(2) {
                        let at = 32 * j + 4 * q;
                        d0 = D::dp(d0, cj[q], bcast_dword(&y.qs[at..]));
                        d1 = D::dp(d1, cj[q + 1], bcast_dword(&y.qs[at + 4..]));
                    }
                    let bias = bias_unit * (y.bsum(2 * j) as i32 + y.bsum(2 * j + 1) as i32);
                    let dot = _mm256_sub_epi32(_mm256_add_epi32(d0, d1), _mm256_set1_epi32(bias));
                    *isum = _mm256_add_epi32(*isum, _mm256_mullo_epi32(dot, lsj));
                }
            }
            let dw = _mm256_cvtph_ps(ld128(&s[1088..]));
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
