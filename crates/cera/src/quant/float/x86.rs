//! F32, F16 and BF16 on x86-64: the F16/BF16 activation converters (AVX2) and the dot products
//! (AVX2; AVX-512, with `vdpbf16ps` for BF16 where the host has AVX512-BF16).
//!
//! The rows are raw little-endian bytes (no alignment assumed); each kernel checks the lengths
//! once and then loads through raw pointers.

use std::arch::x86_64::*;

use crate::simd::x86::ld_ps;
use crate::simd::x86::{hsum_ps, hsum512_ps, prefetch_l2};

/// Checks that both rows hold `n` elements of `size` bytes.
#[inline]
fn check(n: usize, size: usize, w: &[u8], a: &[u8]) {
    let bytes = n.checked_mul(size).expect("row size overflows");
    assert!(
        w.len() >= bytes && a.len() >= bytes,
        "dot product rows hold {} and {} bytes, {bytes} needed",
        w.len(),
        a.len()
    );
}

/// AVX2 version of `float::quantize_f16` (F16C, round to nearest even), same bytes for every
/// finite input (and on F16C hosts for all inputs, as the `half` crate then uses F16C too).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize_f16_avx2(src: &[f32], dst: &mut [u8]) {
    let n = src.len().min(dst.len() / 2);
    let (src, dst) = (&src[..n], &mut dst[..2 * n]);
    let mut xs = src.chunks_exact(8);
    let mut ds = dst.chunks_exact_mut(16);
    for (x, d) in (&mut xs).zip(&mut ds) {
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(ld_ps(x));
        // SAFETY: `d` is 16 writable bytes; unaligned store.
        unsafe { _mm_storeu_si128(d.as_mut_ptr().cast(), h) };
    }
    super::quantize_f16(xs.remainder(), ds.into_remainder());
}

/// AVX2 version of `float::quantize_bf16`: the same integer round-to-nearest-even and NaN
/// quieting, so the bytes are identical for every input.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize_bf16_avx2(src: &[f32], dst: &mut [u8]) {
    let n = src.len().min(dst.len() / 2);
    let (src, dst) = (&src[..n], &mut dst[..2 * n]);
    let mut xs = src.chunks_exact(16);
    let mut ds = dst.chunks_exact_mut(32);
    let one = _mm256_set1_epi32(1);
    let bias = _mm256_set1_epi32(0x7fff);
    let quiet = _mm256_set1_epi32(64);
    for (x, d) in (&mut xs).zip(&mut ds) {
        let conv = |v: __m256| {
            let bits = _mm256_castps_si256(v);
            let hi = _mm256_srli_epi32::<16>(bits);
            let round = _mm256_add_epi32(bias, _mm256_and_si256(hi, one));
            let r = _mm256_srli_epi32::<16>(_mm256_add_epi32(bits, round));
            let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan)
        };
        let (a, b) = (conv(ld_ps(x)), conv(ld_ps(&x[8..])));
        // packus works per 128-bit half; permute the 64-bit groups back into order.
        let p = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(a, b));
        // SAFETY: `d` is 32 writable bytes; unaligned store.
        unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), p) };
    }
    super::quantize_bf16(xs.remainder(), ds.into_remainder());
}

/// The loop shared by the AVX2 dot products: 32 elements per step in four accumulators, then 8
/// at a time, then a scalar tail. `load(i)` returns elements `i..i+8` of a row as f32.
macro_rules! dot_avx2_body {
    ($n:expr, $w:expr, $a:expr, $load:expr, $conv:expr) => {{
        let (n, w, a) = ($n, $w, $a);
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps($load(w, i + 8 * k), $load(a, i + 8 * k), *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps($load(w, i), $load(a, i), acc[0]);
            i += 8;
        }
        let acc = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut sum = hsum_ps(acc);
        while i < n {
            sum += $conv(w, i) * $conv(a, i);
            i += 1;
        }
        sum
    }};
}

fn scalar_f32(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("4 bytes"))
}

fn scalar_f16(b: &[u8], i: usize) -> f32 {
    crate::quant::f16_to_f32([b[2 * i], b[2 * i + 1]])
}

fn scalar_bf16(b: &[u8], i: usize) -> f32 {
    f32::from_bits((u16::from_le_bytes([b[2 * i], b[2 * i + 1]]) as u32) << 16)
}

