//! The `NeonI8mm` tier's GEMM drivers, shared by the per-format kernels in
//! `quant/<format>/neon.rs`: [`gemm32_i8mm`] for the 32-element formats and [`gemm256_i8mm`] for
//! the K-quants, each generic over the weight and activation [`Block`] types and handed the
//! format's decoding and float step as closures.
//!
//! They sit here rather than in `simd::neon` (where the other NEON building blocks are) because
//! they read rows as [`Block`]s: `simd` is the layer below `quant` and imports nothing from it,
//! and `kernels` (which picks these kernels at run time) is above `quant`, which must not import
//! it. `smmla` is written as inline assembly because its intrinsic is not stable on our
//! toolchain (Rust 1.95).

use std::arch::aarch64::*;
use std::arch::asm;

use crate::quant::{Block, as_blocks};
use crate::simd::ActRows;

/// `smmla`: `acc` (a 2×2 i32 matrix, row-major) plus `a · bᵀ`, where `a` and `b` each hold two
/// rows of 8 signed bytes.
///
/// # Safety
/// The CPU must support `i8mm`.
#[inline(always)]
unsafe fn smmla(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: the caller guarantees `i8mm`; registers only.
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Two rows' 8-byte chunk `j` (0..4) of a 32-code block, side by side for [`smmla`].
#[inline]
#[target_feature(enable = "neon")]
fn pair_chunk(c0: &[int8x16_t; 2], c1: &[int8x16_t; 2], j: usize) -> int8x16_t {
    let half = |c: &[int8x16_t; 2]| {
        let v = c[j / 2];
        if j.is_multiple_of(2) {
            vget_low_s8(v)
        } else {
            vget_high_s8(v)
        }
    };
    vcombine_s8(half(c0), half(c1))
}

/// The `NeonI8mm` GEMM of a 32-element format over plain weight rows: `out[t * ldo + r] =
/// Σ w_r · a_t` for the `n_rows` rows of `w` (`k` elements each) and the `acts.n` quantized
/// activation rows. Rows go in pairs and tokens in pairs through `smmla` (one instruction per
/// 8 columns gives the four row × token sums); each weight block is decoded (`codes`) once for
/// all the tokens. Per (row, token) the exact integer block sum meets `term`, the format's
/// scalar float step, in block order: the GEMV's bits, whatever the token count.
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm32_i8mm<W: Block, A: Block>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
    codes: impl Fn(&W) -> [int8x16_t; 2],
    qs: impl Fn(&A) -> &[u8; 32],
    term: impl Fn(&W, &A, i32) -> f32,
) {
    let (nt, nb) = (acts.n, k / 32);
    assert!((1..=4).contains(&nt) && W::ELEMS == 32 && k.is_multiple_of(32));
    let wb = nb * size_of::<W>();
    assert!(w.len() >= n_rows * wb && out.len() >= (nt - 1) * ldo + n_rows);
    let a: [&[A]; 4] = std::array::from_fn(|t| &as_blocks::<A>(acts.rows[t.min(nt - 1)])[..nb]);
    for r0 in (0..n_rows).step_by(2) {
        // an odd last row pairs with itself; its second result is dropped
        let r1 = (r0 + 1).min(n_rows - 1);
        let w0 = &as_blocks::<W>(&w[r0 * wb..(r0 + 1) * wb])[..nb];
        let w1 = &as_blocks::<W>(&w[r1 * wb..(r1 + 1) * wb])[..nb];
        let mut sum = [[0.0f32; 4]; 2];
        for i in 0..nb {
            let (c0, c1) = (codes(&w0[i]), codes(&w1[i]));
            let wj: [int8x16_t; 4] = std::array::from_fn(|j| pair_chunk(&c0, &c1, j));
            for t0 in (0..nt).step_by(2) {
                let t1 = (t0 + 1).min(nt - 1);
                let (y0, y1) = (qs(&a[t0][i]), qs(&a[t1][i]));
                let mut acc = vdupq_n_s32(0);
                for (j, &wj) in wj.iter().enumerate() {
                    // SAFETY: 8 readable bytes at `8j` of each 32-byte block.
                    let yj = unsafe {
                        vcombine_s8(
                            vld1_s8(y0[8 * j..].as_ptr().cast()),
                            vld1_s8(y1[8 * j..].as_ptr().cast()),
                        )
                    };
                    // SAFETY: this function only runs where `i8mm` is enabled.
                    acc = unsafe { smmla(acc, wj, yj) };
                }
                // lanes: (r0, t0), (r0, t1), (r1, t0), (r1, t1)
                let s: [i32; 4] = [
                    vgetq_lane_s32::<0>(acc),
                    vgetq_lane_s32::<1>(acc),
                    vgetq_lane_s32::<2>(acc),
                    vgetq_lane_s32::<3>(acc),
                ];
                sum[0][t0] += term(&w0[i], &a[t0][i], s[0]);
                sum[1][t0] += term(&w1[i], &a[t0][i], s[2]);
                if t1 != t0 {
                    sum[0][t1] += term(&w0[i], &a[t1][i], s[1]);
                    sum[1][t1] += term(&w1[i], &a[t1][i], s[3]);
                }
            }
        }
        for t in 0..nt {
            out[t * ldo + r0] = sum[0][t];
            if r1 != r0 {
                out[t * ldo + r1] = sum[1][t];
            }
        }
    }
}

