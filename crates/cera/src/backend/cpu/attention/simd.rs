//! Vector helpers of the attention tiles, one implementation per CPU tier. The tile loop in
//! `mod.rs` is generic over [`Ops`] and instantiated inside `#[target_feature]` functions, so
//! these `#[inline(always)]` helpers compile with the tier's instructions.
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

    use super::{BK, Ops, softcap_max};
    use crate::simd::math::exp;

    pub(in super::super) struct Avx2;

    #[inline(always)]
    unsafe fn hsum256(v: __m256) -> f32 {
        let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
        let x = _mm_add_ss(x, _mm_movehdup_ps(x));
        _mm_cvtss_f32(x)
    }

    impl Ops for Avx2 {
        #[inline(always)]
        unsafe fn tq_group(bits: u32, planes: &[u8], lut: &[f32; 16], out: &mut [f32]) {
            crate::backend::turbo::decode_group_avx2(bits, planes, lut, out)
        }
        #[inline(always)]
        unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
            let n = a.len().min(b.len());
            let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i + 16 <= n {
                a0 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(a.as_ptr().add(i)),
                    _mm256_loadu_ps(b.as_ptr().add(i)),
                    a0,
                );
                a1 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(a.as_ptr().add(i + 8)),
                    _mm256_loadu_ps(b.as_ptr().add(i + 8)),
                    a1,
                );
                i += 16;
            }
            let mut sum = hsum256(_mm256_add_ps(a0, a1));
            while i < n {
                sum += a[i] * b[i];
                i += 1;
            }
            sum
        }
        #[inline(always)]
        unsafe fn scale_softcap_max(
            s: &mut [f32; BK],
            jl: usize,
            jh: usize,
            scale: f32,
            cap: f32,
        ) -> f32 {
            softcap_max::<__m256>(s, jl, jh, scale, cap)
        }
        #[inline(always)]
        unsafe fn exp_sum(s: &mut [f32; BK], m: f32) -> f32 {
            let mv = _mm256_set1_ps(m);
            let mut sum = _mm256_setzero_ps();
            for i in (0..BK).step_by(8) {
                let p = s.as_mut_ptr().add(i);
                let e = exp(_mm256_sub_ps(_mm256_loadu_ps(p), mv));
                _mm256_storeu_ps(p, e);
                sum = _mm256_add_ps(sum, e);
            }
            hsum256(sum)
        }
        #[inline(always)]
        unsafe fn pv(acc: &mut [f32], c: f32, p: &[f32; BK], v: &[f32], kb: usize) {
            let dv = acc.len();
            assert!(v.len() >= kb * dv && kb <= BK);
            let cv = _mm256_set1_ps(c);
            let mut c0 = 0;
            // 32 outputs (4 registers) at a time, every key into them
            while c0 + 32 <= dv {
                let a = acc.as_mut_ptr().add(c0);
                let mut r = [
                    _mm256_mul_ps(_mm256_loadu_ps(a), cv),
                    _mm256_mul_ps(_mm256_loadu_ps(a.add(8)), cv),
                    _mm256_mul_ps(_mm256_loadu_ps(a.add(16)), cv),
                    _mm256_mul_ps(_mm256_loadu_ps(a.add(24)), cv),
                ];
                // even and odd keys into two sets of accumulators (eight FMA chains), added
                // at the end: four chains would wait on the FMA latency
                let mut r2 = [_mm256_setzero_ps(); 4];
                let mut j = 0;
                while j + 2 <= kb {
                    let (p0, p1) = (_mm256_set1_ps(p[j]), _mm256_set1_ps(p[j + 1]));
                    let (v0, v1) = (
                        v.as_ptr().add(j * dv + c0),
                        v.as_ptr().add((j + 1) * dv + c0),
                    );
                    for i in 0..4 {
                        r[i] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v0.add(8 * i)), r[i]);
                        r2[i] = _mm256_fmadd_ps(p1, _mm256_loadu_ps(v1.add(8 * i)), r2[i]);
                    }
                    j += 2;
                }
                if j < kb {
                    let pv = _mm256_set1_ps(p[j]);
                    let vr = v.as_ptr().add(j * dv + c0);
                    for (i, x) in r.iter_mut().enumerate() {
                        *x = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr.add(8 * i)), *x);
                    }
                }
                for i in 0..4 {
                    _mm256_storeu_ps(a.add(8 * i), _mm256_add_ps(r[i], r2[i]));
                }
                c0 += 32;
            }
            while c0 + 8 <= dv {
                let a = acc.as_mut_ptr().add(c0);
                let mut x = _mm256_mul_ps(_mm256_loadu_ps(a), cv);
                for (j, &pj) in p.iter().enumerate().take(kb) {
                    let vr = v.as_ptr().add(j * dv + c0);
                    x = _mm256_fmadd_ps(_mm256_set1_ps(pj), _mm256_loadu_ps(vr), x);
                }
                _mm256_storeu_ps(a, x);
                c0 += 8;
            }
            for d in c0..dv {
                let mut x = acc[d] * c;
                for (j, &pj) in p.iter().enumerate().take(kb) {
                    x += pj * v[j * dv + d];
                }
                acc[d] = x;
            }
        }
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
        #[inline(always)]
        unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
            let n = a.len().min(b.len());
            let mut acc = _mm512_setzero_ps();
            let mut i = 0;
            while i + 16 <= n {
                acc = _mm512_fmadd_ps(
                    _mm512_loadu_ps(a.as_ptr().add(i)),
                    _mm512_loadu_ps(b.as_ptr().add(i)),
                    acc,
                );
                i += 16;
            }
            if i < n {
                let m: __mmask16 = (1u32 << (n - i)).wrapping_sub(1) as u16;
                acc = _mm512_fmadd_ps(
                    _mm512_maskz_loadu_ps(m, a.as_ptr().add(i)),
                    _mm512_maskz_loadu_ps(m, b.as_ptr().add(i)),
                    acc,
                );
            }
            _mm512_reduce_add_ps(acc)
        }
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
        unsafe fn scale_softcap_max(
            s: &mut [f32; BK],
            jl: usize,
            jh: usize,
            scale: f32,
            cap: f32,
        ) -> f32 {
            softcap_max::<__m512>(s, jl, jh, scale, cap)
        }
        #[inline(always)]
        unsafe fn exp_sum(s: &mut [f32; BK], m: f32) -> f32 {
            let mv = _mm512_set1_ps(m);
            let mut sum = _mm512_setzero_ps();
            for i in (0..BK).step_by(16) {
                let p = s.as_mut_ptr().add(i);
                let e = exp(_mm512_sub_ps(_mm512_loadu_ps(p), mv));
                _mm512_storeu_ps(p, e);
                sum = _mm512_add_ps(sum, e);
            }
            _mm512_reduce_add_ps(sum)
        }
        #[inline(always)]
        unsafe fn pv(acc: &mut [f32], c: f32, p: &[f32; BK], v: &[f32], kb: usize) {
            let dv = acc.len();
            assert!(v.len() >= kb * dv && kb <= BK);
            let cv = _mm512_set1_ps(c);
            let mut c0 = 0;
            while c0 < dv {
                // up to 64 outputs (4 registers, the last one masked) at a time
                let w = (dv - c0).min(64);
                let nreg = w.div_ceil(16);
                let last: __mmask16 = if w.is_multiple_of(16) {
                    0xFFFF
                } else {
                    ((1u32 << (w % 16)) - 1) as u16
                };
                let mask = |i: usize| if i + 1 == nreg { last } else { 0xFFFF };
                let a = acc.as_mut_ptr().add(c0);
                // even and odd keys into two sets of accumulators, added at the end: one chain
                // of FMAs per output register would wait on the FMA latency at every key
                let mut r = [_mm512_setzero_ps(); 4];
                let mut r2 = [_mm512_setzero_ps(); 4];
                for (i, x) in r.iter_mut().enumerate().take(nreg) {
                    *x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask(i), a.add(16 * i)), cv);
                }
                let mut j = 0;
                while j + 2 <= kb {
                    let (p0, p1) = (_mm512_set1_ps(p[j]), _mm512_set1_ps(p[j + 1]));
                    let (v0, v1) = (
                        v.as_ptr().add(j * dv + c0),
                        v.as_ptr().add((j + 1) * dv + c0),
                    );
                    for i in 0..nreg {
                        let x0 = _mm512_maskz_loadu_ps(mask(i), v0.add(16 * i));
                        let x1 = _mm512_maskz_loadu_ps(mask(i), v1.add(16 * i));
                        r[i] = _mm512_fmadd_ps(p0, x0, r[i]);
                        r2[i] = _mm512_fmadd_ps(p1, x1, r2[i]);
                    }
                    j += 2;
                }
                if j < kb {
                    let pv = _mm512_set1_ps(p[j]);
                    let vr = v.as_ptr().add(j * dv + c0);
                    for (i, x) in r.iter_mut().enumerate().take(nreg) {
                        let vx = _mm512_maskz_loadu_ps(mask(i), vr.add(16 * i));
                        *x = _mm512_fmadd_ps(pv, vx, *x);
                    }
                }
                for i in 0..nreg {
                    _mm512_mask_storeu_ps(a.add(16 * i), mask(i), _mm512_add_ps(r[i], r2[i]));
                }
                c0 += w;
            }
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

    use super::{BK, Ops, softcap_max};
    use crate::kernels::neon::f16x4_to_f32;
    use crate::simd::math::exp;

    pub(in super::super) struct Neon;

    impl Ops for Neon {
        #[inline(always)]
        unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
            let n = a.len().min(b.len());
            let mut acc = [vdupq_n_f32(0.0); 4];
            let mut i = 0;
            while i + 16 <= n {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let at = i + 4 * k;
                    *acc = vfmaq_f32(
                        *acc,
                        vld1q_f32(a.as_ptr().add(at)),
                        vld1q_f32(b.as_ptr().add(at)),
                    );
                }
                i += 16;
            }
            while i + 4 <= n {
                acc[0] = vfmaq_f32(
                    acc[0],
                    vld1q_f32(a.as_ptr().add(i)),
                    vld1q_f32(b.as_ptr().add(i)),
                );
                i += 4;
            }
            let v = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
            let mut s = vaddvq_f32(v);
            while i < n {
                s += a[i] * b[i];
                i += 1;
            }
            s
        }
        #[inline(always)]
        unsafe fn scale_softcap_max(
            s: &mut [f32; BK],
            jl: usize,
            jh: usize,
            scale: f32,
            cap: f32,
        ) -> f32 {
            softcap_max::<float32x4_t>(s, jl, jh, scale, cap)
        }
        #[inline(always)]
        unsafe fn exp_sum(s: &mut [f32; BK], m: f32) -> f32 {
            let mv = vdupq_n_f32(m);
            let mut sum = vdupq_n_f32(0.0);
            for i in (0..BK).step_by(4) {
                let p = s.as_mut_ptr().add(i);
                let e = exp(vsubq_f32(vld1q_f32(p), mv));
                vst1q_f32(p, e);
                sum = vaddq_f32(sum, e);
            }
            vaddvq_f32(sum)
        }
        #[inline(always)]
        unsafe fn pv(acc: &mut [f32], c: f32, p: &[f32; BK], v: &[f32], kb: usize) {
            let dv = acc.len();
            assert!(v.len() >= kb * dv && kb <= BK);
            let mut c0 = 0;
            // 32 outputs (8 registers) at a time, then 4, then single values
            while c0 + 32 <= dv {
                let a = acc.as_mut_ptr().add(c0);
                let mut r = [vdupq_n_f32(0.0); 8];
                for (i, x) in r.iter_mut().enumerate() {
                    *x = vmulq_n_f32(vld1q_f32(a.add(4 * i)), c);
                }
                for (j, &pj) in p.iter().enumerate().take(kb) {
                    let vr = v.as_ptr().add(j * dv + c0);
                    for (i, x) in r.iter_mut().enumerate() {
                        *x = vfmaq_n_f32(*x, vld1q_f32(vr.add(4 * i)), pj);
                    }
                }
                for (i, x) in r.iter().enumerate() {
                    vst1q_f32(a.add(4 * i), *x);
                }
                c0 += 32;
            }
            while c0 + 4 <= dv {
                let a = acc.as_mut_ptr().add(c0);
                let mut x = vmulq_n_f32(vld1q_f32(a), c);
                for (j, &pj) in p.iter().enumerate().take(kb) {
                    x = vfmaq_n_f32(x, vld1q_f32(v.as_ptr().add(j * dv + c0)), pj);
                }
                vst1q_f32(a, x);
                c0 += 4;
            }
            for o in c0..dv {
                let mut x = acc[o] * c;
                for (j, &pj) in p.iter().enumerate().take(kb) {
                    x += pj * v[j * dv + o];
                }
                acc[o] = x;
            }
        }
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

    use super::{BK, Ops, softcap_max};
    use crate::simd::math::exp;
    use crate::simd::wasm::{f16x4_to_f32, hsum_f32, ld, ld_f32};

    pub(in super::super) struct Simd128;

    /// Stores four floats.
    #[inline(always)]
    fn st_f32(x: &mut [f32], v: v128) {
        assert!(x.len() >= 4);
        // SAFETY: 4 writable floats checked above.
        unsafe { v128_store(x.as_mut_ptr().cast(), v) }
    }

    impl Ops for Simd128 {
        #[inline(always)]
        unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
            let n = a.len().min(b.len());
            let mut acc = [f32x4_splat(0.0); 4];
            let mut i = 0;
            while i + 16 <= n {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let at = i + 4 * k;
                    *acc = f32x4_add(*acc, f32x4_mul(ld_f32(&a[at..]), ld_f32(&b[at..])));
                }
                i += 16;
            }
            while i + 4 <= n {
                acc[0] = f32x4_add(acc[0], f32x4_mul(ld_f32(&a[i..]), ld_f32(&b[i..])));
                i += 4;
            }
            let v = f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3]));
            let mut s = hsum_f32(v);
            while i < n {
                s += a[i] * b[i];
                i += 1;
            }
            s
        }
        #[inline(always)]
        unsafe fn scale_softcap_max(
            s: &mut [f32; BK],
            jl: usize,
            jh: usize,
            scale: f32,
            cap: f32,
        ) -> f32 {
            softcap_max::<v128>(s, jl, jh, scale, cap)
        }
        #[inline(always)]
        unsafe fn exp_sum(s: &mut [f32; BK], m: f32) -> f32 {
            let mv = f32x4_splat(m);
            let mut sum = f32x4_splat(0.0);
            for c in s.chunks_exact_mut(4) {
                let e = exp(f32x4_sub(ld_f32(c), mv));
                st_f32(c, e);
                sum = f32x4_add(sum, e);
            }
            hsum_f32(sum)
        }
        #[inline(always)]
        unsafe fn pv(acc: &mut [f32], c: f32, p: &[f32; BK], v: &[f32], kb: usize) {
            let dv = acc.len();
            assert!(v.len() >= kb * dv && kb <= BK);
            let cv = f32x4_splat(c);
            let mut c0 = 0;
            // 32 outputs (8 registers) at a time, every key into them, then 4, then single
            // values
            while c0 + 32 <= dv {
                let mut r: [v128; 8] =
                    std::array::from_fn(|i| f32x4_mul(ld_f32(&acc[c0 + 4 * i..]), cv));
                for (j, &pj) in p.iter().enumerate().take(kb) {
                    let (vr, pj) = (&v[j * dv + c0..], f32x4_splat(pj));
                    for (i, x) in r.iter_mut().enumerate() {
                        *x = f32x4_add(*x, f32x4_mul(ld_f32(&vr[4 * i..]), pj));
                    }
                }
                for (i, x) in r.iter().enumerate() {
                    st_f32(&mut acc[c0 + 4 * i..], *x);
                }
                c0 += 32;
            }
            while c0 + 4 <= dv {
                let mut x = f32x4_mul(ld_f32(&acc[c0..]), cv);
                for (j, &pj) in p.iter().enumerate().take(kb) {
                    x = f32x4_add(x, f32x4_mul(ld_f32(&v[j * dv + c0..]), f32x4_splat(pj)));
                }
                st_f32(&mut acc[c0..], x);
                c0 += 4;
            }
            for o in c0..dv {
                let mut x = acc[o] * c;
                for (j, &pj) in p.iter().enumerate().take(kb) {
                    x += pj * v[j * dv + o];
                }
                acc[o] = x;
            }
        }
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
