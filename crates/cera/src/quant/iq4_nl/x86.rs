//! IQ4_NL × Q8_0 dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors): the 4-bit indices go through
//! the code book with `vpshufb`, then a signed × signed byte dot product.

use std::arch::x86_64::*;

use super::{BlockIQ4_NL, KVALUES_IQ4NL, QK};
use crate::quant::dot_blocks;
use crate::quant::q8_0::BlockQ8_0;
use crate::simd::x86::*;

/// The code book in each 128-bit lane, for `vpshufb`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn table256() -> __m256i {
    // SAFETY: KVALUES_IQ4NL is 16 bytes.
    let t = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()) };
    _mm256_broadcastsi128_si256(t)
}

/// AVX2 `Σ w·a` (the values reach ±127, so the sign trick keeps `vpmaddubsw` exact).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockIQ4_NL], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let table = table256();
    drive32_avx2::<_, _, false>(
        &w[..nb],
        &a[..nb],
        |b, y| {
            dot_i8i8(
                _mm256_shuffle_epi8(table, unpack_nibbles(&b.qs)),
                ld256(&y.qs),
            )
        },
        |b, y| [b.d, y.d],
        |_, _| [[0; 2]; 2],
    )
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors; the code book biased by +128 (so the values are
/// unsigned, 1..=241) feeds `vpdpbusd`, and `128·Σa` comes off.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockIQ4_NL], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let table = _mm256_xor_si256(table256(), _mm256_set1_epi8(0x80u8 as i8));
    let off = _mm256_set1_epi8(0x80u8 as i8);
    drive32_avx2::<_, _, false>(
        &w[..nb],
        &a[..nb],
        |b, y| {
            let (z, ay) = (_mm256_setzero_si256(), ld256(&y.qs));
            let u = _mm256_shuffle_epi8(table, unpack_nibbles(&b.qs));
            _mm256_sub_epi32(
                _mm256_dpbusd_epi32(z, u, ay),
                _mm256_dpbusd_epi32(z, off, ay),
            )
        },
        |b, y| [b.d, y.d],
        |_, _| [[0; 2]; 2],
    )
}

/// AVX-512 tier GEMM over x8-packed weights (see `simd::x86::gemm_x8`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn gemm_avx512<const NT: usize>(
    nb: usize,
    n_rows: usize,
    w: &[u8],
    packed: &[u8],
    out: &mut [f32],
    ldo: usize,
) {
    use crate::quant::x8_layout;
    let ty = crate::quant::GgmlType::IQ4_NL;
    let table = _mm256_xor_si256(table256(), _mm256_set1_epi8(0x80u8 as i8));
    // SAFETY: this function's features are the tier's.
    unsafe {
        gemm_x8::<Vnni, false, NT>(
            w,
            n_rows,
            nb,
            x8_layout::superblock_bytes(ty).unwrap(),
            x8_layout::scale_offsets(ty),
            128,
            |s| unpack_x8_nibbles(s).map(|c| _mm256_shuffle_epi8(table, c)),
            packed,
            out,
            ldo,
        )
    }
}

/// AVX2 tier GEMM over x8-packed weights (see `simd::x86::gemm_x8`): the code book's signed
/// values with the sign trick ([`SignedMaddubs`]), no zero point.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn gemm_avx2<const NT: usize>(
    nb: usize,
    n_rows: usize,
    w: &[u8],
    packed: &[u8],
    out: &mut [f32],
    ldo: usize,
) {
    use crate::quant::x8_layout;
    let ty = crate::quant::GgmlType::IQ4_NL;
    let table = table256();
    // SAFETY: this function's features are the tier's.
    unsafe {
        gemm_x8::<SignedMaddubs, false, NT>(
            w,
            n_rows,
            nb,
            x8_layout::superblock_bytes(ty).unwrap(),
            x8_layout::scale_offsets(ty),
            0,
            |s| unpack_x8_nibbles(s).map(|c| _mm256_shuffle_epi8(table, c)),
            packed,
            out,
            ldo,
        )
    }
}
