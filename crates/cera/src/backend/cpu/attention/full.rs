//! Encoder attention (every row of a vision or audio tower, or of an embedding model, sees
//! every key; no window, no soft-capping, f32 keys and values) on the AVX-512 tier as two
//! products per head in `dense`'s broadcast form: the scores `S = (scale·Q)·Kᵀ` of a block of
//! queries, each row's softmax, then `S·V`. The flash-style tile computes the same sums one
//! score row at a time at about half the rate and was a quarter of an image's encode; here
//! the products run at the encoder matmuls' rate. No decode step has to reproduce these rows
//! (nothing attends incrementally to an encoder), so their order of sums is free.

use std::cell::RefCell;

use super::AttnSeq;
use super::kv::KvBuf;
use crate::backend::AttentionParams;
use crate::backend::cpu::dense::{PANEL, Panel, panel_product};
use crate::backend::cpu::{Cpu, SyncPtr};
use crate::kernels::CpuTier;

/// Query rows per work item: their scores (`[QB][n_keys]`, 192 KiB at 1024 keys) stay in L2
/// between the two products; a multiple of the kernel's 12-row block.
const QB: usize = 48;

thread_local! {
    /// The calling thread's packed keys and values of the current call (grown once).
    static PACKED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Per worker: a block's buffers.
    static BLOCK: RefCell<Block> = RefCell::default();
}

/// A block's buffers (kept by each worker between calls).
#[derive(Default)]
struct Block {
    /// the scaled queries (`[QB][head_dim]`; with the content bias for relative positions)
    qa: Vec<f32>,
    /// with the position bias (`[QB][head_dim]`)
    qb: Vec<f32>,
    /// scores, `[QB][n keys]`
    sc: Vec<f32>,
    /// position scores over the panels a block reads (`[QB][width]`)
    bd: Vec<f32>,
    /// the rows' `1 / Σ exp`
    inv: Vec<f32>,
}

