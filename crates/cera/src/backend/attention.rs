//! Causal multi-head attention over a session's KV cache, with grouped-query heads, optional
//! sliding window and logit soft-capping. One pass over the keys per (token, head) with an
//! online softmax, so no score buffer is needed.

use half::f16;

use super::{Cpu, SyncPtr};

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KvType {
    F32,
    #[default]
    F16,
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(KvType::F32),
            "f16" => Ok(KvType::F16),
            _ => Err(format!(
                "unsupported KV cache type '{s}' (supported: f32, f16)"
            )),
        }
    }
}

#[derive(Clone, Debug)]
enum KvBuf {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl KvBuf {
    fn new(ty: KvType, n: usize) -> KvBuf {
        match ty {
            KvType::F32 => KvBuf::F32(vec![0.0; n]),
            KvType::F16 => KvBuf::F16(vec![f16::ZERO; n]),
        }
    }

    fn store(&mut self, at: usize, src: &[f32]) {
        match self {
            KvBuf::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            KvBuf::F16(v) => {
                for (d, &s) in v[at..at + src.len()].iter_mut().zip(src) {
                    *d = f16::from_f32(s);
                }
            }
        }
    }
}

/// One layer's keys and values: `n_ctx` rows of `n_kv_head * head_dim` each.
#[derive(Clone, Debug)]
pub struct KvLayer {
    k: KvBuf,
    v: KvBuf,
    k_dim: usize,
    v_dim: usize,
    n_ctx: usize,
}

impl KvLayer {
    pub fn new(ty: KvType, n_ctx: usize, k_dim: usize, v_dim: usize) -> KvLayer {
        KvLayer {
            k: KvBuf::new(ty, n_ctx * k_dim),
            v: KvBuf::new(ty, n_ctx * v_dim),
            k_dim,
            v_dim,
            n_ctx,
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let elem = match self.k {
            KvBuf::F32(_) => 4,
            KvBuf::F16(_) => 2,
        };
        self.n_ctx * (self.k_dim + self.v_dim) * elem
    }

    /// Stores `n` tokens' keys and values at positions `pos..pos+n`.
    pub fn store(&mut self, pos: usize, k: &[f32], v: &[f32]) {
        self.k.store(pos * self.k_dim, k);
        self.v.store(pos * self.v_dim, v);
    }
}

#[derive(Clone, Debug)]
pub struct AttentionParams {
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    /// Multiplies q·k (usually 1/sqrt(head_dim)).
    pub scale: f32,
    /// `cap * tanh(s / cap)` on the scores (Gemma 2).
    pub softcap: Option<f32>,
    /// Keys older than this many positions are masked (sliding-window layers).
    pub window: Option<usize>,
}

const MAX_HEAD_DIM: usize = 512;

impl Cpu {
    /// `q`: `n_tokens` × `n_head` × `head_dim`, for positions `pos0..pos0+n_tokens`, whose keys
    /// and values are already in `kv`. Writes `n_tokens` × `n_head` × `head_dim_v` to `out`.
    pub fn attention(
        &self,
        q: &[f32],
        kv: &KvLayer,
        pos0: usize,
        n_tokens: usize,
        p: &AttentionParams,
        out: &mut [f32],
    ) {
        assert!(p.head_dim <= MAX_HEAD_DIM && p.head_dim_v <= MAX_HEAD_DIM);
        assert!(pos0 + n_tokens <= kv.n_ctx);
        let group = p.n_head / p.n_kv_head;
        let items = n_tokens * p.n_head;
        let optr = SyncPtr(out.as_mut_ptr());
        let chunk = (items / (self.n_threads() * 4)).max(1);
        self.pool
            .for_chunks(items, chunk, self.n_threads(), &|range| {
                let mut qh = [0f32; MAX_HEAD_DIM];
                let mut acc = [0f32; MAX_HEAD_DIM];
                for item in range {
                    let (t, h) = (item / p.n_head, item % p.n_head);
                    let g = h / group;
                    let qpos = pos0 + t;
                    let first = p.window.map_or(0, |w| (qpos + 1).saturating_sub(w));
                    let qrow = &q[(t * p.n_head + h) * p.head_dim..][..p.head_dim];
                    let qh = &mut qh[..p.head_dim];
                    let acc = &mut acc[..p.head_dim_v];
                    acc.fill(0.0);
                    let mut m = f32::NEG_INFINITY;
                    let mut l = 0f32;
                    for j in first..=qpos {
                        let s = match &kv.k {
                            KvBuf::F32(k) => {
                                dot(qrow, &k[j * kv.k_dim + g * p.head_dim..][..p.head_dim])
                            }
                            KvBuf::F16(k) => {
                                // q is rounded to f16 for the product with f16 keys, as llama.cpp does
                                if j == first {
                                    for (d, &s) in qh.iter_mut().zip(qrow) {
                                        *d = f16::from_f32(s).to_f32();
                                    }
                                }
                                dot_f16(qh, &k[j * kv.k_dim + g * p.head_dim..][..p.head_dim])
                            }
                        };
                        let mut s = s * p.scale;
                        if let Some(cap) = p.softcap {
                            s = cap * (s / cap).tanh();
                        }
                        let (wt, rescale) = if s > m {
                            let r = (m - s).exp();
                            m = s;
                            (1.0, r)
                        } else {
                            ((s - m).exp(), 1.0)
                        };
                        l = l * rescale + wt;
                        match &kv.v {
                            KvBuf::F32(v) => {
                                let vr = &v[j * kv.v_dim + g * p.head_dim_v..][..p.head_dim_v];
                                for (a, &x) in acc.iter_mut().zip(vr) {
                                    *a = *a * rescale + wt * x;
                                }
                            }
                            KvBuf::F16(v) => {
                                let vr = &v[j * kv.v_dim + g * p.head_dim_v..][..p.head_dim_v];
                                for (a, &x) in acc.iter_mut().zip(vr) {
                                    *a = *a * rescale + wt * x.to_f32();
                                }
                            }
                        }
                    }
                    // SAFETY: each (token, head) output row is written by exactly one item.
                    let o = unsafe { optr.slice((t * p.n_head + h) * p.head_dim_v, p.head_dim_v) };
                    let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
                    for (d, &a) in o.iter_mut().zip(acc.iter()) {
                        *d = a * inv;
                    }
                }
            });
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn dot_f16(a: &[f32], b: &[f16]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y.to_f32()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive softmax attention in f64 for comparison.
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        pos0: usize,
        n: usize,
        p: &AttentionParams,
    ) -> Vec<f32> {
        let group = p.n_head / p.n_kv_head;
        let (kd, vd) = (p.n_kv_head * p.head_dim, p.n_kv_head * p.head_dim_v);
        let mut out = vec![0f32; n * p.n_head * p.head_dim_v];
        for t in 0..n {
            for h in 0..p.n_head {
                let g = h / group;
                let qp = pos0 + t;
                let first = p.window.map_or(0, |w| (qp + 1).saturating_sub(w));
                let qr = &q[(t * p.n_head + h) * p.head_dim..][..p.head_dim];
                let scores: Vec<f64> = (first..=qp)
                    .map(|j| {
                        let kr = &k[j * kd + g * p.head_dim..][..p.head_dim];
                        let mut s = qr
                            .iter()
                            .zip(kr)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                            * p.scale as f64;
                        if let Some(c) = p.softcap {
                            s = c as f64 * (s / c as f64).tanh();
                        }
                        s
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let den: f64 = scores.iter().map(|s| (s - mx).exp()).sum();
                for (jj, s) in scores.iter().enumerate() {
                    let j = first + jj;
                    let w = (s - mx).exp() / den;
                    for d in 0..p.head_dim_v {
                        out[(t * p.n_head + h) * p.head_dim_v + d] +=
                            (w * v[j * vd + g * p.head_dim_v + d] as f64) as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn matches_naive_softmax_attention() {
        let cpu = Cpu::new(2);
        for (window, softcap) in [(None, None), (Some(3), None), (None, Some(5.0))] {
            let p = AttentionParams {
                n_head: 4,
                n_kv_head: 2,
                head_dim: 8,
                head_dim_v: 8,
                scale: 0.35,
                softcap,
                window,
            };
            let n_ctx = 10;
            let mut seed = 1u32;
            let mut rnd = || {
                seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                (seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            };
            let k: Vec<f32> = (0..n_ctx * 16).map(|_| rnd()).collect();
            let v: Vec<f32> = (0..n_ctx * 16).map(|_| rnd()).collect();
            let q: Vec<f32> = (0..4 * 32).map(|_| rnd()).collect();
            let mut kv = KvLayer::new(KvType::F32, n_ctx, 16, 16);
            kv.store(0, &k, &v);
            let mut out = vec![0f32; 4 * 32];
            cpu.attention(&q, &kv, 5, 4, &p, &mut out);
            let want = reference(&q, &k, &v, 5, 4, &p);
            for (a, b) in out.iter().zip(&want) {
                assert!((a - b).abs() < 1e-5, "{window:?} {softcap:?}: {a} vs {b}");
            }
        }
    }
}
