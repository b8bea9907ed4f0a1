//! Matrix multiplication against quantized weights: activations are quantized once per op to
//! the weight format's paired type (and shared by the matmuls that read the same input), then
//! each thread takes chunks of weight rows.
//!
//! Where the kernel table has a GEMM kernel for the format (the AVX-512 tier: every format; AVX2:
//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q6_K; NEON with i8mm: see `kernels`),
//! every matmul, prefill or decode, runs it on up to four tokens at a time: the same arithmetic
//! for one token or many, so decoding computes exactly what prefill computes. The quantized
//! formats' weights are first repacked, once, on first use, into the x8 layout
//! (`kernels::pack`: eight rows interleaved per 32-bit lane); F32/F16/BF16 are read as stored.
//! Other tiers run the GEMV per token over chunks of rows as stored in the file (each chunk
//! stays in cache across the tokens).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8};

use super::lowrank::{Epilogue, FusedLora, MAX_DELTAS};
use super::{Cpu, SyncPtr};
use crate::backend::Weight;
use crate::backend::weight::PackedBuf;
use crate::error::{Error, Result};
use crate::kernels::{ActRows, KernelTable, pack};
use crate::quant::GgmlType;

/// The CPU's side of a weight: its packed copy.
impl Weight {
    /// The x8-packed weights when the kernel table reads this format packed. Packed on first
    /// call; the original pages are then released from the resident set (they are only read
    /// again for embedding lookups).
    fn packed(&self, cpu: &Cpu) -> Option<&[u8]> {
        let table = cpu.table;
        if !table.gemm_packs_weights(self.ty) {
            return None;
        }
        self.packed
            .x8
            .get_or_init(|| {
                let len = pack::packed_len(self.ty, self.rows, self.cols)?;
                let mut v = PackedBuf::zeroed(len);
                // a few MB at a time, releasing what was read: the original and the copy are
                // never both resident (a 28 MB tied embedding would otherwise add 28 MB to the
                // peak); the pieces are packed in parallel
                // (every thread gets a share of a weight under 2 MB too: weights are packed one
                // at a time, on first use, so a first forward pass packs the whole model, and on
                // one thread that was half of SmolLM2's cold `cera run -n 1`)
                let rb = self.row_bytes();
                let threads = cpu.width_for(self.len);
                let step = ((2 << 20) / rb.max(1))
                    .min(self.rows.div_ceil(threads))
                    .max(1)
                    .next_multiple_of(pack::GROUP_ROWS);
                let data = self.data();
                let dst = SyncPtr(v.as_mut_ptr());
                cpu.pool.for_chunks(self.rows, step, threads, &|r| {
                    let at = pack::packed_len(self.ty, r.start, self.cols).unwrap();
                    let n = pack::packed_len(self.ty, r.len(), self.cols).unwrap();
                    // SAFETY: chunks start at multiples of eight rows, so each owns whole
                    // groups: a disjoint range of the packed copy.
                    let out = unsafe { dst.slice(at, n) };
                    let src = &data[r.start * rb..r.end * rb];
                    pack::pack(self.ty, r.len(), self.cols, src, out);
                    self.file
                        .release_range(self.offset + r.start * rb, src.len());
                });
                Some(v)
            })
            .as_deref()
    }

    /// Packs the weight now if the kernels read it packed (otherwise its first product would).
    pub(crate) fn prepack(&self, cpu: &Cpu) {
        let _ = self.packed(cpu);
    }

    /// Packs a weight that is also an embedding table (a tied output) before its first
    /// lookup, so that lookups read the packed copy from the start and the file's pages are
    /// never faulted in for them. No-op for formats the kernels read unpacked.
    pub fn pack_tied(&self, output: &Weight, cpu: &Cpu) {
        if Arc::ptr_eq(&self.packed, &output.packed) {
            let _ = self.packed(cpu);
        }
    }
}

/// Activations of `n` tokens quantized to one paired type, reusable across the matmuls that read
/// the same input (Q/K/V, gate/up).
#[derive(Default)]
pub struct QuantizedActs {
    ty: Option<GgmlType>,
    pub(super) n_tokens: usize,
    cols: usize,
    row_bytes: usize,
    buf: Vec<u8>,
    /// The rows again in groups of four tokens, packed for the 32-element GEMM kernels
    /// (`kernels::ActRows::pack`); group `g` starts at `g * packed_group`.
    packed: Vec<u8>,
    packed_group: usize,
}

