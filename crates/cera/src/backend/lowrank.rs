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

use super::{Cpu, QuantizedActs, SyncPtr, Weight};
use crate::error::Result;
use crate::kernels::{ActRows, KernelTable};
use crate::quant::GgmlType;

/// B transposed (`[rank, out]` row-major), kept in the adapter's own precision: half the
/// bytes per token for a 16-bit adapter, and the same values either way.
#[derive(Clone, Debug)]
pub enum Transposed {
    F32(std::sync::Arc<[f32]>),
    F16(std::sync::Arc<[half::f16]>),
    BF16(std::sync::Arc<[half::bf16]>),
}

impl Transposed {
    /// Elements `from..from + out.len()` as f32.
    fn read(&self, from: usize, out: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        let n = out.len();
        match self {
            Transposed::F32(v) => out.copy_from_slice(&v[from..from + n]),
            Transposed::F16(v) => v[from..from + n].convert_to_f32_slice(out),
            Transposed::BF16(v) => v[from..from + n].convert_to_f32_slice(out),
        }
    }

    /// Element `i` as f32.
    pub fn get(&self, i: usize) -> f32 {
        match self {
            Transposed::F32(v) => v[i],
            Transposed::F16(v) => v[i].to_f32(),
            Transposed::BF16(v) => v[i].to_f32(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Transposed::F32(v) => v.len() * 4,
            Transposed::F16(v) => v.len() * 2,
            Transposed::BF16(v) => v.len() * 2,
        }
    }
}

/// A LoRA pair in the form the backends apply it ([`super::Backend::lora`]).
#[derive(Clone, Debug)]
pub struct LowRank {
    /// `rank` rows of the projection's input width
    pub a: Weight,
    /// B transposed
    pub bt: Transposed,
    pub rank: usize,
    pub out: usize,
}

impl LowRank {
    /// From A and rows `start..start + n` of B (the part of a fused projection an output
    /// belongs to; all of B for a plain one).
    pub fn new(a: Weight, b: &Weight, start: usize, n: usize) -> Result<LowRank> {
        let rank = a.rows;
        assert_eq!(b.cols, rank, "{}: B's width is the rank", b.name);
        let mut bt = vec![0f32; rank * n];
        let mut row = vec![0f32; rank];
        for o in 0..n {
            b.row_f32(start + o, &mut row)?;
            for (j, &v) in row.iter().enumerate() {
                bt[j * n + o] = v;
            }
        }
        // f16 and bf16 values are exact in f32 and back
        let bt = match b.ty {
            GgmlType::F16 => Transposed::F16(bt.iter().map(|&v| half::f16::from_f32(v)).collect()),
            GgmlType::BF16 => {
                Transposed::BF16(bt.iter().map(|&v| half::bf16::from_f32(v)).collect())
            }
            _ => Transposed::F32(bt.into()),
        };
        Ok(LowRank {
            a,
            bt,
            rank,
            out: n,
        })
    }
}

/// Ranks up to which `A · x` of four rows lives on the stack.
const MAX_RANK: usize = 256;
/// Output columns summed at a time (a stack buffer).
const COLS: usize = 512;

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
        let direct = matches!(w.a.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
            && table.has_gemm(w.a.ty)
            && r <= MAX_RANK;
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
                rank_sum(&t[i * r..(i + 1) * r], &w.bt, o, 0..o, dst, s);
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
            let threads = self.width_for(4 * bytes).min(o.div_ceil(64));
            let chunk = o.div_ceil(threads).next_multiple_of(16);
            self.pool.for_chunks(o, chunk, threads, &|cols| {
                let mut t = [0f32; 4 * MAX_RANK];
                a_product(0, n, &mut t);
                for i in 0..n {
                    // SAFETY: chunks own disjoint columns of each row.
                    let dst = unsafe { out.slice(row_of(i) * o + cols.start, cols.len()) };
                    rank_sum(&t[i * r..(i + 1) * r], &w.bt, o, cols.clone(), dst, s);
                }
            });
        } else {
            let threads = self.width_for(bytes * n.div_ceil(4));
            self.pool.for_chunks(n, 4, threads, &|toks| {
                let mut t = [0f32; 4 * MAX_RANK];
                for t0 in toks.clone().step_by(4) {
                    let nt = (toks.end - t0).min(4);
                    a_product(t0, nt, &mut t);
                    for i in 0..nt {
                        // SAFETY: each row belongs to one chunk (the rows are distinct).
                        let dst = unsafe { out.slice(row_of(t0 + i) * o, o) };
                        rank_sum(&t[i * r..(i + 1) * r], &w.bt, o, 0..o, dst, s);
                    }
                }
            });
        }
        Ok(())
    }
}

/// `dst[c - cols.start] += s · Σ_j t[j] · bt[j][c]` for the columns `cols` (`dst` is that
/// slice of the output row; `bt` is `[t.len(), o]`). The sum runs over `j` in order and is
/// scaled before the add, whatever the slice.
fn rank_sum(
    t: &[f32],
    bt: &Transposed,
    o: usize,
    cols: std::ops::Range<usize>,
    dst: &mut [f32],
    s: f32,
) {
    let mut d = [0f32; COLS];
    let mut b = [0f32; COLS];
    for c0 in cols.clone().step_by(COLS) {
        let c1 = (c0 + COLS).min(cols.end);
        let d = &mut d[..c1 - c0];
        let b = &mut b[..c1 - c0];
        d.fill(0.0);
        for (j, &c) in t.iter().enumerate() {
            bt.read(j * o + c0, b);
            for (dv, &bv) in d.iter_mut().zip(b.iter()) {
                *dv += c * bv;
            }
        }
        for (a, &dv) in dst[c0 - cols.start..c1 - cols.start]
            .iter_mut()
            .zip(d.iter())
        {
            *a += s * dv;
        }
    }
}
