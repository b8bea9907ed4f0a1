//! Small aarch64 NEON building blocks shared by the per-format kernels in
//! `quant/<format>/neon.rs`.
//!
//! Each integer kernel is written once as an `#[inline]` body generic over a [`Dot`]
//! (the i8 dot product step) and instantiated twice: with [`Emul`] in a
//! `#[target_feature(enable = "neon")]` function (the `Neon` tier: `smull`/`smull2` and
//! `sadalp`) and with [`Sdot`] in a `#[target_feature(enable = "neon,dotprod")]` one
//! (`NeonDotprod`, whose table the `NeonI8mm` tier extends with the `smmla` GEMMs of
//! `quant::i8mm`). `sdot` and the f16 conversions are written as inline assembly because their
//! intrinsics are not stable on our toolchain (Rust 1.95).
//!
//! The two dot steps leave their partial sums in different lanes; callers only use the lanes'
//! total (or keep the lane layout out of the result), so both tiers give the same integers.

use std::arch::aarch64::*;
use std::arch::asm;

use super::math::F32s;

/// Multiply-accumulate of signed bytes: `acc` plus the 16 products `a_i·b_i`, four per i32
/// lane (which four lands where is up to the implementation).
pub(crate) trait Dot: Copy {
    fn dot(self, acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

/// Baseline NEON: widening multiplies into i16 (|a·b| ≤ 2^14, so exact) and pairwise adds
/// into the i32 lanes.
#[derive(Clone, Copy)]
pub(crate) struct Emul;

impl Dot for Emul {
    #[inline(always)]
    fn dot(self, acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: NEON is part of every aarch64 target (a trait method cannot carry
        // `#[target_feature]`).
        unsafe {
            let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
            let hi = vmull_high_s8(a, b);
            vpadalq_s16(vpadalq_s16(acc, lo), hi)
        }
    }
}

/// The dot product extension's `sdot`. Only constructible through [`Sdot::new`], whose caller
/// promises the CPU has the extension.
#[derive(Clone, Copy)]
pub(crate) struct Sdot(());

impl Sdot {
    /// # Safety
    /// The CPU must support `dotprod` (callers are `#[target_feature(enable = "dotprod")]`).
    #[inline(always)]
    pub(crate) unsafe fn new() -> Sdot {
        Sdot(())
    }
}

impl Dot for Sdot {
    #[inline(always)]
    fn dot(self, mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: an `Sdot` exists only where the CPU has `sdot` (see `Sdot::new`); the
        // instruction touches registers only.
        unsafe {
            asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        acc
    }
}

/// Loads 16 bytes as i8.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn ld_s8(s: &[u8]) -> int8x16_t {
    assert!(s.len() >= 16);
    // SAFETY: 16 readable bytes checked above; NEON loads need no alignment.
    unsafe { vld1q_s8(s.as_ptr().cast()) }
}

/// Loads 16 bytes as u8.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn ld_u8(s: &[u8]) -> uint8x16_t {
    assert!(s.len() >= 16);
    // SAFETY: as above.
    unsafe { vld1q_u8(s.as_ptr()) }
}

/// Loads 4 floats.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn ld_f32(x: &[f32]) -> float32x4_t {
    assert!(x.len() >= 4);
    // SAFETY: 4 readable floats checked above.
    unsafe { vld1q_f32(x.as_ptr()) }
}

/// 16 bytes of packed nibbles to their low nibbles and their high nibbles.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn nibbles(qs: &[u8]) -> [uint8x16_t; 2] {
    let x = ld_u8(qs);
    [vandq_u8(x, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(x)]
}

/// Sum of the lanes of a dot product accumulator.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn hsum(v: int32x4_t) -> i32 {
    vaddvq_s32(v)
}

/// `Σ c·a` over one 32-element block: codes `c` (two vectors of i8, elements 0..16 and
/// 16..32) against 32 activation bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn dot32<D: Dot>(d: D, c: [int8x16_t; 2], a: &[u8]) -> i32 {
    let acc = d.dot(vdupq_n_s32(0), c[0], ld_s8(a));
    hsum(d.dot(acc, c[1], ld_s8(&a[16..])))
}

/// Four f16 (as u16 lanes) to f32, exactly (`fcvtl`).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn f16x4_to_f32(h: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: register-only conversion, part of baseline ASIMD/FP.
    unsafe {
        asm!("fcvtl {o:v}.4s, {h:v}.4h", o = lateout(vreg) out, h = in(vreg) h,
             options(pure, nomem, nostack, preserves_flags));
    }
    out
}

/// Four f32 to f16 bits (`fcvtn`, rounding to nearest even as `quant::f32_to_f16`; the FPCR
/// rounding mode is Rust's default, nearest).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn f32x4_to_f16(x: float32x4_t) -> uint16x4_t {
    let out: uint16x4_t;
    // SAFETY: as above.
    unsafe {
        asm!("fcvtn {o:v}.4h, {x:v}.4s", o = lateout(vreg) out, x = in(vreg) x,
             options(pure, nomem, nostack, preserves_flags));
    }
    out
}

/// The fifth bits of a Q5_0/Q5_1 block (`qh`, bit `j` for element `j`) as `0x10` bytes where
/// set: elements 0..16, then 16..32.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn fifth_bits(qh: [u8; 4]) -> [uint8x16_t; 2] {
    let v = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le_bytes(qh)));
    let bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
    let sixteen = vdupq_n_u8(0x10);
    // byte `k` of the u32 spread over 8 lanes, one bit per lane
    let spread = |k: u8| vqtbl1q_u8(v, vcombine_u8(vdup_n_u8(k), vdup_n_u8(k + 1)));
    [
        vandq_u8(vtstq_u8(spread(0), bit), sixteen),
        vandq_u8(vtstq_u8(spread(2), bit), sixteen),
    ]
}