impl Cpu {
    /// Quantizes `x` (`n_tokens` rows of `cols`) to `ty` into `acts`, reusing its buffer.
    pub fn quantize_acts(
        &self,
        x: &[f32],
        n_tokens: usize,
        cols: usize,
        ty: GgmlType,
        acts: &mut QuantizedActs,
    ) {
        let row_bytes = ty
            .bytes_for(cols as u64)
            .expect("activation row is whole blocks") as usize;
        acts.buf.resize(row_bytes * n_tokens, 0);
        acts.ty = Some(ty);
        acts.n_tokens = n_tokens;
        acts.cols = cols;
        acts.row_bytes = row_bytes;
        let table = self.table;
        // the 32-element GEMM kernels read the tokens packed in groups of four
        let pack = matches!(ty, GgmlType::Q8_0 | GgmlType::Q8_1) && table.gemm_reads_packed(ty);
        let nb = cols / 32;
        acts.packed_group = ActRows::packed_len(4, nb);
        if pack {
            acts.packed
                .resize(n_tokens.div_ceil(4) * acts.packed_group, 0);
        }
        let ptr = SyncPtr(acts.buf.as_mut_ptr());
        let pptr = SyncPtr(acts.packed.as_mut_ptr());
        let group = acts.packed_group;
        let threads = if n_tokens >= 8 { self.n_threads() } else { 1 };
        // chunks of four tokens: one packed group each
        self.pool.for_chunks(n_tokens, 4, threads, &|r| {
            for t in r.clone() {
                // SAFETY: each token's row is written by exactly one chunk.
                let dst = unsafe { ptr.slice(t * row_bytes, row_bytes) };
                table.quantize_row(ty, &x[t * cols..(t + 1) * cols], dst);
            }
            if pack {
                for g0 in (r.start.next_multiple_of(4)..r.end).step_by(4) {
                    let g1 = (g0 + 4).min(n_tokens);
                    // SAFETY: the group's rows were written above by this chunk (chunks are
                    // aligned to four tokens) and its packed bytes belong to it alone.
                    let mut rows: [&[u8]; 4] = [&[]; 4];
                    for (i, t) in (g0..g1).enumerate() {
                        rows[i] = unsafe { &*ptr.slice(t * row_bytes, row_bytes) };
                    }
                    let out = unsafe { pptr.slice(g0 / 4 * group, group) };
                    ActRows::pack(ty, &rows[..g1 - g0], nb, out);
                }
            }
        });
    }

    /// `out[t][r] = Σ_c w[r][c] · x[t][c]` for `n_tokens` rows of `x`. `scratch` holds the
    /// quantized activations (kept by the caller so decoding allocates nothing).
    pub fn matmul(
        &self,
        w: &Weight,
        x: &[f32],
        n_tokens: usize,
        scratch: &mut QuantizedActs,
        out: &mut [f32],
    ) -> Result<()> {
        self.matmul_many(&mut [(w, out)], x, n_tokens, scratch)
    }

    /// Several matmuls that read the same input (Q/K/V, gate/up): the input is quantized once
    /// per paired activation type, not once per weight, and the weights that share it run in
    /// one parallel region.
    pub fn matmul_many(
        &self,
        ops: &mut [(&Weight, &mut [f32])],
        x: &[f32],
        n_tokens: usize,
        scratch: &mut QuantizedActs,
    ) -> Result<()> {
        scratch.invalidate();
        for part in ops.chunks_mut(MAX_FUSED) {
            let mut list = [(part[0].0, SyncPtr(std::ptr::null_mut()), 0); MAX_FUSED];
            for (e, (w, out)) in list.iter_mut().zip(part.iter_mut()) {
                *e = (*w, SyncPtr(out.as_mut_ptr()), out.len());
            }
            self.matmul_list(&list[..part.len()], x, n_tokens, scratch)?;
        }
        Ok(())
    }

    /// Products of `x` with each weight into its output (pointer and length), checked first.
    /// Consecutive weights with the same activation type share one quantization of `x` (kept
    /// in `scratch` while it matches: call [`QuantizedActs::invalidate`] when `x` changes) and
    /// one parallel region.
    pub(crate) fn matmul_list(
        &self,
        ops: &[(&Weight, SyncPtr<f32>, usize)],
        x: &[f32],
        n_tokens: usize,
        scratch: &mut QuantizedActs,
    ) -> Result<()> {
        self.matmul_list_lora(ops, x, n_tokens, scratch, None)
    }

