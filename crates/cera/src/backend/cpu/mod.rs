//! [`Backend`] on the host: tensors are `Vec<f32>` that only ever grow, the per-step context
//! holds the quantized activations and the MoE routing scratch, and every op runs the CPU
//! kernels (chosen per CPU tier) on the engine's thread pool.

pub(crate) mod activation;
pub(crate) mod attention;
pub(crate) mod dense;
mod ffn;
pub(crate) mod lowrank;
pub(crate) mod matmul;
pub(crate) mod moe;

pub use matmul::QuantizedActs;

use self::attention::{AttnSeq, KvLayer};
use self::moe::MoeScratch;
use super::moe::{MoeLora, MoeWeights};
use super::{
    Act, AttentionParams, Backend, KvCache, KvSpec, LowRank, RopeConfig, SeqSpan, Weight,
    elementwise as ew,
};
use crate::error::{Error, Result};
use crate::kernels::KernelTable;
use crate::runtime::ThreadPool;

/// A `rows` × `cols` f32 tensor in host memory. Reshaping keeps the storage (it only grows),
/// so a steady-state decode step allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct CpuTensor {
    data: Vec<f32>,
    rows: usize,
    cols: usize,
}

impl CpuTensor {
    /// A tensor holding `data` as `rows` × `cols`.
    pub fn from_vec(data: Vec<f32>, rows: usize, cols: usize) -> CpuTensor {
        assert_eq!(data.len(), rows * cols, "tensor data for {rows} x {cols}");
        CpuTensor { data, rows, cols }
    }

    /// Reshapes to `rows` × `cols` and returns the elements (their values are unspecified
    /// until written).
    pub fn reshape(&mut self, rows: usize, cols: usize) -> &mut [f32] {
        let n = rows * cols;
        if self.data.len() < n {
            self.data.resize(n, 0.0);
        }
        self.rows = rows;
        self.cols = cols;
        &mut self.data[..n]
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The elements, row-major.
    pub fn data(&self) -> &[f32] {
        &self.data[..self.rows * self.cols]
    }

    pub fn data_mut(&mut self) -> &mut [f32] {
        let n = self.rows * self.cols;
        &mut self.data[..n]
    }
}

/// The CPU's per-step context: buffers reused across ops and steps.
#[derive(Default)]
pub struct CpuCtx {
    pub(crate) acts: QuantizedActs,
    /// An encoder product's input as its weights pair it, and its f16 scratch
    /// (`dense.rs`): kept, since they are megabytes.
    pub(crate) dense_x: Vec<f32>,
    pub(crate) dense_h: Vec<half::f16>,
    pub(crate) moe: MoeScratch,
    /// `(cos, sin)` per rotated pair of one position
    cs: Vec<(f32, f32)>,
    /// LFM2 convolution: `B ⊙ x` of one sequence's rows (`n` × `d`) and its new state
    bx: Vec<f32>,
    conv_state: Vec<f32>,
    /// LoRA: `A · x` of a projection's rows (`n` × rank), for formats without a GEMM kernel;
    /// in a decode step, every delta's (`4 · rank` each)
    lora_t: Vec<f32>,
    /// LoRA, decode: the step's input quantized for the adapters' A products
    lora_acts: QuantizedActs,
    /// [`Backend::encoder_ffn`]'s block of rows: its input, hidden activations and output
    ffn: ffn::FfnScratch,
}

impl CpuCtx {
    /// For mixture-of-experts models: the smallest gap, since the last call, between the
    /// selection score of the last expert chosen and the best one left out (None: no routing).
    pub fn take_routing_margin(&mut self) -> Option<f32> {
        self.moe.take_min_gap()
    }
}

impl KvCache for KvLayer {
    fn n_ctx(&self) -> usize {
        KvLayer::n_ctx(self)
    }
    fn bytes(&self) -> usize {
        KvLayer::bytes(self)
    }
    fn spec(&self) -> KvSpec {
        KvLayer::spec(self)
    }
    fn dims(&self) -> (usize, usize, usize) {
        KvLayer::dims(self)
    }
}

/// Sequences of a step up to which attention plans on the stack (a bigger step allocates).
const INLINE_SEQS: usize = 32;

impl Backend for Cpu {
    type Tensor = CpuTensor;
    type Kv = KvLayer;
    type Ctx = CpuCtx;

