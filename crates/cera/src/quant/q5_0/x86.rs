//! Q5_0 × Q8_0 dot products on x86-64 (AVX2; AVX-512 VL + VNNI on 256-bit vectors). The 5-bit codes are used unsigned
//! (0..32) and the offset comes off as `16·Σa`.

use std::arch::x86_64::*;

use super::{BlockQ5_0, QK};
use crate::quant::dot_blocks;
use crate::quant::q8_0::BlockQ8_0;
use crate::simd::x86::*;

/// The 32 unsigned 5-bit codes of a block.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn codes(qs: &[u8], qh: [u8; 4]) -> __m256i {
    let hb = _mm256_and_si256(
        bits_to_bytes(u32::from_le_bytes(qh)),
        _mm256_set1_epi8(0x10),
    );
    _mm256_or_si256(unpack_nibbles(qs), hb)
}

/// AVX2 `Σ w·a` (`vpmaddubsw`; pair sums stay below 31·127·2).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let off = _mm256_set1_epi8(16);
    drive32_avx2::<_, _, false>(
        &w[..nb],
        &a[..nb],
        |b, y| {
            let (q, ay) = (codes(&b.qs, b.qh), ld256(&y.qs));
            let p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, ay), _mm256_maddubs_epi16(off, ay));
            _mm256_madd_epi16(p, _mm256_set1_epi16(1))
        },
        |b, y| [b.d, y.d],
        |_, _| [[0; 2]; 2],
    )
}

/// The 32 unsigned 5-bit codes of a block (AVX512-BW/VL: the fifth bits through a mask).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) fn codes_mask(qs: &[u8], qh: [u8; 4]) -> __m256i {
    let nib = unpack_nibbles(qs);
    _mm256_mask_add_epi8(nib, u32::from_le_bytes(qh), nib, _mm256_set1_epi8(0x10))
}

/// AVX-512 tier `Σ w·a`: 256-bit vectors, `vpdpbusd` for `Σ q·a` and `16·Σ a`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let off = _mm256_set1_epi8(16);
    drive32_avx2::<_, _, false>(
        &w[..nb],
        &a[..nb],
        |b, y| {
            let (z, ay) = (_mm256_setzero_si256(), ld256(&y.qs));
            _mm256_sub_epi32(
                _mm256_dpbusd_epi32(z, codes_mask(&b.qs, b.qh), ay),
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
    let ty = crate::quant::GgmlType::Q5_0;
    // SAFETY: this function's features are the tier's.
    unsafe {
        gemm_x8::<Vnni, false, NT>(
            w,
            n_rows,
            nb,
            x8_layout::superblock_bytes(ty).unwrap(),
            x8_layout::scale_offsets(ty),
            16,
            |s| unpack_x8_q5(s),
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
    let ty = crate::quant::GgmlType::Q5_0;
    // SAFETY: this function's features are the tier's.
    unsafe {
        gemm_x8::<Maddubs, false, NT>(
            w,
            n_rows,
            nb,
            x8_layout::superblock_bytes(ty).unwrap(),
            x8_layout::scale_offsets(ty),
            16,
            |s| unpack_x8_q5_avx2(s),
            packed,
            out,
            ldo,
        )
    }
}