/// The `NeonI8mm` GEMM of a 256-element K-quant over plain weight rows and Q8_K activation
/// rows, as [`gemm32_i8mm`] does it for the 32-element formats: `codes` gives a super-block's
/// 256 codes as i8 in element order, `scales` its 16 per-16-element integer scales (a scale of
/// a 32-element sub-block appears twice). Per (row, token) the integer sum `Σ scale · Σ code·a`
/// is exact and meets `term`, the format's scalar float step, in super-block order: the
/// GEMV's bits, whatever the token count.
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm256_i8mm<W: Block, A: Block>(
    k: usize,
    n_rows: usize,
    w: &[u8],
    acts: &ActRows<'_>,
    out: &mut [f32],
    ldo: usize,
    codes: impl Fn(&W) -> [int8x16_t; 16],
    scales: impl Fn(&W) -> [i32; 16],
    qs: impl Fn(&A) -> &[u8; 256],
    term: impl Fn(&W, &A, i32) -> f32,
) {
    let (nt, nb) = (acts.n, k / 256);
    assert!((1..=4).contains(&nt) && W::ELEMS == 256 && k.is_multiple_of(256));
    let wb = nb * size_of::<W>();
    assert!(w.len() >= n_rows * wb && out.len() >= (nt - 1) * ldo + n_rows);
    let a: [&[A]; 4] = std::array::from_fn(|t| &as_blocks::<A>(acts.rows[t.min(nt - 1)])[..nb]);
    for r0 in (0..n_rows).step_by(2) {
        // an odd last row pairs with itself; its second result is dropped
        let r1 = (r0 + 1).min(n_rows - 1);
        let w0 = &as_blocks::<W>(&w[r0 * wb..(r0 + 1) * wb])[..nb];
        let w1 = &as_blocks::<W>(&w[r1 * wb..(r1 + 1) * wb])[..nb];
        let mut sum = [[0.0f32; 4]; 2];
        for i in 0..nb {
            let (c0, c1) = (codes(&w0[i]), codes(&w1[i]));
            let (s0, s1) = (scales(&w0[i]), scales(&w1[i]));
            for t0 in (0..nt).step_by(2) {
                let t1 = (t0 + 1).min(nt - 1);
                let (y0, y1) = (qs(&a[t0][i]), qs(&a[t1][i]));
                let mut isum = vdupq_n_s32(0);
                for q in 0..16 {
                    let mut tile = vdupq_n_s32(0);
                    for j in 0..2 {
                        let wj = if j == 0 {
                            vcombine_s8(vget_low_s8(c0[q]), vget_low_s8(c1[q]))
                        } else {
                            vcombine_s8(vget_high_s8(c0[q]), vget_high_s8(c1[q]))
                        };
                        let at = 16 * q + 8 * j;
                        // SAFETY: 8 readable bytes at `at` of each 256-byte row of codes.
                        let yj = unsafe {
                            vcombine_s8(
                                vld1_s8(y0[at..at + 8].as_ptr().cast()),
                                vld1_s8(y1[at..at + 8].as_ptr().cast()),
                            )
                        };
                        // SAFETY: this function only runs where `i8mm` is enabled.
                        tile = unsafe { smmla(tile, wj, yj) };
                    }
                    // lanes (r0, t0), (r0, t1), (r1, t0), (r1, t1): row scales per half
                    let sc = vcombine_s32(vdup_n_s32(s0[q]), vdup_n_s32(s1[q]));
                    isum = vmlaq_s32(isum, tile, sc);
                }
                let s: [i32; 4] = [
                    vgetq_lane_s32::<0>(isum),
                    vgetq_lane_s32::<1>(isum),
                    vgetq_lane_s32::<2>(isum),
                    vgetq_lane_s32::<3>(isum),
                ];
                sum[0][t0] += term(&w0[i], &a[t0][i], s[0]);
                sum[1][t0] += term(&w1[i], &a[t0][i], s[2]);
                if t1 != t0 {
                    sum[0][t1] += term(&w0[i], &a[t1][i], s[1]);
                    sum[1][t1] += term(&w1[i], &a[t1][i], s[3]);
                }
            }
        }
        for t in 0..nt {
            out[t * ldo + r0] = sum[0][t];
            if r1 != r0 {
                out[t * ldo + r1] = sum[1][t];
            }
        }
    }
}
