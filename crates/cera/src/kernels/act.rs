//! Element-wise activation kernels per tier: every SIMD tier runs the vector functions of
//! `simd::math` (within 1e-6 relative of the exact values, as the scalar libm formulas are),
//! the scalar tier keeps the libm formulas. The backend (`backend::activation`) splits large
//! slices over its pool and calls [`apply`] on each part.

use super::CpuTier;
use crate::simd::math::{self, F32s};

/// What [`apply`] computes for each element `x` (with `u` the matching element of `up`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Elementwise {
    /// SiLU, `x / (1 + e^-x)`.
    Silu,
    /// GELU in ggml's tanh form, `0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))`.
    Gelu,
    /// `silu(x) · u` (SwiGLU).
    SiluMul,
    /// `gelu(x) · u` (GeGLU).
    GeluMul,
    /// `cap · tanh(x / cap)` (Gemma's soft-capping).
    Softcap(f32),
    /// `e^x`, for the accuracy tests of the vector `exp` itself (its users, SiLU, GELU and the
    /// attention softmax, call it inline).
    #[cfg(test)]
    Exp,
}

impl Elementwise {
    /// Whether the op reads `up`.
    pub(crate) fn gated(self) -> bool {
        matches!(self, Elementwise::SiluMul | Elementwise::GeluMul)
    }
}

/// `x = op(x)` (or `op(x, up)` for the gated ops, which need `up` of `x`'s length) with
/// `tier`'s instructions.
pub(crate) fn apply(tier: CpuTier, op: Elementwise, x: &mut [f32], up: Option<&[f32]>) {
    let up = up.unwrap_or(&[]);
    assert!(!op.gated() || up.len() == x.len(), "{op:?}: lengths differ");
    match tier {
        // SAFETY: the kernel table only holds a tier the host supports.
        #[cfg(target_arch = "x86_64")]
        CpuTier::Avx512 => unsafe { x86::avx512(op, x, up) },
        #[cfg(target_arch = "x86_64")]
        CpuTier::Avx2 => unsafe { x86::avx2(op, x, up) },
        // SAFETY: NEON is part of the base aarch64 architecture.
        #[cfg(target_arch = "aarch64")]
        CpuTier::Neon | CpuTier::NeonDotprod | CpuTier::NeonI8mm => unsafe {
            slice::<std::arch::aarch64::float32x4_t>(op, x, up)
        },
        // SAFETY: the module is built with simd128, so every engine that runs it has it.
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        CpuTier::Simd128 => unsafe { slice::<core::arch::wasm32::v128>(op, x, up) },
        _ => scalar(op, x, up),
    }
}

/// The scalar tier: the libm formulas.
fn scalar(op: Elementwise, x: &mut [f32], up: &[f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044715;
    let silu = |x: f32| x / (1.0 + (-x).exp());
    let gelu = |x: f32| 0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh());
    match op {
        Elementwise::Silu => x.iter_mut().for_each(|v| *v = silu(*v)),
        Elementwise::Gelu => x.iter_mut().for_each(|v| *v = gelu(*v)),
        Elementwise::SiluMul => x.iter_mut().zip(up).for_each(|(v, u)| *v = silu(*v) * u),
        Elementwise::GeluMul => x.iter_mut().zip(up).for_each(|(v, u)| *v = gelu(*v) * u),
        Elementwise::Softcap(cap) => x.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh()),
        #[cfg(test)]
        Elementwise::Exp => x.iter_mut().for_each(|v| *v = v.exp()),
    }
}

/// One register of [`apply`]'s work.
#[cfg_attr(
    all(target_arch = "wasm32", not(target_feature = "simd128")),
    allow(dead_code)
)]
#[inline(always)]
unsafe fn lanes<V: F32s>(op: Elementwise, x: V, u: V) -> V {
    // SAFETY: the caller runs on a host with `V`'s tier.
    unsafe {
        match op {
            Elementwise::Silu => math::silu(x),
            Elementwise::Gelu => math::gelu(x),
            Elementwise::SiluMul => math::silu(x).mul(u),
            Elementwise::GeluMul => math::gelu(x).mul(u),
            Elementwise::Softcap(cap) => {
                let c = V::splat(cap);
                c.mul(math::tanh(x.div(c)))
            }
            #[cfg(test)]
            Elementwise::Exp => math::exp(x),
        }
    }
}

