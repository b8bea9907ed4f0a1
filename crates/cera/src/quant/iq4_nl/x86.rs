//! IQ4_NL × Q8_0 dot products on x86-64 (AVX2, AVX-512 VNNI): the 4-bit indices go through
//! the code book with `vpshufb`, then a signed × signed byte dot product.

use std::arch::x86_64::*;

use super::{BlockIQ4_NL, KVALUES_IQ4NL, QK};
use crate::kernels::x86::*;
use crate::quant::dot_blocks;
use crate::quant::q8_0::BlockQ8_0;

/// The code book in each 128-bit lane, for `vpshufb`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn table256() -> __m256i {
    // SAFETY: KVALUES_IQ4NL is 16 bytes.
    let t = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()) };
    _mm256_broadcastsi128_si256(t)
}

/// The code book in each 128-bit lane of a 512-bit vector.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn table512() -> __m512i {
    // SAFETY: KVALUES_IQ4NL is 16 bytes.
    let t = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()) };
    _mm512_broadcast_i32x4(t)
}

/// AVX2 `Σ w·a` (the values reach ±127, so the sign trick keeps `vpmaddubsw` exact).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockIQ4_NL], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let table = table256();
    let mut acc = [_mm256_setzero_ps(); 2];
    for (i, (b, y)) in w[..nb].iter().zip(&a[..nb]).enumerate() {
        let v = _mm256_shuffle_epi8(table, unpack_nibbles(&b.qs));
        let s = dot_i8i8(v, ld256(&y.qs));
        let d = _mm256_set1_ps(f16(b.d) * f16(y.d));
        acc[i & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[i & 1]);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1]))
}

/// AVX-512 `Σ w·a`: two blocks per 512-bit vector through `vpdpbusd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockIQ4_NL], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let (w, a) = (&w[..nb], &a[..nb]);
    let table = table512();
    let zero = _mm512_setzero_si512();
    let mut acc = _mm512_setzero_ps();
    let (wp, ap) = (w.chunks_exact(2), a.chunks_exact(2));
    let (wr, ar) = (wp.remainder(), ap.remainder());
    for (b, y) in wp.zip(ap) {
        let v = _mm512_shuffle_epi8(table, unpack_nibbles_x2(&b[0].qs, &b[1].qs));
        let s = dpbusd_i8i8(zero, v, ld256x2(&y[0].qs, &y[1].qs));
        let d = f16_products_2x8(b[0].d, b[1].d, y[0].d, y[1].d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc);
    }
    let mut sum = hsum512_ps(acc);
    for (b, y) in wr.iter().zip(ar) {
        let v = _mm256_shuffle_epi8(table256(), unpack_nibbles(&b.qs));
        let s = dpbusd_i8i8_256(_mm256_setzero_si256(), v, ld256(&y.qs));
        sum += hsum_epi32(s) as f32 * (f16(b.d) * f16(y.d));
    }
    sum
}