    fn name(&self) -> &'static str {
        "CPU"
    }

    fn take_routing_margin(&self, cx: &mut CpuCtx) -> Option<f32> {
        cx.take_routing_margin()
    }

    fn new_kv(
        &self,
        spec: KvSpec,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> KvLayer {
        KvLayer::with_spec(spec, n_ctx, n_kv_head, head_dim, head_dim_v)
    }

    fn zeros(&self, rows: usize, cols: usize) -> CpuTensor {
        CpuTensor::from_vec(vec![0.0; rows * cols], rows, cols)
    }

    fn fill_zero(&self, _cx: &mut CpuCtx, t: &mut CpuTensor) {
        t.data_mut().fill(0.0);
    }

    fn upload(&self, _cx: &mut CpuCtx, data: &[f32], rows: usize, cols: usize, t: &mut CpuTensor) {
        t.reshape(rows, cols).copy_from_slice(data);
    }

    fn download(&self, _cx: &mut CpuCtx, t: &CpuTensor, out: &mut Vec<f32>) {
        out.clear();
        out.extend_from_slice(t.data());
    }

    fn top_k(&self, _cx: &mut CpuCtx, t: &CpuTensor, k: usize, out: &mut Vec<(u32, f32)>) {
        super::top_k_rows(t.data(), t.cols, k, out);
    }

    fn shape(&self, t: &CpuTensor) -> (usize, usize) {
        (t.rows, t.cols)
    }

    fn reshape(&self, t: &mut CpuTensor, rows: usize, cols: usize) {
        t.reshape(rows, cols);
    }

    fn embed(
        &self,
        _cx: &mut CpuCtx,
        table: &Weight,
        tied: &Weight,
        tokens: &[u32],
        out: &mut CpuTensor,
    ) -> Result<()> {
        table.pack_tied(tied, self);
        let d = table.cols;
        let x = out.reshape(tokens.len(), d);
        for (t, &tok) in tokens.iter().enumerate() {
            if tok as usize >= table.rows {
                return Err(Error::TokenOutOfRange {
                    id: tok,
                    n_vocab: table.rows,
                });
            }
            table.row_f32(tok as usize, &mut x[t * d..(t + 1) * d])?;
        }
        Ok(())
    }

    fn matmul(
        &self,
        cx: &mut CpuCtx,
        ops: &mut [(&Weight, &mut CpuTensor)],
        x: &CpuTensor,
    ) -> Result<()> {
        // the input is new: quantize it again for the first weight that needs it
        cx.acts.invalidate();
        for part in ops.chunks_mut(8) {
            let mut list = [(part[0].0, SyncPtr(std::ptr::null_mut()), 0); 8];
            for (e, (w, out)) in list.iter_mut().zip(part.iter_mut()) {
                let o = out.reshape(x.rows, w.rows);
                *e = (*w, SyncPtr(o.as_mut_ptr()), o.len());
            }
            self.matmul_list(&list[..part.len()], x.data(), x.rows, &mut cx.acts)?;
        }
        Ok(())
    }

    fn matmul_encoder(
        &self,
        cx: &mut CpuCtx,
        ops: &mut [(&Weight, &mut CpuTensor)],
        x: &CpuTensor,
    ) -> Result<()> {
        let (n, k) = (x.rows, x.cols);
        let mut any = false;
        for (w, out) in ops.iter_mut() {
            if self.dense_supported(w) {
                out.reshape(n, w.rows);
                any = true;
            } else {
                Backend::matmul(self, cx, &mut [(*w, &mut **out)], x)?;
            }
        }
        if !any {
            return Ok(());
        }
        // the rows a chunk at a time: the input's rounded copy (into the context's buffers) is
        // a chunk's, not the whole input's (an encoder's MLP input is megabytes)
        const CHUNK_ROWS: usize = 256;
        for r0 in (0..n).step_by(CHUNK_ROWS) {
            let nr = CHUNK_ROWS.min(n - r0);
            let xs = &x.data[r0 * k..(r0 + nr) * k];
            // rounded once per weight type (Q/K/V share it)
            let mut rounded = None;
            for (w, out) in ops.iter_mut() {
                if !self.dense_supported(w) {
                    continue;
                }
                if rounded != Some(w.ty) {
                    Cpu::dense_input(w.ty, xs, &mut cx.dense_x, &mut cx.dense_h);
                    rounded = Some(w.ty);
                }
                let o = &mut out.data[r0 * w.rows..(r0 + nr) * w.rows];
                self.dense_matmul(w, &cx.dense_x[..nr * k], nr, o);
            }
        }
        Ok(())
    }

    fn lora_embed(
        &self,
        cx: &mut CpuCtx,
        out: &mut CpuTensor,
        tokens: &[u32],
        rows: Option<&[usize]>,
        w: &LowRank,
        s: f32,
    ) -> Result<()> {
        assert_eq!(out.cols, w.out, "lora_embed: output width");
        assert!(
            rows.map_or(tokens.len() == out.rows, |rs| rs.len() == tokens.len()
                && rs.iter().all(|&i| i < out.rows)),
            "lora_embed: rows"
        );
        let o = w.out;
        let t = &mut cx.lora_t;
        t.resize(w.rank, 0.0);
        let data = out.data_mut();
        for (i, &tok) in tokens.iter().enumerate() {
            if tok as usize >= w.a.rows {
                return Err(Error::TokenOutOfRange {
                    id: tok,
                    n_vocab: w.a.rows,
                });
            }
            w.a.row_f32(tok as usize, t)?;
            let r = rows.map_or(i, |rs| rs[i]);
            lowrank::rank_sum(
                self.table.tier(),
                t,
                &w.bt,
                o,
                0..o,
                &mut data[r * o..(r + 1) * o],
                s,
            );
        }
        Ok(())
    }

    fn matmul_lora(
        &self,
        cx: &mut CpuCtx,
        ops: &mut [(&Weight, &mut CpuTensor)],
        x: &CpuTensor,
        deltas: &[(usize, &LowRank, f32)],
    ) -> Result<()> {
        // decode (a few rows): the deltas ride in the products' parallel regions, one region
        // per projection list instead of one more per adapter and projection
        let a_ty = deltas[0].1.a.ty;
        let fused = x.rows <= 4
            && ops.len() <= 8
            && deltas.len() <= lowrank::MAX_DELTAS
            && deltas.iter().all(|&(i, w, _)| {
                self.lora_direct(w)
                    && KernelTable::vec_dot_type(w.a.ty) == KernelTable::vec_dot_type(a_ty)
                    && w.a.cols == x.cols
                    && w.out == ops[i].0.rows
            })
            && deltas.is_sorted_by_key(|d| d.0);
        if !fused {
            Backend::matmul(self, cx, ops, x)?;
            for &(i, pair, s) in deltas {
                self.lora(cx, ops[i].1, x, None, pair, s)?;
            }
            return Ok(());
        }
        let act_ty = KernelTable::vec_dot_type(a_ty).expect("a float format");
        self.quantize_acts(x.data(), x.rows, x.cols, act_ty, &mut cx.lora_acts);
        let room: usize = deltas.iter().map(|d| 4 * d.1.rank).sum();
        cx.lora_t.resize(room, 0.0);
        cx.acts.invalidate();
        let mut list = [(ops[0].0, SyncPtr(std::ptr::null_mut()), 0); 8];
        for (e, (w, out)) in list.iter_mut().zip(ops.iter_mut()) {
            let o = out.reshape(x.rows, w.rows);
            *e = (*w, SyncPtr(o.as_mut_ptr()), o.len());
        }
        self.matmul_list_lora(
            &list[..ops.len()],
            x.data(),
            x.rows,
            &mut cx.acts,
            Some((deltas, &cx.lora_acts, &mut cx.lora_t)),
        )
    }

    fn rms_norm(&self, _cx: &mut CpuCtx, x: &CpuTensor, w: &[f32], eps: f32, out: &mut CpuTensor) {
        let o = out.reshape(x.rows, x.cols);
        ew::rms_norm(x.data(), w, eps, o);
    }

    fn rms_norm_inplace(&self, _cx: &mut CpuCtx, x: &mut CpuTensor, w: &[f32], eps: f32) {
        ew::rms_norm_inplace(x.data_mut(), w, eps);
    }

    fn layer_norm(
        &self,
        _cx: &mut CpuCtx,
        x: &CpuTensor,
        w: &[f32],
        b: &[f32],
        eps: f32,
        out: &mut CpuTensor,
    ) {
        assert!(w.len() == x.cols && b.len() == x.cols, "layer_norm: width");
        let o = out.reshape(x.rows, x.cols);
        ew::layer_norm(x.data(), w, b, eps, o);
    }

    fn encoder_ffn(
        &self,
        cx: &mut CpuCtx,
        x: &mut CpuTensor,
        h: &CpuTensor,
        up: (&Weight, Option<&[f32]>),
        down: (&Weight, Option<&[f32]>),
        act: Act,
        _mid: &mut CpuTensor,
        _out: &mut CpuTensor,
    ) -> Result<()> {
        self.ffn_by_rows(cx, x, h, up, down, act)
    }

    fn activate(&self, _cx: &mut CpuCtx, x: &mut CpuTensor, act: Act) {
        self.act(x.data_mut(), act);
    }

    fn add(&self, _cx: &mut CpuCtx, x: &mut CpuTensor, y: &CpuTensor) {
        assert_eq!(self.shape(x), self.shape(y), "add: shapes differ");
        ew::add_inplace(x.data_mut(), y.data());
    }

    fn lora(
        &self,
        cx: &mut CpuCtx,
        out: &mut CpuTensor,
        x: &CpuTensor,
        rows: Option<&[usize]>,
        w: &LowRank,
        s: f32,
    ) -> Result<()> {
        assert_eq!(out.cols, w.out, "lora: output width");
        let n = x.rows;
        assert!(
            rows.map_or(n == out.rows, |rs| rs.len() == n
                && rs.iter().all(|&i| i < out.rows)),
            "lora: rows"
        );
        let dst = SyncPtr(out.data_mut().as_mut_ptr());
        self.lora_delta(w, x.data(), n, rows, dst, s, &mut cx.acts, &mut cx.lora_t)
    }

    fn scale(&self, _cx: &mut CpuCtx, x: &mut CpuTensor, s: f32) {
        ew::scale_inplace(x.data_mut(), s);
    }

    fn add_bias(&self, _cx: &mut CpuCtx, x: &mut CpuTensor, bias: &[f32]) {
        assert_eq!(x.cols, bias.len(), "add_bias: width");
        ew::add_bias(x.data_mut(), bias);
    }

    fn glu(&self, _cx: &mut CpuCtx, gate: &mut CpuTensor, up: &CpuTensor, act: Act) {
        assert_eq!(self.shape(gate), self.shape(up), "glu: shapes differ");
        Cpu::glu(self, gate.data_mut(), up.data(), act);
    }

    fn softcap(&self, _cx: &mut CpuCtx, x: &mut CpuTensor, cap: f32) {
        self.softcap_slice(x.data_mut(), cap);
    }

    fn copy_cols(
        &self,
        _cx: &mut CpuCtx,
        src: &CpuTensor,
        col0: usize,
        n: usize,
        dst: &mut CpuTensor,
    ) {
        assert!(col0 + n <= src.cols, "copy_cols past the row");
        let w = src.cols;
        let d = dst.reshape(src.rows, n);
        for (o, row) in d.chunks_exact_mut(n.max(1)).zip(src.data().chunks_exact(w)) {
            o.copy_from_slice(&row[col0..col0 + n]);
        }
    }

    fn gather_rows(&self, _cx: &mut CpuCtx, src: &CpuTensor, rows: &[usize], dst: &mut CpuTensor) {
        let w = src.cols;
        let s = src.data();
        let d = dst.reshape(rows.len(), w);
        for (o, &r) in d.chunks_exact_mut(w.max(1)).zip(rows) {
            o.copy_from_slice(&s[r * w..(r + 1) * w]);
        }
    }

    fn rope(
        &self,
        cx: &mut CpuCtx,
        x: &mut CpuTensor,
        n_head: usize,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    ) {
        let w = x.cols;
        assert_eq!(pos.len(), x.rows, "rope: one position per row");
        assert!(w >= n_head * head_dim);
        cx.cs.resize(cfg.n_rot / 2, (0.0, 0.0));
        for (row, &p) in x.data_mut().chunks_exact_mut(w).zip(pos) {
            cfg.cos_sin(p as i64, &mut cx.cs);
            cfg.apply(&mut row[..n_head * head_dim], n_head, head_dim, &cx.cs);
        }
    }

    fn kv_store(
        &self,
        _cx: &mut CpuCtx,
        kv: &mut KvLayer,
        k: &CpuTensor,
        v: &CpuTensor,
        s: SeqSpan,
    ) {
        let (kd, vd) = (k.cols, v.cols);
        let rk = &k.data()[s.row0 * kd..(s.row0 + s.n) * kd];
        let rv = &v.data()[s.row0 * vd..(s.row0 + s.n) * vd];
        kv.store(s.pos0, rk, rv);
    }

    fn kv_save(&self, kv: &KvLayer, n: usize, out: &mut Vec<u8>) {
        kv.save(n, out)
    }

    fn kv_load(&self, kv: &mut KvLayer, n: usize, src: &[u8]) -> Result<()> {
        kv.load(n, src)
            .map_err(|e| Error::Model(format!("restoring a KV cache layer: {e}")))
    }

    fn kv_shift(
        &self,
        kv: &mut KvLayer,
        keep: usize,
        n_discard: usize,
        n_past: usize,
        rope: Option<&RopeConfig>,
    ) {
        kv.shift(keep, n_discard, n_past, rope)
    }

    fn attention(
        &self,
        _cx: &mut CpuCtx,
        q: &CpuTensor,
        kv: &[&KvLayer],
        spans: &[SeqSpan],
        p: &AttentionParams,
        out: &mut CpuTensor,
    ) {
        assert_eq!(kv.len(), spans.len(), "attention: one cache per sequence");
        let o = out.reshape(q.rows, p.n_head * p.head_dim_v);
        if spans.is_empty() {
            return;
        }
        let seq = |i: usize| AttnSeq {
            kv: kv[i],
            pos0: spans[i].pos0,
            row0: spans[i].row0,
            n: spans[i].n,
        };
        if spans.len() <= INLINE_SEQS {
            let mut list = [seq(0); INLINE_SEQS];
            for (i, e) in list.iter_mut().enumerate().take(spans.len()) {
                *e = seq(i);
            }
            self.attention_batch(q.data(), &list[..spans.len()], p, o);
        } else {
            let list: Vec<AttnSeq> = (0..spans.len()).map(seq).collect();
            self.attention_batch(q.data(), &list, p, o);
        }
    }

    /// On the host memory the tensors already are (no copies); on the AVX-512 tier as
    /// products (`attention::full`).
    fn rel_pos_attention(
        &self,
        _cx: &mut CpuCtx,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        p: &CpuTensor,
        bias_u: &[f32],
        bias_v: &[f32],
        n_head: usize,
        out: &mut CpuTensor,
    ) -> Result<()> {
        let shape = |t: &CpuTensor| (t.rows, t.cols);
        super::relpos::check_shapes(
            [shape(q), shape(k), shape(v), shape(p)],
            bias_u.len(),
            bias_v.len(),
            n_head,
        )?;
        let (n, d) = shape(q);
        let o = out.reshape(n, d);
        let args = (q.data(), k.data(), v.data(), p.data());
        if self.dense_attention_tier() {
            self.rel_pos_dense(args.0, args.1, args.2, args.3, bias_u, bias_v, n_head, o);
        } else {
            super::relpos::rel_pos_attention(
                args.0, args.1, args.2, args.3, bias_u, bias_v, n_head, o,
            );
        }
        Ok(())
    }

    fn short_conv(
        &self,
        cx: &mut CpuCtx,
        bcx: &CpuTensor,
        kernel: &[f32],
        state: &mut CpuTensor,
        s: SeqSpan,
        out: &mut CpuTensor,
    ) {
        let d = bcx.cols / 3;
        let l = kernel.len() / d.max(1);
        assert_eq!(
            (out.rows, out.cols),
            (bcx.rows, d),
            "short_conv: output shape"
        );
        let rows = &bcx.data()[s.row0 * 3 * d..(s.row0 + s.n) * 3 * d];
        cx.bx.resize(s.n * d, 0.0);
        for (b, row) in cx.bx.chunks_exact_mut(d).zip(rows.chunks_exact(3 * d)) {
            for ((o, &bv), &xv) in b.iter_mut().zip(&row[..d]).zip(&row[2 * d..]) {
                *o = bv * xv;
            }
        }
        let st = state.data_mut();
        assert_eq!(st.len(), (l - 1) * d, "short_conv: state size");
        let dst = &mut out.data_mut()[s.row0 * d..(s.row0 + s.n) * d];
        causal_conv(&cx.bx, d, st, kernel, dst, &mut cx.conv_state);
        for (y, row) in dst.chunks_exact_mut(d).zip(rows.chunks_exact(3 * d)) {
            for (yv, &cv) in y.iter_mut().zip(&row[d..2 * d]) {
                *yv *= cv;
            }
        }
    }

    fn moe(
        &self,
        cx: &mut CpuCtx,
        w: &MoeWeights,
        h: &CpuTensor,
        lora: &dyn MoeLora,
        out: &mut CpuTensor,
    ) -> Result<()> {
        let o = out.reshape(h.rows, h.cols);
        moe::moe_ffn(
            self,
            w,
            h.data(),
            h.rows,
            self.moe_dispatch(),
            lora,
            &mut cx.moe,
            o,
        )
    }
}

/// The causal depthwise convolution as ggml's `ssm_conv`: each channel `c` has `l` taps, the
/// first for the oldest input; `out[t][c] = Σ_k w[c][k] · seq[t + k][c]`, where `seq` is the
/// state (`l - 1` rows of `d`) followed by the `n` rows of `x`. Afterwards the state holds the
/// last `l - 1` rows of `seq` (`tmp` is the scratch for it).
pub(crate) fn causal_conv(
    x: &[f32],
    d: usize,
    state: &mut [f32],
    kernel: &[f32],
    out: &mut [f32],
    tmp: &mut Vec<f32>,
) {
    let n = x.len() / d;
    let l = kernel.len() / d;
    let dc = l - 1;
    debug_assert_eq!(state.len(), dc * d);
    debug_assert_eq!(out.len(), n * d);
    // row j of seq: state row j for j < dc, else x row j - dc
    let row = |j: usize| -> &[f32] {
        if j < dc {
            &state[j * d..(j + 1) * d]
        } else {
            &x[(j - dc) * d..(j - dc + 1) * d]
        }
    };
    for t in 0..n {
        let o = &mut out[t * d..(t + 1) * d];
        for (c, oc) in o.iter_mut().enumerate() {
            let w = &kernel[c * l..(c + 1) * l];
            let mut s = 0f32;
            for (k, &wk) in w.iter().enumerate() {
                s += row(t + k)[c] * wk;
            }
            *oc = s;
        }
    }
    // the new state: the last dc rows of seq (n + dc rows)
    tmp.resize(dc * d, 0.0);
    for j in 0..dc {
        tmp[j * d..(j + 1) * d].copy_from_slice(row(n + j));
    }
    state.copy_from_slice(tmp);
}

/// A kernel pool of `n_threads`: the backend's own, but in the threads WebAssembly build one
/// per width for the whole process. There a worker is a Web Worker that `cera-threads.js`
/// starts up front (a few spares beyond the first pool's), because a new one does not start
/// while the main thread waits inside a call: an app holding several models would otherwise
/// need more workers than were started and hang in its next call. Sharing is safe: jobs from
/// several backends are serialised by the pool's submission lock, as sessions' are.
fn kernel_pool(n_threads: usize) -> std::sync::Arc<ThreadPool> {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    {
        use std::sync::{Arc, Mutex, Weak};
        static POOLS: Mutex<Vec<Weak<ThreadPool>>> = Mutex::new(Vec::new());
        let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
        pools.retain(|w| w.strong_count() > 0);
        let n = n_threads.max(1);
        if let Some(p) = pools
            .iter()
            .filter_map(Weak::upgrade)
            .find(|p| p.n_threads() == n)
        {
            return p;
        }
        let p = Arc::new(ThreadPool::new(n));
        pools.push(Arc::downgrade(&p));
        p
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    std::sync::Arc::new(ThreadPool::new(n_threads))
}

/// The CPU backend: a kernel table (chosen at start-up from the CPU's features) and a pool.
pub struct Cpu {
    pub(crate) pool: std::sync::Arc<ThreadPool>,
    pub(crate) table: &'static KernelTable,
    /// The most threads a one-token step's ops take ([`Cpu::set_decode_threads`]).
    decode_threads: std::sync::atomic::AtomicUsize,
    /// Per-token MoE dispatch instead of grouped (for measuring; `CERA_MOE_DISPATCH=token`).
    per_token_moe: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Cpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cpu({} threads)", self.n_threads())
    }
}

impl Cpu {
    pub fn new(n_threads: usize) -> Cpu {
        Cpu::with_table(n_threads, KernelTable::get())
    }

