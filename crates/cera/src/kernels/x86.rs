//! Small x86-64 SIMD building blocks shared by the per-format kernels in `quant/<format>/x86.rs`.
//!
//! Every helper is `#[inline]` with the narrowest feature set it needs, so it inlines into any
//! kernel whose `#[target_feature]` set is a superset (an AVX2 helper inlines into both the AVX2
//! and the AVX-512 kernels). Loads take slices and assert their length, so the helpers are safe
//! to call from a function that has the features enabled.
//!
//! The feature sets, as string literals in the kernels' attributes:
//! - AVX2 tier: `avx2,fma,f16c`
//! - AVX-512 tier: `avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c` (and
//!   `avx512bf16` on top for the BF16 dot product, which the table only uses when present).

use std::arch::x86_64::*;

// ---------------------------------------------------------------------------------------------
// AVX2 (+ FMA, F16C)
// ---------------------------------------------------------------------------------------------

/// Loads 16 bytes.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn ld128(s: &[u8]) -> __m128i {
    assert!(s.len() >= 16);
    // SAFETY: 16 readable bytes checked above; unaligned load.
    unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
}

/// Loads 32 bytes.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn ld256(s: &[u8]) -> __m256i {
    assert!(s.len() >= 32);
    // SAFETY: 32 readable bytes checked above; unaligned load.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_ps(v: __m256) -> f32 {
    let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    let x = _mm_add_ss(x, _mm_movehdup_ps(x));
    _mm_cvtss_f32(x)
}

/// Sum of the 8 lanes (wrapping; callers keep sums in range).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_epi32(v: __m256i) -> i32 {
    let x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let x = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
    let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b01>(x));
    _mm_cvtsi128_si32(x)
}

/// One f16 (little-endian bytes) to f32 with F16C; exact, like `quant::f16_to_f32`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn f16(bits: [u8; 2]) -> f32 {
    let v = _mm_cvtsi32_si128(u16::from_le_bytes(bits) as i32);
    _mm_cvtss_f32(_mm_cvtph_ps(v))
}

/// 16 bytes of packed nibbles to 32 bytes: the low nibbles (elements 0..16 of a 32-block) in
/// the low half, the high nibbles (elements 16..32) in the high half.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn unpack_nibbles(qs: &[u8]) -> __m256i {
    let x = ld128(qs);
    let y = _mm256_set_m128i(_mm_srli_epi16::<4>(x), x);
    _mm256_and_si256(y, _mm256_set1_epi8(0x0F))
}

/// Dot products of unsigned × signed bytes, 4 adjacent products summed into each i32 lane.
/// `vpmaddubsw` saturates its i16 pair sums, so callers keep `u * |s| * 2` below 32768.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn dot_u8i8(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// Dot products of signed × signed bytes (4 per i32 lane) through `|x| · (y * sign(x))`.
/// `y` must not hold -128 (our activation quantizers never produce it); `x` may.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn dot_i8i8(x: __m256i, y: __m256i) -> __m256i {
    dot_u8i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// Each bit of `bits` to a byte: 0xFF where bit `j` is set, 0 elsewhere (byte `j`).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn bits_to_bytes(bits: u32) -> __m256i {
    let v = _mm256_set1_epi32(bits as i32);
    #[rustfmt::skip]
    let pick = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let v = _mm256_shuffle_epi8(v, pick);
    let sel = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel)
}

/// `[lo ×8 i16 | hi ×8 i16]`: one scale per 128-bit half (a 16-element sub-block each).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn scales_2x8(lo: i16, hi: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
}

/// Sixteen i16 (little-endian bytes, e.g. Q8_K's `bsums`).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn ld_i16x16(s: &[u8]) -> __m256i {
    ld256(s)
}

// ---------------------------------------------------------------------------------------------
// AVX-512 (F, BW, VL, DQ, VNNI)
// ---------------------------------------------------------------------------------------------