/// AVX2 `Σ w·a` over `n` f32 values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_f32_avx2(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check(n, 4, w, a);
    // SAFETY (all loads): `check` guarantees 4n bytes and every load reads elements i..i+8 < n.
    let load = |b: &[u8], i: usize| unsafe { _mm256_loadu_ps(b.as_ptr().add(4 * i).cast()) };
    dot_avx2_body!(n, w, a, load, scalar_f32)
}

/// AVX2 `Σ w·a` over `n` f16 values (F16C widening).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_f16_avx2(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check(n, 2, w, a);
    // SAFETY (all loads): `check` guarantees 2n bytes and every load reads elements i..i+8 < n.
    let load = |b: &[u8], i: usize| unsafe {
        _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(2 * i).cast()))
    };
    dot_avx2_body!(n, w, a, load, scalar_f16)
}

/// AVX2 `Σ w·a` over `n` bf16 values (widened by a 16-bit shift).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_bf16_avx2(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check(n, 2, w, a);
    // SAFETY (all loads): `check` guarantees 2n bytes and every load reads elements i..i+8 < n.
    let load = |b: &[u8], i: usize| unsafe {
        let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(b.as_ptr().add(2 * i).cast()));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
    };
    dot_avx2_body!(n, w, a, load, scalar_bf16)
}

/// The AVX-512 loop: 64 elements per step in four accumulators, then 16 at a time, then the
/// rest through a masked load (zeros beyond `n`).
macro_rules! dot_avx512_body {
    ($n:expr, $w:expr, $a:expr, $load:expr) => {{
        let (n, w, a) = ($n, $w, $a);
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        while i + 64 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                let k = i + 16 * k;
                *acc = _mm512_fmadd_ps($load(w, k, !0), $load(a, k, !0), *acc);
            }
            i += 64;
        }
        while i + 16 <= n {
            acc[0] = _mm512_fmadd_ps($load(w, i, !0), $load(a, i, !0), acc[0]);
            i += 16;
        }
        if i < n {
            let m: __mmask16 = (1u16 << (n - i)) - 1;
            acc[1] = _mm512_fmadd_ps($load(w, i, m), $load(a, i, m), acc[1]);
        }
        hsum512_ps(_mm512_add_ps(
            _mm512_add_ps(acc[0], acc[1]),
            _mm512_add_ps(acc[2], acc[3]),
        ))
    }};
}

/// AVX-512 `Σ w·a` over `n` f32 values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_f32_avx512(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check(n, 4, w, a);
    // SAFETY (all loads): `check` guarantees 4n bytes; the mask covers only elements below n.
    let load = |b: &[u8], i: usize, m: __mmask16| unsafe {
        _mm512_maskz_loadu_ps(m, b.as_ptr().add(4 * i).cast())
    };
    dot_avx512_body!(n, w, a, load)
}

/// AVX-512 `Σ w·a` over `n` f16 values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_f16_avx512(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check(n, 2, w, a);
    // SAFETY (all loads): `check` guarantees 2n bytes; the mask covers only elements below n.
    let load = |b: &[u8], i: usize, m: __mmask16| unsafe {
        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b.as_ptr().add(2 * i).cast()))
    };
    dot_avx512_body!(n, w, a, load)
}

/// AVX-512 `Σ w·a` over `n` bf16 values, widened by a shift (hosts without AVX512-BF16).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_bf16_avx512(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check(n, 2, w, a);
    // SAFETY (all loads): `check` guarantees 2n bytes; the mask covers only elements below n.
    let load = |b: &[u8], i: usize, m: __mmask16| unsafe {
        let h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, b.as_ptr().add(2 * i).cast()));
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(h))
    };
    dot_avx512_body!(n, w, a, load)
}

/// AVX512-BF16 `Σ w·a` over `n` bf16 values: `vdpbf16ps` multiplies 32 pairs per instruction
/// into f32 accumulators. (The instruction flushes bf16 subnormals to zero and rounds its pair
/// sums to nearest even, so the result can differ from the widening kernels in the last bits.)
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx2,fma,f16c")]
pub(crate) fn vec_dot_bf16_avx512bf16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    check(n, 2, w, a);
    // SAFETY (all loads): `check` guarantees 2n bytes; the mask covers only elements below n.
    let load = |b: &[u8], i: usize, m: __mmask32| unsafe {
        let v = _mm512_maskz_loadu_epi16(m, b.as_ptr().add(2 * i).cast());
        std::mem::transmute::<__m512i, __m512bh>(v)
    };
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i + 128 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let k = i + 32 * k;
            *acc = _mm512_dpbf16_ps(*acc, load(w, k, !0), load(a, k, !0));
        }
        i += 128;
    }
    while i < n {
        let m: __mmask32 = if n - i >= 32 {
            !0
        } else {
            (1u32 << (n - i)) - 1
        };
        acc[0] = _mm512_dpbf16_ps(acc[0], load(w, i, m), load(a, i, m));
        i += 32;
    }
    hsum512_ps(_mm512_add_ps(
        _mm512_add_ps(acc[0], acc[1]),
        _mm512_add_ps(acc[2], acc[3]),
    ))
}

