//! WebAssembly SIMD (`simd128`) building blocks shared by the per-format kernels in
//! `quant/<format>/wasm.rs`.
//!
//! The tier exists only in modules built with `-C target-feature=+simd128` (see
//! `kernels::cpu`): an engine without SIMD refuses the whole module, so there is nothing to
//! detect at run time, and these are plain safe functions that the compiler inlines anywhere.
//!
//! simd128 has no 8-bit dot product, so the dot step widens both operands to i16 and
//! multiplies-adds pairs into i32 lanes (`i32x4.dot_i16x8_s`, one `pmaddwd` on x86 and
//! `smull`+`addp` on Arm): exact, since every product of two i8 fits in 15 bits. Operands known
//! to be non-negative (the unsigned 4-bit codes) widen with a zero extension, which costs
//! engines one instruction less than a sign extension of the high half.
//!
//! A module built with `+relaxed-simd` as well (the threads build's second module, which its
//! loader picks where the engine validates relaxed SIMD) does the unsigned codes' dot products
//! with `i32x4.relaxed_dot_i8x16_i7x16_add`: relaxed SIMD leaves its result to the engine only
//! where the second operand's top bit is set (signed or unsigned) or a pair's 16-bit sum
//! overflows (saturating or wrapping); codes in 0..128 against signed bytes avoid both (a
//! pair's sum is within ±32512), so every engine gives the exact sum, the same integers as the
//! widening path. Signed codes (Q4_0, Q5_0) go through it with their offset added back:
//! `Σ(c − k)·a = Σc·a − k·Σa`.
//!
//! Integer sums are reduced per block (or per super-block) and then weighted in the scalar
//! reference's float order, so the quantized kernels give the scalar tier's bits.

use core::arch::wasm32::*;

use super::math::F32s;

/// Loads 16 bytes.
#[inline(always)]
pub(crate) fn ld(s: &[u8]) -> v128 {
    assert!(s.len() >= 16);
    // SAFETY: 16 readable bytes checked above; wasm loads need no alignment.
    unsafe { v128_load(s.as_ptr().cast()) }
}

/// Loads 4 floats.
#[inline(always)]
pub(crate) fn ld_f32(x: &[f32]) -> v128 {
    assert!(x.len() >= 4);
    // SAFETY: 4 readable floats checked above.
    unsafe { v128_load(x.as_ptr().cast()) }
}

/// Stores 16 bytes.
#[inline(always)]
pub(crate) fn st(s: &mut [u8], v: v128) {
    assert!(s.len() >= 16);
    // SAFETY: 16 writable bytes checked above.
    unsafe { v128_store(s.as_mut_ptr().cast(), v) }
}

/// 16 bytes of packed nibbles to their low nibbles and their high nibbles.
#[inline(always)]
pub(crate) fn nibbles(qs: &[u8]) -> [v128; 2] {
    let x = ld(qs);
    let m = u8x16_splat(0x0F);
    [v128_and(x, m), v128_and(u16x8_shr(x, 4), m)]
}

// Byte shifts: x86 has no 8-bit shift, so engines emulate `i8x16.shl`/`i8x16.shr_u` with a
// 16-bit shift and a mask they build. The kernels shift 16-bit lanes and mask the bits they
// keep themselves: where the mask drops the bits that cross from one byte to the next, that is
// the same result in two instructions.

/// `(x << n) & mask` per byte, for masks that clear the `n` low bits of each byte.
#[inline(always)]
pub(crate) fn shl_mask(x: v128, n: u32, mask: u8) -> v128 {
    v128_and(i16x8_shl(x, n), u8x16_splat(mask))
}

/// `(x >> n) & mask` per byte, for masks that clear the `n` high bits of each byte.
#[inline(always)]
pub(crate) fn shr_mask(x: v128, n: u32, mask: u8) -> v128 {
    v128_and(u16x8_shr(x, n), u8x16_splat(mask))
}

/// `acc + d·sc`: an integer sub-block sum `d` (i32 lanes) weighted by its scale.
#[inline(always)]
pub(crate) fn add_scaled(acc: v128, d: v128, sc: i32) -> v128 {
    i32x4_add(acc, i32x4_mul(d, i32x4_splat(sc)))
}

/// `acc` plus `Σ a_i·b_i` over 16 signed bytes, four products per i32 lane.
#[inline(always)]
pub(crate) fn dot_i8(acc: v128, a: v128, b: v128) -> v128 {
    let lo = i32x4_dot_i16x8(i16x8_extend_low_i8x16(a), i16x8_extend_low_i8x16(b));
    let hi = i32x4_dot_i16x8(i16x8_extend_high_i8x16(a), i16x8_extend_high_i8x16(b));
    i32x4_add(acc, i32x4_add(lo, hi))
}

