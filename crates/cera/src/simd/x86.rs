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

use super::PACKED_BLOCK_BYTES;
use super::math::F32s;

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

/// Loads 8 floats.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn ld_ps(x: &[f32]) -> __m256 {
    assert!(x.len() >= 8);
    // SAFETY: 8 readable floats checked above; unaligned load.
    unsafe { _mm256_loadu_ps(x.as_ptr()) }
}

/// Largest lane.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hmax_ps(v: __m256) -> f32 {
    let x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    let x = _mm_max_ss(x, _mm_movehdup_ps(x));
    _mm_cvtss_f32(x)
}

/// `|x|`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn abs_ps(x: __m256) -> __m256 {
    _mm256_andnot_ps(_mm256_set1_ps(-0.0), x)
}

/// Four vectors of i32 (in range for i8) to 32 bytes in element order.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn pack_i32x32_to_i8(i0: __m256i, i1: __m256i, i2: __m256i, i3: __m256i) -> __m256i {
    // packs works per 128-bit half: the result holds 4-element groups in the order
    // 0 2 4 6 1 3 5 7; the permute puts them back.
    let a = _mm256_packs_epi32(i0, i1);
    let b = _mm256_packs_epi32(i2, i3);
    let v = _mm256_packs_epi16(a, b);
    _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
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

/// Sixteen i16 scales (`cvtepi8_epi16` of a K-quant's sub-block scales) as two registers that
/// hold scales 0..8 and 8..16 in both 128-bit lanes, for [`pick_scale_pair`].
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn split_scales(sc16: __m256i) -> [__m256i; 2] {
    [
        _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc16)),
        _mm256_broadcastsi128_si256(_mm256_extracti128_si256::<1>(sc16)),
    ]
}

/// From one half of [`split_scales`]: `[s[2j] ×8 | s[2j+1] ×8]` (`j` in 0..4), the scales of
/// two 16-element sub-blocks, with one `vpshufb`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn pick_scale_pair(half: __m256i, j: usize) -> __m256i {
    let pair = |i: usize| (2 * i) as i16 | (((2 * i + 1) as i16) << 8);
    let idx = _mm256_set_m128i(_mm_set1_epi16(pair(2 * j + 1)), _mm_set1_epi16(pair(2 * j)));
    _mm256_shuffle_epi8(half, idx)
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

/// Two 32-byte loads side by side.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn ld256x2(lo: &[u8], hi: &[u8]) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(ld256(lo)), ld256(hi))
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

// ---------------------------------------------------------------------------------------------
// Drivers for the 32-element block formats
// ---------------------------------------------------------------------------------------------

/// `[x0·y0, x1·y1, ·, ·]` for two f16 pairs. The four values are packed in a general-purpose
/// register and converted with one `vmovq` + `vcvtph2ps` (element inserts would crowd the
/// shuffle port).
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn f16_pair_products(x0: [u8; 2], x1: [u8; 2], y0: [u8; 2], y1: [u8; 2]) -> __m128 {
    let u = |b: [u8; 2]| u16::from_le_bytes(b) as u64;
    let bits = u(x0) | (u(x1) << 16) | (u(y0) << 32) | (u(y1) << 48);
    let v = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64));
    _mm_mul_ps(v, _mm_movehl_ps(v, v))
}

/// Sums lanes 0 and 1.
#[inline]
#[target_feature(enable = "avx2")]
fn sum01(v: __m128) -> f32 {
    _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)))
}

