//! Q5_1 × Q8_1 dot products on x86-64 (AVX2, AVX-512 VNNI): per block
//! `d_w d_a Σ q·a + m_w s_a`, the 5-bit codes unsigned.

use std::arch::x86_64::*;

use super::{BlockQ5_1, QK};
use crate::kernels::x86::*;
use crate::quant::dot_blocks;
use crate::quant::q5_0::x86::{codes, codes_x2};
use crate::quant::q8_1::BlockQ8_1;

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut summ = 0.0f32;
    for (i, (b, y)) in w[..nb].iter().zip(&a[..nb]).enumerate() {
        let s = dot_u8i8(codes(&b.qs, b.qh), ld256(&y.qs));
        let d = _mm256_set1_ps(f16(b.d) * f16(y.d));
        acc[i & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[i & 1]);
        summ += f16(b.m) * f16(y.s);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1])) + summ
}

/// AVX-512 `Σ w·a`: two blocks per 512-bit vector through `vpdpbusd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let (w, a) = (&w[..nb], &a[..nb]);
    let zero = _mm512_setzero_si512();
    let mut acc = _mm512_setzero_ps();
    let mut summ = 0.0f32;
    let (wp, ap) = (w.chunks_exact(2), a.chunks_exact(2));
    let (wr, ar) = (wp.remainder(), ap.remainder());
    for (b, y) in wp.zip(ap) {
        let q = codes_x2(&b[0].qs, b[0].qh, &b[1].qs, b[1].qh);
        let s = _mm512_dpbusd_epi32(zero, q, ld256x2(&y[0].qs, &y[1].qs));
        let d = f16_products_2x8(b[0].d, b[1].d, y[0].d, y[1].d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc);
        summ += f16(b[0].m) * f16(y[0].s) + f16(b[1].m) * f16(y[1].s);
    }
    let mut sum = hsum512_ps(acc);
    for (b, y) in wr.iter().zip(ar) {
        let s = _mm256_dpbusd_epi32(
            _mm256_setzero_si256(),
            codes(&b.qs, b.qh),
            ld256(&y.qs),
        );
        sum += hsum_epi32(s) as f32 * (f16(b.d) * f16(y.d));
        summ += f16(b.m) * f16(y.s);
    }
    sum + summ
}
