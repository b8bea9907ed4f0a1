//! The `Neon` and `NeonDotprod` tiers' GEMM drivers, shared by the per-format kernels in
//! `quant/<format>/neon.rs`: [`gemm32_dot`] for the 32-element formats and [`gemm256_dot`] for
//! the K-quants and IQ4_XS, generic over the i8 dot step ([`Dot`]: `sdot`, or `smull` +
//! `sadalp`) and over the weight and activation [`Block`] types, and handed the same decoding
//! and float-step closures as the `NeonI8mm` drivers of `quant::i8mm` (one decoding per
//! format). The macros [`gemm32_tiers`] and [`gemm256_tiers`] instantiate them for both tiers.
//!
//! Each weight block is decoded once and dotted with the block of each of the (up to four)
//! tokens; per (row, token) the exact integer block sum meets the format's float step in block
//! order, as the GEMV (`vec_dot_neon`, `vec_dot_dotprod`) does: the GEMM gives the GEMV's bits
//! for any token count, so prefill computes what decode computes. They sit here rather than in
//! `simd::neon` because they read rows as [`Block`]s (see `quant::i8mm`).

use std::arch::aarch64::*;

use crate::quant::{Block, as_blocks};
use crate::simd::ActRows;
use crate::simd::neon::{Dot, dot32, isum256};

/// Runs `$body` with the const token count `$nt` equal to `$n` (1..=4): with the count known
/// the token loops unroll and the sums stay in registers.
macro_rules! with_nt {
    ($n:expr, $nt:ident => $body:expr) => {
        match $n {
            1 => {
                const $nt: usize = 1;
                $body
            }
            2 => {
                const $nt: usize = 2;
                $body
            }
            3 => {
                const $nt: usize = 3;
                $body
            }
            _ => {
                const $nt: usize = 4;
                $body
            }
        }
    };
}

/// The GEMM of a 32-element format over plain weight rows: `out[t * ldo + r] = Σ w_r · a_t`
/// for the `n_rows` rows of `w` (`k` elements each) and the `acts.n` quantized activation rows.
/// `codes` decodes a weight block to i8 (elements 0..16, then 16..32), `qs` gives an activation
/// block's 32 codes and `term` is the format's float step for one block's integer sum.
#[inline]
#[target_feature(enable = "neon")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm32_dot<D: Dot, W: Block, A: Block>(
    dp: D,
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
    with_nt!(nt, NT => {
        let a: [&[A]; NT] = std::array::from_fn(|t| &as_blocks::<A>(acts.rows[t])[..nb]);
        for r0 in (0..n_rows).step_by(2) {
            // rows in pairs, so each activation load serves two rows; an odd last row pairs
            // with itself and its second result is dropped
            let r1 = (r0 + 1).min(n_rows - 1);
            let w0 = &as_blocks::<W>(&w[r0 * wb..(r0 + 1) * wb])[..nb];
            let w1 = &as_blocks::<W>(&w[r1 * wb..(r1 + 1) * wb])[..nb];
            let mut sum = [[0.0f32; NT]; 2];
            for i in 0..nb {
                let (b0, b1) = (&w0[i], &w1[i]);
                let (c0, c1) = (codes(b0), codes(b1));
                for (t, a) in a.iter().enumerate() {
                    let y = &a[i];
                    let yq = qs(y);
                    sum[0][t] += term(b0, y, dot32(dp, c0, yq));
                    sum[1][t] += term(b1, y, dot32(dp, c1, yq));
                }
            }
            for t in 0..NT {
                out[t * ldo + r0] = sum[0][t];
                if r1 != r0 {
                    out[t * ldo + r1] = sum[1][t];
                }
            }
        }
    })
}

/// The GEMM of a 256-element format over plain weight rows and Q8_K activation rows, as
/// [`gemm32_dot`] does it: `codes` gives a super-block's 256 codes as i8 in element order,
/// `scales` its 16 per-16-element integer scales (a 32-element sub-block's scale twice: `SUB`
/// is 32 then, 16 otherwise), and the exact `Σ scale · Σ code·a` ([`isum256`]) meets `term` in
/// super-block order. One row at
/// a time: a row's decoded super-block already fills half the vector registers.
#[inline]
#[target_feature(enable = "neon")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm256_dot<D: Dot, W: Block, A: Block, const SUB: usize>(
    dp: D,
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
    with_nt!(nt, NT => {
        let a: [&[A]; NT] = std::array::from_fn(|t| &as_blocks::<A>(acts.rows[t])[..nb]);
        for r in 0..n_rows {
            let wr = &as_blocks::<W>(&w[r * wb..(r + 1) * wb])[..nb];
            let mut sum = [0.0f32; NT];
            for (i, b) in wr.iter().enumerate() {
                let (c, s) = (codes(b), scales(b));
                for (sum, a) in sum.iter_mut().zip(&a) {
                    let y = &a[i];
                    *sum += term(b, y, isum256::<D, SUB>(dp, &c, &s, qs(y)));
                }
            }
            for (t, &s) in sum.iter().enumerate() {
                out[t * ldo + r] = s;
            }
        }
    })
}

