//! Vector helpers of the attention tiles, per CPU tier. The tile loop in `mod.rs` is generic
//! over [`Ops`] and instantiated inside `#[target_feature]` functions, so these
//! `#[inline(always)]` helpers compile with the tier's instructions. The dot product, the
//! softmax's exponentials and the `P·V` update are written once over a register of lanes
//! ([`F32s`]: AVX2's, AVX-512's, NEON's, simd128's), each tier choosing its accumulator
//! count; what differs in kind (AVX-512's masked f16 loads and 16-key score transpose, the
//! f16 widening, TurboQuant's code lookups) stays per tier.
// Every function here is an unsafe SIMD helper whose one precondition is the tier's CPU
// features, checked once when the tier is chosen; marking each operation inside adds nothing.
#![allow(unsafe_op_in_unsafe_fn)]

use half::f16;

#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    all(target_arch = "wasm32", target_feature = "simd128")
))]
use crate::simd::math::{self, F32s};

/// Keys per tile.
pub(super) const BK: usize = 64;

/// A tier's vector operations. All are `unsafe` because the SIMD versions may only run on a
/// host with their features (the caller checks the tier once).
pub(super) trait Ops {
    /// `Σ a·b`.
    unsafe fn dot(a: &[f32], b: &[f32]) -> f32;
    /// `s[j] = exp(s[j] - m)` (entries at −∞ become 0); returns `Σ s`.
    unsafe fn exp_sum(s: &mut [f32; BK], m: f32) -> f32;
    /// `acc = acc · c + Σ_{j<kb} p[j] · v[j·acc.len() ..]` (`v`: `kb` rows of `acc.len()`).
    unsafe fn pv(acc: &mut [f32], c: f32, p: &[f32; BK], v: &[f32], kb: usize);
    /// f16 to f32, `dst.len()` values.
    unsafe fn cvt(src: &[f16], dst: &mut [f32]);

    /// `out[j] = lut[codes[j]]` for 16 codes below 16 (IQ4_NL's non-linear levels).
    #[inline(always)]
    unsafe fn lut16(codes: &[u8; 16], lut: &[f32; 16], out: &mut [f32]) {
        for (o, &c) in out.iter_mut().zip(codes) {
            *o = lut[c as usize & 15];
        }
    }

    /// One TurboQuant group: 16 codes from `bits` u16 planes to `lut[code]`.
    #[inline(always)]
    unsafe fn tq_group(bits: u32, planes: &[u8], lut: &[f32; 16], out: &mut [f32]) {
        crate::backend::turbo::decode_group_scalar(bits, planes, lut, out)
    }

    /// `s[j] = q · k[j·d..(j+1)·d]` for at least the keys `jl..jh` of a tile (`k`: `BK` rows of
    /// `d`); other entries may be left with any value. A key's score must not depend on
    /// `jl`/`jh` (which differ between the rows of a tile), so that a token decoded alone gets
    /// the scores it gets inside a prefill.
    #[inline(always)]
    unsafe fn scores(q: &[f32], k: &[f32], d: usize, jl: usize, jh: usize, s: &mut [f32; BK]) {
        for (j, sj) in s.iter_mut().enumerate().take(jh).skip(jl) {
            *sj = Self::dot(q, &k[j * d..(j + 1) * d]);
        }
    }

    /// Scales the scores `jl..jh` by `scale` and sets the others to −∞; returns the largest.
    #[inline(always)]
    unsafe fn scale_mask_max(s: &mut [f32; BK], jl: usize, jh: usize, scale: f32) -> f32 {
        let mut mt = f32::NEG_INFINITY;
        for (j, sj) in s.iter_mut().enumerate() {
            if j < jl || j >= jh {
                *sj = f32::NEG_INFINITY;
            } else {
                *sj *= scale;
                mt = mt.max(*sj);
            }
        }
        mt
    }

    /// Scales the scores `jl..jh` by `scale`, soft-caps them (`cap · tanh(x / cap)`) and sets
    /// the others to −∞; returns the largest. Here the scalar tier's libm `tanh`; the SIMD
    /// tiers use [`softcap_max`].
    #[inline(always)]
    unsafe fn scale_softcap_max(
        s: &mut [f32; BK],
        jl: usize,
        jh: usize,
        scale: f32,
        cap: f32,
    ) -> f32 {
        let mut mt = f32::NEG_INFINITY;
        for (j, sj) in s.iter_mut().enumerate() {
            if j < jl || j >= jh {
                *sj = f32::NEG_INFINITY;
            } else {
                *sj = cap * (*sj * scale / cap).tanh();
                mt = mt.max(*sj);
            }
        }
        mt
    }
}