/// The AVX2 loop of a 32-element block format: two blocks per step into two accumulators.
/// `dot` gives a block's integer dot product as 8 i32 partial sums, `d` its two f16 scales
/// (weight, activation); with `OFFSET`, `offset` gives the f16 pair whose product is added per
/// block (Q4_1/Q5_1: the weight's min and the activation's `s`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn drive32_avx2<W, A, const OFFSET: bool>(
    w: &[W],
    a: &[A],
    dot: impl Fn(&W, &A) -> __m256i,
    d: impl Fn(&W, &A) -> [[u8; 2]; 2],
    offset: impl Fn(&W, &A) -> [[u8; 2]; 2],
) -> f32 {
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut accm = _mm_setzero_ps();
    let (wp, ap) = (w.chunks_exact(2), a.chunks_exact(2));
    let (wr, ar) = (wp.remainder(), ap.remainder());
    for (b, y) in wp.zip(ap) {
        let (s0, s1) = (dot(&b[0], &y[0]), dot(&b[1], &y[1]));
        let ([dw0, da0], [dw1, da1]) = (d(&b[0], &y[0]), d(&b[1], &y[1]));
        let p = f16_pair_products(dw0, dw1, da0, da1);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_broadcastss_ps(p), acc0);
        let p1 = _mm_movehdup_ps(p);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_broadcastss_ps(p1), acc1);
        if OFFSET {
            let ([m0, s0], [m1, s1]) = (offset(&b[0], &y[0]), offset(&b[1], &y[1]));
            accm = _mm_add_ps(accm, f16_pair_products(m0, m1, s0, s1));
        }
    }
    let mut sum = hsum_ps(_mm256_add_ps(acc0, acc1)) + sum01(accm);
    for (b, y) in wr.iter().zip(ar) {
        let [dw, da] = d(b, y);
        sum += hsum_epi32(dot(b, y)) as f32 * (f16(dw) * f16(da));
        if OFFSET {
            let [m, s] = offset(b, y);
            sum += f16(m) * f16(s);
        }
    }
    sum
}

/// The AVX-512 loop of a 32-element block format: two blocks per 512-bit vector, two such
/// pairs per step into two accumulators. `dot2` gives the integer dot products of a pair of
/// blocks as 16 i32 partial sums (8 per block), `dot1` one block's as 8; `d` and `offset` as in
/// [`drive32_avx2`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn drive32_avx512<W, A, const OFFSET: bool>(
    w: &[W],
    a: &[A],
    dot2: impl Fn(&[W], &[A]) -> __m512i,
    dot1: impl Fn(&W, &A) -> __m256i,
    d: impl Fn(&W, &A) -> [[u8; 2]; 2],
    offset: impl Fn(&W, &A) -> [[u8; 2]; 2],
) -> f32 {
    let (mut acc0, mut acc1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut accm = _mm_setzero_ps();
    let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let mut pair = |b: &[W], y: &[A]| {
        let s = dot2(b, y);
        let ([dw0, da0], [dw1, da1]) = (d(&b[0], &y[0]), d(&b[1], &y[1]));
        let p = f16_pair_products(dw0, dw1, da0, da1);
        let p = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p));
        if OFFSET {
            let ([m0, s0], [m1, s1]) = (offset(&b[0], &y[0]), offset(&b[1], &y[1]));
            accm = _mm_add_ps(accm, f16_pair_products(m0, m1, s0, s1));
        }
        (_mm512_cvtepi32_ps(s), p)
    };
    let (wq, aq) = (w.chunks_exact(4), a.chunks_exact(4));
    let (wr, ar) = (wq.remainder(), aq.remainder());
    for (b, y) in wq.zip(aq) {
        let (s0, p0) = pair(&b[..2], &y[..2]);
        acc0 = _mm512_fmadd_ps(s0, p0, acc0);
        let (s1, p1) = pair(&b[2..], &y[2..]);
        acc1 = _mm512_fmadd_ps(s1, p1, acc1);
    }
    if wr.len() >= 2 {
        let (s0, p0) = pair(&wr[..2], &ar[..2]);
        acc0 = _mm512_fmadd_ps(s0, p0, acc0);
    }
    let mut sum = hsum512_ps(_mm512_add_ps(acc0, acc1)) + sum01(accm);
    if wr.len() % 2 == 1 {
        let (b, y) = (&wr[wr.len() - 1], &ar[ar.len() - 1]);
        let [dw, da] = d(b, y);
        sum += hsum_epi32(dot1(b, y)) as f32 * (f16(dw) * f16(da));
        if OFFSET {
            let [m, s] = offset(b, y);
            sum += f16(m) * f16(s);
        }
    }
    sum
}