impl Cpu {
    /// Whether [`Cpu::full_attention`] runs this call.
    pub(super) fn full_attention_applies(&self, seqs: &[AttnSeq<'_>], p: &AttentionParams) -> bool {
        let [s] = seqs else { return false };
        let (k, v) = (&s.kv.k, &s.kv.v);
        self.dense_attention_tier()
            && !p.causal
            && p.window.is_none()
            && p.softcap.is_none()
            // below a block of rows the tile is as fast and packing is pure cost
            && s.n >= QB
            && matches!((&k.buf, &v.buf), (KvBuf::F32(_), KvBuf::F32(_)))
            && !k.rot.is_some()
            && !v.rot.is_some()
    }

    /// Whether the host runs `dense`'s kernel (AVX-512).
    pub(crate) fn dense_attention_tier(&self) -> bool {
        cfg!(target_arch = "x86_64") && self.table.tier() == CpuTier::Avx512
    }

    /// Non-causal attention of one sequence's rows over keys `0..pos0 + n` of its cache (see
    /// the module docs); `q`, `out` as [`Cpu::attention_batch`] takes them.
    pub(super) fn full_attention(
        &self,
        q: &[f32],
        s: &AttnSeq<'_>,
        p: &AttentionParams,
        out: &mut [f32],
    ) {
        let (n_head, n_kv) = (p.n_head, p.n_kv_head);
        let group = n_head / n_kv;
        let (d, dv) = (p.head_dim, p.head_dim_v);
        let nk = s.pos0 + s.n;
        let n_ctx = s.kv.n_ctx;
        let (KvBuf::F32(kb), KvBuf::F32(vb)) = (&s.kv.k.buf, &s.kv.v.buf) else {
            unreachable!("full_attention_applies checked the cache's type")
        };
        let keys = Packing::new(nk, d);
        let vals = Packing::new(nk, dv);
        let threads = self.step_threads(s.n);
        PACKED.with_borrow_mut(|packed| {
            let per_g = keys.len + vals.len;
            packed.clear();
            packed.resize(n_kv * per_g, 0.0);
            let pp = SyncPtr(packed.as_mut_ptr());
            self.pool.for_chunks(n_kv, 1, threads, &|heads| {
                for g in heads {
                    // SAFETY: head g's share of the buffer is written by this chunk alone.
                    let dst = unsafe { pp.slice(g * per_g, per_g) };
                    let (kp, vp) = dst.split_at_mut(keys.len);
                    keys.rows(&kb[g * n_ctx * d..], d, 0, kp);
                    vals.columns(&vb[g * n_ctx * dv..], dv, 0, vp);
                }
            });
            let packed = packed.as_slice();
            let optr = SyncPtr(out.as_mut_ptr());
            let ldo = n_head * dv;
            self.pool
                .for_chunks(n_head * s.n.div_ceil(QB), 1, threads, &|items| {
                    BLOCK.with_borrow_mut(|b| {
                        for i in items {
                            let (h, qb) = (i % n_head, i / n_head);
                            let g = h / group;
                            let (t0, nt) = (qb * QB, QB.min(s.n - qb * QB));
                            b.qa.clear();
                            for t in 0..nt {
                                let row = &q[((s.row0 + t0 + t) * n_head + h) * d..][..d];
                                b.qa.extend(row.iter().map(|x| x * p.scale));
                            }
                            let kp = &packed[g * per_g..][..keys.len];
                            b.sc.resize(nt * nk, 0.0);
                            keys.product(kp, 0, keys.np, &b.qa, nt, &mut b.sc, nk);
                            let vp = &packed[g * per_g + keys.len..][..vals.len];
                            // SAFETY: head h's columns of rows t0..t0+nt are this item's alone.
                            unsafe {
                                softmax_values(
                                    &vals,
                                    vp,
                                    b,
                                    nt,
                                    optr.at((s.row0 + t0) * ldo + h * dv),
                                    ldo,
                                )
                            };
                        }
                    })
                });
        });
    }

    /// [`crate::backend::relpos::rel_pos_attention`] on the AVX-512 tier in the same form: per
    /// head and block of queries, `(q + u)·Kᵀ` and `(q + v)·Pᵀ` over the positions the block
    /// reads (the relative shift picks, for row `i`, positions `n - 1 - i ..`), their sum's
    /// softmax, then the values; the result bit-for-bit that of no other path, within f32
    /// rounding of [`crate::backend::relpos`]'s. The caller checked the shapes and the tier.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rel_pos_dense(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        pos: &[f32],
        bias_u: &[f32],
        bias_v: &[f32],
        n_head: usize,
        out: &mut [f32],
    ) {
        let d = bias_u.len();
        let n = q.len() / d;
        let hd = d / n_head;
        let np = 2 * n - 1;
        let scale = 1.0 / (hd as f32).sqrt();
        let keys = Packing::new(n, hd);
        let poss = Packing::new(np, hd);
        let vals = Packing::new(n, hd);
        let threads = self.n_threads();
        PACKED.with_borrow_mut(|packed| {
            let per_h = keys.len + poss.len + vals.len;
            packed.clear();
            packed.resize(n_head * per_h, 0.0);
            let pp = SyncPtr(packed.as_mut_ptr());
            self.pool.for_chunks(n_head, 1, threads, &|heads| {
                for h in heads {
                    // SAFETY: head h's share of the buffer is written by this chunk alone.
                    let dst = unsafe { pp.slice(h * per_h, per_h) };
                    let (kp, rest) = dst.split_at_mut(keys.len);
                    let (pp, vp) = rest.split_at_mut(poss.len);
                    keys.rows(k, d, h * hd, kp);
                    poss.rows(pos, d, h * hd, pp);
                    vals.columns(v, d, h * hd, vp);
                }
            });
            let packed = packed.as_slice();
            let optr = SyncPtr(out.as_mut_ptr());
            self.pool
                .for_chunks(n_head * n.div_ceil(QB), 1, threads, &|items| {
                    BLOCK.with_borrow_mut(|b| {
                        for i in items {
                            let (h, qb) = (i % n_head, i / n_head);
                            let (i0, nt) = (qb * QB, QB.min(n - qb * QB));
                            let c0 = h * hd;
                            b.qa.clear();
                            b.qb.clear();
                            for t in 0..nt {
                                let row = &q[(i0 + t) * d + c0..][..hd];
                                let (u, w) = (&bias_u[c0..c0 + hd], &bias_v[c0..c0 + hd]);
                                b.qa.extend(row.iter().zip(u).map(|(x, u)| (x + u) * scale));
                                b.qb.extend(row.iter().zip(w).map(|(x, w)| (x + w) * scale));
                            }
                            let base = h * per_h;
                            b.sc.resize(nt * n, 0.0);
                            keys.product(
                                &packed[base..][..keys.len],
                                0,
                                keys.np,
                                &b.qa,
                                nt,
                                &mut b.sc,
                                n,
                            );
                            // row i reads positions n - 1 - i + j, j < n: the block's rows
                            // r_lo = n - i0 - nt ..= 2n - 2 - i0, whole panels around them
                            let (p_lo, p_hi) =
                                ((n - i0 - nt) / PANEL, (2 * n - 2 - i0) / PANEL + 1);
                            let w = (p_hi - p_lo) * PANEL;
                            b.bd.resize(nt * w, 0.0);
                            let pk = &packed[base + keys.len..][..poss.len];
                            poss.product(pk, p_lo, p_hi, &b.qb, nt, &mut b.bd, w);
                            for (t, (s, bd)) in
                                b.sc.chunks_exact_mut(n)
                                    .zip(b.bd.chunks_exact(w))
                                    .enumerate()
                            {
                                let r0 = n - 1 - (i0 + t) - p_lo * PANEL;
                                s.iter_mut().zip(&bd[r0..r0 + n]).for_each(|(s, x)| *s += x);
                            }
                            let vp = &packed[base + keys.len + poss.len..][..vals.len];
                            // SAFETY: head h's columns of rows i0..i0+nt are this item's alone.
                            unsafe { softmax_values(&vals, vp, b, nt, optr.at(i0 * d + c0), d) };
                        }
                    })
                });
        });
    }
}