/// [`Ops::scale_softcap_max`] with the vector `tanh` of `V`'s tier: the whole tile (a score
/// outside `jl..jh` may hold anything, and is then overwritten), then the mask and maximum.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    all(target_arch = "wasm32", target_feature = "simd128")
))]
#[inline(always)]
unsafe fn softcap_max<V: F32s>(
    s: &mut [f32; BK],
    jl: usize,
    jh: usize,
    scale: f32,
    cap: f32,
) -> f32 {
    let (sv, cv) = (V::splat(scale), V::splat(cap));
    for c in s.chunks_exact_mut(V::LANES) {
        let x = V::load(c.as_ptr()).mul(sv);
        cv.mul(math::tanh(x.div(cv))).store(c.as_mut_ptr());
    }
    let mut mt = f32::NEG_INFINITY;
    for (j, sj) in s.iter_mut().enumerate() {
        if j < jl || j >= jh {
            *sj = f32::NEG_INFINITY;
        } else {
            mt = mt.max(*sj);
        }
    }
    mt
}

/// [`Ops::dot`] on `A` independent accumulators of `V` (an FMA chain each, so the loop does not
/// wait on one latency), then whole vectors into the first, the accumulators added pairwise
/// (`(a0 + a1) + (a2 + a3)`), the lanes summed, and the last values one by one.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    all(target_arch = "wasm32", target_feature = "simd128")
))]
#[inline(always)]
unsafe fn dot_v<V: F32s, const A: usize>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let w = V::LANES;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [V::splat(0.0); A];
    let mut i = 0;
    while i + A * w <= n {
        for (k, x) in acc.iter_mut().enumerate() {
            *x = V::load(pa.add(i + k * w)).mul_add(V::load(pb.add(i + k * w)), *x);
        }
        i += A * w;
    }
    while i + w <= n {
        acc[0] = V::load(pa.add(i)).mul_add(V::load(pb.add(i)), acc[0]);
        i += w;
    }
    let mut m = A;
    while m > 1 {
        for k in 0..m / 2 {
            acc[k] = acc[2 * k].add(acc[2 * k + 1]);
        }
        m /= 2;
    }
    let mut s = acc[0].sum();
    while i < n {
        s += a[i] * b[i];
        i += 1;
    }
    s
}

/// [`Ops::exp_sum`] a vector of `V` at a time.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    all(target_arch = "wasm32", target_feature = "simd128")
))]
#[inline(always)]
unsafe fn exp_sum_v<V: F32s>(s: &mut [f32; BK], m: f32) -> f32 {
    let mv = V::splat(m);
    let mut sum = V::splat(0.0);
    for i in (0..BK).step_by(V::LANES) {
        let p = s.as_mut_ptr().add(i);
        let e = math::exp(V::load(p).sub(mv));
        e.store(p);
        sum = sum.add(e);
    }
    sum.sum()
}

/// [`Ops::pv`]: `R` vectors of outputs at a time (every key into them), then one vector, then
/// single values. With `TWO`, even and odd keys go into two sets of accumulators added at the
/// end (twice the FMA chains, for tiers whose FMA latency one set of `R` would wait on).
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    all(target_arch = "wasm32", target_feature = "simd128")
))]
#[inline(always)]
unsafe fn pv_v<V: F32s, const R: usize, const TWO: bool>(
    acc: &mut [f32],
    c: f32,
    p: &[f32; BK],
    v: &[f32],
    kb: usize,
) {
    let dv = acc.len();
    assert!(v.len() >= kb * dv && kb <= BK);
    let (w, cv) = (V::LANES, V::splat(c));
    let mut c0 = 0;
    while c0 + R * w <= dv {
        pv_block::<V, R, TWO>(acc, cv, p, v, kb, c0);
        c0 += R * w;
    }
    while c0 + w <= dv {
        pv_block::<V, 1, TWO>(acc, cv, p, v, kb, c0);
        c0 += w;
    }
    for d in c0..dv {
        let mut x = acc[d] * c;
        for (j, &pj) in p.iter().enumerate().take(kb) {
            x += pj * v[j * dv + d];
        }
        acc[d] = x;
    }
}

