//! LoRA deltas on the CPU: `out[row] += s · B(A · x)` for the rows of the sequences that
//! attached an adapter. `A` is a weight like any other (its product runs the matmul kernels);
//! `B` is kept transposed in f32 (`[rank, out]`), so its product is `rank` scaled row
//! additions that vectorize over the output, instead of `out` dot products of `rank` terms.
//!
//! Decode has one to four rows and a few tens of KB of adapter per projection: there each
//! thread takes a slice of the output columns and computes the rank-sized `A · x` itself
//! (it is tiny), so a projection's delta costs one parallel region and both cores stream
//! the adapter. Longer steps split the rows instead. Either way a row's arithmetic is the
//! same (`A · x` by the GEMM kernel in groups of up to four rows, then the rank sum in rank
//! order), so batching never changes a result.

use super::{Cpu, QuantizedActs, SyncPtr};
use crate::backend::LowRank;
use crate::backend::lowrank::{BLOCK, Transposed};
use crate::error::Result;
use crate::kernels::{ActRows, CpuTier, KernelTable};
use crate::quant::GgmlType;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

impl Transposed {
    /// Prefetches (to L2) the blocks holding columns `cols`.
    fn prefetch(&self, rank: usize, cols: &std::ops::Range<usize>) {
        let (p, elem) = match self {
            Transposed::F32(v) => (v.as_ptr() as *const u8, 4),
            Transposed::F16(v) => (v.as_ptr() as *const u8, 2),
            Transposed::BF16(v) => (v.as_ptr() as *const u8, 2),
        };
        let from = cols.start / BLOCK * rank * BLOCK * elem;
        let to = cols.end.div_ceil(BLOCK) * rank * BLOCK * elem;
        prefetch_l2(p.wrapping_add(from), to - from);
    }
}

/// Ranks up to which `A · x` of four rows lives on the stack.
pub(super) const MAX_RANK: usize = 256;

impl Cpu {
    /// Adds `s · B(A · x[i])` to row `rows[i]` (or `i`) of `out` (`w.out` wide) for the `n`
    /// rows of `x`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lora_delta(
        &self,
        w: &LowRank,
        x: &[f32],
        n: usize,
        rows: Option<&[usize]>,
        out: SyncPtr<f32>,
        s: f32,
        acts: &mut QuantizedActs,
        scratch: &mut Vec<f32>,
    ) -> Result<()> {
        let (k, r, o) = (w.a.cols, w.rank, w.out);
        let table = self.table;
        let tier = table.tier();
        let direct = self.lora_direct(w);
        let row_of = |i: usize| rows.map_or(i, |rs| rs[i]);
        if !direct {
            // other formats: A's product through the general matmul, then the rank sums
            scratch.resize(n * r, 0.0);
            let list = [(&w.a, SyncPtr(scratch.as_mut_ptr()), n * r)];
            acts.invalidate();
            self.matmul_list(&list, x, n, acts)?;
            acts.invalidate();
            let t = &scratch[..];
            for i in 0..n {
                // SAFETY: one row at a time, on this thread.
                let dst = unsafe { out.slice(row_of(i) * o, o) };
                rank_sum(tier, &t[i * r..(i + 1) * r], &w.bt, o, 0..o, dst, s);
            }
            return Ok(());
        }
        let act_ty = KernelTable::vec_dot_type(w.a.ty).expect("a float format");
        self.quantize_acts(x, n, k, act_ty, acts);
        let acts = &*acts;
        let a_data = w.a.data();
        // A · x for tokens t0..t0+nt (nt ≤ 4) into t[..nt * r]
        let a_product = |t0: usize, nt: usize, t: &mut [f32]| {
            let ar = ActRows {
                n: nt,
                rows: std::array::from_fn(|i| acts.row(t0 + i.min(nt - 1))),
                packed: &[],
            };
            table.gemm(w.a.ty, k, r, a_data, &ar, t, r);
        };
        let bytes = w.a.data().len() + w.bt.bytes();
        if n <= 4 {
            let threads = self.width_for_step(4 * bytes, n).min(o.div_ceil(64));
            let chunk = o.div_ceil(threads).next_multiple_of(16);
            self.pool.for_chunks(o, chunk, threads, &|cols| {
                let mut t = [0f32; 4 * MAX_RANK];
                a_product(0, n, &mut t);
                for i in 0..n {
                    // SAFETY: chunks own disjoint columns of each row.
                    let dst = unsafe { out.slice(row_of(i) * o + cols.start, cols.len()) };
                    rank_sum(tier, &t[i * r..(i + 1) * r], &w.bt, o, cols.clone(), dst, s);
                }
            });
        } else {
            let threads = self.width_for_step(bytes * n.div_ceil(4), n);
            self.pool.for_chunks(n, 4, threads, &|toks| {
                let mut t = [0f32; 4 * MAX_RANK];
                for t0 in toks.clone().step_by(4) {
                    let nt = (toks.end - t0).min(4);
                    a_product(t0, nt, &mut t);
                    for i in 0..nt {
                        // SAFETY: each row belongs to one chunk (the rows are distinct).
                        let dst = unsafe { out.slice(row_of(t0 + i) * o, o) };
                        rank_sum(tier, &t[i * r..(i + 1) * r], &w.bt, o, 0..o, dst, s);
                    }
                }
            });
        }
        Ok(())
    }
}