/// The AVX-512 GEMM loop: four weight rows × `NT` tokens of accumulators, so each loaded (and
/// converted) weight vector serves every token and each activation vector four rows; the tail
/// of a row goes through a masked load.
macro_rules! gemm_avx512_body {
    ($size:expr, $k:expr, $n_rows:expr, $w:expr, $acts:expr, $out:expr, $ldo:expr, $load:expr) => {{
        let (k, n_rows, w, acts, out, ldo) = ($k, $n_rows, $w, $acts, $out, $ldo);
        let rb = k * $size;
        assert!(acts.n == NT && w.len() >= n_rows * rb && out.len() >= (NT - 1) * ldo + n_rows);
        for t in 0..NT {
            assert!(acts.rows[t].len() >= rb, "activation row of {k}");
        }
        for r0 in (0..n_rows).step_by(4) {
            let nr = (n_rows - r0).min(4);
            // rows past the end repeat the last one; their sums are dropped
            let wr: [&[u8]; 4] = std::array::from_fn(|r| &w[(r0 + r.min(nr - 1)) * rb..]);
            let mut acc = [[_mm512_setzero_ps(); NT]; 4];
            let mut i = 0;
            while i < k {
                let m: __mmask16 = if k - i >= 16 {
                    !0
                } else {
                    (1u16 << (k - i)) - 1
                };
                let a: [__m512; NT] = std::array::from_fn(|t| $load(acts.rows[t], i, m));
                for (row, acc) in wr.iter().zip(acc.iter_mut()) {
                    let wv = $load(row, i, m);
                    for (acc, a) in acc.iter_mut().zip(&a) {
                        *acc = _mm512_fmadd_ps(wv, *a, *acc);
                    }
                }
                i += 16;
            }
            for (r, acc) in acc.iter().enumerate().take(nr) {
                for (t, acc) in acc.iter().enumerate() {
                    out[t * ldo + r0 + r] = hsum512_ps(*acc);
                }
            }
        }
    }};
}

/// AVX-512 GEMM over f32 rows: `out[t * ldo + r] = Σ w_r · a_t` for `NT` tokens.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn gemm_f32_avx512<const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &crate::simd::ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    // SAFETY (all loads): every row holds 4k bytes (asserted); the mask stops at k.
    let load = |b: &[u8], i: usize, m: __mmask16| unsafe {
        _mm512_maskz_loadu_ps(m, b.as_ptr().add(4 * i).cast())
    };
    gemm_avx512_body!(4, k, n_rows, w, acts, out, ldo, load)
}

/// AVX-512 GEMM over f16 rows (converted with `vcvtph2ps`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn gemm_f16_avx512<const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &crate::simd::ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    // SAFETY (all loads): every row holds 2k bytes (asserted); the mask stops at k.
    let load = |b: &[u8], i: usize, m: __mmask16| unsafe {
        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b.as_ptr().add(2 * i).cast()))
    };
    gemm_avx512_body!(2, k, n_rows, w, acts, out, ldo, load)
}

/// AVX-512 GEMM over bf16 rows (widened by a shift).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(crate) fn gemm_bf16_avx512<const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &crate::simd::ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    // SAFETY (all loads): every row holds 2k bytes (asserted); the mask stops at k.
    let load = |b: &[u8], i: usize, m: __mmask16| unsafe {
        let h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, b.as_ptr().add(2 * i).cast()));
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(h))
    };
    gemm_avx512_body!(2, k, n_rows, w, acts, out, ldo, load)
}