/// Outputs `c0..c0 + R·LANES` of [`pv_v`] (`v.len() >= kb · acc.len()` checked there).
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    all(target_arch = "wasm32", target_feature = "simd128")
))]
#[inline(always)]
unsafe fn pv_block<V: F32s, const R: usize, const TWO: bool>(
    acc: &mut [f32],
    cv: V,
    p: &[f32; BK],
    v: &[f32],
    kb: usize,
    c0: usize,
) {
    let (dv, w) = (acc.len(), V::LANES);
    let a = acc.as_mut_ptr().add(c0);
    let vp = v.as_ptr();
    let mut r: [V; R] = std::array::from_fn(|i| V::load(a.add(w * i)).mul(cv));
    let mut r2 = [V::splat(0.0); R];
    let mut j = 0;
    if TWO {
        while j + 2 <= kb {
            let (p0, p1) = (V::splat(p[j]), V::splat(p[j + 1]));
            let (v0, v1) = (vp.add(j * dv + c0), vp.add((j + 1) * dv + c0));
            for i in 0..R {
                r[i] = p0.mul_add(V::load(v0.add(w * i)), r[i]);
                r2[i] = p1.mul_add(V::load(v1.add(w * i)), r2[i]);
            }
            j += 2;
        }
    }
    while j < kb {
        let (pj, vr) = (V::splat(p[j]), vp.add(j * dv + c0));
        for (i, x) in r.iter_mut().enumerate() {
            *x = pj.mul_add(V::load(vr.add(w * i)), *x);
        }
        j += 1;
    }
    for (i, x) in r.iter().enumerate() {
        let x = if TWO { x.add(r2[i]) } else { *x };
        x.store(a.add(w * i));
    }
}

/// The [`Ops`] methods written over [`F32s`], for a tier's register type `$v`: `$acc`
/// accumulators in [`Ops::dot`], `$regs` registers per block of [`Ops::pv`], `$two` sets of them.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    all(target_arch = "wasm32", target_feature = "simd128")
))]
macro_rules! lane_ops {
    ($v:ty, $acc:literal, $regs:literal, $two:literal) => {
        #[inline(always)]
        unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
            super::dot_v::<$v, $acc>(a, b)
        }
        #[inline(always)]
        unsafe fn scale_softcap_max(
            s: &mut [f32; BK],
            jl: usize,
            jh: usize,
            scale: f32,
            cap: f32,
        ) -> f32 {
            super::softcap_max::<$v>(s, jl, jh, scale, cap)
        }
        #[inline(always)]
        unsafe fn exp_sum(s: &mut [f32; BK], m: f32) -> f32 {
            super::exp_sum_v::<$v>(s, m)
        }
        #[inline(always)]
        unsafe fn pv(acc: &mut [f32], c: f32, p: &[f32; BK], v: &[f32], kb: usize) {
            super::pv_v::<$v, $regs, $two>(acc, c, p, v, kb)
        }
    };
}

pub(super) struct Scalar;

