//! Q4_0 × Q8_0 dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors).
//!
//! The nibbles are used unsigned (0..16) and the offset of 8 comes off as `8·Σa`:
//! `Σ (q − 8)·a = Σ q·a − 8·Σ a`.

use std::arch::x86_64::*;

use super::{BlockQ4_0, QK};
use crate::quant::dot_blocks;
use crate::quant::q8_0::BlockQ8_0;
use crate::simd::x86::*;

/// AVX2 `Σ w·a` (`vpmaddubsw`; the i16 pair sums stay below 15·127·2).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let off = _mm256_set1_epi8(8);
    drive32_avx2::<_, _, false>(
        &w[..nb],
        &a[..nb],
        |b, y| {
            let (q, ay) = (unpack_nibbles(&b.qs), ld256(&y.qs));
            let p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, ay), _mm256_maddubs_epi16(off, ay));
            _mm256_madd_epi16(p, _mm256_set1_epi16(1))
        },
        |b, y| [b.d, y.d],
        |_, _| [[0; 2]; 2],
    )
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors (AVX512-VL encoding), `vpdpbusd` for `Σ q·a` and
/// `8·Σ a`. (512-bit vectors measured slower: see the `kernels` module docs.)
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let off = _mm256_set1_epi8(8);
    drive32_avx2::<_, _, false>(
        &w[..nb],
        &a[..nb],
        |b, y| {
            let (z, ay) = (_mm256_setzero_si256(), ld256(&y.qs));
            _mm256_sub_epi32(
                _mm256_dpbusd_epi32(z, unpack_nibbles(&b.qs), ay),
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
    let ty = crate::quant::GgmlType::Q4_0;
    // SAFETY: this function's features are the tier's.
    unsafe {
        gemm_x8::<Vnni, false, NT>(
            w,
            n_rows,
            nb,
            x8_layout::superblock_bytes(ty).unwrap(),
            x8_layout::scale_offsets(ty),
            8,
            |s| unpack_x8_nibbles(s),
            packed,
            out,
            ldo,
        )
    }
}

/// AVX2 tier GEMM over x8-packed weights (see `simd::x86::gemm_x8`; `vpmaddubsw` is exact
/// here, the codes being below 32).
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
    let ty = crate::quant::GgmlType::Q4_0;
    // SAFETY: this function's features are the tier's.
    unsafe {
        gemm_x8::<Maddubs, false, NT>(
            w,
            n_rows,
            nb,
            x8_layout::superblock_bytes(ty).unwrap(),
            x8_layout::scale_offsets(ty),
            8,
            |s| unpack_x8_nibbles(s),
            packed,
            out,
            ldo,
        )
    }
}