/// [`dot_i8`] for codes `c` in 0..128 (zero extension widens them as sign extension would; relaxed
/// SIMD's dot product is exact for them).
#[inline(always)]
pub(crate) fn dot_u7(acc: v128, c: v128, b: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    {
        i32x4_relaxed_dot_i8x16_i7x16_add(b, c, acc)
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        let lo = i32x4_dot_i16x8(u16x8_extend_low_u8x16(c), i16x8_extend_low_i8x16(b));
        let hi = i32x4_dot_i16x8(u16x8_extend_high_u8x16(c), i16x8_extend_high_i8x16(b));
        i32x4_add(acc, i32x4_add(lo, hi))
    }
}

/// `Σ c·a` over one 32-element block of signed codes (elements 0..16, 16..32) against 32
/// activation bytes, in i32 lanes.
#[inline(always)]
pub(crate) fn dot32_i8(c: [v128; 2], a: &[u8]) -> v128 {
    dot_i8(dot_i8(i32x4_splat(0), c[0], ld(a)), c[1], ld(&a[16..]))
}

/// [`dot32_i8`] for codes in 0..128.
#[inline(always)]
pub(crate) fn dot32_u7(c: [v128; 2], a: &[u8]) -> v128 {
    dot_u7(dot_u7(i32x4_splat(0), c[0], ld(a)), c[1], ld(&a[16..]))
}

/// `Σ (c − 2^K)·a` over one 32-element block, for unsigned codes `c` in 0..128 stored with an
/// offset of `2^K` (Q4_0's 8, Q5_0's 16), in i32 lanes.
#[inline(always)]
pub(crate) fn dot32_offset<const K: u32>(c: [v128; 2], a: &[u8]) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    {
        // Σc·a − 2^K·Σa, Σa by the same instruction against ones
        let (a0, a1) = (ld(a), ld(&a[16..]));
        let one = i8x16_splat(1);
        let sum = dot_u7(dot_u7(i32x4_splat(0), one, a0), one, a1);
        let dot = dot_u7(dot_u7(i32x4_splat(0), c[0], a0), c[1], a1);
        i32x4_sub(dot, i32x4_shl(sum, K))
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        let k = i8x16_splat(1 << K);
        dot32_i8([i8x16_sub(c[0], k), i8x16_sub(c[1], k)], a)
    }
}

/// Sum of the i32 lanes.
#[inline(always)]
pub(crate) fn hsum_i32(v: v128) -> i32 {
    let v = i32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    let v = i32x4_add(v, i32x4_shuffle::<1, 0, 3, 2>(v, v));
    i32x4_extract_lane::<0>(v)
}

/// Sum of the f32 lanes, as `(l0 + l2) + (l1 + l3)`.
#[inline(always)]
pub(crate) fn hsum_f32(v: v128) -> f32 {
    let v = f32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    let v = f32x4_add(v, i32x4_shuffle::<1, 0, 3, 2>(v, v));
    f32x4_extract_lane::<0>(v)
}

/// The lane sums of four i32 vectors, as one vector: lane `i` is `Σ v[i]`. Three adds and six
/// shuffles (each a single unpack instruction on x86 and Arm) instead of four horizontal sums.
#[inline(always)]
pub(crate) fn hsum4_i32(v: [v128; 4]) -> v128 {
    let ab = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(v[0], v[1]),
        i32x4_shuffle::<2, 6, 3, 7>(v[0], v[1]),
    );
    let cd = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(v[2], v[3]),
        i32x4_shuffle::<2, 6, 3, 7>(v[2], v[3]),
    );
    i32x4_add(i64x2_shuffle::<0, 2>(ab, cd), i64x2_shuffle::<1, 3>(ab, cd))
}

