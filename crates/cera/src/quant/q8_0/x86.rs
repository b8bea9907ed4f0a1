//! Q8_0 on x86-64: the activation quantizer (AVX2) and Q8_0 × Q8_0 dot products (AVX2;
//! AVX-512 VNNI on 512-bit vectors).

use std::arch::x86_64::*;

use super::{BlockQ8_0, QK};
use crate::quant::dot_blocks;
use crate::simd::x86::*;

/// f32 to f16 bits with F16C (round to nearest even, as `quant::f32_to_f16`).
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn f32_to_f16_bits(x: f32) -> [u8; 2] {
    let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x));
    (_mm_extract_epi16::<0>(h) as u16).to_le_bytes()
}

/// One 32-element block, as `q8_0::quantize_act`: `d = amax / 127`,
/// `q = round_half_even(x · 127 / amax)`. Returns
/// `d` (before rounding to f16) and the sum of the quants.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize_block(x: &[f32], qs: &mut [u8; QK]) -> (f32, i32) {
    let v = [ld_ps(x), ld_ps(&x[8..]), ld_ps(&x[16..]), ld_ps(&x[24..])];
    // `max(|v|, acc)` keeps `acc` when `v` is NaN, like `f32::max` in the reference.
    let mut m = _mm256_setzero_ps();
    for v in v {
        m = _mm256_max_ps(abs_ps(v), m);
    }
    let amax = hmax_ps(m);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mul = _mm256_set1_ps(id);
    // Clamped like `as i8` (which saturates): `id` overflows to infinity when the block's
    // largest magnitude is subnormal.
    let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
    let conv = |v: __m256| {
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(v, mul),
        );
        _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi))
    };
    // (Written out: `array::map` would not inline into this `#[target_feature]` function.)
    let q = [conv(v[0]), conv(v[1]), conv(v[2]), conv(v[3])];
    let sum = hsum_epi32(_mm256_add_epi32(
        _mm256_add_epi32(q[0], q[1]),
        _mm256_add_epi32(q[2], q[3]),
    ));
    let packed = pack_i32x32_to_i8(q[0], q[1], q[2], q[3]);
    // SAFETY: `qs` is 32 writable bytes; unaligned store.
    unsafe { _mm256_storeu_si256(qs.as_mut_ptr().cast(), packed) };
    (d, sum)
}

/// AVX2 version of `q8_0::quantize_act`, byte for byte the same output.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize_avx2(src: &[f32], out: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (d, _) = quantize_block(x, &mut b.qs);
        b.d = f32_to_f16_bits(d);
    }
}

/// AVX2 `Σ w·a`: `|w| · (a * sign(w))` through `vpmaddubsw`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2(n: usize, w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    drive32_avx2::<_, _, false>(
        &w[..nb],
        &a[..nb],
        |b, y| dot_i8i8(ld256(&b.qs), ld256(&y.qs)),
        |b, y| [b.d, y.d],
        |_, _| [[0; 2]; 2],
    )
}

/// AVX-512 tier `Σ w·a`: two blocks per 512-bit vector, `vpdpbusd` on `|w|` and `a * sign(w)`.
/// (The one format where 512-bit vectors measured faster than 256-bit ones: no unpacking.)
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512(n: usize, w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    drive32_avx512::<_, _, false>(
        &w[..nb],
        &a[..nb],
        |b, y| {
            let x = ld256x2(&b[0].qs, &b[1].qs);
            dpbusd_i8i8(_mm512_setzero_si512(), x, ld256x2(&y[0].qs, &y[1].qs))
        },
        |b, y| dpbusd_i8i8_256(_mm256_setzero_si256(), ld256(&b.qs), ld256(&y.qs)),
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
    let ty = crate::quant::GgmlType::Q8_0;
    // SAFETY: this function's features are the tier's.
    unsafe {
        gemm_x8::<Vnni, false, NT>(
            w,
            n_rows,
            nb,
            x8_layout::superblock_bytes(ty).unwrap(),
            x8_layout::scale_offsets(ty),
            128,
            |s| std::array::from_fn(|j| ld256(&s[32 * j..])),
            packed,
            out,
            ldo,
        )
    }
}

/// AVX2 tier GEMM over x8-packed weights (see `simd::x86::gemm_x8`): the stored codes are
/// biased by 128, so they are flipped back to signed bytes and multiplied with the sign trick
/// ([`SignedMaddubs`]), with no zero point.
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
    let ty = crate::quant::GgmlType::Q8_0;
    let flip = _mm256_set1_epi8(0x80u8 as i8);
    // SAFETY: this function's features are the tier's.
    unsafe {
        gemm_x8::<SignedMaddubs, false, NT>(
            w,
            n_rows,
            nb,
            x8_layout::superblock_bytes(ty).unwrap(),
            x8_layout::scale_offsets(ty),
            0,
            |s| std::array::from_fn(|j| _mm256_xor_si256(ld256(&s[32 * j..]), flip)),
            packed,
            out,
            ldo,
        )
    }
}