/// `Σ c·a` over 16 codes and 16 activation bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn dot16<D: Dot>(d: D, c: int8x16_t, a: &[u8]) -> i32 {
    hsum(d.dot(vdupq_n_s32(0), c, ld_s8(a)))
}

/// `Σ_q scale_q · Σ c·a` over a 256-element super-block: 16 vectors of codes `c` (elements
/// `16q..16q + 16`) with their integer scales `s` against 256 activation bytes, as the K-quant
/// GEMVs sum it: each scale's dot product reduced (`addv`) and weighted in a scalar
/// multiply-add. `SUB` is the elements per scale: with 32 (the scales come in equal pairs) two
/// dot steps share one accumulator and one reduction. (Weighting the lanes with `mla` and
/// reducing once per super-block ran slower under qemu; no hardware was at hand to settle it.)
///
/// Always inlined, without a `target_feature` of its own (NEON is aarch64's baseline): as a
/// call of its own it would be compiled without `dotprod` and `sdot` would not assemble.
#[inline(always)]
pub(crate) fn isum256<D: Dot, const SUB: usize>(
    d: D,
    c: &[int8x16_t; 16],
    s: &[i32; 16],
    a: &[u8],
) -> i32 {
    assert!(a.len() >= 256 && (SUB == 16 || SUB == 32));
    let per = SUB / 16;
    let mut isum = 0i32;
    for j in 0..16 / per {
        // SAFETY: NEON is part of every aarch64 target (as in `Emul::dot`); `a` holds the
        // 256 bytes `ld_s8` reads (checked above).
        let sum = unsafe {
            let mut p = vdupq_n_s32(0);
            for q in per * j..per * (j + 1) {
                p = d.dot(p, c[q], ld_s8(&a[16 * q..]));
            }
            hsum(p)
        };
        debug_assert!(per == 1 || s[2 * j] == s[2 * j + 1]);
        isum += s[per * j] * sum;
    }
    isum
}

/// The `Neon` (emulated dot step) and `NeonDotprod` (`sdot`) instantiations of a format's
/// generic `dot` body, as `vec_dot_neon` and `vec_dot_dotprod`.
macro_rules! neon_tiers {
    ($wb:ty, $ab:ty) => {
        /// `Neon` tier `Σ w·a`.
        #[target_feature(enable = "neon")]
        pub(crate) fn vec_dot_neon(n: usize, w: &[$wb], a: &[$ab]) -> f32 {
            dot($crate::simd::neon::Emul, n, w, a)
        }

        /// `NeonDotprod` tier `Σ w·a`.
        #[target_feature(enable = "neon,dotprod")]
        pub(crate) fn vec_dot_dotprod(n: usize, w: &[$wb], a: &[$ab]) -> f32 {
            // SAFETY: this function only runs where `dotprod` is enabled.
            dot(unsafe { $crate::simd::neon::Sdot::new() }, n, w, a)
        }
    };
}
pub(crate) use neon_tiers;

// The vector math's register (`simd::math`). `vmaxq`/`vminq` return NaN when either operand
// is NaN, so the clamp keeps one.
#[allow(unsafe_op_in_unsafe_fn)]
impl F32s for float32x4_t {
    const LANES: usize = 4;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        vdupq_n_f32(v)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        vld1q_f32(p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        vst1q_f32(p, self)
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        vaddq_f32(self, o)
    }
    #[inline(always)]
    unsafe fn sub(self, o: Self) -> Self {
        vsubq_f32(self, o)
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        vmulq_f32(self, o)
    }
    #[inline(always)]
    unsafe fn div(self, o: Self) -> Self {
        vdivq_f32(self, o)
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        vfmaq_f32(c, self, b)
    }
    #[inline(always)]
    unsafe fn neg_mul_add(self, b: Self, c: Self) -> Self {
        vfmsq_f32(c, self, b)
    }
    #[inline(always)]
    unsafe fn abs(self) -> Self {
        vabsq_f32(self)
    }
    #[inline(always)]
    unsafe fn clamp(self, lo: f32, hi: f32) -> Self {
        vminq_f32(vmaxq_f32(self, vdupq_n_f32(lo)), vdupq_n_f32(hi))
    }
    #[inline(always)]
    unsafe fn round(self) -> Self {
        vrndnq_f32(self)
    }
    #[inline(always)]
    unsafe fn scale2(self, n: Self) -> Self {
        // two factors 2^(n/2) and 2^(n - n/2), each a normal float, so that the product
        // overflows or underflows (through subnormals) only at the last multiply
        let n = vcvtq_s32_f32(n);
        let n1 = vshrq_n_s32::<1>(n);
        let n2 = vsubq_s32(n, n1);
        let pow2 = |k| vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(k, vdupq_n_s32(127))));
        vmulq_f32(vmulq_f32(self, pow2(n1)), pow2(n2))
    }
    #[inline(always)]
    unsafe fn copysign(self, sign: Self) -> Self {
        vbslq_f32(vdupq_n_u32(0x8000_0000), sign, self)
    }
    #[inline(always)]
    unsafe fn select_lt(a: Self, b: Self, t: Self, f: Self) -> Self {
        vbslq_f32(vcltq_f32(a, b), t, f)
    }
    #[inline(always)]
    unsafe fn sum(self) -> f32 {
        vaddvq_f32(self)
    }
}