    /// A backend on a given kernel table (tests pin a CPU tier this way).
    pub fn with_table(n_threads: usize, table: &'static KernelTable) -> Cpu {
        let n_threads = n_threads.max(1);
        Cpu {
            pool: kernel_pool(n_threads),
            table,
            decode_threads: decode_threads_from_env()
                .unwrap_or(n_threads)
                .min(n_threads)
                .into(),
            per_token_moe: (moe::Dispatch::from_env() == moe::Dispatch::PerToken).into(),
        }
    }

    /// How MoE layers reach their experts (grouped by default).
    pub fn set_moe_dispatch(&self, d: moe::Dispatch) {
        self.per_token_moe.store(
            d == moe::Dispatch::PerToken,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    pub(crate) fn moe_dispatch(&self) -> moe::Dispatch {
        if self
            .per_token_moe
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            moe::Dispatch::PerToken
        } else {
            moe::Dispatch::Grouped
        }
    }

    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// The most threads an op of a one-token step (single-sequence decode) takes: the pool's
    /// width unless `CERA_DECODE_THREADS` or [`Cpu::set_decode_threads`] pinned fewer. Decode
    /// reads every weight once per token, and past the cores that saturate the memory bus
    /// more threads only add joins (llama.cpp's `-t` against `-tb` is the same split). Steps of
    /// several tokens, batched decode included, use the whole pool.
    pub fn decode_threads(&self) -> usize {
        self.decode_threads
            .load(std::sync::atomic::Ordering::Relaxed)
            .clamp(1, self.n_threads())
    }

    /// Pins [`Cpu::decode_threads`] (at most the pool's width).
    pub fn set_decode_threads(&self, n: usize) {
        self.decode_threads.store(
            n.clamp(1, self.n_threads()),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The thread cap of an op in a step of `n_tokens` tokens.
    pub fn step_threads(&self, n_tokens: usize) -> usize {
        if n_tokens <= 1 {
            self.decode_threads()
        } else {
            self.n_threads()
        }
    }

    /// Threads for an op that reads about `bytes` of weights: at least `CERA_MIN_WORK` bytes
    /// (default 32 KiB) per thread, since handing a job to a thread and joining it costs about
    /// as much as a few tens of kilobytes of kernel work. `-t` stays the upper bound.
    pub fn width_for(&self, bytes: usize) -> usize {
        (bytes / min_bytes_per_thread()).clamp(1, self.n_threads())
    }

    /// [`Cpu::width_for`] for an op of a step of `n_tokens` tokens, whose weights are read
    /// once per four tokens or so: at most [`Cpu::step_threads`].
    pub fn width_for_step(&self, bytes: usize, n_tokens: usize) -> usize {
        self.width_for(bytes).min(self.step_threads(n_tokens))
    }

    pub fn table(&self) -> &'static KernelTable {
        self.table
    }
}

/// `CERA_DECODE_THREADS`: pins the threads of one-token steps (see [`Cpu::decode_threads`]).
fn decode_threads_from_env() -> Option<usize> {
    static V: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        let v = std::env::var("CERA_DECODE_THREADS").ok()?;
        match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                eprintln!("warning: CERA_DECODE_THREADS={v} is not a positive count; ignored");
                None
            }
        }
    })
}

fn min_bytes_per_thread() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("CERA_MIN_WORK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(32 << 10)
    })
}

/// A raw pointer that may be shared across the pool's threads; each thread writes a disjoint
/// part of the buffer it points into.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr<T>(pub *mut T);
// SAFETY: users guarantee disjoint writes and that the buffer outlives the parallel region.
unsafe impl<T> Send for SyncPtr<T> {}
unsafe impl<T> Sync for SyncPtr<T> {}

impl<T> SyncPtr<T> {
    /// The pointer `i` elements on (a method, so a closure captures the whole `SyncPtr`).
    pub(crate) fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }

    /// # Safety
    /// `start..start+len` must be in bounds and not aliased by another thread.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}