impl Ops for Scalar {
    #[inline(always)]
    unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }
    #[inline(always)]
    unsafe fn exp_sum(s: &mut [f32; BK], m: f32) -> f32 {
        let mut sum = 0.0;
        for x in s.iter_mut() {
            *x = (*x - m).exp();
            sum += *x;
        }
        sum
    }
    #[inline(always)]
    unsafe fn pv(acc: &mut [f32], c: f32, p: &[f32; BK], v: &[f32], kb: usize) {
        let dv = acc.len();
        for a in acc.iter_mut() {
            *a *= c;
        }
        for (j, &pj) in p.iter().enumerate().take(kb) {
            for (a, &x) in acc.iter_mut().zip(&v[j * dv..(j + 1) * dv]) {
                *a += pj * x;
            }
        }
    }
    #[inline(always)]
    unsafe fn cvt(src: &[f16], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_f32();
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::{BK, Ops};

    pub(in super::super) struct Avx2;

    impl Ops for Avx2 {
        #[inline(always)]
        unsafe fn tq_group(bits: u32, planes: &[u8], lut: &[f32; 16], out: &mut [f32]) {
            crate::backend::turbo::decode_group_avx2(bits, planes, lut, out)
        }
        lane_ops!(__m256, 2, 4, true);
        #[inline(always)]
        unsafe fn cvt(src: &[f16], dst: &mut [f32]) {
            let n = dst.len();
            assert!(src.len() >= n);
            let mut i = 0;
            while i + 8 <= n {
                let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
                i += 8;
            }
            while i < n {
                let h = _mm_cvtsi32_si128(src[i].to_bits() as i32);
                dst[i] = _mm_cvtss_f32(_mm_cvtph_ps(h));
                i += 1;
            }
        }
    }

    pub(in super::super) struct Avx512;

    impl Ops for Avx512 {
        #[inline(always)]
        unsafe fn lut16(codes: &[u8; 16], lut: &[f32; 16], out: &mut [f32]) {
            assert!(out.len() >= 16);
            let idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(codes.as_ptr().cast()));
            let v = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(lut.as_ptr()));
            _mm512_storeu_ps(out.as_mut_ptr(), v);
        }
        #[inline(always)]
        unsafe fn tq_group(bits: u32, planes: &[u8], lut: &[f32; 16], out: &mut [f32]) {
            crate::backend::turbo::decode_group_avx512(bits, planes, lut, out)
        }
        lane_ops!(__m512, 1, 4, true);
        /// Sixteen keys at a time when `d` is whole vectors: each key's products accumulate in
        /// a vector of its own, as in [`Ops::dot`], and one transpose-and-add tree sums all
        /// sixteen at once instead of one horizontal sum per key.
        #[inline(always)]
        unsafe fn scores(q: &[f32], k: &[f32], d: usize, jl: usize, jh: usize, s: &mut [f32; BK]) {
            if !d.is_multiple_of(16) {
                for (j, sj) in s.iter_mut().enumerate().take(jh).skip(jl) {
                    *sj = Self::dot(q, &k[j * d..(j + 1) * d]);
                }
                return;
            }
            assert!(q.len() >= d && k.len() >= BK * d);
            let nv = d / 16;
            for g in (jl / 16)..jh.div_ceil(16) {
                // one query vector at a time against the sixteen keys (each key's products in
                // the order `dot` takes them): sixteen accumulators and the query's vector stay
                // in registers at any head dim, where holding the whole query (16 vectors at
                // head dim 256) beside the accumulators spilled
                let mut acc = [_mm512_setzero_ps(); 16];
                let kg = k.as_ptr().add(16 * g * d);
                for c in 0..nv {
                    let qc = _mm512_loadu_ps(q.as_ptr().add(16 * c));
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kg.add(i * d + 16 * c)), *a);
                    }
                }
                // Sum each key's vector in `_mm512_reduce_add_ps`'s order (lanes 8 apart, then
                // 4, 2, 1), sixteen keys at a time, so the scores keep the bits of one horizontal
                // sum per key. Distance 8: keys 2j and 2j+1 in the two 256-bit halves of t[j].
                let mut t = [_mm512_setzero_ps(); 8];
                for (j, tj) in t.iter_mut().enumerate() {
                    let (a, b) = (acc[2 * j], acc[2 * j + 1]);
                    *tj = _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0x44>(a, b),
                        _mm512_shuffle_f32x4::<0xEE>(a, b),
                    );
                }
                // distance 4: key 4i + L in 128-bit lane L of u[i]
                let mut u = [_mm512_setzero_ps(); 4];
                for (i, ui) in u.iter_mut().enumerate() {
                    let (a, b) = (t[2 * i], t[2 * i + 1]);
                    *ui = _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0x88>(a, b),
                        _mm512_shuffle_f32x4::<0xDD>(a, b),
                    );
                }
                // distance 2: 128-bit lane L of w[i] holds keys 8i + L and 8i + 4 + L
                let mut w = [_mm512_setzero_ps(); 2];
                for (i, wi) in w.iter_mut().enumerate() {
                    let (a, b) = (_mm512_castps_pd(u[2 * i]), _mm512_castps_pd(u[2 * i + 1]));
                    *wi = _mm512_add_ps(
                        _mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                        _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)),
                    );
                }
                // distance 1: lane 4L + m holds key 4m + L; one permute puts key k in lane k
                let x = _mm512_add_ps(
                    _mm512_shuffle_ps::<0x88>(w[0], w[1]),
                    _mm512_shuffle_ps::<0xDD>(w[0], w[1]),
                );
                let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
                let r = _mm512_permutexvar_ps(order, x);
                _mm512_storeu_ps(s.as_mut_ptr().add(16 * g), r);
            }
        }
        #[inline(always)]
        unsafe fn scale_mask_max(s: &mut [f32; BK], jl: usize, jh: usize, scale: f32) -> f32 {
            let (sv, ninf) = (_mm512_set1_ps(scale), _mm512_set1_ps(f32::NEG_INFINITY));
            let mut mx = ninf;
            for g in 0..BK / 16 {
                let p = s.as_mut_ptr().add(16 * g);
                let idx = _mm512_add_epi32(
                    _mm512_set1_epi32(16 * g as i32),
                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                );
                let inside = _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32(jl as i32))
                    & _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32(jh as i32));
                let x = _mm512_mask_mul_ps(ninf, inside, _mm512_loadu_ps(p), sv);
                _mm512_storeu_ps(p, x);
                mx = _mm512_max_ps(mx, x);
            }
            _mm512_reduce_max_ps(mx)
        }
        #[inline(always)]
        unsafe fn cvt(src: &[f16], dst: &mut [f32]) {
            let n = dst.len();
            assert!(src.len() >= n);
            let mut i = 0;
            while i + 16 <= n {
                let h = _mm256_loadu_si256(src.as_ptr().add(i).cast());
                _mm512_storeu_ps(dst.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
                i += 16;
            }
            if i < n {
                let m: __mmask16 = ((1u32 << (n - i)) - 1) as u16;
                let h = _mm256_maskz_loadu_epi16(m, src.as_ptr().add(i).cast());
                _mm512_mask_storeu_ps(dst.as_mut_ptr().add(i), m, _mm512_cvtph_ps(h));
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(super) use arm::Neon;

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::*;

    use half::f16;

    use super::{BK, Ops};
    use crate::kernels::neon::f16x4_to_f32;

    pub(in super::super) struct Neon;

    impl Ops for Neon {
        lane_ops!(float32x4_t, 4, 8, false);
        #[inline(always)]
        unsafe fn cvt(src: &[f16], dst: &mut [f32]) {
            let n = dst.len();
            assert!(src.len() >= n);
            let mut i = 0;
            while i + 4 <= n {
                let h = vld1_u16(src.as_ptr().add(i).cast());
                vst1q_f32(dst.as_mut_ptr().add(i), f16x4_to_f32(h));
                i += 4;
            }
            for (d, s) in dst[i..].iter_mut().zip(&src[i..n]) {
                *d = s.to_f32();
            }
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(super) use wasm::Simd128;

/// The `simd128` tier (wasm32): the NEON helpers' data flow on `f32x4`, without FMA (simd128
/// has none; relaxed SIMD's may or may not fuse). The score dot product and the softmax's
/// exponentials are what the scalar code leaves sequential; `pv` and the f16 widening
/// vectorize there already, but the f16 one goes through `half`'s branchy conversion.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use core::arch::wasm32::*;

    use half::f16;

    use super::{BK, Ops};
    use crate::simd::wasm::{f16x4_to_f32, ld};

    pub(in super::super) struct Simd128;

    /// Stores four floats.
    #[inline(always)]
    fn st_f32(x: &mut [f32], v: v128) {
        assert!(x.len() >= 4);
        // SAFETY: 4 writable floats checked above.
        unsafe { v128_store(x.as_mut_ptr().cast(), v) }
    }

    impl Ops for Simd128 {
        lane_ops!(v128, 4, 8, false);
        #[inline(always)]
        unsafe fn cvt(src: &[f16], dst: &mut [f32]) {
            let n = dst.len();
            assert!(src.len() >= n);
            let mut i = 0;
            while i + 8 <= n {
                // SAFETY: `f16` is a plain 16-bit value; 8 of them are 16 readable bytes.
                let bytes = unsafe { std::slice::from_raw_parts(src[i..].as_ptr().cast(), 16) };
                let h = ld(bytes);
                st_f32(&mut dst[i..], f16x4_to_f32::<false>(h));
                st_f32(&mut dst[i + 4..], f16x4_to_f32::<true>(h));
                i += 8;
            }
            for (d, s) in dst[i..].iter_mut().zip(&src[i..n]) {
                *d = s.to_f32();
            }
        }
    }
}