/// `dst[c - cols.start] += s · Σ_j t[j] · bt[j][c]` for the columns `cols` (`dst` is that
/// slice of the output row; `bt` is `[t.len(), o]`). The sum runs over `j` in order and is
/// scaled before the add; each column's arithmetic is the same whatever the slice (the SIMD
/// tiers fuse every multiply-add, their tails included), so chunking never changes a result.
pub(super) fn rank_sum(
    tier: CpuTier,
    t: &[f32],
    bt: &Transposed,
    o: usize,
    cols: std::ops::Range<usize>,
    dst: &mut [f32],
    s: f32,
) {
    let r = t.len();
    assert!(cols.end <= o && dst.len() == cols.len() && bt.len() >= r * o.next_multiple_of(BLOCK));
    #[cfg(target_arch = "x86_64")]
    if matches!(tier, CpuTier::Avx2 | CpuTier::Avx512) {
        let wide = tier == CpuTier::Avx512;
        // SAFETY: the tier was detected on this host; bounds checked above.
        unsafe { x86::rank_sum(wide, t, bt, cols.start, dst, s) };
        return;
    }
    let _ = tier;
    for (k, dv) in dst.iter_mut().enumerate() {
        let c = cols.start + k;
        let mut d = 0f32;
        for (j, &tj) in t.iter().enumerate() {
            d += tj * bt.b(r, j, c);
        }
        *dv += s * d;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The rank sum with the columns in vector registers: per block of 16 columns, `rank`
    //! fused multiply-adds of the block's rows (converted from f16/bf16 in registers) by
    //! `t[j]`, then one fused `dst += s · acc`; the block's values are read in order. Columns
    //! not on a block boundary (a chunk's edge) take the scalar path, fused the same way.
    use super::{BLOCK, Transposed};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX2+FMA+F16C (and AVX-512F when `wide`) present; `bt` holds `t.len()` rows of the
    /// blocks covering `c0 + dst.len()` columns.
    pub(super) unsafe fn rank_sum(
        wide: bool,
        t: &[f32],
        bt: &Transposed,
        c0: usize,
        dst: &mut [f32],
        s: f32,
    ) {
        let r = t.len();
        let n = dst.len();
        let mut k = 0;
        while k < n {
            let c = c0 + k;
            if c.is_multiple_of(BLOCK) && k + BLOCK <= n {
                let base = (c / BLOCK) * r * BLOCK;
                // SAFETY: the caller's guarantees; the block is whole.
                unsafe {
                    let d = dst.as_mut_ptr().add(k);
                    if wide {
                        block512(t, bt, base, d, s);
                    } else {
                        block256(t, bt, base, d, s);
                    }
                }
                k += BLOCK;
                continue;
            }
            if c.is_multiple_of(8) && k + 8 <= n {
                // half a block (chunks of rows are cut at multiples of eight)
                let base = (c / BLOCK) * r * BLOCK + c % BLOCK;
                // SAFETY: as above; the half block is whole.
                unsafe { half256(t, bt, base, dst.as_mut_ptr().add(k), s) };
                k += 8;
                continue;
            }
            let mut acc = 0f32;
            for (j, &tj) in t.iter().enumerate() {
                acc = fma(tj, bt.b(r, j, c), acc);
            }
            dst[k] = fma(s, acc, dst[k]);
            k += 1;
        }
    }

    /// A fused multiply-add with the vector units' rounding (one rounding).
    #[inline]
    fn fma(a: f32, b: f32, c: f32) -> f32 {
        // SAFETY: FMA is present (the caller's tier).
        unsafe { fma_scalar(a, b, c) }
    }

    #[target_feature(enable = "fma")]
    unsafe fn fma_scalar(a: f32, b: f32, c: f32) -> f32 {
        _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)))
    }

    /// 16 values from `i` as f32.
    #[target_feature(enable = "avx512f")]
    unsafe fn load16(bt: &Transposed, i: usize) -> __m512 {
        unsafe {
            match bt {
                Transposed::F32(v) => _mm512_loadu_ps(v.as_ptr().add(i)),
                Transposed::F16(v) => {
                    _mm512_cvtph_ps(_mm256_loadu_si256(v.as_ptr().add(i) as *const __m256i))
                }
                Transposed::BF16(v) => {
                    let h = _mm256_loadu_si256(v.as_ptr().add(i) as *const __m256i);
                    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                }
            }
        }
    }

    /// 8 values from `i` as f32.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(bt: &Transposed, i: usize) -> __m256 {
        unsafe {
            match bt {
                Transposed::F32(v) => _mm256_loadu_ps(v.as_ptr().add(i)),
                Transposed::F16(v) => {
                    _mm256_cvtph_ps(_mm_loadu_si128(v.as_ptr().add(i) as *const __m128i))
                }
                Transposed::BF16(v) => {
                    let h = _mm_loadu_si128(v.as_ptr().add(i) as *const __m128i);
                    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                }
            }
        }
    }

    /// One block (16 columns) whose values start at `base`, added into `d[..16]`: per column
    /// the scalar path's chain exactly (`acc = fma(t[j], b, acc)` in rank order, then
    /// `d = fma(s, acc, d)`), so a column's result does not depend on its chunk.
    #[target_feature(enable = "avx512f")]
    unsafe fn block512(t: &[f32], bt: &Transposed, base: usize, d: *mut f32, s: f32) {
        unsafe {
            let mut acc = _mm512_setzero_ps();
            for (j, &tj) in t.iter().enumerate() {
                acc = _mm512_fmadd_ps(_mm512_set1_ps(tj), load16(bt, base + j * BLOCK), acc);
            }
            _mm512_storeu_ps(
                d,
                _mm512_fmadd_ps(_mm512_set1_ps(s), acc, _mm512_loadu_ps(d)),
            );
        }
    }

    /// Eight columns of a block, from `base` (its first value in row 0).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn half256(t: &[f32], bt: &Transposed, base: usize, d: *mut f32, s: f32) {
        unsafe {
            let mut acc = _mm256_setzero_ps();
            for (j, &tj) in t.iter().enumerate() {
                acc = _mm256_fmadd_ps(_mm256_set1_ps(tj), load8(bt, base + j * BLOCK), acc);
            }
            _mm256_storeu_ps(
                d,
                _mm256_fmadd_ps(_mm256_set1_ps(s), acc, _mm256_loadu_ps(d)),
            );
        }
    }

    /// [`block512`] in two halves of eight.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block256(t: &[f32], bt: &Transposed, base: usize, d: *mut f32, s: f32) {
        unsafe {
            let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for (j, &tj) in t.iter().enumerate() {
                let tv = _mm256_set1_ps(tj);
                let i = base + j * BLOCK;
                lo = _mm256_fmadd_ps(tv, load8(bt, i), lo);
                hi = _mm256_fmadd_ps(tv, load8(bt, i + 8), hi);
            }
            let sv = _mm256_set1_ps(s);
            _mm256_storeu_ps(d, _mm256_fmadd_ps(sv, lo, _mm256_loadu_ps(d)));
            let d8 = d.add(8);
            _mm256_storeu_ps(d8, _mm256_fmadd_ps(sv, hi, _mm256_loadu_ps(d8)));
        }
    }
}