/// Elements `i0..i1` (multiples of 32) of one weight row against `M` tokens, 32 per step into
/// four accumulators per token as the AVX2 dot products (`dot_avx2_body!`) run them; each
/// weight vector is loaded and converted once for the `M` tokens. `M` is at most 2: 4·`M`
/// accumulators, the weight vector and an activation vector then fit the sixteen registers.
///
/// # Safety
/// The host has AVX2, FMA and F16C; `load(row, i)` must be sound for `i + 8 ≤ i1`, and each
/// activation row must hold `i1` values (its loads are unchecked).
#[inline(always)]
#[allow(unsafe_op_in_unsafe_fn)]
unsafe fn gemm_avx2_steps<const M: usize>(
    acc: &mut [[__m256; 4]; M],
    row: &[u8],
    a: [&[f32]; M],
    (i0, i1): (usize, usize),
    load: impl Fn(&[u8], usize) -> __m256,
) {
    let mut i = i0;
    while i + 32 <= i1 {
        for q in 0..4 {
            let wv = load(row, i + 8 * q);
            for (acc, a) in acc.iter_mut().zip(&a) {
                let av = _mm256_loadu_ps(a.as_ptr().add(i + 8 * q));
                acc[q] = _mm256_fmadd_ps(wv, av, acc[q]);
            }
        }
        i += 32;
    }
}

/// The end of a row after its 32-element steps (from `i0`): 8 at a time into the first
/// accumulator, the pairwise sum of the four, the horizontal sum and a scalar tail, as
/// `dot_avx2_body!` ends.
///
/// # Safety
/// As [`gemm_avx2_steps`], up to `k`.
#[inline(always)]
#[allow(unsafe_op_in_unsafe_fn)]
unsafe fn gemm_avx2_finish<const M: usize>(
    mut acc: [[__m256; 4]; M],
    row: &[u8],
    a: [&[f32]; M],
    (i0, k): (usize, usize),
    load: impl Fn(&[u8], usize) -> __m256,
    conv: fn(&[u8], usize) -> f32,
) -> [f32; M] {
    let mut i = i0;
    while i + 8 <= k {
        let wv = load(row, i);
        for (acc, a) in acc.iter_mut().zip(&a) {
            acc[0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(a.as_ptr().add(i)), acc[0]);
        }
        i += 8;
    }
    std::array::from_fn(|t| {
        let acc = &acc[t];
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut sum = hsum_ps(v);
        for (e, &av) in a[t].iter().enumerate().take(k).skip(i) {
            sum += conv(row, e) * av;
        }
        sum
    })
}

/// Activation elements per span of [`gemm_avx2_body!`]: four tokens' f32 values take 16 KiB of
/// L1, beside 2 to 4 KiB of the current weight row (1024 measured a little faster than 512).
const GEMM_SPAN: usize = 1024;

/// Rows per tile of [`gemm_avx2_body!`]: their accumulators (4 KiB for four tokens) stay in L1
/// between spans.
const GEMM_TILE: usize = 8;

