//! Q4_1 × Q8_1 dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors): per block
//! `d_w d_a Σ q·a + m_w s_a`, the nibbles unsigned.

use std::arch::x86_64::*;

use super::{BlockQ4_1, QK};
use crate::quant::dot_blocks;
use crate::quant::q8_1::BlockQ8_1;
use crate::simd::x86::*;

/// AVX2 `Σ w·a`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    drive32_avx2::<_, _, true>(
        &w[..nb],
        &a[..nb],
        |b, y| dot_u8i8(unpack_nibbles(&b.qs), ld256(&y.qs)),
        |b, y| [b.d, y.d],
        |b, y| [b.m, y.s],
    )
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors, `vpdpbusd` for `Σ q·a`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    drive32_avx2::<_, _, true>(
        &w[..nb],
        &a[..nb],
        |b, y| _mm256_dpbusd_epi32(_mm256_setzero_si256(), unpack_nibbles(&b.qs), ld256(&y.qs)),
        |b, y| [b.d, y.d],
        |b, y| [b.m, y.s],
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
    let ty = crate::quant::GgmlType::Q4_1;
    // SAFETY: this function's features are the tier's.
    unsafe {
        gemm_x8::<Vnni, true, NT>(
            w,
            n_rows,
            nb,
            x8_layout::superblock_bytes(ty).unwrap(),
            x8_layout::scale_offsets(ty),
            0,
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
    let ty = crate::quant::GgmlType::Q4_1;
    // SAFETY: this function's features are the tier's.
    unsafe {
        gemm_x8::<Maddubs, true, NT>(
            w,
            n_rows,
            nb,
            x8_layout::superblock_bytes(ty).unwrap(),
            x8_layout::scale_offsets(ty),
            0,
            |s| unpack_x8_nibbles(s),
            packed,
            out,
            ldo,
        )
    }
}