/// [`apply`] over whole registers, then the tail through a zero-padded register, so an element
/// gets the same bits wherever it sits in the slice (a token decoded alone and inside a batch,
/// or a slice split over threads at any point).
#[cfg_attr(
    all(target_arch = "wasm32", not(target_feature = "simd128")),
    allow(dead_code)
)]
#[inline(always)]
unsafe fn slice<V: F32s>(op: Elementwise, x: &mut [f32], up: &[f32]) {
    const { assert!(V::LANES <= 16) };
    let n = x.len();
    let gated = op.gated();
    let mut i = 0;
    while i + V::LANES <= n {
        // SAFETY: `i + LANES <= n`, for `up` too when it is read (then of length `n`); the
        // caller runs on a host with `V`'s tier.
        unsafe {
            let u = if gated {
                V::load(up.as_ptr().add(i))
            } else {
                V::splat(0.0)
            };
            lanes(op, V::load(x.as_ptr().add(i)), u).store(x.as_mut_ptr().add(i));
        }
        i += V::LANES;
    }
    if i < n {
        let (mut bx, mut bu) = ([0f32; 16], [0f32; 16]);
        let t = n - i;
        bx[..t].copy_from_slice(&x[i..]);
        if gated {
            bu[..t].copy_from_slice(&up[i..]);
        }
        // SAFETY: both buffers hold 16 ≥ LANES floats; as above for the tier.
        unsafe { lanes(op, V::load(bx.as_ptr()), V::load(bu.as_ptr())).store(bx.as_mut_ptr()) };
        x[i..].copy_from_slice(&bx[..t]);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{__m256, __m512};

    use super::{Elementwise, slice};

    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    pub(super) unsafe fn avx512(op: Elementwise, x: &mut [f32], up: &[f32]) {
        // SAFETY: the caller checked the features.
        unsafe { slice::<__m512>(op, x, up) }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn avx2(op: Elementwise, x: &mut [f32], up: &[f32]) {
        // SAFETY: the caller checked the features.
        unsafe { slice::<__m256>(op, x, up) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GELU's `2·√(2/π)·x·(1 + 0.044715·x²)` with ggml's f32 constants: they define the
    /// function ggml computes (the f64 constants would differ by 5e-8 relative, which the
    /// negative tail multiplies by up to 87).
    fn gelu_y(x: f64) -> f64 {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        const GELU_COEF_A: f32 = 0.044715;
        2.0 * SQRT_2_OVER_PI as f64 * x * (1.0 + GELU_COEF_A as f64 * x * x)
    }

    fn exact(op: Elementwise, x: f64, u: f64) -> f64 {
        let silu = x / (1.0 + (-x).exp());
        // 0.5·x·(1 + tanh(y/2)) as x·σ(y): in f64 too, `1 + tanh` would cancel in the tail
        let gelu = x / (1.0 + (-gelu_y(x)).exp());
        match op {
            Elementwise::Silu => silu,
            Elementwise::Gelu => gelu,
            Elementwise::SiluMul => silu * u,
            Elementwise::GeluMul => gelu * u,
            Elementwise::Softcap(c) => c as f64 * (x / c as f64).tanh(),
            Elementwise::Exp => x.exp(),
        }
    }

    /// The inputs of the sweeps: every 4099th f32 bit pattern of both signs between 2^-30 and
    /// 128 (150k values, 2k per binade, through the polynomial/formula switches and every step
    /// of the range reduction; small enough for the emulated tiers' debug builds), the
    /// integers and half-integers up to ±120 (the edges of `exp`'s reduction), and the special
    /// values.
    fn sweep() -> Vec<f32> {
        let mut xs = Vec::new();
        let (lo, hi) = ((2f32).powi(-30).to_bits(), 128f32.to_bits());
        for b in (lo..hi).step_by(4099) {
            let x = f32::from_bits(b);
            xs.extend([x, -x]);
        }
        for i in -240..=240 {
            xs.push(i as f32 * 0.5);
        }
        xs.extend([
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1e-45,
            88.72,
            88.73,
            -87.33,
            -103.9,
            -104.0,
            9.02,
            -9.02,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]);
        xs
    }

    /// Whether `got` is within `rel` (plus `slack`) of the exact `want`; infinities (and
    /// results beyond f32's range) and NaN must match exactly. Results below f32's normal range
    /// are held to an absolute 2^-136 (1/1024 of the smallest normal) instead: a subnormal has
    /// too few bits for a relative bound, and the vector and libm formulas underflow at
    /// different points.
    fn close(got: f32, want: f64, rel: f64, slack: f64) -> bool {
        if want.is_nan() {
            return got.is_nan();
        }
        if want.abs() > f32::MAX as f64 {
            return got.is_infinite() && got.signum() as f64 == want.signum();
        }
        (got as f64 - want).abs() <= rel * want.abs() + slack + (2f64).powi(-136)
    }

    fn check(tier: CpuTier, op: Elementwise, xs: &[f32], up: Option<&[f32]>, rel: f64) {
        let mut got = xs.to_vec();
        apply(tier, op, &mut got, up);
        for (i, (&x, &g)) in xs.iter().zip(&got).enumerate() {
            let u = up.map_or(1.0, |u| u[i]);
            let want = exact(op, x as f64, u as f64);
            let gelu = matches!(op, Elementwise::Gelu | Elementwise::GeluMul);
            let silu = matches!(op, Elementwise::Silu | Elementwise::SiluMul);
            let mut slack = 0.0;
            // the scalar GELU formula (libm, in f32) loses the rounding of `1 + tanh` in the
            // negative tail, where it cancels, and the scalar SiLU's `e^-x` overflows below
            // x = -88.7, flushing results under 3e-37 to 0; the vector forms `x·σ(y)` do not
            if tier == CpuTier::Scalar && gelu {
                slack += 1.2e-7 * (0.5 * x as f64 * u as f64).abs();
            }
            if tier == CpuTier::Scalar && silu && x < -88.7 {
                slack += want.abs();
            }
            // both GELUs carry the rounding of y = 2s in f32, ~3 ulps, which σ(y) multiplies by
            // |y| in the tail: the FMA tiers make up for it, the others cannot
            if matches!(tier, CpuTier::Scalar | CpuTier::Simd128) && gelu {
                slack += 2e-7 * gelu_y(x as f64).abs() * want.abs();
            }
            assert!(
                close(g, want, rel, slack),
                "{tier} {op:?} [{i}] x={x:e} u={u}: {g:e} vs {want:e} ({:e} relative)",
                (g as f64 - want).abs() / want.abs()
            );
        }
    }

    /// Each vector function on each tier against f64 over the sweep: `exp` and `tanh` within
    /// 3e-7 relative (a few ulps), SiLU, GELU and the soft-cap within 1e-6; overflow to ∞,
    /// underflow to 0, saturation to ±1 and NaN where the exact functions have them.
    #[test]
    fn vector_math_matches_f64() {
        let xs = sweep();
        for tier in CpuTier::supported() {
            check(tier, Elementwise::Exp, &xs, None, 3e-7);
            check(tier, Elementwise::Softcap(1.0), &xs, None, 3e-7);
            for op in [
                Elementwise::Silu,
                Elementwise::Gelu,
                Elementwise::Softcap(30.0),
                Elementwise::Softcap(0.7),
            ] {
                check(tier, op, &xs, None, 1e-6);
            }
            let up: Vec<f32> = (0..xs.len())
                .map(|i| ((i * 31 % 17) as f32 - 8.0) / 3.0)
                .collect();
            for op in [Elementwise::SiluMul, Elementwise::GeluMul] {
                check(tier, op, &xs, Some(&up), 1e-6);
            }
        }
    }

    /// An element's result does not depend on where it sits: the tail (a zero-padded register)
    /// and a slice started at any offset give the bits of the whole-slice run.
    #[test]
    fn results_independent_of_position() {
        let xs: Vec<f32> = (0..67).map(|i| (i as f32 - 33.0) * 0.37).collect();
        let up: Vec<f32> = (0..67).map(|i| 1.0 + i as f32 * 0.01).collect();
        for tier in CpuTier::supported() {
            for op in [
                Elementwise::Gelu,
                Elementwise::SiluMul,
                Elementwise::Softcap(5.0),
            ] {
                let up = op.gated().then_some(&up[..]);
                let mut whole = xs.clone();
                apply(tier, op, &mut whole, up);
                for start in 0..20 {
                    let mut part = xs[start..].to_vec();
                    apply(tier, op, &mut part, up.map(|u| &u[start..]));
                    assert_eq!(part, whole[start..], "{tier} {op:?} from {start}");
                }
            }
        }
    }
}