/// A matrix of `n` rows of `w` values as `dense`'s panels: by rows (`[np][w][32]`: 32 rows per
/// panel, the keys of `S = Q·Kᵀ`) or by columns (`[nc][n][32]`: the values of `S·V`).
struct Packing {
    n: usize,
    w: usize,
    /// panels of rows
    np: usize,
    /// floats of either layout's panels
    len: usize,
}

impl Packing {
    fn new(n: usize, w: usize) -> Packing {
        let np = n.div_ceil(PANEL);
        Packing {
            n,
            w,
            np,
            len: (np * w * PANEL).max(w.div_ceil(PANEL) * n * PANEL),
        }
    }

    /// Rows `0..n` of `src` (row stride `stride`, columns `c0..c0 + w`) into `dst` by rows
    /// (missing lanes of the last panel left as they are: zero).
    fn rows(&self, src: &[f32], stride: usize, c0: usize, dst: &mut [f32]) {
        for j in 0..self.n {
            let panel = &mut dst[(j / PANEL) * self.w * PANEL..][..self.w * PANEL];
            for (kk, &x) in src[j * stride + c0..][..self.w].iter().enumerate() {
                panel[kk * PANEL + j % PANEL] = x;
            }
        }
    }

    /// The same by columns.
    fn columns(&self, src: &[f32], stride: usize, c0: usize, dst: &mut [f32]) {
        let n = self.n;
        for j in 0..n {
            for (c, &x) in src[j * stride + c0..][..self.w].iter().enumerate() {
                dst[(c / PANEL) * n * PANEL + j * PANEL + c % PANEL] = x;
            }
        }
    }

    /// `out[t][(p - p_lo)·32 + c] = x[t] · row(p·32 + c)` for panels `p_lo..p_hi` of rows
    /// packed by [`Packing::rows`], `x`: `[nt][w]`, `out` rows of `ldo`.
    #[allow(clippy::too_many_arguments)]
    fn product(
        &self,
        packed: &[f32],
        p_lo: usize,
        p_hi: usize,
        x: &[f32],
        nt: usize,
        out: &mut [f32],
        ldo: usize,
    ) {
        let w = self.w;
        let last = (p_hi - 1 - p_lo) * PANEL + PANEL.min(self.n - (p_hi - 1) * PANEL);
        assert!(p_lo < p_hi && p_hi <= self.np && x.len() >= nt * w);
        assert!(last <= ldo && out.len() >= (nt - 1) * ldo + last);
        for pn in p_lo..p_hi {
            let nr = PANEL.min(self.n - pn * PANEL);
            let panel = Panel::F32(&packed[pn * w * PANEL..][..w * PANEL]);
            // SAFETY: columns (pn - p_lo)·32.. +nr of the nt rows lie in `out` (asserted);
            // the tier is AVX-512 (the callers' checks).
            unsafe {
                panel_product(
                    panel,
                    w,
                    nr,
                    x,
                    nt,
                    out.as_mut_ptr().add((pn - p_lo) * PANEL),
                    ldo,
                )
            };
        }
    }
}

