//! Vector `exp`, `tanh`, SiLU and GELU, written once over [`F32s`] (a register of f32 lanes)
//! and instantiated per tier: `__m256` (AVX2 + FMA) and `__m512` (AVX-512) in `x86`,
//! `float32x4_t` in `neon`, `v128` in `wasm`. The scalar tier keeps the libm formulas; these
//! are their vector counterparts, so no activation calls libm per element. The tests
//! (`kernels::act`) hold every tier to f64 over dense sweeps and the special values.
//!
//! Largest relative errors measured on those sweeps (AVX2/AVX-512; 1e-6 is about 17 ulps):
//! - `exp`: 8e-8 (a degree-6 polynomial, relative error 3e-9, after a reduction by ln 2 in two
//!   parts); +∞ above ~88.72, gradual underflow to 0 below ~-87.3, NaN kept;
//! - `tanh`: 1.4e-7 (an odd polynomial below |x| = 0.625, where `1 - 2/(e^2|x| + 1)` would
//!   cancel; that formula above, which saturates to ±1 by itself);
//! - `silu`: 2.2e-7, `gelu`: 2.4e-7, both as `x·σ(y)` with `σ(y) = 1/(1 + e^-y)`, which has no
//!   `1 + tanh` cancellation in the negative tail.
//!
//! simd128 has no FMA: its `exp` and `tanh` round a few more times, and its GELU tail loses the
//! correction described at [`gelu`].
// Every function here is an unsafe SIMD helper whose one precondition is the tier's CPU
// features, checked once when the tier is chosen; marking each operation inside adds nothing.
#![allow(unsafe_op_in_unsafe_fn)]
// A wasm32 build without simd128 has no vector tier: everything here is unused there.
#![cfg_attr(
    all(target_arch = "wasm32", not(target_feature = "simd128")),
    allow(dead_code)
)]

/// A register of f32 lanes and the operations the functions below are written with. All are
/// `unsafe` because an implementation may only run on a host with its tier's features.
pub(crate) trait F32s: Copy {
    const LANES: usize;
    unsafe fn splat(v: f32) -> Self;
    /// Loads `LANES` floats from `p` (unaligned).
    unsafe fn load(p: *const f32) -> Self;
    /// Stores `LANES` floats at `p` (unaligned).
    unsafe fn store(self, p: *mut f32);
    unsafe fn add(self, o: Self) -> Self;
    unsafe fn sub(self, o: Self) -> Self;
    unsafe fn mul(self, o: Self) -> Self;
    unsafe fn div(self, o: Self) -> Self;
    /// `self · b + c`, fused where the tier has FMA.
    unsafe fn mul_add(self, b: Self, c: Self) -> Self;
    /// `c - self · b`, fused where the tier has FMA.
    unsafe fn neg_mul_add(self, b: Self, c: Self) -> Self;
    unsafe fn abs(self) -> Self;
    /// `self` clamped to `lo..=hi`; NaN stays NaN.
    unsafe fn clamp(self, lo: f32, hi: f32) -> Self;
    /// Rounded to the nearest integer, ties to even.
    unsafe fn round(self) -> Self;
    /// `self · 2^n` for integral `n` in −160..=130, overflowing to ±∞ and underflowing to 0
    /// (through subnormals) as the exact product would round; NaN stays NaN.
    unsafe fn scale2(self, n: Self) -> Self;
    /// The magnitude of `self` with the sign of `sign`.
    unsafe fn copysign(self, sign: Self) -> Self;
    /// Per lane, `t` where `a < b` and `f` elsewhere (NaN compares false).
    unsafe fn select_lt(a: Self, b: Self, t: Self, f: Self) -> Self;
    /// The sum of the lanes (in the tier's own order of pairwise additions).
    unsafe fn sum(self) -> f32;
}

/// ln 2 in two parts: `LN2_HI` has 16 significant bits, so `n · LN2_HI` is exact for
/// |n| < 2^8 even without FMA, and `x - n·ln2` keeps its precision.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// `e^r ≈ 1 + r + r²·Q(r)` on |r| ≤ ln2/2, relative error 3e-9 (Q fitted for minimax relative
/// error, highest power first).
const EXP_Q: [f32; 5] = [
    0.001_381_461,
    0.008_368_71,
    0.041_668_387,
    0.166_665_21,
    0.499_999_93,
];
/// Below this |x|, [`tanh`] uses its polynomial.
const TANH_SMALL: f32 = 0.625;
/// `tanh a ≈ a + a³·P(a²)` on 0 ≤ a ≤ 0.625, relative error 4e-9 (highest power first).
const TANH_P: [f32; 5] = [
    -0.005_704_990_4,
    0.020_639_091,
    -0.053_739_716,
    0.133_314_42,
    -0.333_332_8,
];
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044715;

