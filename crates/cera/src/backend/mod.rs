//! The backend seam: the small set of ops models are written against ([`Backend`]), over
//! tensors the backend owns. [`Cpu`] implements it on host memory; a GPU backend implements the
//! same trait over device buffers, so models are written once.
//!
//! Design points a GPU backend relies on:
//! - activations are [`Backend::Tensor`]s, allocated by the backend and reused between steps
//!   (an op reshapes its output; storage only ever grows), so a step needs no per-op host
//!   buffer;
//! - every op takes the caller's [`Backend::Ctx`], the per-step recording context (on the CPU
//!   the quantized-activation and MoE scratch; on a GPU, the step's command encoder), so a whole
//!   step can be recorded and submitted once;
//! - the only reads back to the host are [`Backend::download`] of the logits rows; the host
//!   slices some ops take (token ids, positions, sequence spans) are constants of the step,
//!   the same slice for every layer, so a GPU backend uploads each once per step;
//! - per-sequence state (KV caches, LFM2 convolution inputs) is backend memory
//!   ([`Backend::Kv`], [`Backend::Tensor`]), owned by the session, never by the model;
//! - one step may hold several sequences: the cache update, attention and the convolution name
//!   each sequence's span of the step's rows ([`SeqSpan`]); every other op is row-wise.
//!
//! Weights stay host descriptions ([`Weight`], file-backed) and small parameters (norm
//! weights, biases, convolution taps) plain `&[f32]` owned by the immutable model: a backend
//! makes its resident copy on first use (the CPU packs quantized weights into its GEMM layout;
//! a GPU uploads), keyed by the weight, since a model never changes after loading.
//!
//! Layout: this file is the seam ([`Backend`], [`KvCache`], the step's shared types); beside
//! it the types every backend reads ([`Weight`], [`kvtype`], [`moe`], [`LowRank`], RoPE);
//! `cpu/` and `gpu/` implement the trait and [`Device`] (`device.rs`) chooses between them at
//! load time — the only module that names either (`tests/layering.rs`).
//!
//! Testing a backend: [`reference::Reference`] implements every op in plain f64 scalar code, and
//! `tests/backend_ops.rs` (harness: `tests/common/backend_ops.rs`, `check_all`) runs each op on a
//! backend and on it with the same random inputs, within per-op error bounds.

pub(crate) mod cpu;
mod device;
mod elementwise;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod kvtype;
mod lowrank;
pub mod moe;
pub mod reference;
pub mod relpos;
mod rope;
mod weight;

pub use cpu::attention::{AttnSeq, KvLayer};
pub use cpu::moe::Dispatch;
pub use cpu::{Cpu, CpuCtx, CpuTensor, QuantizedActs};
pub use device::{DevCtx, DevKv, DevTensor, Device};
pub use elementwise::*;
pub use kvtype::{KvSpec, KvType, Rotation, round_trip, turbo};
pub use lowrank::LowRank;
pub use moe::{MoeLora, NoLora};
pub use rope::{RopeConfig, RopeKind, RopeScaling};
pub use weight::Weight;

use crate::error::Result;
use moe::MoeWeights;

/// The activation of a gated FFN (`act(gate) * up`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    Silu,
    /// GELU, tanh approximation (ggml's `gelu`).
    Gelu,
}

/// One sequence's rows in a step: tokens `row0..row0 + n` of the step's tensors are positions
/// `pos0..pos0 + n` of that sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqSpan {
    pub row0: usize,
    pub n: usize,
    pub pos0: usize,
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
    /// Each query sees only the keys at or before its position; `false` (encoders): every key
    /// of its sequence in the step, later ones included.
    pub causal: bool,
}

/// The largest head the backends take (the CPU's tiles keep a row on the stack).
pub(crate) const MAX_HEAD_DIM: usize = 512;

/// A KV cache layer in backend memory.
pub trait KvCache: Send {
    /// Positions it holds.
    fn n_ctx(&self) -> usize;
    /// Bytes held.
    fn bytes(&self) -> usize;
    /// The types and rotation it stores.
    fn spec(&self) -> KvSpec;
    /// Element types of the keys and the values.
    fn types(&self) -> (KvType, KvType) {
        let s = self.spec();
        (s.k, s.v)
    }
    /// `(n_kv_head, head_dim, head_dim_v)`.
    fn dims(&self) -> (usize, usize, usize);
    /// Bytes [`Backend::kv_save`] writes for `n` positions. The layout is the same on every
    /// backend: for the keys, then the values, each head's `n` rows in the cache's element type
    /// (f32, f16 or bf16 little-endian, ggml's blocks, TurboQuant codes; rotated rows as
    /// stored, in their rotated space).
    fn saved_len(&self, n: usize) -> usize {
        let (h, d, dv) = self.dims();
        let s = self.spec();
        h * n * (s.k.row_bytes(d) + s.v.row_bytes(dv))
    }
}