// ---------------------------------------------------------------------------------------------
// GEMM driver for the 32-element block formats (prefill)
// ---------------------------------------------------------------------------------------------

/// `out[t * ldo + r] = Σ w_r · a_t` for the `n_rows` rows of `w`, a matrix of a 32-element
/// format in the x8 layout (`kernels::pack`: `nb` super-blocks of `sb` bytes per group of eight
/// rows), and the `NT` (1 to 4) tokens of `packed` (the layout of
/// [`ActRows::pack`](super::ActRows::pack)), on 256-bit vectors: VNNI on the AVX-512 tier,
/// `vpmaddubsw` + `vpmaddwd` on the AVX2 tier.
///
/// One row per 32-bit lane: `unpack` turns a super-block into eight vectors, vector `j` holding
/// every row's (unsigned) codes `4j..4j+4`; each token's activation bytes `4j..4j+4`, broadcast,
/// meet them in `vpdpbusd`, and after eight of those each lane holds its row's integer block
/// sum. The float work (scales, offsets) runs once per eight rows, and no horizontal sums are
/// needed. A token's result depends neither on `NT` nor on the other rows, so a token's logits
/// are the same whether it is decoded alone or prefilled in a batch.
///
/// The weight value is `d · (code − z)` (`MIN = false`) or `d · code + m` (`MIN = true`), with
/// `d` and `m` at `offs` in the super-block. Per block and token, in ggml's order:
/// `acc += (d_w·d_a) · Σ (code − z)·a` with the sum exact in integers, and for the `MIN` formats
/// `acc_m += m · s_a` (`s_a` = Q8_1's `d_a Σa`), added at the end.
///
/// `D` is the tier's u8 × i8 dot-accumulate ([`Dp`]); this body is inlined into the tiers'
/// `#[target_feature]` wrappers, which is what makes its intrinsics available.
#[inline(always)]
#[allow(clippy::too_many_arguments, unsafe_op_in_unsafe_fn)]
pub(crate) unsafe fn gemm_x8<D: Dp, const MIN: bool, const NT: usize>(
    w: &[u8],
    n_rows: usize,
    nb: usize,
    sb: usize,
    offs: (usize, usize),
    z: u8,
    unpack: impl Fn(&[u8]) -> [__m256i; 8],
    packed: &[u8],
    out: &mut [f32],
    ldo: usize,
) {
    assert!(nb > 0 && (1..=4).contains(&NT) && offs.0 + 16 <= sb && (!MIN || offs.1 + 16 <= sb));
    let groups = n_rows.div_ceil(8);
    assert!(w.len() >= groups * nb * sb);
    let stride = NT * PACKED_BLOCK_BYTES;
    assert!(packed.len() >= nb * stride + 16);
    assert!(out.len() >= (NT - 1) * ldo + n_rows);
    let negz = -(z as i32);
    for g in 0..groups {
        let mut acc = [_mm256_setzero_ps(); NT];
        let mut accm = [_mm256_setzero_ps(); NT];
        let mut p = packed.as_ptr();
        for s in w[g * nb * sb..(g + 1) * nb * sb].chunks_exact(sb) {
            prefetch_l2(s.as_ptr().wrapping_add(PREFETCH_AHEAD), sb);
            let cw = unpack(s);
            let dw = _mm256_cvtph_ps(ld128(&s[offs.0..]));
            let mw = if MIN {
                _mm256_cvtph_ps(ld128(&s[offs.1..]))
            } else {
                dw
            };
            for (t, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `p` walks `nb` blocks of `stride` bytes (checked above).
                let (a, da, extra) = unsafe {
                    (
                        p.add(32 * t).cast::<i32>(),
                        _mm256_set1_ps(p.add(32 * NT + 4 * t).cast::<f32>().read_unaligned()),
                        p.add(36 * NT + 4 * t).cast::<[u8; 4]>().read(),
                    )
                };
                // zero-point formats: `−z·Σa` starts the integer sum, so it is exact
                let mut s0 = if MIN {
                    _mm256_setzero_si256()
                } else {
                    _mm256_set1_epi32(negz * i32::from_le_bytes(extra))
                };
                let mut s1 = _mm256_setzero_si256();
                for j in (0..8).step_by(2) {
                    // SAFETY: within the token's 32 codes.
                    let (y0, y1) = unsafe {
                        (
                            _mm256_set1_epi32(a.add(j).read_unaligned()),
                            _mm256_set1_epi32(a.add(j + 1).read_unaligned()),
                        )
                    };
                    s0 = D::dp(s0, cw[j], y0);
                    s1 = D::dp(s1, cw[j + 1], y1);
                }
                // ggml's order: the scale product first, then one FMA; the offsets apart
                let dd = _mm256_mul_ps(dw, da);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), dd, *acc);
                if MIN {
                    let sa = _mm256_set1_ps(f32::from_le_bytes(extra));
                    accm[t] = _mm256_fmadd_ps(mw, sa, accm[t]);
                }
            }
            // SAFETY: stays within the checked range (one past the last block at most).
            p = unsafe { p.add(stride) };
        }
        let r0 = 8 * g;
        let n = (n_rows - r0).min(8);
        if MIN {
            for (a, m) in acc.iter_mut().zip(&accm) {
                *a = _mm256_add_ps(*a, *m);
            }
        }
        for (t, a) in acc.iter().enumerate() {
            let dst = &mut out[t * ldo + r0..t * ldo + r0 + n];
            if n == 8 {
                // SAFETY: `dst` holds eight f32.
                unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), *a) };
            } else {
                let mut v = [0f32; 8];
                // SAFETY: eight f32.
                unsafe { _mm256_storeu_ps(v.as_mut_ptr(), *a) };
                dst.copy_from_slice(&v[..n]);
            }
        }
    }
}