/// The block's scores `b.sc` (`[nt][n keys]`) through the softmax, times the values (packed
/// by columns in `vp`), into `nt` rows of `out` (stride `ldo`).
///
/// # Safety
/// `out` valid for writes of the `vals.w` values at `t · ldo`, `t < nt`; AVX-512.
unsafe fn softmax_values(
    vals: &Packing,
    vp: &[f32],
    b: &mut Block,
    nt: usize,
    out: *mut f32,
    ldo: usize,
) {
    let nk = vals.n;
    b.inv.resize(nt, 0.0);
    for (row, inv) in b.sc.chunks_exact_mut(nk).zip(b.inv.iter_mut()) {
        *inv = 1.0 / exp_rows(row);
    }
    let dv = vals.w;
    for pn in 0..dv.div_ceil(PANEL) {
        let nr = PANEL.min(dv - pn * PANEL);
        let panel = Panel::F32(&vp[pn * nk * PANEL..][..nk * PANEL]);
        // SAFETY: as the caller promises.
        unsafe { panel_product(panel, nk, nr, &b.sc, nt, out.add(pn * PANEL), ldo) };
    }
    for (t, &inv) in b.inv.iter().enumerate() {
        // SAFETY: as the caller promises.
        let o = unsafe { std::slice::from_raw_parts_mut(out.add(t * ldo), dv) };
        o.iter_mut().for_each(|x| *x *= inv);
    }
}