/// The ops models are written against. Shapes: a tensor is `rows` × `cols` f32, row-major; a
/// step's tensors have one row per token of the step. Outputs are reshaped by the op.
pub trait Backend: Send + Sync {
    /// Activations in backend memory.
    type Tensor: Default + Send;
    /// One attention layer's keys and values of one sequence.
    type Kv: KvCache;
    /// The per-step recording context (see the module docs).
    type Ctx: Default + Send;

    /// The backend's name, as `cera bench` reports it (`CPU`, `Vulkan`, ...).
    fn name(&self) -> &'static str;

    /// Whether [`Backend::new_kv`] can hold keys and values of `spec` at these head sizes
    /// (the CPU holds every type; a GPU a subset, and sessions refuse the rest by name).
    fn kv_supported(&self, _spec: KvSpec, _head_dim: usize, _head_dim_v: usize) -> bool {
        true
    }

    /// Ends a step that read nothing back: submits what `cx` recorded (the CPU has nothing
    /// pending). Work that must see the step's results (snapshots, the next step on another
    /// context) comes after it.
    fn finish(&self, _cx: &mut Self::Ctx) {}

    /// For mixture-of-experts layers: the smallest gap, since the last call on `cx`, between
    /// the selection score of the last expert chosen and the best one left out (None: no
    /// routing). A tiny gap means rounding-level differences could have chosen other experts,
    /// which is what comparisons against another engine need to know.
    fn take_routing_margin(&self, _cx: &mut Self::Ctx) -> Option<f32> {
        None
    }

    // ---- memory ----