/// `Σ term(w_i, a_i, isum_i)` over the blocks of a 32-element format, added in block order as
/// the scalar reference adds them, where `isum_i` is the lane sum of `dot(w_i, a_i)`. Four
/// blocks go at once: their lanes reduced together ([`hsum4_i32`]) and their float terms
/// computed in the lanes of one vector by `term4` (which must compute each lane as `term` does:
/// the same operations in the same order, so the same bits), then added one by one.
#[inline(always)]
pub(crate) fn dot_blocks32<W, A>(
    w: &[W],
    a: &[A],
    dot: impl Fn(&W, &A) -> v128,
    term4: impl Fn(&[W], &[A], v128) -> v128,
    term: impl Fn(&W, &A, i32) -> f32,
) -> f32 {
    let mut sumf = 0.0f32;
    let (w4, a4) = (w.chunks_exact(4), a.chunks_exact(4));
    let (wr, ar) = (w4.remainder(), a4.remainder());
    for (w, a) in w4.zip(a4) {
        let s = hsum4_i32([
            dot(&w[0], &a[0]),
            dot(&w[1], &a[1]),
            dot(&w[2], &a[2]),
            dot(&w[3], &a[3]),
        ]);
        let t = term4(w, a, s);
        sumf += f32x4_extract_lane::<0>(t);
        sumf += f32x4_extract_lane::<1>(t);
        sumf += f32x4_extract_lane::<2>(t);
        sumf += f32x4_extract_lane::<3>(t);
    }
    for (w, a) in wr.iter().zip(ar) {
        sumf += term(w, a, hsum_i32(dot(w, a)));
    }
    sumf
}

/// Eight f16 values (a scale field of four weight blocks and of four activation blocks, say)
/// as two f32 vectors: `[x[0..4], x[4..8]]`.
#[inline(always)]
pub(crate) fn f16x8_to_f32(x: [[u8; 2]; 8]) -> [v128; 2] {
    let h = x.map(u16::from_le_bytes);
    let v = u16x8(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    [f16x4_to_f32::<false>(v), f16x4_to_f32::<true>(v)]
}

/// Four f16 (the low u16 lanes of `h`, or the high ones with `HIGH`) to f32, with the value
/// `quant::f16_to_f32_fast` gives: the exponent and mantissa placed in an f32 and scaled by
/// 2^112 (right for normal and subnormal values alike), infinities and NaN rebuilt, the sign
/// put back.
#[inline(always)]
pub(crate) fn f16x4_to_f32<const HIGH: bool>(h: v128) -> v128 {
    let h = if HIGH {
        u32x4_extend_high_u16x8(h)
    } else {
        u32x4_extend_low_u16x8(h)
    };
    let sign = i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16);
    let em = v128_and(h, u32x4_splat(0x7fff));
    let bits = i32x4_shl(em, 13);
    let finite = f32x4_mul(bits, f32x4_splat(f32::from_bits(0x7780_0000)));
    let special = v128_or(bits, u32x4_splat(0x7f80_0000));
    // (`em` is below 2^15, so a signed compare does; x86 has no unsigned one)
    let v = v128_bitselect(special, finite, i32x4_gt(em, i32x4_splat(0x7bff)));
    v128_or(v, sign)
}

/// The float step of the symmetric 32-element formats (Q4_0, Q5_0, Q8_0, IQ4_NL) for four
/// blocks, `sumi as f32 * (d_w * d_a)` per lane.
#[inline(always)]
pub(crate) fn term4_sym(dw: [[u8; 2]; 4], da: [[u8; 2]; 4], isum: v128) -> v128 {
    let [dw, da] = f16x8_to_f32([dw[0], dw[1], dw[2], dw[3], da[0], da[1], da[2], da[3]]);
    f32x4_mul(f32x4_convert_i32x4(isum), f32x4_mul(dw, da))
}

/// The float step of the zero-point 32-element formats (Q4_1, Q5_1) for four blocks,
/// `sumi as f32 * (d_w * d_a) + m_w * s_a` per lane.
#[inline(always)]
pub(crate) fn term4_min(d: [[u8; 2]; 8], ms: [[u8; 2]; 8], isum: v128) -> v128 {
    let [dw, da] = f16x8_to_f32(d);
    let [m, s] = f16x8_to_f32(ms);
    f32x4_add(
        f32x4_mul(f32x4_convert_i32x4(isum), f32x4_mul(dw, da)),
        f32x4_mul(m, s),
    )
}

/// The fifth bits of a Q5_0/Q5_1 block (`qh`, bit `j` for element `j`) as `0x10` bytes where
/// set: elements 0..16, then 16..32.
#[inline(always)]
pub(crate) fn fifth_bits(qh: [u8; 4]) -> [v128; 2] {
    let v = u32x4_splat(u32::from_le_bytes(qh));
    let bit = u64x2_splat(0x8040_2010_0804_0201);
    let sixteen = u8x16_splat(0x10);
    // byte `k` of the word over lanes 0..8, byte `k + 1` over lanes 8..16; one bit per lane
    let spread = |k: u8| {
        let idx = u8x16(
            k,
            k,
            k,
            k,
            k,
            k,
            k,
            k,
            k + 1,
            k + 1,
            k + 1,
            k + 1,
            k + 1,
            k + 1,
            k + 1,
            k + 1,
        );
        i8x16_swizzle(v, idx)
    };
    let set = |x: v128| v128_and(i8x16_eq(v128_and(x, bit), bit), sixteen);
    [set(spread(0)), set(spread(2))]
}

