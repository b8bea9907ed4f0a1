//! Gated activations `gate = act(gate) · up` (SwiGLU, GeGLU) on the CPU: vectorized per tier
//! with the vector `exp` of [`crate::simd`] (relative error below 2e-7, so a result stays
//! within about 1e-6 of the scalar libm formula), and split over the pool when the step is
//! large (a prefill's FFN). A scalar `expf` per element was most of the time of a decode
//! step's elementwise work.

use super::{Act, Cpu, SyncPtr, elementwise as ew};
use crate::kernels::CpuTier;

/// Elements per thread below which the pool is not worth waking.
const MIN_PER_THREAD: usize = 16 << 10;

impl Cpu {
    /// `gate = act(gate) · up`, element-wise.
    pub(crate) fn glu(&self, gate: &mut [f32], up: &[f32], act: Act) {
        assert_eq!(gate.len(), up.len(), "glu: lengths differ");
        let n = gate.len();
        let tier = self.table.tier();
        let threads = (n / MIN_PER_THREAD).clamp(1, self.n_threads());
        if threads == 1 {
            glu_slice(tier, gate, up, act);
            return;
        }
        let g = SyncPtr(gate.as_mut_ptr());
        let chunk = n.div_ceil(threads * 4).next_multiple_of(64);
        self.pool.for_chunks(n, chunk, threads, &|r| {
            // SAFETY: the chunks are disjoint ranges of `gate`.
            let gs = unsafe { g.slice(r.start, r.len()) };
            glu_slice(tier, gs, &up[r], act);
        });
    }
}

fn glu_slice(tier: CpuTier, gate: &mut [f32], up: &[f32], act: Act) {
    match tier {
        // SAFETY: the kernel table only holds a tier the host supports.
        #[cfg(target_arch = "x86_64")]
        CpuTier::Avx512 => unsafe { x86::glu_avx512(gate, up, act) },
        #[cfg(target_arch = "x86_64")]
        CpuTier::Avx2 => unsafe { x86::glu_avx2(gate, up, act) },
        _ => glu_scalar(gate, up, act),
    }
}