/// `(output index, pair, scale)` of the deltas a list of projections adds.
pub(crate) type Deltas<'a> = [(usize, &'a LowRank, f32)];

/// The deltas of [`Cpu::matmul_list_lora`] with `x` quantized for them and room for their
/// `A · x`.
pub(crate) type FusedLora<'a> = (&'a Deltas<'a>, &'a QuantizedActs, &'a mut [f32]);

/// Deltas added inside a product's parallel region ([`Cpu::matmul_lora_fused`]) up to this many.
pub(super) const MAX_DELTAS: usize = 32;

/// The LoRA deltas of a decode step's projections, added by the threads of the base product
/// as they finish each chunk of output rows. The region's first units compute the `A · x`
/// products, each cut in two halves of A's rows when the rank allows (so a projection with a
/// single delta has both threads on its product), handed out before any chunk of rows. A
/// chunk whose product is not ready helps with a half nobody took, waits a few microseconds
/// for the one another thread is computing, and past that computes its own copy: a thread
/// preempted mid-product (two cores, shared with the rest of the system) then costs a few
/// microseconds of repeated work, not a spin for a time slice. The arithmetic is
/// [`Cpu::lora_delta`]'s: the same `A · x` kernel per row and the same rank sum per column,
/// so fused and separate deltas agree bit for bit.
pub(super) struct Epilogue<'a> {
    /// `(output index in the fused list, pair, scale)`, in the order they add
    pub deltas: &'a [(usize, &'a LowRank, f32)],
    /// index of the region's first output in the list the deltas name
    pub base: usize,
    /// the input rows quantized for the A products (all the same type)
    pub acts: &'a QuantizedActs,
    /// per delta `[4, rank]` at `off[d]`: its `A · x` rows
    pub t: SyncPtr<f32>,
    pub off: [usize; MAX_DELTAS],
    /// per delta and half of A: taken by a thread
    pub taken: [AtomicBool; 2 * MAX_DELTAS],
    /// per delta: halves finished
    pub done: [AtomicU8; MAX_DELTAS],
    pub tier: CpuTier,
}