/// The four-byte dot-accumulate of the x8 GEMMs: `acc + Σ_k u[4i+k]·s[4i+k]` per 32-bit lane
/// (`u` unsigned, `s` signed bytes), per tier. The bodies are `#[inline(always)]` and only run
/// inlined into a `#[target_feature]` function of their tier.
pub(crate) trait Dp {
    /// # Safety
    /// The host must have the tier's features.
    unsafe fn dp(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;

    /// `x + v` in the bytes where `h & bit` is nonzero (`bit` one bit per byte): how the
    /// K-quant GEMMs add a high bit (Q3_K's third, Q5_K's fifth) to the low bits of their
    /// codes. AVX2 turns the test into a byte mask by compare; the AVX-512 tier overrides it
    /// with a mask register.
    ///
    /// # Safety
    /// As [`Dp::dp`].
    #[inline(always)]
    unsafe fn add_where(x: __m256i, h: __m256i, bit: __m256i, v: __m256i) -> __m256i {
        // SAFETY: the caller runs on the AVX2 tier or above.
        unsafe {
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
            _mm256_add_epi8(x, _mm256_and_si256(set, v))
        }
    }
}

/// `vpdpbusd` (AVX512-VNNI on 256-bit vectors).
pub(crate) struct Vnni;

impl Dp for Vnni {
    #[inline(always)]
    unsafe fn dp(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the caller runs on the AVX-512 tier.
        unsafe { _mm256_dpbusd_epi32(acc, u, s) }
    }

