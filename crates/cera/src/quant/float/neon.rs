//! F32, F16 and BF16 on aarch64 (NEON): the F16/BF16 activation converters (the same bits as
//! the scalar ones), the dot products, summed in four vector accumulators (another order
//! than the scalar loop: float rounding differs, as on x86), and GEMMs of up to four tokens
//! that keep the dot products' order per (row, token), so they give the GEMV's bits.

use std::arch::aarch64::*;

use crate::simd::ActRows;
use crate::simd::neon::{f16x4_to_f32, f32x4_to_f16, ld_f32};

/// Loads 8 u16 from 16 bytes.
#[inline]
#[target_feature(enable = "neon")]
fn ld_u16(s: &[u8]) -> uint16x8_t {
    assert!(s.len() >= 16);
    // SAFETY: 16 readable bytes checked above; NEON loads need no alignment.
    unsafe { vld1q_u16(s.as_ptr().cast()) }
}

/// f32 to f16 bits, four at a time (`fcvtn`: nearest even, as `quant::f32_to_f16`).
#[target_feature(enable = "neon")]
pub(crate) fn quantize_f16_neon(src: &[f32], dst: &mut [u8]) {
    let m = src.len() / 4 * 4;
    let (head, tail) = dst.split_at_mut(2 * m);
    for (x, d) in src[..m].chunks_exact(4).zip(head.chunks_exact_mut(8)) {
        // SAFETY: `d` holds 8 writable bytes.
        unsafe { vst1_u16(d.as_mut_ptr().cast(), f32x4_to_f16(ld_f32(x))) };
    }
    super::quantize_f16(&src[m..], tail);
}

/// f32 to bf16 with `float::f32_to_bf16`'s rounding (nearest even; NaN stays a quiet NaN).
#[target_feature(enable = "neon")]
pub(crate) fn quantize_bf16_neon(src: &[f32], dst: &mut [u8]) {
    let m = src.len() / 4 * 4;
    let (head, tail) = dst.split_at_mut(2 * m);
    for (x, d) in src[..m].chunks_exact(4).zip(head.chunks_exact_mut(8)) {
        let v = ld_f32(x);
        let bits = vreinterpretq_u32_f32(v);
        let odd = vandq_u32(vshrq_n_u32::<16>(bits), vdupq_n_u32(1));
        let rounded = vshrq_n_u32::<16>(vaddq_u32(bits, vaddq_u32(vdupq_n_u32(0x7fff), odd)));
        let nan = vorrq_u32(vshrq_n_u32::<16>(bits), vdupq_n_u32(64));
        let r = vbslq_u32(vceqq_f32(v, v), rounded, nan);
        // SAFETY: `d` holds 8 writable bytes.
        unsafe { vst1_u16(d.as_mut_ptr().cast(), vmovn_u32(r)) };
    }
    super::quantize_bf16(&src[m..], tail);
}

/// `Σ w·a` with `conv` widening 16 bytes of each row to 4 f32 vectors per step of `B`-byte
/// elements (`B * 16` bytes), four accumulators; the tail in scalar.
#[inline]
#[target_feature(enable = "neon")]
fn dot_f<const B: usize>(
    n: usize,
    w: &[u8],
    a: &[u8],
    conv: impl Fn(&[u8]) -> [float32x4_t; 4],
    tail: fn(usize, &[u8], &[u8]) -> f32,
) -> f32 {
    let (w, a) = (&w[..n * B], &a[..n * B]);
    let mut acc = [vdupq_n_f32(0.0); 4];
    let (wc, ac) = (w.chunks_exact(16 * B), a.chunks_exact(16 * B));
    let (wr, ar) = (wc.remainder(), ac.remainder());
    for (w, a) in wc.zip(ac) {
        let (x, y) = (conv(w), conv(a));
        for i in 0..4 {
            acc[i] = vfmaq_f32(acc[i], x[i], y[i]);
        }
    }
    let s = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
    vaddvq_f32(s) + tail(wr.len() / B, wr, ar)
}

