//! Q4_0 × Q8_0 dot products on x86-64 (AVX2, AVX-512 VNNI).
//!
//! The nibbles are used unsigned (0..16) and the offset of 8 comes off as `8·Σa`:
//! `Σ (q − 8)·a = Σ q·a − 8·Σ a`.

use std::arch::x86_64::*;

use super::{BlockQ4_0, QK};
use crate::kernels::x86::*;
use crate::quant::dot_blocks;
use crate::quant::q8_0::BlockQ8_0;

/// AVX2 `Σ w·a` (`vpmaddubsw`; the i16 pair sums stay below 15·127·2).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let off = _mm256_set1_epi8(8);
    let mut acc = [_mm256_setzero_ps(); 2];
    for (i, (b, y)) in w[..nb].iter().zip(&a[..nb]).enumerate() {
        let q = unpack_nibbles(&b.qs);
        let ay = ld256(&y.qs);
        let p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, ay), _mm256_maddubs_epi16(off, ay));
        let s = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
        let d = _mm256_set1_ps(f16(b.d) * f16(y.d));
        acc[i & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[i & 1]);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1]))
}

/// AVX-512 `Σ w·a`: two blocks per 512-bit vector, `vpdpbusd` for `Σ q·a` and `8·Σ a`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let (w, a) = (&w[..nb], &a[..nb]);
    let zero = _mm512_setzero_si512();
    let off = _mm512_set1_epi8(8);
    let mut acc = _mm512_setzero_ps();
    let (wp, ap) = (w.chunks_exact(2), a.chunks_exact(2));
    let (wr, ar) = (wp.remainder(), ap.remainder());
    for (b, y) in wp.zip(ap) {
        let q = unpack_nibbles_x2(&b[0].qs, &b[1].qs);
        let ay = ld256x2(&y[0].qs, &y[1].qs);
        let s = _mm512_sub_epi32(
            _mm512_dpbusd_epi32(zero, q, ay),
            _mm512_dpbusd_epi32(zero, off, ay),
        );
        let d = f16_products_2x8(b[0].d, b[1].d, y[0].d, y[1].d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc);
    }
    let mut sum = hsum512_ps(acc);
    for (b, y) in wr.iter().zip(ar) {
        let z = _mm256_setzero_si256();
        let ay = ld256(&y.qs);
        let s = _mm256_sub_epi32(
            _mm256_dpbusd_epi32(z, unpack_nibbles(&b.qs), ay),
            _mm256_dpbusd_epi32(z, _mm256_set1_epi8(8), ay),
        );
        sum += hsum_epi32(s) as f32 * (f16(b.d) * f16(y.d));
    }
    sum
}
