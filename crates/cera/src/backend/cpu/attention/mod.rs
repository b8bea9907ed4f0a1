//! Causal multi-head attention over a session's KV cache, with grouped-query heads, optional
//! sliding window and logit soft-capping: tiled (flash-style) with an online softmax, so no
//! score matrix is stored, and vectorised per CPU tier (`simd.rs`).

mod full;
mod kv;
mod simd;

use half::f16;

use self::simd::{BK, Ops};
use super::{Cpu, SyncPtr};
use crate::kernels::CpuTier;
use crate::quant::q8_0::{self, BlockQ8_0};

use self::kv::KvBuf;
pub use self::kv::KvLayer;
use crate::backend::kvtype::KvType;
use crate::backend::{AttentionParams, MAX_HEAD_DIM};

/// Query rows (token × head of one GQA group) per tile: enough to amortise converting a key
/// tile, few enough that the accumulators stay in L1.
const TILE_ROWS: usize = 64;

/// One sequence's share of a batched attention call: its query rows are tokens
/// `row0..row0 + n` of the batch, at positions `pos0..pos0 + n` of its own cache `kv` (whose keys
/// and values for those positions are already stored). Sequences never see each other's keys.
#[derive(Clone, Copy)]
pub struct AttnSeq<'a> {
    pub kv: &'a KvLayer,
    pub pos0: usize,
    pub row0: usize,
    pub n: usize,
}

/// One unit of work: rows `r0..r1` of the query rows (token × head of one GQA group,
/// token-major) of the tile starting at token `t0` of sequence `s`, for KV head `g`, against
/// all the keys they see.
#[derive(Clone, Copy)]
struct Item {
    s: usize,
    g: usize,
    t0: usize,
    r0: usize,
    r1: usize,
}

/// Per-thread buffers of the tile loop (kept between calls, so decoding allocates nothing).
#[derive(Default)]
struct TileScratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    acc: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<TileScratch> = Default::default();
    /// The calling thread's tile plan of the current call (grown once, then reused).
    static PLAN: std::cell::RefCell<(Vec<SeqTiles>, Vec<usize>)> = Default::default();
}

struct Ctx<'a> {
    /// the whole batch's queries: rows of `n_head * head_dim`
    q: &'a [f32],
    seqs: &'a [AttnSeq<'a>],
    p: &'a AttentionParams,
    group: usize,
}

impl Ctx<'_> {
    /// First key position a query at `qpos` may see.
    fn first_key(&self, qpos: usize) -> usize {
        self.p.window.map_or(0, |w| (qpos + 1).saturating_sub(w))
    }

    /// One past the last key a query at `qpos` of a sequence whose step ends at `end` sees.
    fn key_end(&self, qpos: usize, end: usize) -> usize {
        if self.p.causal { qpos + 1 } else { end }
    }
}