    /// [`Cpu::matmul_list`], adding LoRA deltas to the outputs inside the products' parallel
    /// regions ([`Epilogue`]): `lora` holds the deltas (output index, pair, scale; ascending
    /// by output, every A the same float type and width, at most four rows), `x` quantized for
    /// them, and room for their `A · x` (`4 · rank` each).
    pub(crate) fn matmul_list_lora(
        &self,
        ops: &[(&Weight, SyncPtr<f32>, usize)],
        x: &[f32],
        n_tokens: usize,
        scratch: &mut QuantizedActs,
        mut lora: Option<FusedLora>,
    ) -> Result<()> {
        for &(w, _, len) in ops {
            KernelTable::vec_dot_type(w.ty).ok_or(Error::QuantUnsupported {
                ty: w.ty.name(),
                op: "matrix multiplication",
            })?;
            if x.len() != n_tokens * w.cols {
                return Err(Error::QuantShape {
                    ty: w.ty.name(),
                    reason: format!(
                        "{}: input has {} values, expected {n_tokens} x {}",
                        w.name,
                        x.len(),
                        w.cols
                    ),
                });
            }
            assert_eq!(len, w.rows * n_tokens, "{}: output size", w.name);
        }
        let mut i = 0;
        while i < ops.len() {
            let act_ty = KernelTable::vec_dot_type(ops[i].0.ty).expect("checked above");
            let mut j = i + 1;
            while j < ops.len() && KernelTable::vec_dot_type(ops[j].0.ty) == Some(act_ty) {
                j += 1;
            }
            let cols = ops[i].0.cols;
            if scratch.ty != Some(act_ty) || scratch.cols != cols {
                self.quantize_acts(x, n_tokens, cols, act_ty, scratch);
            }
            match &mut lora {
                None => self.matmul_fused(&ops[i..j], scratch, None),
                Some((deltas, lacts, t)) => {
                    // this run's deltas (they ascend by output)
                    let d0 = deltas.partition_point(|d| d.0 < i);
                    let d1 = deltas.partition_point(|d| d.0 < j);
                    let mut off = [0usize; MAX_DELTAS];
                    let mut end = 0;
                    for (o, d) in off.iter_mut().zip(&deltas[d0..d1]) {
                        *o = end;
                        end += 4 * d.1.rank;
                    }
                    assert!(
                        d1 - d0 <= MAX_DELTAS && end <= t.len(),
                        "lora epilogue: room"
                    );
                    let ep = Epilogue {
                        deltas: &deltas[d0..d1],
                        base: i,
                        acts: lacts,
                        t: SyncPtr(t.as_mut_ptr()),
                        off,
                        taken: std::array::from_fn(|_| AtomicBool::new(false)),
                        done: std::array::from_fn(|_| AtomicU8::new(0)),
                        tier: self.table.tier(),
                    };
                    self.matmul_fused(&ops[i..j], scratch, (d1 > d0).then_some(&ep));
                }
            }
            i = j;
        }
        Ok(())
    }