/// f32 to i8 the way the activation quantizers round: `round_ties_even(x)` saturated to
/// -128..=127 (NaN to 0), 16 values from four vectors.
#[inline(always)]
pub(crate) fn round_i8(x: [v128; 4]) -> v128 {
    let q = x.map(|v| i32x4_trunc_sat_f32x4(f32x4_nearest(v)));
    i8x16_narrow_i16x8(
        i16x8_narrow_i32x4(q[0], q[1]),
        i16x8_narrow_i32x4(q[2], q[3]),
    )
}

/// The largest `|x|` of the lanes of a slice (a multiple of 4 long), ignoring NaN lanes as
/// `f32::max` does.
#[inline(always)]
pub(crate) fn amax(x: &[f32]) -> f32 {
    let mut m = f32x4_splat(0.0);
    for c in x.chunks_exact(4) {
        // `pmax(m, v)` is `m < v ? v : m`: a NaN `v` leaves `m`
        m = f32x4_pmax(m, f32x4_abs(ld_f32(c)));
    }
    let m = f32x4_pmax(m, i32x4_shuffle::<2, 3, 0, 1>(m, m));
    let m = f32x4_pmax(m, i32x4_shuffle::<1, 0, 3, 2>(m, m));
    f32x4_extract_lane::<0>(m)
}

/// Sum of 16 signed bytes.
#[inline(always)]
pub(crate) fn sum_i8(v: v128) -> i32 {
    hsum_i32(i32x4_extadd_pairwise_i16x8(i16x8_extadd_pairwise_i8x16(v)))
}

// The vector math's register (`simd::math`). simd128 has no FMA, so `mul_add` rounds twice
// (the functions stay within their bounds regardless). `pmax(x, lo)` is `x < lo ? lo : x` and
// `pmin(x, hi)` is `hi < x ? hi : x`: a NaN `x` fails both comparisons and is kept.
impl F32s for v128 {
    const LANES: usize = 4;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        f32x4_splat(v)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller passes 4 readable floats; wasm loads need no alignment.
        unsafe { v128_load(p.cast()) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller passes 4 writable floats.
        unsafe { v128_store(p.cast(), self) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        f32x4_add(self, o)
    }
    #[inline(always)]
    unsafe fn sub(self, o: Self) -> Self {
        f32x4_sub(self, o)
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        f32x4_mul(self, o)
    }
    #[inline(always)]
    unsafe fn div(self, o: Self) -> Self {
        f32x4_div(self, o)
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        f32x4_add(f32x4_mul(self, b), c)
    }
    #[inline(always)]
    unsafe fn neg_mul_add(self, b: Self, c: Self) -> Self {
        f32x4_sub(c, f32x4_mul(self, b))
    }
    #[inline(always)]
    unsafe fn abs(self) -> Self {
        f32x4_abs(self)
    }
    #[inline(always)]
    unsafe fn clamp(self, lo: f32, hi: f32) -> Self {
        f32x4_pmin(f32x4_pmax(self, f32x4_splat(lo)), f32x4_splat(hi))
    }
    #[inline(always)]
    unsafe fn round(self) -> Self {
        f32x4_nearest(self)
    }
    #[inline(always)]
    unsafe fn scale2(self, n: Self) -> Self {
        // two factors 2^(n/2) and 2^(n - n/2), each a normal float, so that the product
        // overflows or underflows (through subnormals) only at the last multiply
        let n = i32x4_trunc_sat_f32x4(n);
        let n1 = i32x4_shr(n, 1);
        let n2 = i32x4_sub(n, n1);
        let pow2 = |k| i32x4_shl(i32x4_add(k, i32x4_splat(127)), 23);
        f32x4_mul(f32x4_mul(self, pow2(n1)), pow2(n2))
    }
    #[inline(always)]
    unsafe fn copysign(self, sign: Self) -> Self {
        v128_bitselect(sign, self, f32x4_splat(-0.0))
    }
    #[inline(always)]
    unsafe fn select_lt(a: Self, b: Self, t: Self, f: Self) -> Self {
        v128_bitselect(t, f, f32x4_lt(a, b))
    }
    #[inline(always)]
    unsafe fn sum(self) -> f32 {
        hsum_f32(self)
    }
}