fn glu_scalar(gate: &mut [f32], up: &[f32], act: Act) {
    let f = match act {
        Act::Silu => ew::silu,
        Act::Gelu => ew::gelu,
    };
    ew::glu_inplace(gate, up, f);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Act, glu_scalar};
    use crate::simd::x86::{exp256, exp512};

    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044715;

    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    pub(super) unsafe fn glu_avx512(gate: &mut [f32], up: &[f32], act: Act) {
        let n = gate.len();
        let mut i = 0;
        let one = _mm512_set1_ps(1.0);
        while i + 16 <= n {
            // SAFETY: `i + 16 <= n` for both slices.
            let (g, u) = unsafe {
                (
                    _mm512_loadu_ps(gate.as_ptr().add(i)),
                    _mm512_loadu_ps(up.as_ptr().add(i)),
                )
            };
            let a = match act {
                // x / (1 + e^-x)
                Act::Silu => unsafe {
                    _mm512_div_ps(
                        g,
                        _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))),
                    )
                },
                // 0.5 x (1 + tanh s) = x / (1 + e) for s >= 0, x e / (1 + e) below, with
                // e = e^-2|s|: no 1 + tanh cancellation in the negative tail
                Act::Gelu => unsafe {
                    let s = _mm512_mul_ps(
                        _mm512_mul_ps(_mm512_set1_ps(SQRT_2_OVER_PI), g),
                        _mm512_fmadd_ps(_mm512_set1_ps(GELU_COEF_A), _mm512_mul_ps(g, g), one),
                    );
                    let e = exp512(_mm512_mul_ps(_mm512_set1_ps(-2.0), _mm512_abs_ps(s)));
                    let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(s, _mm512_setzero_ps());
                    let num = _mm512_mask_mul_ps(g, neg, g, e);
                    _mm512_div_ps(num, _mm512_add_ps(one, e))
                },
            };
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(gate.as_mut_ptr().add(i), _mm512_mul_ps(a, u)) };
            i += 16;
        }
        glu_scalar(&mut gate[i..], &up[i..], act);
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn glu_avx2(gate: &mut [f32], up: &[f32], act: Act) {
        let n = gate.len();
        let mut i = 0;
        let one = _mm256_set1_ps(1.0);
        let sign_mask = _mm256_set1_ps(-0.0);
        while i + 8 <= n {
            // SAFETY: `i + 8 <= n` for both slices.
            let (g, u) = unsafe {
                (
                    _mm256_loadu_ps(gate.as_ptr().add(i)),
                    _mm256_loadu_ps(up.as_ptr().add(i)),
                )
            };
            let a = match act {
                Act::Silu => unsafe {
                    _mm256_div_ps(
                        g,
                        _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), g))),
                    )
                },
                Act::Gelu => unsafe {
                    let s = _mm256_mul_ps(
                        _mm256_mul_ps(_mm256_set1_ps(SQRT_2_OVER_PI), g),
                        _mm256_fmadd_ps(_mm256_set1_ps(GELU_COEF_A), _mm256_mul_ps(g, g), one),
                    );
                    let abs = _mm256_andnot_ps(sign_mask, s);
                    let e = exp256(_mm256_mul_ps(_mm256_set1_ps(-2.0), abs));
                    let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(s, _mm256_setzero_ps());
                    let num = _mm256_blendv_ps(g, _mm256_mul_ps(g, e), neg);
                    _mm256_div_ps(num, _mm256_add_ps(one, e))
                },
            };
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(gate.as_mut_ptr().add(i), _mm256_mul_ps(a, u)) };
            i += 8;
        }
        glu_scalar(&mut gate[i..], &up[i..], act);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::KernelTable;

    /// Every tier within 2e-6 relative of the exact value (f64), plus the rounding of
    /// `1 + tanh` in f32 where the GELU's negative tail cancels (the scalar libm formula loses
    /// that much there itself, and is held to the same bound), over a range that covers
    /// saturation on both sides, lengths that leave remainders, and lengths large enough to
    /// split over the pool.
    #[test]
    fn vector_glu_matches_exact() {
        let exact = |x: f64, u: f64, act: Act| match act {
            Act::Silu => x / (1.0 + (-x).exp()) * u,
            Act::Gelu => {
                let s = 0.797_884_560_802_865_4 * x * (1.0 + 0.044715 * x * x);
                0.5 * x * (1.0 + s.tanh()) * u
            }
        };
        for tier in CpuTier::supported() {
            let table: &'static KernelTable =
                Box::leak(Box::new(KernelTable::for_tier(tier).unwrap()));
            let cpu = Cpu::with_table(2, table);
            for n in [1, 7, 16, 33, 100, 40_000] {
                let g: Vec<f32> = (0..n)
                    .map(|i| ((i * 7919 % 2001) as f32 - 1000.0) / 40.0)
                    .collect();
                let u: Vec<f32> = (0..n).map(|i| ((i * 31 % 17) as f32 - 8.0) / 3.0).collect();
                for act in [Act::Silu, Act::Gelu] {
                    let mut scalar = g.clone();
                    glu_scalar(&mut scalar, &u, act);
                    let mut got = g.clone();
                    cpu.glu(&mut got, &u, act);
                    for i in 0..n {
                        let want = exact(g[i] as f64, u[i] as f64, act);
                        let bound = 2e-6 * want.abs()
                            + match act {
                                Act::Silu => 1e-30,
                                Act::Gelu => 1.2e-7 * (0.5 * g[i] as f64 * u[i] as f64).abs(),
                            };
                        for (who, v) in [("vector", got[i]), ("scalar", scalar[i])] {
                            assert!(
                                (v as f64 - want).abs() <= bound,
                                "{tier} {who} {act:?} n={n} [{i}] x={}: {v} vs {want}",
                                g[i]
                            );
                        }
                    }
                }
            }
        }
    }
}
