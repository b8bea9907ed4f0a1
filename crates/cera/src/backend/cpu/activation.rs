//! Element-wise activations on the CPU: the gated `gate = act(gate) · up` (SwiGLU, GeGLU), a
//! plain activation (BERT's GELU) and soft-capping `cap · tanh(x / cap)` (Gemma's logits),
//! through the per-tier kernels of `kernels::act` (vector `exp`/`tanh` on every SIMD tier, no
//! libm call per element), split over the pool when the slice is large (a prefill's FFN).

use super::{Act, Cpu, SyncPtr};
use crate::kernels::act::{Elementwise, apply};

/// Elements per thread below which the pool is not worth waking.
const MIN_PER_THREAD: usize = 16 << 10;

impl Cpu {
    /// `gate = act(gate) · up`, element-wise.
    pub(crate) fn glu(&self, gate: &mut [f32], up: &[f32], act: Act) {
        assert_eq!(gate.len(), up.len(), "glu: lengths differ");
        let op = match act {
            Act::Silu => Elementwise::SiluMul,
            Act::Gelu => Elementwise::GeluMul,
        };
        self.elementwise(op, gate, Some(up));
    }

    /// `x = act(x)`, element-wise.
    pub(crate) fn act(&self, x: &mut [f32], act: Act) {
        let op = match act {
            Act::Silu => Elementwise::Silu,
            Act::Gelu => Elementwise::Gelu,
        };
        self.elementwise(op, x, None);
    }

    /// `x = cap · tanh(x / cap)`, element-wise.
    pub(crate) fn softcap_slice(&self, x: &mut [f32], cap: f32) {
        self.elementwise(Elementwise::Softcap(cap), x, None);
    }

    fn elementwise(&self, op: Elementwise, x: &mut [f32], up: Option<&[f32]>) {
        let n = x.len();
        let tier = self.table.tier();
        let threads = (n / MIN_PER_THREAD).clamp(1, self.n_threads());
        if threads == 1 {
            apply(tier, op, x, up);
            return;
        }
        let p = SyncPtr(x.as_mut_ptr());
        let chunk = n.div_ceil(threads * 4).next_multiple_of(64);
        self.pool.for_chunks(n, chunk, threads, &|r| {
            // SAFETY: the chunks are disjoint ranges of `x`.
            let xs = unsafe { p.slice(r.start, r.len()) };
            apply(tier, op, xs, up.map(|u| &u[r]));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{CpuTier, KernelTable};

    /// Split over the pool or not, every op on every tier gives the bits of one kernel call
    /// over the whole slice (whose accuracy `kernels::act`'s tests check).
    #[test]
    fn pool_split_matches_one_call() {
        for tier in CpuTier::supported() {
            let table: &'static KernelTable =
                Box::leak(Box::new(KernelTable::for_tier(tier).unwrap()));
            let cpu = Cpu::with_table(2, table);
            for n in [1, 33, 40_000, 100_003] {
                let g: Vec<f32> = (0..n)
                    .map(|i| ((i * 7919 % 2001) as f32 - 1000.0) / 40.0)
                    .collect();
                let u: Vec<f32> = (0..n).map(|i| ((i * 31 % 17) as f32 - 8.0) / 3.0).collect();
                for act in [Act::Silu, Act::Gelu] {
                    let (mut got, mut want) = (g.clone(), g.clone());
                    cpu.glu(&mut got, &u, act);
                    let op = match act {
                        Act::Silu => Elementwise::SiluMul,
                        Act::Gelu => Elementwise::GeluMul,
                    };
                    apply(tier, op, &mut want, Some(&u));
                    assert_eq!(got, want, "{tier} glu {act:?} n={n}");

                    let (mut got, mut want) = (g.clone(), g.clone());
                    cpu.act(&mut got, act);
                    let op = match act {
                        Act::Silu => Elementwise::Silu,
                        Act::Gelu => Elementwise::Gelu,
                    };
                    apply(tier, op, &mut want, None);
                    assert_eq!(got, want, "{tier} {act:?} n={n}");
                }
                let (mut got, mut want) = (g.clone(), g.clone());
                cpu.softcap_slice(&mut got, 30.0);
                apply(tier, Elementwise::Softcap(30.0), &mut want, None);
                assert_eq!(got, want, "{tier} softcap n={n}");
            }
        }
    }
}