    #[inline(always)]
    unsafe fn add_where(x: __m256i, h: __m256i, bit: __m256i, v: __m256i) -> __m256i {
        // SAFETY: the caller runs on the AVX-512 tier.
        unsafe { _mm256_mask_add_epi8(x, _mm256_test_epi8_mask(h, bit), x, v) }
    }
}

/// `vpmaddubsw` then `vpmaddwd` against ones (AVX2). Exact only while no pair of products
/// saturates i16, i.e. for codes below 128: the nibble formats, Q5 and Q6_K codes.
pub(crate) struct Maddubs;

impl Dp for Maddubs {
    #[inline(always)]
    unsafe fn dp(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the caller runs on the AVX2 tier.
        unsafe {
            let pairs = _mm256_maddubs_epi16(u, s);
            _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        }
    }
}

/// Signed weight bytes × signed activation bytes with AVX2: `vpmaddubsw(|w|, a·sign(w))` then
/// `vpmaddwd` against ones. Exact for weights in −128..=127 and activations in −127..=127 (a
/// pair of products stays within 2·128·127), which Q8_0 activations are.
pub(crate) struct SignedMaddubs;

impl Dp for SignedMaddubs {
    #[inline(always)]
    unsafe fn dp(acc: __m256i, w: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the caller runs on the AVX2 tier.
        unsafe {
            let pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(s, w));
            _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        }
    }
}

/// Code vectors of a nibble format's x8 super-block: low nibbles of vector `v` are codes
/// `4v..`, high nibbles codes `16 + 4v..` (code vector `v + 4`).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn unpack_x8_nibbles(s: &[u8]) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut c = [_mm256_setzero_si256(); 8];
    for v in 0..4 {
        let x = ld256(&s[32 * v..]);
        c[v] = _mm256_and_si256(x, m4);
        c[v + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4);
    }
    c
}

/// Adds the fifth bits of a Q5 x8 super-block (masks at byte 128) to its nibble codes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
pub(crate) fn unpack_x8_q5(s: &[u8]) -> [__m256i; 8] {
    assert!(s.len() >= 160);
    let mut c = unpack_x8_nibbles(s);
    let sixteen = _mm256_set1_epi8(16);
    for (j, cj) in c.iter_mut().enumerate() {
        // straight from memory into a mask register (not through a general register)
        // SAFETY: bytes 128 + 4j .. 132 + 4j are in `s` (checked above).
        let m = unsafe { _load_mask32(s.as_ptr().add(128 + 4 * j).cast::<__mmask32>()) };
        *cj = _mm256_mask_add_epi8(*cj, m, *cj, sixteen);
    }
    c
}

/// [`unpack_x8_q5`] with AVX2 only: the fifth-bit masks become bytes by shuffle and compare.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn unpack_x8_q5_avx2(s: &[u8]) -> [__m256i; 8] {
    let mut c = unpack_x8_nibbles(s);
    let sixteen = _mm256_set1_epi8(16);
    for (j, cj) in c.iter_mut().enumerate() {
        let m = u32::from_le_bytes(s[128 + 4 * j..132 + 4 * j].try_into().unwrap());
        *cj = _mm256_or_si256(*cj, _mm256_and_si256(bits_to_bytes(m), sixteen));
    }
    c
}

/// Eight bytes, zero-extended into an `__m128i`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn ld_u64(s: &[u8]) -> __m128i {
    _mm_cvtsi64_si128(i64::from_le_bytes(s[..8].try_into().unwrap()))
}

/// Four bytes broadcast to every 32-bit lane.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn bcast_dword(s: &[u8]) -> __m256i {
    _mm256_set1_epi32(i32::from_le_bytes(s[..4].try_into().unwrap()))
}

/// Stores lane `i` of `acc[t]` at `out[t * ldo + r0 + i]` for the rows below `n_rows`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn store_rows8(acc: &[__m256], out: &mut [f32], ldo: usize, r0: usize, n_rows: usize) {
    let n = (n_rows - r0).min(8);
    for (t, a) in acc.iter().enumerate() {
        let dst = &mut out[t * ldo + r0..t * ldo + r0 + n];
        if n == 8 {
            // SAFETY: `dst` holds eight f32.
            unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), *a) };
        } else {
            let mut v = [0f32; 8];
            // SAFETY: eight f32.
            unsafe { _mm256_storeu_ps(v.as_mut_ptr(), *a) };
            dst.copy_from_slice(&v[..n]);
        }
    }
}