#[inline(always)]
unsafe fn horner<V: F32s>(x: V, coefs: &[f32]) -> V {
    let mut p = V::splat(coefs[0]);
    for &c in &coefs[1..] {
        p = p.mul_add(x, V::splat(c));
    }
    p
}

/// `e^x`.
#[inline(always)]
pub(crate) unsafe fn exp<V: F32s>(x: V) -> V {
    // beyond these the result is ∞ or 0 anyway, and n stays in scale2's range
    let x = x.clamp(-110.0, 89.0);
    let n = x.mul(V::splat(std::f32::consts::LOG2_E)).round();
    let r = n.neg_mul_add(V::splat(LN2_HI), x);
    let r = n.neg_mul_add(V::splat(LN2_LO), r);
    let q = horner(r, &EXP_Q);
    let p = r.mul(r).mul_add(q, r).add(V::splat(1.0));
    p.scale2(n)
}

/// `tanh x`.
#[inline(always)]
pub(crate) unsafe fn tanh<V: F32s>(x: V) -> V {
    let a = x.abs();
    let s = a.mul(a);
    let small = a.mul(s).mul_add(horner(s, &TANH_P), a);
    // 1 - 2/(e^2a + 1): e^2a = ∞ gives exactly 1, and a NaN lane takes this branch
    let one = V::splat(1.0);
    let e = exp(a.add(a));
    let large = V::splat(2.0).div(e.add(one)).neg_mul_add(one, one);
    V::select_lt(a, V::splat(TANH_SMALL), small, large).copysign(x)
}

/// `x · σ(y + yl) = x / (1 + e^-(y + yl))` for a small correction `yl` of `y`, exact in the
/// tails: `e^-|y|` never overflows, and for y < 0 the quotient is `x·e^y / (1 + e^y)`.
#[inline(always)]
unsafe fn mul_sigmoid<V: F32s>(x: V, y: V, yl: V) -> V {
    let zero = V::splat(0.0);
    let e = exp(zero.sub(y.abs()));
    // e^-|y + yl| = e^-|y| · (1 ∓ yl)
    let e = e.mul_add(V::select_lt(y, zero, yl, zero.sub(yl)), e);
    let num = V::select_lt(y, zero, x.mul(e), x);
    num.div(e.add(V::splat(1.0)))
}

/// `a + b` as a rounded sum and its exact rounding error (Knuth's two-sum).
#[inline(always)]
unsafe fn two_sum<V: F32s>(a: V, b: V) -> (V, V) {
    let s = a.add(b);
    let bb = s.sub(a);
    (s, a.sub(s.sub(bb)).add(b.sub(bb)))
}

/// SiLU, `x / (1 + e^-x)`.
#[inline(always)]
pub(crate) unsafe fn silu<V: F32s>(x: V) -> V {
    mul_sigmoid(x, x, V::splat(0.0))
}

/// GELU in ggml's tanh form, `0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))` with ggml's f32
/// constants, computed as `x·σ(y)` with `y = 2·√(2/π)·x·(1 + 0.044715·x²)` (the same value):
/// the negative tail, where `1 + tanh` cancels, keeps its precision. There `σ(y) ≈ e^y`
/// multiplies the error of `y` by |y| (up to ~87), so the rounding errors of `y`'s products and
/// sum are carried along (exactly, through FMA) and applied to `e^y`; without FMA (simd128)
/// they come out zero and the tail's relative error grows to ~|y| ulps.
#[inline(always)]
pub(crate) unsafe fn gelu<V: F32s>(x: V) -> V {
    // beyond ±13, σ(y) is 0 or 1 in f32; clamped, x² stays finite for the error terms
    let xc = x.clamp(-13.0, 13.0);
    let zero = V::splat(0.0);
    let (a, c2) = (V::splat(GELU_COEF_A), V::splat(2.0 * SQRT_2_OVER_PI));
    let q = xc.mul(xc);
    let ql = xc.mul_add(xc, zero.sub(q));
    let p = a.mul(q);
    let pl = a.mul_add(q, zero.sub(p));
    let (t, tl) = two_sum(V::splat(1.0), p);
    let tl = a.mul_add(ql, tl.add(pl));
    let cx = c2.mul(xc);
    let cxl = c2.mul_add(xc, zero.sub(cx));
    let y = cx.mul(t);
    let yl = cx.mul_add(t, zero.sub(y));
    let yl = cx.mul_add(tl, cxl.mul_add(t, yl));
    mul_sigmoid(x, y, yl)
}