thread_local! {
    /// The AVX2 float GEMMs' activations widened to f32 (grown once per thread, then reused).
    static WIDE_ACTS: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The AVX2 GEMM: every (row, token) sum in the AVX2 GEMV's order (the same FMAs into the same
/// four accumulators, the same reduction), so each has the GEMV's bits and prefill computes
/// what decode computes. The tokens go two at a time through a row ([`gemm_avx2_steps`]: the
/// weight vector loaded and converted once for both; eight accumulators are as many as the
/// sixteen registers hold beside it). The activations are widened to f32 once per call, and
/// tiles of [`GEMM_TILE`] rows are walked a span of [`GEMM_SPAN`] elements at a time (the
/// accumulators kept between spans, the next tile prefetched), so the activations read stay in
/// L1: converting BF16 ones beside every weight vector, as the GEMV does, or reading whole f32
/// rows from L2 left the GEMM no faster than four GEMVs (`bench_dot`: 1.0 ms against 1.0). The
/// loop stays bound by its loads (1.5 per FMA against the GEMV's 2), which is why F16, whose
/// GEMV converts cheaply, has no AVX2 GEMM: it measured 0.62 ms against four GEMVs' 0.65.
macro_rules! gemm_avx2_body {
    ($size:expr, $k:expr, $n_rows:expr, $w:expr, $acts:expr, $out:expr, $ldo:expr, $load:expr, $conv:expr) => {{
        let (k, n_rows, w, acts, out, ldo) = ($k, $n_rows, $w, $acts, $out, $ldo);
        let rb = k * $size;
        assert!(acts.n == NT && w.len() >= n_rows * rb && out.len() >= (NT - 1) * ldo + n_rows);
        for t in 0..NT {
            assert!(acts.rows[t].len() >= rb, "activation row of {k}");
        }
        // (f32 rows are copied too: a byte row need not be aligned for a `[f32]` view)
        let mut wide = WIDE_ACTS.take();
        wide.clear();
        wide.resize(NT * k, 0.0);
        for (t, dst) in wide.chunks_exact_mut(k).enumerate() {
            let src = acts.rows[t];
            let mut i = 0;
            while i + 8 <= k {
                // SAFETY: elements i..i+8 of `dst` exist; `load` reads within `rb` bytes.
                unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(i), $load(src, i)) };
                i += 8;
            }
            for (e, d) in dst.iter_mut().enumerate().skip(i) {
                *d = $conv(src, e);
            }
        }
        let a: [&[f32]; NT] = std::array::from_fn(|t| &wide[t * k..(t + 1) * k]);
        let k32 = k / 32 * 32;
        // SAFETY (the passes): the features are the caller's; `load` reads within the row's
        // `rb` bytes, and every activation row holds `k` values.
        for r0 in (0..n_rows).step_by(GEMM_TILE) {
            let nr = (n_rows - r0).min(GEMM_TILE);
            let rows = || w[r0 * rb..(r0 + nr) * rb].chunks_exact(rb);
            let mut state = [[[_mm256_setzero_ps(); 4]; NT]; GEMM_TILE];
            for s0 in (0..k32).step_by(GEMM_SPAN) {
                let span = (s0, (s0 + GEMM_SPAN).min(k32));
                for (row, st) in rows().zip(state.iter_mut()) {
                    // The row walk jumps by a row every span, which the hardware prefetchers
                    // do not follow: ask for the next tile's span into L2 meanwhile.
                    let ahead = row.as_ptr().wrapping_add(GEMM_TILE * rb + span.0 * $size);
                    prefetch_l2(ahead, (span.1 - span.0) * $size);
                    let mut t0 = 0;
                    while t0 + 1 < NT {
                        let mut acc = [st[t0], st[t0 + 1]];
                        unsafe {
                            gemm_avx2_steps::<2>(&mut acc, row, [a[t0], a[t0 + 1]], span, $load)
                        };
                        [st[t0], st[t0 + 1]] = acc;
                        t0 += 2;
                    }
                    if t0 < NT {
                        let mut acc = [st[t0]];
                        unsafe { gemm_avx2_steps::<1>(&mut acc, row, [a[t0]], span, $load) };
                        st[t0] = acc[0];
                    }
                }
            }
            for (r, (row, st)) in rows().zip(state.iter()).enumerate() {
                let r = r0 + r;
                let mut t0 = 0;
                while t0 + 1 < NT {
                    let acc = [st[t0], st[t0 + 1]];
                    let s = unsafe {
                        gemm_avx2_finish::<2>(acc, row, [a[t0], a[t0 + 1]], (k32, k), $load, $conv)
                    };
                    out[t0 * ldo + r] = s[0];
                    out[(t0 + 1) * ldo + r] = s[1];
                    t0 += 2;
                }
                if t0 < NT {
                    let s = unsafe {
                        gemm_avx2_finish::<1>([st[t0]], row, [a[t0]], (k32, k), $load, $conv)
                    };
                    out[t0 * ldo + r] = s[0];
                }
            }
        }
        WIDE_ACTS.set(wide);
    }};
}

/// AVX2 GEMM over f32 rows: `out[t * ldo + r] = Σ w_r · a_t` for `NT` tokens, bit for bit
/// [`vec_dot_f32_avx2`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn gemm_f32_avx2<const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &crate::simd::ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    // SAFETY (all loads): every row holds 4k bytes (asserted) and a load reads i..i+8 ≤ k.
    let load = |b: &[u8], i: usize| unsafe { _mm256_loadu_ps(b.as_ptr().add(4 * i).cast()) };
    gemm_avx2_body!(4, k, n_rows, w, acts, out, ldo, load, scalar_f32)
}

/// AVX2 GEMM over bf16 rows (widened by a 16-bit shift), bit for bit [`vec_dot_bf16_avx2`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn gemm_bf16_avx2<const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &crate::simd::ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    // SAFETY (all loads): every row holds 2k bytes (asserted) and a load reads i..i+8 ≤ k.
    let load = |b: &[u8], i: usize| unsafe {
        let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(b.as_ptr().add(2 * i).cast()));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
    };
    gemm_avx2_body!(2, k, n_rows, w, acts, out, ldo, load, scalar_bf16)
}