/// How far ahead of the super-block being computed the GEMMs prefetch their weights.
pub(crate) const PREFETCH_AHEAD: usize = 16 << 10;

/// Asks for the `len` bytes at `p` in L2 ahead of their use. The GEMMs call it once per
/// super-block for the super-block [`PREFETCH_AHEAD`] bytes further on: left to the hardware
/// prefetcher, a weight stream from memory ran at half the speed of the same work in cache
/// (four-token Q6_K: 4.8 ms against 1.9 ms per 110 MB). Into L2 (`T1`), not L1: with the `T0`
/// hint 12 KiB ahead, one decode token's stream of packed Q4_K (16 GB/s from memory against
/// 44 in cache, one thread; `bench_dot`) was slower than with no prefetch at all, the far
/// prefetches holding L1's few fill buffers; into L2 16 KiB ahead it is 20-22 GB/s, and
/// Llama-3.2-1B's Q4_K_M decode on two threads went from 29 to 38 t/s. A hint: nothing is
/// read, and an address past the buffer is harmless.
#[inline(always)]
#[allow(unused_unsafe)]
pub(crate) fn prefetch_l2(p: *const u8, len: usize) {
    for l in (0..len).step_by(64) {
        // SAFETY: prefetching never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(l).cast()) };
    }
}

// ---- the vector math's registers (`simd::math`) ----

// The AVX2 tier's register (FMA is part of the tier). `max`/`min` return their second
// operand when either is NaN, so `x` goes second to keep a NaN.
#[allow(unsafe_op_in_unsafe_fn)]
impl F32s for __m256 {
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        _mm256_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm256_storeu_ps(p, self)
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        _mm256_add_ps(self, o)
    }
    #[inline(always)]
    unsafe fn sub(self, o: Self) -> Self {
        _mm256_sub_ps(self, o)
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        _mm256_mul_ps(self, o)
    }
    #[inline(always)]
    unsafe fn div(self, o: Self) -> Self {
        _mm256_div_ps(self, o)
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        _mm256_fmadd_ps(self, b, c)
    }
    #[inline(always)]
    unsafe fn neg_mul_add(self, b: Self, c: Self) -> Self {
        _mm256_fnmadd_ps(self, b, c)
    }
    #[inline(always)]
    unsafe fn abs(self) -> Self {
        _mm256_andnot_ps(_mm256_set1_ps(-0.0), self)
    }
    #[inline(always)]
    unsafe fn clamp(self, lo: f32, hi: f32) -> Self {
        _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), self))
    }
    #[inline(always)]
    unsafe fn round(self) -> Self {
        _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(self)
    }
    #[inline(always)]
    unsafe fn scale2(self, n: Self) -> Self {
        // two factors 2^(n/2) and 2^(n - n/2), each a normal float, so that the product
        // overflows or underflows (through subnormals) only at the last multiply
        let n = _mm256_cvtps_epi32(n);
        let n1 = _mm256_srai_epi32::<1>(n);
        let n2 = _mm256_sub_epi32(n, n1);
        let pow2 = |k| {
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                k,
                _mm256_set1_epi32(127),
            )))
        };
        _mm256_mul_ps(_mm256_mul_ps(self, pow2(n1)), pow2(n2))
    }
    #[inline(always)]
    unsafe fn copysign(self, sign: Self) -> Self {
        let m = _mm256_set1_ps(-0.0);
        _mm256_or_ps(_mm256_andnot_ps(m, self), _mm256_and_ps(m, sign))
    }
    #[inline(always)]
    unsafe fn select_lt(a: Self, b: Self, t: Self, f: Self) -> Self {
        _mm256_blendv_ps(f, t, _mm256_cmp_ps::<_CMP_LT_OQ>(a, b))
    }
    #[inline(always)]
    unsafe fn sum(self) -> f32 {
        hsum_ps(self)
    }
}