/// Loads 64 bytes.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn ld512(s: &[u8]) -> __m512i {
    assert!(s.len() >= 64);
    // SAFETY: 64 readable bytes checked above; unaligned load.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// Two 32-byte loads side by side.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn ld256x2(lo: &[u8], hi: &[u8]) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(ld256(lo)), ld256(hi))
}

/// Two blocks of 16 packed nibbles to 64 bytes: `[lo(a) | hi(a) | lo(b) | hi(b)]`, i.e. the
/// element order of two consecutive 32-element blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn unpack_nibbles_x2(a: &[u8], b: &[u8]) -> __m512i {
    let v = _mm256_set_m128i(ld128(b), ld128(a));
    let m = _mm256_set1_epi8(0x0F);
    let lo = _mm256_and_si256(v, m);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m);
    let idx = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    _mm512_permutex2var_epi64(_mm512_castsi256_si512(lo), idx, _mm512_castsi256_si512(hi))
}

/// The products `dw0*da0` and `dw1*da1` of two f16 pairs, broadcast as `[p0 ×8 | p1 ×8]`.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,f16c")]
pub(crate) fn f16_products_2x8(dw0: [u8; 2], dw1: [u8; 2], da0: [u8; 2], da1: [u8; 2]) -> __m512 {
    let u = |b: [u8; 2]| u16::from_le_bytes(b) as i16;
    let h = _mm_setr_epi16(u(dw0), u(dw1), u(da0), u(da1), 0, 0, 0, 0);
    let f = _mm_cvtph_ps(h);
    let p = _mm_mul_ps(f, _mm_movehl_ps(f, f));
    let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p))
}

/// Signed × signed byte dot products (4 per i32 lane) with VNNI: `|x| · (y * sign(x))`.
/// `y` must not hold -128; `x` may (|−128| = 128 is a valid unsigned operand).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn dpbusd_i8i8(acc: __m512i, x: __m512i, y: __m512i) -> __m512i {
    let neg = _mm512_movepi8_mask(x);
    let ys = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(x), ys)
}

/// Same as [`dpbusd_i8i8`] on 256-bit vectors (AVX512-VL encoding).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dpbusd_i8i8_256(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
    let neg = _mm256_movepi8_mask(x);
    let ys = _mm256_mask_sub_epi8(y, neg, _mm256_setzero_si256(), y);
    _mm256_dpbusd_epi32(acc, _mm256_abs_epi8(x), ys)
}

/// The 16 i32 lanes folded to 8 (low half + high half).
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn fold_epi32(v: __m512i) -> __m256i {
    _mm256_add_epi32(
        _mm512_castsi512_si256(v),
        _mm512_extracti64x4_epi64::<1>(v),
    )
}

/// Sum of the 16 lanes.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn hsum512_ps(v: __m512) -> f32 {
    let x = _mm256_add_ps(
        _mm512_castps512_ps256(v),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))),
    );
    hsum_ps(x)
}

/// Broadcasts 4 i16 scales, one per 128-bit lane: lane `k` holds `sc[k]` eight times.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn scales_4x8(s0: i16, s1: i16, s2: i16, s3: i16) -> __m512i {
    let v = _mm_setr_epi16(s0, s1, s2, s3, 0, 0, 0, 0);
    #[rustfmt::skip]
    let idx = _mm512_setr_epi64(
        0x0000_0000_0000_0000, 0x0000_0000_0000_0000,
        0x0001_0001_0001_0001, 0x0001_0001_0001_0001,
        0x0002_0002_0002_0002, 0x0002_0002_0002_0002,
        0x0003_0003_0003_0003, 0x0003_0003_0003_0003,
    );
    _mm512_permutexvar_epi16(idx, _mm512_castsi128_si512(v))
}

/// `[a ×16 i16 | b ×16 i16]`: one scale per 256-bit half (a 32-element sub-block each).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn scales_2x16(a: i16, b: i16) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_set1_epi16(a), _mm256_set1_epi16(b))
}