/// Spins a chunk waits for a product another thread is finishing before computing its own.
const PATIENCE: usize = 4000;

/// Halves of A's rows a delta's product is cut into: two when each half is whole groups of
/// four rows (the GEMM kernels' row tile, so a row's arithmetic is the same either way).
fn halves(rank: usize) -> usize {
    if rank.is_multiple_of(8) { 2 } else { 1 }
}

impl Epilogue<'_> {
    /// The A-product units: every delta's halves, in order.
    pub fn n_units(&self) -> usize {
        self.deltas.iter().map(|d| halves(d.1.rank)).sum()
    }

    /// Delta `d`'s `A · x` of A's rows `rows`, for every input row, into `t` (`[4, rank]`).
    fn a_rows(&self, table: &KernelTable, d: usize, rows: std::ops::Range<usize>, t: &mut [f32]) {
        let w = self.deltas[d].1;
        let n = self.acts.n_tokens;
        let ar = ActRows {
            n,
            rows: std::array::from_fn(|i| self.acts.row(i.min(n - 1))),
            packed: &[],
        };
        let rb = w.a.row_bytes();
        let a = &w.a.data()[rows.start * rb..rows.end * rb];
        table.gemm(
            w.a.ty,
            w.a.cols,
            rows.len(),
            a,
            &ar,
            &mut t[rows.start..],
            w.rank,
        );
    }

    /// Half `h` of delta `d`'s product into the shared buffer, unless a thread took it.
    fn half(&self, table: &KernelTable, d: usize, h: usize) {
        if self.taken[2 * d + h].swap(true, Ordering::Acquire) {
            return;
        }
        let w = self.deltas[d].1;
        let per = w.rank / halves(w.rank);
        let rb = w.a.row_bytes();
        // all of the half's requests in flight at once (it is a few KB)
        let a = &w.a.data()[h * per * rb..(h + 1) * per * rb];
        prefetch_l2(a.as_ptr(), a.len());
        // SAFETY: this half's rows of the slice are written by the thread that took it, before
        // `done` counts it.
        let t = unsafe { self.t.slice(self.off[d], 4 * w.rank) };
        self.a_rows(table, d, h * per..(h + 1) * per, t);
        self.done[d].fetch_add(1, Ordering::Release);
    }

    /// Unit `u` of the region's first [`Epilogue::n_units`].
    pub fn a_unit(&self, table: &KernelTable, mut u: usize) {
        for (d, &(_, w, _)) in self.deltas.iter().enumerate() {
            let h = halves(w.rank);
            if u < h {
                return self.half(table, d, u);
            }
            u -= h;
        }
    }

    /// Asks for the adapter bytes output `i`'s rows `cols` will read (B's blocks for them),
    /// ahead of the base product of those rows: the delta then reads from cache. Left to the
    /// hardware prefetcher the small, scattered adapter streams ran at a third of the base
    /// weights' speed.
    pub fn prefetch(&self, i: usize, cols: &std::ops::Range<usize>) {
        for &(op, w, _) in self.deltas {
            if op == self.base + i {
                w.bt.prefetch(w.rank, cols);
            }
        }
    }

    /// Whether delta `d`'s shared product is complete, after helping with it and waiting a
    /// little for it.
    fn ready(&self, table: &KernelTable, d: usize) -> bool {
        let h = halves(self.deltas[d].1.rank);
        for k in 0..h {
            self.half(table, d, k);
        }
        for _ in 0..PATIENCE {
            if self.done[d].load(Ordering::Acquire) as usize == h {
                return true;
            }
            std::hint::spin_loop();
        }
        false
    }

    /// Adds the deltas of output `i` (`o` wide, `out` its rows) to its columns `cols`.
    pub fn add(
        &self,
        table: &KernelTable,
        i: usize,
        cols: std::ops::Range<usize>,
        out: SyncPtr<f32>,
        o: usize,
    ) {
        let n = self.acts.n_tokens;
        for (d, &(op, w, s)) in self.deltas.iter().enumerate() {
            if op != self.base + i {
                continue;
            }
            let apply = |t: &[f32]| {
                for tk in 0..n {
                    // SAFETY: columns `cols` of output i belong to this chunk.
                    let dst = unsafe { out.slice(tk * o + cols.start, cols.len()) };
                    let row = &t[tk * w.rank..(tk + 1) * w.rank];
                    rank_sum(self.tier, row, &w.bt, o, cols.clone(), dst, s);
                }
            };
            if self.ready(table, d) {
                // SAFETY: complete (both halves counted), and only read from here on.
                apply(unsafe { &*self.t.slice(self.off[d], 4 * w.rank) });
            } else {
                let mut own = [0f32; 4 * MAX_RANK];
                self.a_rows(table, d, 0..w.rank, &mut own);
                apply(&own[..4 * w.rank]);
            }
        }
    }

    /// Bytes the deltas read.
    pub fn bytes(&self) -> usize {
        self.deltas
            .iter()
            .map(|d| d.1.a.data().len() + d.1.bt.bytes())
            .sum()
    }
}

impl Cpu {
    /// Whether `A · x` runs the GEMM kernel straight on A's rows (a float adapter of a rank
    /// that fits the stack buffers).
    pub(super) fn lora_direct(&self, w: &LowRank) -> bool {
        matches!(w.a.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
            && self.table.has_gemm(w.a.ty)
            && w.rank <= MAX_RANK
    }
}

/// A hint to bring `len` bytes at `p` into L2; nothing is read, any address is harmless.
#[inline(always)]
fn prefetch_l2(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for l in (0..len).step_by(64) {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        // SAFETY: prefetching never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(l).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}