// The AVX-512 tier's register: as `__m256`, with `vscalefps` for the scaling (which handles
// overflow, underflow and NaN itself).
#[allow(unsafe_op_in_unsafe_fn)]
impl F32s for __m512 {
    const LANES: usize = 16;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        _mm512_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm512_storeu_ps(p, self)
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        _mm512_add_ps(self, o)
    }
    #[inline(always)]
    unsafe fn sub(self, o: Self) -> Self {
        _mm512_sub_ps(self, o)
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        _mm512_mul_ps(self, o)
    }
    #[inline(always)]
    unsafe fn div(self, o: Self) -> Self {
        _mm512_div_ps(self, o)
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        _mm512_fmadd_ps(self, b, c)
    }
    #[inline(always)]
    unsafe fn neg_mul_add(self, b: Self, c: Self) -> Self {
        _mm512_fnmadd_ps(self, b, c)
    }
    #[inline(always)]
    unsafe fn abs(self) -> Self {
        _mm512_abs_ps(self)
    }
    #[inline(always)]
    unsafe fn clamp(self, lo: f32, hi: f32) -> Self {
        _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), self))
    }
    #[inline(always)]
    unsafe fn round(self) -> Self {
        _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(self)
    }
    #[inline(always)]
    unsafe fn scale2(self, n: Self) -> Self {
        _mm512_scalef_ps(self, n)
    }
    #[inline(always)]
    unsafe fn copysign(self, sign: Self) -> Self {
        let m = _mm512_set1_ps(-0.0);
        _mm512_or_ps(_mm512_andnot_ps(m, self), _mm512_and_ps(m, sign))
    }
    #[inline(always)]
    unsafe fn select_lt(a: Self, b: Self, t: Self, f: Self) -> Self {
        _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b), f, t)
    }
    #[inline(always)]
    unsafe fn sum(self) -> f32 {
        _mm512_reduce_add_ps(self)
    }
}

/// The two x86 tiers' `#[target_feature]` entry points of a Q8_K-activation GEMM over
/// x8-packed weights, `gemm_x8_avx512` and `gemm_x8_avx2`: each runs the format's GEMM body
/// (`$body`, inlined into it) over activation blocks `$act` (Q8_K's), with the tier's
/// dot-accumulate and flags (`[$g512]`, `[$g2]`, the body's generic arguments before the
/// token count). What each format's kernel does is
/// said at its call.
macro_rules! kx8_gemm_entries {
    ($act:ty; $($body:ident)::+, [$($g512:tt)*], [$($g2:tt)*]) => {
        /// AVX-512 tier GEMM over x8-packed weights (`vpdpbusd`/`vpdpwssd`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        pub(crate) fn gemm_x8_avx512<const NT: usize>(
            k: usize,
            n_rows: usize,
            w: &[u8],
            acts: &crate::simd::GemmActs<'_, $act>,
            out: &mut [f32],
            ldo: usize,
        ) {
            // SAFETY: this function's features are the tier's.
            unsafe { $($body)::+::<$($g512)*, NT>(k, n_rows, w, acts, out, ldo) }
        }

        /// AVX2 tier GEMM over x8-packed weights (`vpmaddubsw`).
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn gemm_x8_avx2<const NT: usize>(
            k: usize,
            n_rows: usize,
            w: &[u8],
            acts: &crate::simd::GemmActs<'_, $act>,
            out: &mut [f32],
            ldo: usize,
        ) {
            // SAFETY: this function's features are the tier's.
            unsafe { $($body)::+::<$($g2)*, NT>(k, n_rows, w, acts, out, ldo) }
        }
    };
}
pub(crate) use kx8_gemm_entries;