    /// How weight `w`'s product is cut into chunks of rows and which kernel runs them.
    fn plan<'a>(
        &self,
        w: &'a Weight,
        acts: &QuantizedActs,
        out: SyncPtr<f32>,
        threads: usize,
    ) -> MatPlan<'a> {
        let table = self.table;
        let n_tokens = acts.n_tokens;
        // activations packed for the 32-element kernels (the K-quant ones read the rows)
        let packed_acts = acts.ty.is_some_and(|t| {
            matches!(t, GgmlType::Q8_0 | GgmlType::Q8_1) && table.gemm_reads_packed(t)
        });
        // Packed weights go through the GEMM for decode too: the same kernel for one token or
        // many, so decode computes what prefill computes (and the original pages stay released).
        // Where the GEMMs give their GEMV's bits (NEON), a token alone takes the GEMV.
        let use_gemm = table.has_gemm(w.ty)
            && (n_tokens > 1 || table.gemm_decodes(w.ty))
            && (!packed_acts || acts.packed.len() >= n_tokens.div_ceil(4) * acts.packed_group);
        let wpacked = if use_gemm { w.packed(self) } else { None };
        let gemm = use_gemm && (wpacked.is_some() || !table.gemm_packs_weights(w.ty));
        // enough chunks to balance threads, each big enough to amortise dispatch
        let chunk = if gemm {
            (w.rows / (threads * 4)).clamp(16, 256).next_multiple_of(8)
        } else if threads == 1 {
            w.rows
        } else {
            (w.rows / (threads * 8)).clamp(16, 256)
        };
        MatPlan {
            w,
            out,
            chunk,
            gemm,
            wpacked,
            group_bytes: pack::superblock_bytes(w.ty).unwrap_or(0)
                * (w.cols / pack::block_cols(w.ty).max(1)),
            packed_acts,
        }
    }

    /// Weights that read the same quantized input, in one parallel region: their chunks of
    /// rows are laid end to end and shared out together, so Q/K/V (or gate/up) cost one
    /// dispatch and one join instead of one each. A row's arithmetic does not depend on its
    /// chunk.
    fn matmul_fused(
        &self,
        ops: &[(&Weight, SyncPtr<f32>, usize)],
        acts: &QuantizedActs,
        ep: Option<&Epilogue>,
    ) {
        let n_tokens = acts.n_tokens;
        let bytes: usize = ops
            .iter()
            .map(|o| o.0.rows * o.0.row_bytes())
            .sum::<usize>()
            + ep.map_or(0, |e| e.bytes());
        let threads = self.width_for_step(bytes * n_tokens, n_tokens);
        // the first weight's plan also fills the unused entries
        let mut plans = [self.plan(ops[0].0, acts, ops[0].1, threads); MAX_FUSED];
        // first chunk index of each weight, and the total
        let mut first = [0usize; MAX_FUSED + 1];
        for (i, &(w, out, _)) in ops.iter().enumerate() {
            if i > 0 {
                plans[i] = self.plan(w, acts, out, threads);
            }
            first[i + 1] = first[i] + w.rows.div_ceil(plans[i].chunk);
        }
        let n = ops.len();
        let plans = &plans[..n];
        let first = &first[..=n];
        // the deltas' A products come first, so they are taken before any chunk waits on one
        let na = ep.map_or(0, |e| e.n_units());
        self.pool.for_chunks(na + first[n], 1, threads, &|units| {
            for u in units {
                if u < na {
                    ep.expect("units below na are deltas").a_unit(self.table, u);
                    continue;
                }
                let u = u - na;
                let i = first.partition_point(|&f| f <= u) - 1;
                let p = &plans[i];
                let r0 = (u - first[i]) * p.chunk;
                let rows = r0..(r0 + p.chunk).min(p.w.rows);
                if let Some(e) = ep {
                    e.prefetch(i, &rows);
                }
                self.matmul_rows(p, acts, rows.clone());
                if let Some(e) = ep {
                    e.add(self.table, i, rows, p.out, p.w.rows);
                }
            }
        });
    }

    /// Rows `r` of one planned product, for every token.
    fn matmul_rows(&self, p: &MatPlan, acts: &QuantizedActs, r: std::ops::Range<usize>) {
        let (w, table, n_tokens) = (p.w, self.table, acts.n_tokens);
        let (rows, rb) = (w.rows, w.row_bytes());
        let data = w.data();
        if p.gemm {
            let wchunk = match p.wpacked {
                // chunks start at multiples of eight rows: whole groups
                Some(pw) => &pw[r.start / 8 * p.group_bytes..r.end.div_ceil(8) * p.group_bytes],
                None => &data[r.start * rb..r.end * rb],
            };
            let mut tile = [0f32; 4 * 256];
            let n = r.len();
            for t0 in (0..n_tokens).step_by(4) {
                let nt = (n_tokens - t0).min(4);
                let tk = |i: usize| (t0 + i).min(n_tokens - 1);
                let a = ActRows {
                    n: nt,
                    rows: std::array::from_fn(|i| {
                        &acts.buf[tk(i) * acts.row_bytes..(tk(i) + 1) * acts.row_bytes]
                    }),
                    packed: if p.packed_acts {
                        &acts.packed[t0 / 4 * acts.packed_group..][..acts.packed_group]
                    } else {
                        &[]
                    },
                };
                table.gemm(w.ty, w.cols, n, wchunk, &a, &mut tile, n);
                for i in 0..nt {
                    // SAFETY: rows r of token t0+i are written only by this chunk.
                    let dst = unsafe { p.out.slice((t0 + i) * rows + r.start, n) };
                    dst.copy_from_slice(&tile[i * n..(i + 1) * n]);
                }
            }
            return;
        }
        let wchunk = &data[r.start * rb..r.end * rb];
        for t in 0..n_tokens {
            let act = &acts.buf[t * acts.row_bytes..(t + 1) * acts.row_bytes];
            // SAFETY: rows r of token t are written only by this chunk.
            let dst = unsafe { p.out.slice(t * rows + r.start, r.len()) };
            table.gemv(w.ty, w.cols, wchunk, act, dst);
        }
    }
}

/// Weights fused into one parallel region at most (Q/K/V and gate/up need three).
const MAX_FUSED: usize = 8;

/// One weight's product, cut into chunks of rows (see [`Cpu::matmul_fused`]).
#[derive(Clone, Copy)]
struct MatPlan<'a> {
    w: &'a Weight,
    out: SyncPtr<f32>,
    chunk: usize,
    /// GEMM kernels (packed or plain rows) rather than the per-token GEMV
    gemm: bool,
    wpacked: Option<&'a [u8]>,
    /// bytes of eight packed rows
    group_bytes: usize,
    packed_acts: bool,
}

impl QuantizedActs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Token `t`'s quantized row.
    pub(crate) fn row(&self, t: usize) -> &[u8] {
        &self.buf[t * self.row_bytes..(t + 1) * self.row_bytes]
    }

    /// Forgets the quantized input, so the next matmul quantizes its own.
    pub fn invalidate(&mut self) {
        self.ty = None;
    }
}