/// `row[j] = exp(row[j] - max)`; returns the sum (at least 1: the maximum's own term).
fn exp_rows(row: &mut [f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: only reached on the AVX-512 tier (`full_attention_applies`).
    unsafe {
        x86::exp_row(row)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = row;
        unreachable!("full attention runs on the AVX-512 tier only")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::simd::math::{self, F32s};

    /// See [`super::exp_rows`].
    ///
    /// # Safety
    /// AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn exp_row(row: &mut [f32]) -> f32 {
        let n = row.len();
        let body = n - n % 16;
        let p = row.as_mut_ptr();
        // SAFETY: every vector access below lies in 0..body, the tail scalar.
        unsafe {
            let mut mx = _mm512_set1_ps(f32::NEG_INFINITY);
            for i in (0..body).step_by(16) {
                mx = _mm512_max_ps(mx, _mm512_loadu_ps(p.add(i)));
            }
            let mut m = _mm512_reduce_max_ps(mx);
            for &x in &row[body..] {
                m = m.max(x);
            }
            let mv = __m512::splat(m);
            let mut sum = __m512::splat(0.0);
            for i in (0..body).step_by(16) {
                let e = math::exp(__m512::load(p.add(i)).sub(mv));
                e.store(p.add(i));
                sum = sum.add(e);
            }
            let mut s = sum.sum();
            for x in &mut row[body..] {
                *x = (*x - m).exp();
                s += *x;
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::rnd_vec;
    use super::*;
    use crate::backend::cpu::attention::KvLayer;
    use crate::backend::kvtype::KvType;
    use crate::kernels::KernelTable;

    /// The AVX-512 tier's table, or None on a host without it (whose calls the flash tile,
    /// tested in `super::tests`, and the host default of `relpos` run instead).
    fn avx512() -> Option<&'static KernelTable> {
        let Some(table) = KernelTable::for_tier(CpuTier::Avx512) else {
            assert!(!CpuTier::supported().contains(&CpuTier::Avx512));
            return None;
        };
        Some(Box::leak(Box::new(table)))
    }

    /// Against an f64 softmax over every key: head sizes off the panel width, GQA, a key count
    /// off the panel and block sizes, rows after earlier keys (`pos0`), 1 and 3 threads; and
    /// the tier that runs it really takes this path.
    #[test]
    fn matches_f64_reference() {
        let Some(table) = avx512() else { return };
        let mut seed = 5u32;
        let mut rnd = |n: usize| rnd_vec(&mut seed, n);
        // n_head, n_kv_head, head_dim, head_dim_v, pos0, n
        for (nh, nkv, hd, hdv, pos0, n) in [
            (4, 4, 64, 64, 0, 131),
            (6, 2, 40, 72, 9, 48),
            (2, 1, 16, 16, 0, 200),
        ] {
            let p = AttentionParams {
                n_head: nh,
                n_kv_head: nkv,
                head_dim: hd,
                head_dim_v: hdv,
                scale: 1.0 / (hd as f32).sqrt(),
                softcap: None,
                window: None,
                causal: false,
            };
            let nk = pos0 + n;
            let (k, v) = (rnd(nk * nkv * hd), rnd(nk * nkv * hdv));
            let q: Vec<f32> = rnd(n * nh * hd).iter().map(|x| 4.0 * x).collect();
            let mut kv = KvLayer::new(KvType::F32, nk + 2, nkv, hd, hdv);
            kv.store(0, &k, &v);
            let mut want = vec![0f32; n * nh * hdv];
            for t in 0..n {
                for h in 0..nh {
                    let g = h / (nh / nkv);
                    let qr = &q[(t * nh + h) * hd..][..hd];
                    let s: Vec<f64> = (0..nk)
                        .map(|j| {
                            let kr = &k[(j * nkv + g) * hd..][..hd];
                            qr.iter()
                                .zip(kr)
                                .map(|(a, b)| *a as f64 * *b as f64)
                                .sum::<f64>()
                                * p.scale as f64
                        })
                        .collect();
                    let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let den: f64 = s.iter().map(|x| (x - mx).exp()).sum();
                    for (j, x) in s.iter().enumerate() {
                        let w = (x - mx).exp() / den;
                        for c in 0..hdv {
                            want[(t * nh + h) * hdv + c] +=
                                (w * v[(j * nkv + g) * hdv + c] as f64) as f32;
                        }
                    }
                }
            }
            for threads in [1, 3] {
                let cpu = Cpu::with_table(threads, table);
                let seq = AttnSeq {
                    kv: &kv,
                    pos0,
                    row0: 0,
                    n,
                };
                assert!(cpu.full_attention_applies(&[seq], &p));
                let mut out = vec![0f32; n * nh * hdv];
                cpu.attention(&q, &kv, pos0, n, &p, &mut out);
                for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() < 2e-5,
                        "{:?} t{threads} [{i}]: {a} vs {b}",
                        (nh, nkv, hd, hdv, pos0, n)
                    );
                }
            }
        }
    }

    /// The relative-position form against the f64 definition (mtmd's padded shift): a clip
    /// off the block and panel sizes, heads of 64 and 40.
    #[test]
    fn rel_pos_matches_f64_reference() {
        let Some(table) = avx512() else { return };
        let mut seed = 9u32;
        let mut rnd = |n: usize| rnd_vec(&mut seed, n);
        for (n, n_head, hd) in [(101, 2, 64), (37, 3, 40), (1, 2, 8)] {
            let d = n_head * hd;
            let (q, k, v) = (rnd(n * d), rnd(n * d), rnd(n * d));
            let p: Vec<f32> = rnd((2 * n - 1) * d).iter().map(|x| 2.0 * x).collect();
            let (bu, bv) = (rnd(d), rnd(d));
            let want = crate::backend::relpos::tests::reference(&q, &k, &v, &p, &bu, &bv, n_head);
            for threads in [1, 2] {
                let cpu = Cpu::with_table(threads, table);
                let mut out = vec![0f32; n * d];
                cpu.rel_pos_dense(&q, &k, &v, &p, &bu, &bv, n_head, &mut out);
                for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(*a) - b).abs() < 2e-5,
                        "{:?} t{threads} [{i}]: {a} vs {b}",
                        (n, n_head, hd)
                    );
                }
            }
        }
    }
}