/// `out[t * ldo + r] = Σ w_r · a_t` for the `n_rows` rows of `w` (`k` elements of `B` bytes
/// each) and `NT` activation rows, each weight chunk widened once for all the tokens. Every
/// (row, token) pair gets [`dot_f`]'s operations in its order (four accumulators, the same
/// reduction, the same scalar tail): the GEMV's bits, whatever `NT`.
#[inline]
#[target_feature(enable = "neon")]
#[allow(clippy::too_many_arguments)]
fn gemm_f<const B: usize, const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
    conv: impl Fn(&[u8]) -> [float32x4_t; 4],
    tail: fn(usize, &[u8], &[u8]) -> f32,
) {
    let (rb, step) = (k * B, 16 * B);
    assert!(acts.n == NT && w.len() >= n_rows * rb && out.len() >= (NT - 1) * ldo + n_rows);
    let a: [&[u8]; NT] = std::array::from_fn(|t| &acts.rows[t][..rb]);
    let m = rb / step * step;
    for r in 0..n_rows {
        let wr = &w[r * rb..(r + 1) * rb];
        let mut acc = [[vdupq_n_f32(0.0); 4]; NT];
        for c in (0..m).step_by(step) {
            let x = conv(&wr[c..c + step]);
            for (acc, a) in acc.iter_mut().zip(&a) {
                let y = conv(&a[c..c + step]);
                for i in 0..4 {
                    acc[i] = vfmaq_f32(acc[i], x[i], y[i]);
                }
            }
        }
        for (t, (acc, a)) in acc.iter().zip(&a).enumerate() {
            let s = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
            out[t * ldo + r] = vaddvq_f32(s) + tail((rb - m) / B, &wr[m..], &a[m..]);
        }
    }
}

/// 64 bytes of f32 as 4 vectors.
#[inline]
#[target_feature(enable = "neon")]
fn conv_f32(s: &[u8]) -> [float32x4_t; 4] {
    assert!(s.len() >= 64);
    // SAFETY: 64 readable bytes checked above; NEON loads need no alignment.
    std::array::from_fn(|i| unsafe { vld1q_f32(s[16 * i..].as_ptr().cast()) })
}

/// 32 bytes of f16 widened to 4 vectors of f32 (`fcvtl`, exact).
#[inline]
#[target_feature(enable = "neon")]
fn conv_f16(s: &[u8]) -> [float32x4_t; 4] {
    let (h0, h1) = (ld_u16(s), ld_u16(&s[16..]));
    [
        f16x4_to_f32(vget_low_u16(h0)),
        f16x4_to_f32(vget_high_u16(h0)),
        f16x4_to_f32(vget_low_u16(h1)),
        f16x4_to_f32(vget_high_u16(h1)),
    ]
}

/// 32 bytes of bf16 widened to 4 vectors of f32 (bf16 is the top half of an f32: a shift
/// widens it exactly).
#[inline]
#[target_feature(enable = "neon")]
fn conv_bf16(s: &[u8]) -> [float32x4_t; 4] {
    let (h0, h1) = (ld_u16(s), ld_u16(&s[16..]));
    let f = |h: uint16x4_t| vreinterpretq_f32_u32(vshll_n_u16::<16>(h));
    [
        f(vget_low_u16(h0)),
        f(vget_high_u16(h0)),
        f(vget_low_u16(h1)),
        f(vget_high_u16(h1)),
    ]
}

/// `Neon` tier F32 `Σ w·a`.
#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_f32_neon(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_f::<4>(n, w, a, |s| conv_f32(s), super::vec_dot_f32_scalar)
}

/// `Neon` tier F16 `Σ w·a`.
#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_f16_neon(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_f::<2>(n, w, a, |s| conv_f16(s), super::vec_dot_f16_scalar)
}

/// `Neon` tier BF16 `Σ w·a`.
#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_bf16_neon(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_f::<2>(n, w, a, |s| conv_bf16(s), super::vec_dot_bf16_scalar)
}

/// `Neon` tier F32 GEMM of `NT` tokens over plain rows (see [`gemm_f`]).
#[target_feature(enable = "neon")]
pub(crate) fn gemm_f32_neon<const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    a: &ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    let conv = |s: &[u8]| conv_f32(s);
    gemm_f::<4, NT>(k, n_rows, w, a, out, ldo, conv, super::vec_dot_f32_scalar)
}

/// `Neon` tier F16 GEMM of `NT` tokens over plain rows (see [`gemm_f`]).
#[target_feature(enable = "neon")]
pub(crate) fn gemm_f16_neon<const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    a: &ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    let conv = |s: &[u8]| conv_f16(s);
    gemm_f::<2, NT>(k, n_rows, w, a, out, ldo, conv, super::vec_dot_f16_scalar)
}

/// `Neon` tier BF16 GEMM of `NT` tokens over plain rows (see [`gemm_f`]).
#[target_feature(enable = "neon")]
pub(crate) fn gemm_bf16_neon<const NT: usize>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    a: &ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
) {
    let conv = |s: &[u8]| conv_bf16(s);
    gemm_f::<2, NT>(k, n_rows, w, a, out, ldo, conv, super::vec_dot_bf16_scalar)
}