/// The `Neon` and `NeonDotprod` instantiations of [`gemm32_dot`] for a format whose
/// `neon.rs` has `codes` and `term`, as `gemm_neon` and `gemm_dotprod`.
macro_rules! gemm32_tiers {
    ($wb:ty, $ab:ty) => {
        /// `Neon` tier GEMM over plain rows (see `quant::neon_gemm::gemm32_dot`).
        #[target_feature(enable = "neon")]
        pub(crate) fn gemm_neon(
            k: usize,
            n_rows: usize,
            w: &[u8],
            a: &$crate::simd::ActRows<'_>,
            out: &mut [f32],
            ldo: usize,
        ) {
            $crate::quant::neon_gemm::gemm32_dot::<_, $wb, $ab>(
                $crate::simd::neon::Emul,
                k,
                n_rows,
                w,
                a,
                out,
                ldo,
                |b| codes(b),
                |y| &y.qs,
                term,
            )
        }

        /// `NeonDotprod` tier GEMM over plain rows (see `quant::neon_gemm::gemm32_dot`).
        #[target_feature(enable = "neon,dotprod")]
        pub(crate) fn gemm_dotprod(
            k: usize,
            n_rows: usize,
            w: &[u8],
            a: &$crate::simd::ActRows<'_>,
            out: &mut [f32],
            ldo: usize,
        ) {
            $crate::quant::neon_gemm::gemm32_dot::<_, $wb, $ab>(
                // SAFETY: this function only runs where `dotprod` is enabled.
                unsafe { $crate::simd::neon::Sdot::new() },
                k,
                n_rows,
                w,
                a,
                out,
                ldo,
                |b| codes(b),
                |y| &y.qs,
                term,
            )
        }
    };
}
pub(crate) use gemm32_tiers;

/// The `Neon` and `NeonDotprod` instantiations of [`gemm256_dot`] (Q8_K activations, `$sub`
/// elements per scale) for a format whose `neon.rs` has `codes`, `scales` and `term`, as
/// `gemm_neon` and `gemm_dotprod`.
macro_rules! gemm256_tiers {
    ($wb:ty, $sub:literal) => {
        /// `Neon` tier GEMM over plain rows (see `quant::neon_gemm::gemm256_dot`).
        #[target_feature(enable = "neon")]
        pub(crate) fn gemm_neon(
            k: usize,
            n_rows: usize,
            w: &[u8],
            a: &$crate::simd::ActRows<'_>,
            out: &mut [f32],
            ldo: usize,
        ) {
            $crate::quant::neon_gemm::gemm256_dot::<_, $wb, $crate::quant::q8_k::BlockQ8_K, $sub>(
                $crate::simd::neon::Emul,
                k,
                n_rows,
                w,
                a,
                out,
                ldo,
                |b| codes(b),
                scales,
                |y| &y.qs,
                term,
            )
        }

        /// `NeonDotprod` tier GEMM over plain rows (see `quant::neon_gemm::gemm256_dot`).
        #[target_feature(enable = "neon,dotprod")]
        pub(crate) fn gemm_dotprod(
            k: usize,
            n_rows: usize,
            w: &[u8],
            a: &$crate::simd::ActRows<'_>,
            out: &mut [f32],
            ldo: usize,
        ) {
            $crate::quant::neon_gemm::gemm256_dot::<_, $wb, $crate::quant::q8_k::BlockQ8_K, $sub>(
                // SAFETY: this function only runs where `dotprod` is enabled.
                unsafe { $crate::simd::neon::Sdot::new() },
                k,
                n_rows,
                w,
                a,
                out,
                ldo,
                |b| codes(b),
                scales,
                |y| &y.qs,
                term,
            )
        }
    };
}
pub(crate) use gemm256_tiers;