/// How one sequence's query rows are cut into tiles.
#[derive(Clone, Copy)]
struct SeqTiles {
    /// tokens per tile
    tok: usize,
    /// tiles per KV head
    n_qt: usize,
    /// index of this sequence's first tile among all the call's tiles
    first: usize,
}

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
        let seq = AttnSeq {
            kv,
            pos0,
            row0: 0,
            n: n_tokens,
        };
        self.attention_batch(q, &[seq], p, out)
    }

    /// Attention for every sequence of a batch in one parallel region: `q` and `out` hold all
    /// the batch's tokens (rows of `n_head × head_dim` and `n_head × head_dim_v`); each
    /// [`AttnSeq`] names its rows and its cache.
    ///
    /// Flash-style: for each KV head, tiles of query rows (tokens × the heads of its GQA group)
    /// meet tiles of `BK` (64) keys, converted to f32 once per tile, with an online softmax. Each
    /// KV head is read once per query tile, not once per query head. A row's arithmetic does not
    /// depend on the tile it is in nor on the other sequences of the batch, so a token gets the
    /// same bits decoded alone, inside a prefill, or batched with other sequences.
    pub fn attention_batch(
        &self,
        q: &[f32],
        seqs: &[AttnSeq<'_>],
        p: &AttentionParams,
        out: &mut [f32],
    ) {
        assert!(p.head_dim <= MAX_HEAD_DIM && p.head_dim_v <= MAX_HEAD_DIM);
        assert!(p.n_kv_head > 0 && p.n_head.is_multiple_of(p.n_kv_head));
        let n_rows = q.len() / (p.n_head * p.head_dim).max(1);
        assert_eq!(q.len(), n_rows * p.n_head * p.head_dim);
        assert_eq!(out.len(), n_rows * p.n_head * p.head_dim_v);
        for s in seqs {
            assert!(s.pos0 + s.n <= s.kv.n_ctx, "attention past the cache");
            assert!(s.row0 + s.n <= n_rows, "attention rows past the batch");
        }
        if self.full_attention_applies(seqs, p) {
            return self.full_attention(q, &seqs[0], p, out);
        }
        // per sequence: tiles of up to TILE_ROWS query rows; tiles numbered across the batch
        PLAN.with_borrow_mut(|(tiles, tile_rows)| {
            self.attention_planned(q, seqs, p, out, tiles, tile_rows)
        })
    }

    fn attention_planned(
        &self,
        q: &[f32],
        seqs: &[AttnSeq<'_>],
        p: &AttentionParams,
        out: &mut [f32],
        tiles: &mut Vec<SeqTiles>,
        tile_rows: &mut Vec<usize>,
    ) {
        let group = p.n_head / p.n_kv_head;
        tiles.clear();
        tile_rows.clear();
        let mut n_tiles = 0;
        for s in seqs {
            let tok = (TILE_ROWS / group).clamp(1, s.n.max(1));
            let n_qt = s.n.div_ceil(tok);
            tiles.push(SeqTiles {
                tok,
                n_qt,
                first: n_tiles,
            });
            n_tiles += p.n_kv_head * n_qt;
        }
        if n_tiles == 0 {
            return;
        }
        let ctx = Ctx { q, seqs, p, group };
        let tiles = tiles.as_slice();
        // tile b: its sequence (the last one starting at or before b), KV head and query tile
        let locate = |b: usize| -> (usize, usize, usize, usize) {
            let s = tiles.partition_point(|t| t.first <= b) - 1;
            let t = tiles[s];
            let local = b - t.first;
            let (g, qt) = (local % p.n_kv_head, local / p.n_kv_head);
            let t0 = qt * t.tok;
            let rows = ((t0 + t.tok).min(seqs[s].n) - t0) * group;
            (s, g, t0, rows)
        };
        let threads = self.step_threads(seqs.iter().map(|s| s.n).sum());
        // Few tiles for the threads (decoding: one tile per KV head and sequence): the tiles'
        // rows are laid end to end and cut into one equal share per thread, so a share may end
        // inside a tile (3 KV heads on 2 threads: 4.5 heads' rows each, not 2 heads and 1).
        // Each row's arithmetic stays the same as in a whole tile (unlike splitting the keys),
        // so decode computes exactly what prefill computes; the price is reading a split
        // tile's keys once per share.
        let split =
            tiles.iter().all(|t| t.n_qt == 1) && threads > 1 && !n_tiles.is_multiple_of(threads);
        let n_items = if split { threads } else { n_tiles };
        let tier = self.table.tier();
        let dv = p.head_dim_v;
        let optr = SyncPtr(out.as_mut_ptr());
        let finish = |it: Item, sc: &mut TileScratch| {
            run_tile(tier, &ctx, it, sc);
            let row0 = seqs[it.s].row0;
            for r in it.r0..it.r1 {
                let (t, h) = (row0 + it.t0 + r / group, it.g * group + r % group);
                // SAFETY: each (token, head) output row belongs to one item.
                let o = unsafe { optr.slice((t * p.n_head + h) * dv, dv) };
                let i = r - it.r0;
                let inv = if sc.l[i] > 0.0 { 1.0 / sc.l[i] } else { 0.0 };
                for (d, &a) in o.iter_mut().zip(&sc.acc[i * dv..(i + 1) * dv]) {
                    *d = a * inv;
                }
                // values summed in their rotated space: the output rotated back once
                seqs[it.s].kv.v.rot.inverse(o);
            }
        };
        // split shares: the tiles' rows end to end (every tile has `rows` of its own, at most
        // `max_rows`; in a pure decode step all are `group` rows)
        if split {
            tile_rows.extend((0..n_tiles).map(|b| locate(b).3));
        }
        let tile_rows = tile_rows.as_slice();
        let rows_total: usize = tile_rows.iter().sum();
        self.pool.for_chunks(n_items, 1, threads, &|range| {
            SCRATCH.with_borrow_mut(|sc| {
                for i in range {
                    if !split {
                        let (s, g, t0, rows) = locate(i);
                        finish(
                            Item {
                                s,
                                g,
                                t0,
                                r0: 0,
                                r1: rows,
                            },
                            sc,
                        );
                        continue;
                    }
                    // share i: flat rows lo..hi over the tiles laid end to end
                    let (lo, hi) = (i * rows_total / n_items, (i + 1) * rows_total / n_items);
                    let (mut b, mut start) = (0, 0);
                    while b < n_tiles && start + tile_rows[b] <= lo {
                        start += tile_rows[b];
                        b += 1;
                    }
                    let mut at = lo;
                    while at < hi && b < n_tiles {
                        let end = hi.min(start + tile_rows[b]);
                        let (s, g, t0, _) = locate(b);
                        if at < end {
                            finish(
                                Item {
                                    s,
                                    g,
                                    t0,
                                    r0: at - start,
                                    r1: end - start,
                                },
                                sc,
                            );
                        }
                        at = end;
                        start += tile_rows[b];
                        b += 1;
                    }
                }
            })
        });
    }
}

fn run_tile(tier: CpuTier, ctx: &Ctx, it: Item, sc: &mut TileScratch) {
    match tier {
        // SAFETY: the kernel table only holds a tier the host supports.
        #[cfg(target_arch = "x86_64")]
        CpuTier::Avx512 => unsafe { tile_avx512(ctx, it, sc) },
        #[cfg(target_arch = "x86_64")]
        CpuTier::Avx2 => unsafe { tile_avx2(ctx, it, sc) },
        #[cfg(target_arch = "aarch64")]
        CpuTier::Neon | CpuTier::NeonDotprod | CpuTier::NeonI8mm => unsafe {
            tile_neon(ctx, it, sc)
        },
        // (every function of a simd128 module may use it: nothing to enable)
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        CpuTier::Simd128 => tile::<simd::Simd128>(ctx, it, sc),
        _ => tile::<simd::Scalar>(ctx, it, sc),
    }
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn tile_neon(ctx: &Ctx, it: Item, sc: &mut TileScratch) {
    tile::<simd::Neon>(ctx, it, sc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn tile_avx512(ctx: &Ctx, it: Item, sc: &mut TileScratch) {
    tile::<simd::Avx512>(ctx, it, sc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_avx2(ctx: &Ctx, it: Item, sc: &mut TileScratch) {
    tile::<simd::Avx2>(ctx, it, sc)
}

/// One item: leaves the row maxima, sums and unnormalised outputs in `sc.m`, `sc.l`, `sc.acc`.
#[inline(always)]
fn tile<O: Ops>(ctx: &Ctx, it: Item, sc: &mut TileScratch) {
    let p = ctx.p;
    let seq = &ctx.seqs[it.s];
    let (kv, pos0, row0) = (seq.kv, seq.pos0, seq.row0);
    let (d, dv, group) = (p.head_dim, p.head_dim_v, ctx.group);
    let rows = it.r1 - it.r0;
    let kty = kv.k.ty;
    sc.q.resize(rows * d, 0.0);
    sc.k.resize(BK * d, 0.0);
    sc.v.resize(BK * dv, 0.0);
    sc.acc.clear();
    sc.acc.resize(rows * dv, 0.0);
    sc.m.clear();
    sc.m.resize(rows, f32::NEG_INFINITY);
    sc.l.clear();
    sc.l.resize(rows, 0.0);
    for r in 0..rows {
        let rr = it.r0 + r;
        let (t, h) = (row0 + it.t0 + rr / group, it.g * group + rr % group);
        let src = &ctx.q[(t * p.n_head + h) * d..][..d];
        let dst = &mut sc.q[r * d..(r + 1) * d];
        dst.copy_from_slice(src);
        // keys stored rotated: the query rotated once instead (q·k = Rq·Rk)
        kv.k.rot.forward(dst);
        match kty {
            // q is rounded to f16 for the product with f16 keys, as llama.cpp does
            KvType::F16 => {
                for o in dst.iter_mut() {
                    *o = f16::from_f32(*o).to_f32();
                }
            }
            KvType::BF16 => {
                for o in dst.iter_mut() {
                    *o = half::bf16::from_f32(*o).to_f32();
                }
            }
            // and to Q8_0 for block-quantized keys (llama.cpp takes their dot products in
            // Q8_0 or Q8_1, whose codes are the same)
            t if t.is_quantized() && t.turbo_bits().is_none() => {
                let mut blk = [BlockQ8_0 {
                    d: [0; 2],
                    qs: [0; 32],
                }];
                for o in dst.chunks_exact_mut(32) {
                    q8_0::quantize_act(o, &mut blk);
                    q8_0::dequantize(&blk, o);
                }
            }
            _ => {}
        }
    }
    let n_ctx = kv.n_ctx;
    let mut s = [0f32; BK];
    // the keys the tile's rows see: from the first row's window start to the last row
    let k_lo = ctx.first_key(pos0 + it.t0 + it.r0 / group);
    let seq_end = pos0 + seq.n;
    let k_hi = ctx.key_end(pos0 + it.t0 + (it.r1 - 1) / group, seq_end);
    let mut kt0 = k_lo;
    while kt0 < k_hi {
        let kb = (k_hi - kt0).min(BK);
        // keys and values of this tile to f32, once for all the rows (contiguous per head)
        let row = it.g * n_ctx + kt0;
        let (at, n) = (row * d, kb * d);
        let dst = &mut sc.k[..n];
        match &kv.k.buf {
            // SAFETY (all `O::` calls): `tile` runs only under the tier's features.
            KvBuf::F16(k) => unsafe { O::cvt(&k[at..at + n], dst) },
            KvBuf::F32(k) => dst.copy_from_slice(&k[at..at + n]),
            KvBuf::Packed(_) => kv.k.decode_packed_in::<O>(row, dst),
        }
        let (at, n) = (row * dv, kb * dv);
        let dst = &mut sc.v[..n];
        match &kv.v.buf {
            KvBuf::F16(v) => unsafe { O::cvt(&v[at..at + n], dst) },
            KvBuf::F32(v) => dst.copy_from_slice(&v[at..at + n]),
            KvBuf::Packed(_) => kv.v.decode_packed_in::<O>(row, dst),
        }
        for r in 0..rows {
            let qpos = pos0 + it.t0 + (it.r0 + r) / group;
            let lo = ctx.first_key(qpos).max(kt0);
            let hi = ctx.key_end(qpos, seq_end).min(kt0 + kb);
            if lo >= hi {
                continue;
            }
            let (jl, jh) = (lo - kt0, hi - kt0);
            let qr = &sc.q[r * d..(r + 1) * d];
            // the same arithmetic for a key whatever the tile's shape and the row's window, so
            // a token decoded alone gets the scores it gets inside a prefill batch
            unsafe { O::scores(qr, &sc.k, d, jl, jh, &mut s) };
            let mt = match p.softcap {
                None => unsafe { O::scale_mask_max(&mut s, jl, jh, p.scale) },
                Some(cap) => unsafe { O::scale_softcap_max(&mut s, jl, jh, p.scale, cap) },
            };
            let m_old = sc.m[r];
            let m_new = m_old.max(mt);
            let c = if m_old == f32::NEG_INFINITY {
                0.0
            } else {
                (m_old - m_new).exp()
            };
            let sum = unsafe { O::exp_sum(&mut s, m_new) };
            sc.l[r] = sc.l[r] * c + sum;
            sc.m[r] = m_new;
            unsafe { O::pv(&mut sc.acc[r * dv..(r + 1) * dv], c, &s, &sc.v, kb) };
        }
        kt0 += kb;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::kvtype::{KvSpec, round_trip};

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

    /// Thread counts to test: under an emulator (CI runs the aarch64 tiers under qemu, and
    /// says so in `CERA_TEST_RUNNER`) every tier × thread count costs tens of times its native
    /// time, and the thread counts exercise the same per-tier code: one thread and the uneven
    /// split are kept there.
    /// On WebAssembly (no threads in wasm32-wasip1, nor in cera-wasm) only one thread.
    fn thread_counts(all: &[usize]) -> Vec<usize> {
        if cfg!(target_family = "wasm") {
            vec![1]
        } else if std::env::var_os("CERA_TEST_RUNNER").is_some() {
            vec![all[0], *all.last().unwrap()]
        } else {
            all.to_vec()
        }
    }

    pub(super) fn rnd_vec(seed: &mut u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                (*seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// Every tier and thread count, prefill and decode shapes (split rows),
    /// windows, soft-capping, f32 and f16 caches, head sizes that are not multiples of 16.
    #[test]
    fn matches_naive_softmax_attention() {
        use crate::kernels::KernelTable;
        let shapes = [
            // n_head, n_kv_head, head_dim, head_dim_v, pos0, n_tokens
            (4, 2, 8, 8, 5, 4),
            (9, 3, 64, 64, 0, 70),
            (9, 3, 64, 64, 300, 1),
            (14, 2, 64, 64, 40, 100),
            (8, 8, 80, 80, 129, 3),
            (4, 1, 24, 40, 700, 1),
            (16, 8, 128, 128, 10, 17),
        ];
        // every tier at every thread count, made once; each case's inputs, cache and
        // reference are computed once for all of them (under an emulator the reference and
        // the cache's quantization cost as much as the attention itself)
        let cpus: Vec<(CpuTier, usize, Cpu)> = CpuTier::supported()
            .into_iter()
            .flat_map(|tier| {
                let table: &'static KernelTable =
                    Box::leak(Box::new(KernelTable::for_tier(tier).unwrap()));
                thread_counts(&[1, 2, 3])
                    .into_iter()
                    .map(move |threads| (tier, threads, Cpu::with_table(threads, table)))
            })
            .collect();
        // under an emulator the largest prefill shape (two thirds of the test's work) runs
        // without window and soft-capping: the 70-token prefill covers both in prefill tiles
        let emulated = std::env::var_os("CERA_TEST_RUNNER").is_some();
        let mut seed = 7u32;
        for &(nh, nkv, hd, hdv, pos0, n) in &shapes {
            for (window, softcap) in [(None, None), (Some(37), None), (None, Some(5.0))] {
                if emulated && n >= 100 && (window, softcap) != (None, None) {
                    continue;
                }
                for ty in KvType::ALL {
                    if ty.for_head_dim(hd) != ty || ty.for_head_dim(hdv) != ty {
                        continue;
                    }
                    let p = AttentionParams {
                        n_head: nh,
                        n_kv_head: nkv,
                        head_dim: hd,
                        head_dim_v: hdv,
                        scale: 1.0 / (hd as f32).sqrt(),
                        softcap,
                        window,
                        causal: true,
                    };
                    let n_ctx = pos0 + n + 3;
                    let mut k = rnd_vec(&mut seed, n_ctx * nkv * hd);
                    let mut v = rnd_vec(&mut seed, n_ctx * nkv * hdv);
                    let mut q: Vec<f32> = rnd_vec(&mut seed, n * nh * hd)
                        .iter()
                        .map(|x| 3.0 * x)
                        .collect();
                    if ty == KvType::F16 {
                        for x in k.iter_mut().chain(v.iter_mut()).chain(q.iter_mut()) {
                            *x = f16::from_f32(*x).to_f32();
                        }
                    }
                    let spec = KvSpec::same(ty);
                    let mut kv = KvLayer::with_spec(spec, n_ctx, nkv, hd, hdv);
                    kv.store(0, &k, &v);
                    // the reference attends over what the cache holds (decoded and rotated
                    // back), so compressed keys are checked against their dequantized values
                    let (rk, rv) = (kv.k.rot, kv.v.rot);
                    let kd: Vec<f32> = k.chunks(hd).flat_map(|r| round_trip(ty, &rk, r)).collect();
                    let vd: Vec<f32> = v.chunks(hdv).flat_map(|r| round_trip(ty, &rv, r)).collect();
                    let want = reference(&q, &kd, &vd, pos0, n, &p);
                    // block types and bf16 round the query as llama.cpp does (Q8_0: 2-3
                    // significant digits); floats and TurboQuant do not
                    let tol = match ty {
                        KvType::F32 | KvType::F16 => 2e-5,
                        KvType::TQ3 | KvType::TQ4 => 1e-4,
                        _ => 3e-2,
                    };
                    for (tier, threads, cpu) in &cpus {
                        let mut out = vec![0f32; n * nh * hdv];
                        cpu.attention(&q, &kv, pos0, n, &p, &mut out);
                        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                            assert!(
                                (a - b).abs() < tol,
                                "{tier} t{threads} {:?} {window:?} {softcap:?} {ty:?} [{i}]: {a} vs {b}",
                                (nh, nkv, hd, hdv, pos0, n)
                            );
                        }
                    }
                }
            }
        }
    }

    /// A token's output is bit-identical whether it is computed alone (decode) or in a batch
    /// (prefill), on every tier and thread count.
    #[test]
    fn decode_equals_prefill_bitwise() {
        use crate::kernels::KernelTable;
        let (nh, nkv, hd) = (9, 3, 64);
        let n = 150;
        let mut seed = 11u32;
        let k = rnd_vec(&mut seed, n * nkv * hd);
        let v = rnd_vec(&mut seed, n * nkv * hd);
        let q = rnd_vec(&mut seed, n * nh * hd);
        let p = AttentionParams {
            n_head: nh,
            n_kv_head: nkv,
            head_dim: hd,
            head_dim_v: hd,
            scale: 0.125,
            softcap: None,
            window: None,
            causal: true,
        };
        for tier in CpuTier::supported() {
            let table: &'static KernelTable =
                Box::leak(Box::new(KernelTable::for_tier(tier).unwrap()));
            for (threads, ty) in thread_counts(&[1, 2, 4])
                .into_iter()
                .flat_map(|t| KvType::ALL.map(|ty| (t, ty)))
            {
                // every cache type: the quantized ones decode the same tiles for both
                if threads == 4 && ty != KvType::F16 {
                    continue;
                }
                let cpu = Cpu::with_table(threads, table);
                let mut kv = KvLayer::new(ty, n, nkv, hd, hd);
                kv.store(0, &k, &v);
                let mut all = vec![0f32; n * nh * hd];
                cpu.attention(&q, &kv, 0, n, &p, &mut all);
                let row = nh * hd;
                for t in 0..n {
                    let mut one = vec![0f32; row];
                    cpu.attention(&q[t * row..(t + 1) * row], &kv, t, 1, &p, &mut one);
                    assert_eq!(
                        one,
                        all[t * row..(t + 1) * row],
                        "{tier} t{threads} {ty} token {t}"
                    );
                }
            }
        }
    }

    /// Several sequences in one call give each sequence exactly what it gets alone: decode
    /// steps (one token each, the row-splitting path when the tiles do not divide among the
    /// threads), prefill chunks, and a mix, with windows and GQA, on every tier and thread
    /// count.
    #[test]
    fn batch_of_sequences_equals_each_alone_bitwise() {
        use crate::kernels::KernelTable;
        let (nh, nkv, hd) = (6, 3, 32);
        let row = nh * hd;
        // (pos0, n) per sequence
        let mixes: [&[(usize, usize)]; 3] = [
            &[(10, 1), (0, 1), (77, 1), (5, 1)],
            &[(0, 40), (3, 9), (60, 70)],
            &[(0, 33), (12, 1), (100, 1), (7, 5)],
        ];
        for tier in CpuTier::supported() {
            let table: &'static KernelTable =
                Box::leak(Box::new(KernelTable::for_tier(tier).unwrap()));
            for threads in thread_counts(&[1, 2, 3]) {
                let cpu = Cpu::with_table(threads, table);
                for window in [None, Some(20)] {
                    let p = AttentionParams {
                        n_head: nh,
                        n_kv_head: nkv,
                        head_dim: hd,
                        head_dim_v: hd,
                        scale: 0.2,
                        softcap: None,
                        window,
                        causal: true,
                    };
                    for mix in mixes {
                        let mut seed = 3u32;
                        let caches: Vec<KvLayer> = mix
                            .iter()
                            .map(|&(pos0, n)| {
                                let len = pos0 + n;
                                let k = rnd_vec(&mut seed, len * nkv * hd);
                                let v = rnd_vec(&mut seed, len * nkv * hd);
                                let mut kv = KvLayer::new(KvType::F16, len + 2, nkv, hd, hd);
                                kv.store(0, &k, &v);
                                kv
                            })
                            .collect();
                        let total: usize = mix.iter().map(|m| m.1).sum();
                        let q = rnd_vec(&mut seed, total * row);
                        let mut seqs = Vec::new();
                        let mut row0 = 0;
                        for (kv, &(pos0, n)) in caches.iter().zip(mix) {
                            seqs.push(AttnSeq { kv, pos0, row0, n });
                            row0 += n;
                        }
                        let mut all = vec![0f32; total * row];
                        cpu.attention_batch(&q, &seqs, &p, &mut all);
                        for (i, s) in seqs.iter().enumerate() {
                            let mut one = vec![0f32; s.n * row];
                            let qs = &q[s.row0 * row..(s.row0 + s.n) * row];
                            cpu.attention(qs, s.kv, s.pos0, s.n, &p, &mut one);
                            assert_eq!(
                                one,
                                all[s.row0 * row..(s.row0 + s.n) * row],
                                "{tier} t{threads} {window:?} {mix:?} sequence {i}"
                            );
                        }
                    }
                }
            }
        }
    }
}