    /// A KV cache layer of `n_ctx` positions for `n_kv_head` heads of `head_dim` (keys) and
    /// `head_dim_v` (values).
    fn new_kv(
        &self,
        spec: KvSpec,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> Self::Kv;
    /// [`Backend::new_kv`] for attention layer `layer` of a new sequence: a backend may keep
    /// the same layer of several sequences together (the GPU in one buffer, see
    /// `Gpu::set_kv_sequences`), so that [`Backend::kv_store_seqs`] and
    /// [`Backend::attention`] take a batched step's sequences in one pass.
    fn new_layer_kv(
        &self,
        layer: usize,
        spec: KvSpec,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> Self::Kv {
        let _ = layer;
        self.new_kv(spec, n_ctx, n_kv_head, head_dim, head_dim_v)
    }
    /// A zeroed `rows` × `cols` tensor (sequence state such as convolution inputs).
    fn zeros(&self, rows: usize, cols: usize) -> Self::Tensor;
    /// Sets every element to zero.
    fn fill_zero(&self, cx: &mut Self::Ctx, t: &mut Self::Tensor);
    /// `rows` × `cols` from host memory.
    fn upload(
        &self,
        cx: &mut Self::Ctx,
        data: &[f32],
        rows: usize,
        cols: usize,
        t: &mut Self::Tensor,
    );
    /// The whole tensor to host memory (resized to fit): the step's one read back.
    fn download(&self, cx: &mut Self::Ctx, t: &Self::Tensor, out: &mut Vec<f32>);
    /// The `k` largest values of each row of `t` with their columns, as [`top_k_rows`] ranks
    /// them (`k` pairs per row appended to `out`, k ≤ cols): greedy decoding and truncated
    /// sampling read these instead of whole rows of logits. Ends the step like `download`.
    fn top_k(&self, cx: &mut Self::Ctx, t: &Self::Tensor, k: usize, out: &mut Vec<(u32, f32)>) {
        let mut v = Vec::new();
        self.download(cx, t, &mut v);
        top_k_rows(&v, self.shape(t).1, k, out);
    }
    /// (rows, cols) of a tensor.
    fn shape(&self, t: &Self::Tensor) -> (usize, usize);
    /// Gives `t` the shape `rows` × `cols` (storage only grows; contents unspecified).
    fn reshape(&self, t: &mut Self::Tensor, rows: usize, cols: usize);

    // ---- ops ----

    /// `out[t] = table[tokens[t]]` (embedding lookup). `tied` is the output projection: when
    /// it shares the table, lookups read the backend's resident copy. An id past the table is
    /// an error naming it.
    fn embed(
        &self,
        cx: &mut Self::Ctx,
        table: &Weight,
        tied: &Weight,
        tokens: &[u32],
        out: &mut Self::Tensor,
    ) -> Result<()>;
    /// `out = x · wᵀ` for each `(w, out)`: several weights that read the same input (Q/K/V,
    /// gate/up) share its conversion.
    fn matmul(
        &self,
        cx: &mut Self::Ctx,
        ops: &mut [(&Weight, &mut Self::Tensor)],
        x: &Self::Tensor,
    ) -> Result<()>;
    /// [`Backend::matmul`] for an encoder (a vision or audio tower: many rows at once and no
    /// decode step whose sums it must equal): a backend may sum in another order where that
    /// is faster (the CPU's AVX-512 tier does, `backend/cpu/dense.rs`).
    fn matmul_encoder(
        &self,
        cx: &mut Self::Ctx,
        ops: &mut [(&Weight, &mut Self::Tensor)],
        x: &Self::Tensor,
    ) -> Result<()> {
        self.matmul(cx, ops, x)
    }
    /// `x += act(h · upᵀ + up_b) · downᵀ + down_b`: an encoder block's feed-forward (no
    /// gate) and its residual add, over many rows ([`Backend::matmul_encoder`]'s products).
    /// `mid` and `out` are scratch. A backend may run it a block of rows at a time, so that
    /// the hidden activations (four times the width in Whisper and SigLIP) are a block's and
    /// not the whole input's: they are an encoder's biggest buffer.
    #[allow(clippy::too_many_arguments)]
    fn encoder_ffn(
        &self,
        cx: &mut Self::Ctx,
        x: &mut Self::Tensor,
        h: &Self::Tensor,
        up: (&Weight, Option<&[f32]>),
        down: (&Weight, Option<&[f32]>),
        act: Act,
        mid: &mut Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<()> {
        self.matmul_encoder(cx, &mut [(up.0, &mut *mid)], h)?;
        if let Some(b) = up.1 {
            self.add_bias(cx, mid, b);
        }
        self.activate(cx, mid, act);
        self.matmul_encoder(cx, &mut [(down.0, &mut *out)], mid)?;
        if let Some(b) = down.1 {
            self.add_bias(cx, out, b);
        }
        self.add(cx, x, out);
        Ok(())
    }
    /// Whether [`Backend::matmul_add`], [`Backend::norm_matmul`], [`Backend::glu_matmul_add`]
    /// and [`Backend::rope_qk`] are single ops here (for the few rows of a decode step): models
    /// then use them instead of their parts (on a GPU every op is a dispatch; on a CPU the
    /// parts are as fast).
    fn fuses_ops(&self) -> bool {
        false
    }
    /// `out += x · wᵀ`: a block's output projection added to the residual stream.
    fn matmul_add(
        &self,
        cx: &mut Self::Ctx,
        w: &Weight,
        x: &Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<()> {
        let (rows, _) = self.shape(out);
        let mut t = self.zeros(rows, w.rows);
        self.matmul(cx, &mut [(w, &mut t)], x)?;
        self.add(cx, out, &t);
        Ok(())
    }
    /// `h = rms_norm(x, w, eps)` (whole rows), then [`Backend::matmul`] of `h`: a block's
    /// input norm and its projections. A backend that fuses them may leave `h` unwritten.
    fn norm_matmul(
        &self,
        cx: &mut Self::Ctx,
        x: &Self::Tensor,
        w: &[f32],
        eps: f32,
        h: &mut Self::Tensor,
        ops: &mut [(&Weight, &mut Self::Tensor)],
    ) -> Result<()> {
        self.rms_norm(cx, x, w, eps, h);
        self.matmul(cx, ops, h)
    }
    /// [`Backend::norm_matmul`], then `biases[i]` (if any) added to the `i`-th output: Qwen2's
    /// Q/K/V. A backend that fuses them adds the biases as the product stores its outputs.
    #[allow(clippy::too_many_arguments)]
    fn norm_matmul_bias(
        &self,
        cx: &mut Self::Ctx,
        x: &Self::Tensor,
        w: &[f32],
        eps: f32,
        h: &mut Self::Tensor,
        ops: &mut [(&Weight, &mut Self::Tensor)],
        biases: &[Option<&[f32]>],
    ) -> Result<()> {
        self.norm_matmul(cx, x, w, eps, h, ops)?;
        for ((_, out), b) in ops.iter_mut().zip(biases) {
            if let Some(b) = b {
                self.add_bias(cx, out, b);
            }
        }
        Ok(())
    }
    /// `out += glu(gate, up) · wᵀ`: the FFN's activation, down projection and residual add.
    /// A backend that fuses them may leave `gate` as it was.
    fn glu_matmul_add(
        &self,
        cx: &mut Self::Ctx,
        gate: &mut Self::Tensor,
        up: &Self::Tensor,
        act: Act,
        w: &Weight,
        out: &mut Self::Tensor,
    ) -> Result<()> {
        self.glu(cx, gate, up, act);
        self.matmul_add(cx, w, gate, out)
    }
    /// [`Backend::rope`] of a step's queries (`n_head` heads) and keys (`n_kv_head`).
    #[allow(clippy::too_many_arguments)]
    fn rope_qk(
        &self,
        cx: &mut Self::Ctx,
        q: &mut Self::Tensor,
        n_head: usize,
        k: &mut Self::Tensor,
        n_kv_head: usize,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    ) {
        self.rope(cx, q, n_head, head_dim, pos, cfg);
        self.rope(cx, k, n_kv_head, head_dim, pos, cfg);
    }
    /// [`Backend::rope_qk`], then [`Backend::kv_store`] of one sequence's keys and values
    /// (`span`, every row of the step): a backend may do both in one pass, and may leave `k`
    /// unrotated (only the cache is read after; `q` is rotated either way).
    #[allow(clippy::too_many_arguments)]
    fn rope_qk_store(
        &self,
        cx: &mut Self::Ctx,
        q: &mut Self::Tensor,
        n_head: usize,
        k: &mut Self::Tensor,
        v: &Self::Tensor,
        kv: &mut Self::Kv,
        span: SeqSpan,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    ) {
        let n_kv_head = kv.dims().0;
        self.rope_qk(cx, q, n_head, k, n_kv_head, head_dim, pos, cfg);
        self.kv_store(cx, kv, k, v, span);
    }
    /// [`Backend::rope_qk_store`] of one sequence's step, then [`Backend::attention`] of its
    /// queries over its cache into `out`: a backend may do a decode step's all in one pass
    /// (`q` and `k` may be left unrotated then; the cache is stored either way).
    #[allow(clippy::too_many_arguments)]
    fn rope_store_attend(
        &self,
        cx: &mut Self::Ctx,
        q: &mut Self::Tensor,
        k: &mut Self::Tensor,
        v: &Self::Tensor,
        kv: &mut Self::Kv,
        span: SeqSpan,
        pos: &[usize],
        cfg: &RopeConfig,
        p: &AttentionParams,
        out: &mut Self::Tensor,
    ) {
        self.rope_qk_store(cx, q, p.n_head, k, v, kv, span, p.head_dim, pos, cfg);
        self.attention(cx, q, &[&*kv], &[span], p, out);
    }
    /// RMS norm of each `w.len()`-wide segment of every row, times `w` (a whole row, or each
    /// head of a row for per-head Q/K norms).
    fn rms_norm(
        &self,
        cx: &mut Self::Ctx,
        x: &Self::Tensor,
        w: &[f32],
        eps: f32,
        out: &mut Self::Tensor,
    );
    /// [`Backend::rms_norm`] in place.
    fn rms_norm_inplace(&self, cx: &mut Self::Ctx, x: &mut Self::Tensor, w: &[f32], eps: f32);
    /// [`Backend::rms_norm_inplace`] of `q` with `wq` and of `k` with `wk` (a layer's per-head
    /// query and key norms, `wq` and `wk` as long): a backend may do both in one pass.
    fn rms_norm_pair(
        &self,
        cx: &mut Self::Ctx,
        q: &mut Self::Tensor,
        wq: &[f32],
        k: &mut Self::Tensor,
        wk: &[f32],
        eps: f32,
    ) {
        self.rms_norm_inplace(cx, q, wq, eps);
        self.rms_norm_inplace(cx, k, wk, eps);
    }
    /// LayerNorm of each row (mean and variance over the row, summed in f64 as ggml does),
    /// times `w`, plus `b`, into `out` (BERT).
    fn layer_norm(
        &self,
        cx: &mut Self::Ctx,
        x: &Self::Tensor,
        w: &[f32],
        b: &[f32],
        eps: f32,
        out: &mut Self::Tensor,
    );
    /// `x = act(x)` element-wise (a feed-forward without a gate).
    fn activate(&self, cx: &mut Self::Ctx, x: &mut Self::Tensor, act: Act);
    /// `x += y`.
    fn add(&self, cx: &mut Self::Ctx, x: &mut Self::Tensor, y: &Self::Tensor);
    /// `out[rows[i]] += s · B(A · x[i])` for each row of `x` (`rows` `None`: row `i` of
    /// `out`): a LoRA delta added to its sequences' rows of a projection, after the product
    /// and before any bias. The sum over the rank runs in rank order for every row, so a row's
    /// delta does not depend on the rows beside it.
    fn lora(
        &self,
        cx: &mut Self::Ctx,
        out: &mut Self::Tensor,
        x: &Self::Tensor,
        rows: Option<&[usize]>,
        w: &LowRank,
        s: f32,
    ) -> Result<()>;
    /// `out[rows[i]] += s · B · A[tokens[i]]` for each token (`rows` `None`: row `i`): a token
    /// embeddings' LoRA delta ([`LowRank::embedding`]: A holds a row per token), added to the
    /// looked-up rows of the sequences that attached it.
    fn lora_embed(
        &self,
        cx: &mut Self::Ctx,
        out: &mut Self::Tensor,
        tokens: &[u32],
        rows: Option<&[usize]>,
        w: &LowRank,
        s: f32,
    ) -> Result<()>;
    /// [`Backend::matmul`] and then, for each `(i, pair, s)` of `deltas` in order,
    /// [`Backend::lora`] of `pair` on every row of output `i`: the projections of a step whose
    /// rows all apply the same adapters. A backend may run them together (the CPU adds the
    /// deltas inside the product's parallel region when decoding); the result is the same.
    fn matmul_lora(
        &self,
        cx: &mut Self::Ctx,
        ops: &mut [(&Weight, &mut Self::Tensor)],
        x: &Self::Tensor,
        deltas: &[(usize, &LowRank, f32)],
    ) -> Result<()> {
        self.matmul(cx, ops, x)?;
        for &(i, pair, s) in deltas {
            self.lora(cx, ops[i].1, x, None, pair, s)?;
        }
        Ok(())
    }
    /// `x *= s`.
    fn scale(&self, cx: &mut Self::Ctx, x: &mut Self::Tensor, s: f32);
    /// Adds `bias` to every row.
    fn add_bias(&self, cx: &mut Self::Ctx, x: &mut Self::Tensor, bias: &[f32]);
    /// `gate = act(gate) * up`.
    fn glu(&self, cx: &mut Self::Ctx, gate: &mut Self::Tensor, up: &Self::Tensor, act: Act);
    /// `x = cap * tanh(x / cap)`.
    fn softcap(&self, cx: &mut Self::Ctx, x: &mut Self::Tensor, cap: f32);
    /// Columns `col0..col0 + n` of every row of `src` into `dst` (a fused projection's parts).
    fn copy_cols(
        &self,
        cx: &mut Self::Ctx,
        src: &Self::Tensor,
        col0: usize,
        n: usize,
        dst: &mut Self::Tensor,
    );
    /// Rows `rows` of `src`, in that order, into `dst`.
    fn gather_rows(
        &self,
        cx: &mut Self::Ctx,
        src: &Self::Tensor,
        rows: &[usize],
        dst: &mut Self::Tensor,
    );
    /// Rotates each row's `n_head` heads of `head_dim` by RoPE at the row's position
    /// (`pos[row]`).
    fn rope(
        &self,
        cx: &mut Self::Ctx,
        x: &mut Self::Tensor,
        n_head: usize,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    );
    /// Stores one sequence's keys and values (its rows of `k`, `v`) in its cache at its
    /// positions.
    fn kv_store(
        &self,
        cx: &mut Self::Ctx,
        kv: &mut Self::Kv,
        k: &Self::Tensor,
        v: &Self::Tensor,
        span: SeqSpan,
    );
    /// [`Backend::kv_store`] of every sequence of a step (`kv[i]` is `spans[i]`'s cache) in
    /// one pass, where the backend can: a GPU's caches are device buffers, written through
    /// shared handles. Returns whether it stored them; if not (the default), nothing is
    /// stored and the caller stores each with [`Backend::kv_store`].
    fn kv_store_seqs(
        &self,
        cx: &mut Self::Ctx,
        kv: &[&Self::Kv],
        k: &Self::Tensor,
        v: &Self::Tensor,
        spans: &[SeqSpan],
    ) -> bool {
        let _ = (cx, kv, k, v, spans);
        false
    }
    /// Appends positions `0..n` of `kv` to `out` in the layout of [`KvCache::saved_len`]:
    /// bit-exact, and readable by any backend.
    fn kv_save(&self, kv: &Self::Kv, n: usize, out: &mut Vec<u8>);
    /// Restores positions `0..n` from what [`Backend::kv_save`] wrote for a cache of the same
    /// types and dims (any context that holds `n`); a wrong length is an error.
    fn kv_load(&self, kv: &mut Self::Kv, n: usize, src: &[u8]) -> Result<()>;
    /// The context shift: drops positions `keep..keep + n_discard`, moves `keep + n_discard..
    /// n_past` down by `n_discard`, and rotates the moved keys back by `n_discard` positions with
    /// `rope` (none: the layer has no RoPE), stored again in the cache's type.
    fn kv_shift(
        &self,
        kv: &mut Self::Kv,
        keep: usize,
        n_discard: usize,
        n_past: usize,
        rope: Option<&RopeConfig>,
    );
    /// Causal attention of each sequence's queries (its rows of `q`) over its own cache
    /// (`kv[i]` belongs to `spans[i]`; sequences never see each other's keys), into `out`.
    fn attention(
        &self,
        cx: &mut Self::Ctx,
        q: &Self::Tensor,
        kv: &[&Self::Kv],
        spans: &[SeqSpan],
        p: &AttentionParams,
        out: &mut Self::Tensor,
    );
    /// A conformer's self-attention with relative positions over all rows of `q`, `k`, `v`
    /// (`[n, n_head · hd]`, one sequence, no mask) and `p` (`[2n - 1, n_head · hd]`: the
    /// projected sinusoids of distances `n - 1` down to `1 - n`), with the content and
    /// position biases `bias_u`, `bias_v` (`[n_head · hd]`), into `out` `[n, n_head · hd]`
    /// ([`relpos`] says how). By default on the host: the tensors read back, the result
    /// uploaded.
    #[allow(clippy::too_many_arguments)]
    fn rel_pos_attention(
        &self,
        cx: &mut Self::Ctx,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        p: &Self::Tensor,
        bias_u: &[f32],
        bias_v: &[f32],
        n_head: usize,
        out: &mut Self::Tensor,
    ) -> Result<()> {
        relpos::check_shapes(
            [self.shape(q), self.shape(k), self.shape(v), self.shape(p)],
            bias_u.len(),
            bias_v.len(),
            n_head,
        )?;
        let (n, d) = self.shape(q);
        let (mut hq, mut hk, mut hv, mut hp) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        self.download(cx, q, &mut hq);
        self.download(cx, k, &mut hk);
        self.download(cx, v, &mut hv);
        self.download(cx, p, &mut hp);
        let mut o = vec![0f32; n * d];
        relpos::rel_pos_attention(&hq, &hk, &hv, &hp, bias_u, bias_v, n_head, &mut o);
        self.upload(cx, &o, n, d, out);
        Ok(())
    }
    /// LFM2's gated short convolution for one sequence: `bcx` rows are `[B | C | x]`
    /// (3 × `d`); its rows of `out` (already shaped: see [`Backend::reshape`]) become
    /// `C ⊙ conv(B ⊙ x)` per channel with `kernel` (`d` rows of `l` taps, oldest first),
    /// continuing the rolling inputs `state` (`l - 1` rows of `d`), which keeps its last
    /// `l - 1` inputs.
    fn short_conv(
        &self,
        cx: &mut Self::Ctx,
        bcx: &Self::Tensor,
        kernel: &[f32],
        state: &mut Self::Tensor,
        span: SeqSpan,
        out: &mut Self::Tensor,
    );
    /// A routed mixture-of-experts SwiGLU FFN over every row of `h` (tokens of all sequences
    /// grouped by expert, so each chosen expert's weights are read once per step).
    /// `lora` names the rows that apply adapters and their deltas on the router and experts.
    fn moe(
        &self,
        cx: &mut Self::Ctx,
        w: &MoeWeights,
        h: &Self::Tensor,
        lora: &dyn MoeLora,
        out: &mut Self::Tensor,
    ) -> Result<()>;
}
