//! A reference [`Backend`]: every op in the plainest scalar code, accumulated in f64, written
//! independently of the CPU kernels (no `cpu.rs`, `elementwise.rs`, attention tiles or kernel
//! table). It is the yardstick of the op-level test harness (`tests/backend_ops.rs`, in the
//! spirit of llama.cpp's `test-backend-ops`), which runs every op on a backend under test and
//! here with the same inputs and compares within per-op error bounds.
//!
//! - Weights are dequantized with [`crate::quant`]'s scalar dequantizers (ggml's formulas) and
//!   every product is taken in f64: no activation quantization.
//! - RoPE angles are computed in f64 directly from the [`RopeConfig`] fields (ggml's normal and
//!   NeoX layouts, linear `freq_scale`, per-pair `freq_factors`, YaRN's ramp and `mscale`).
//! - Attention is a naive softmax in f64 over the whole causal (optionally windowed) range, or
//!   the whole sequence for an encoder.
//! - **KV cache rounding:** the cache holds f32, but [`Backend::kv_store`] rounds every key and
//!   value to what the requested [`KvType`] can hold (F16: nearest even; block types: the
//!   quantizer per head row, after the Hadamard rotation when the spec rotates; TurboQuant:
//!   its rotation and codebook) and back, in the original space. Storage is part of the cache
//!   type's meaning, so every backend must round the same way; what is left for the harness'
//!   bounds is how a backend computes with the rounded values (the CPU rounds the queries to the
//!   key type, as llama.cpp does).
//!
//! Everything here is slow on purpose; it is for tests.

use std::collections::HashMap;

use super::kvtype as kv_codec;
use super::moe::{Gating, MoeLora, MoeWeights};
use super::{
    Act, AttentionParams, Backend, KvCache, KvSpec, KvType, LowRank, RopeConfig, RopeKind,
    Rotation, SeqSpan, Weight,
};
use crate::error::{Error, Result};
use crate::quant::{self, GgmlType};

/// The reference backend (stateless).
#[derive(Clone, Copy, Debug, Default)]
pub struct Reference;

/// A `rows` × `cols` host tensor, row-major.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RefTensor {
    pub data: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
}

impl RefTensor {
    fn new(rows: usize, cols: usize) -> RefTensor {
        RefTensor {
            data: vec![0.0; rows * cols],
            rows,
            cols,
        }
    }

    fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    fn row_mut(&mut self, r: usize) -> &mut [f32] {
        &mut self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// One layer's keys and values, position-major, as the cache type would hold them (see the
/// module docs), and which positions were ever stored.
#[derive(Clone, Debug)]
pub struct RefKv {
    spec: KvSpec,
    k_rot: Rotation,
    v_rot: Rotation,
    n_ctx: usize,
    n_kv_head: usize,
    head_dim: usize,
    head_dim_v: usize,
    /// `k[(pos * n_kv_head + g) * head_dim ..][..head_dim]`, as the cache holds them (decoded,
    /// unrotated)
    k: Vec<f32>,
    v: Vec<f32>,
    /// the same rows in the cache type's bytes (what a snapshot saves), so a save and load is
    /// exact for every type
    kb: Vec<u8>,
    vb: Vec<u8>,
    stored: Vec<bool>,
}

/// One side of a [`RefKv`]: its type, rotation and row width.
struct RefSide {
    ty: KvType,
    rot: Rotation,
    w: usize,
}

impl RefKv {
    fn side(&self, keys: bool) -> RefSide {
        if keys {
            RefSide {
                ty: self.spec.k,
                rot: self.k_rot,
                w: self.head_dim,
            }
        } else {
            RefSide {
                ty: self.spec.v,
                rot: self.v_rot,
                w: self.head_dim_v,
            }
        }
    }

    /// Row `r` (position-major: `pos * n_kv_head + head`) from its bytes.
    fn put_bytes(&mut self, keys: bool, r: usize, bytes: &[u8]) {
        let s = self.side(keys);
        let rb = s.ty.row_bytes(s.w);
        let vals = decode_row(s.ty, &s.rot, bytes, s.w);
        let (buf, vals_buf) = if keys {
            (&mut self.kb, &mut self.k)
        } else {
            (&mut self.vb, &mut self.v)
        };
        buf[r * rb..(r + 1) * rb].copy_from_slice(bytes);
        vals_buf[r * s.w..(r + 1) * s.w].copy_from_slice(&vals);
    }

    /// Row `r` stored from f32 values: encoded in the type (rotated first where the side
    /// rotates), then held as decoded.
    fn put_values(&mut self, keys: bool, r: usize, x: &[f32]) {
        let s = self.side(keys);
        let mut bytes = Vec::new();
        encode_row(s.ty, &s.rot, x, &mut bytes);
        self.put_bytes(keys, r, &bytes);
    }
}

impl KvCache for RefKv {
    fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    fn bytes(&self) -> usize {
        (self.k.len() + self.v.len()) * 4
    }
    fn spec(&self) -> KvSpec {
        self.spec
    }
    fn dims(&self) -> (usize, usize, usize) {
        (self.n_kv_head, self.head_dim, self.head_dim_v)
    }
}

/// One row `x` of a side of type `ty` rotated by `rot`, in the cache type's bytes (the layout of
/// [`KvCache::saved_len`]).
fn encode_row(ty: KvType, rot: &Rotation, x: &[f32], out: &mut Vec<u8>) {
    match ty {
        KvType::F32 => out.extend(x.iter().flat_map(|v| v.to_le_bytes())),
        KvType::F16 => out.extend(quant::quantize_to_vec(GgmlType::F16, x).expect("f16")),
        t => {
            let at = out.len();
            out.resize(at + t.row_bytes(x.len()), 0);
            kv_codec::encode_row(t, rot, x, &mut out[at..]);
        }
    }
}

/// One row of `d` from its bytes, unrotated.
fn decode_row(ty: KvType, rot: &Rotation, b: &[u8], d: usize) -> Vec<f32> {
    match ty {
        KvType::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        KvType::F16 => quant::dequantize_to_vec(GgmlType::F16, b, d).expect("f16"),
        t => {
            let mut y = vec![0f32; d];
            kv_codec::decode_rows(t, rot.n, d, b, &mut y);
            rot.inverse(&mut y);
            y
        }
    }
}

/// Rotates one head by the pairs' `(cos, sin)`, in f64.
fn rotate(cfg: &RopeConfig, head: &mut [f32], cs: &[(f64, f64)]) {
    let half = cfg.n_rot / 2;
    for (i, &(c, s)) in cs.iter().enumerate() {
        let (a, b) = match cfg.kind {
            RopeKind::Normal => (2 * i, 2 * i + 1),
            RopeKind::Neox => (i, i + half),
        };
        let (x0, x1) = (head[a] as f64, head[b] as f64);
        head[a] = (x0 * c - x1 * s) as f32;
        head[b] = (x0 * s + x1 * c) as f32;
    }
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh approximation.
fn gelu(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

/// The whole weight as f32 (`rows` × `cols`).
fn dequant(w: &Weight) -> Result<Vec<f32>> {
    quant::dequantize_to_vec(w.ty, w.data(), w.rows * w.cols)
}

/// `w · x` for a dequantized `rows` × `x.len()` matrix, in f64.
fn matvec(w: &[f32], x: &[f32]) -> Vec<f64> {
    w.chunks_exact(x.len().max(1)).map(|r| dot(r, x)).collect()
}

/// `(cos θ_i, sin θ_i)`, times YaRN's magnitude scale, for each rotated pair `i` at `pos`.
///
/// `θ_i = pos · base^(-2i/n_rot) / ff_i` (extrapolated); the interpolated angle is
/// `freq_scale · θ_i`. Without YaRN (or with `ext_factor` 0) the angle is the interpolated one;
/// with it, pairs below the correction range keep the extrapolated angle, pairs above take the
/// interpolated one, linearly in between (mixed by `ext_factor`), and the magnitude is
/// `attn_factor · (1 + 0.1 ln(1 / freq_scale))`. The correction range is where a pair turns
/// `beta_fast` and `beta_slow` times over the original context:
/// `dim(β) = n_rot · ln(n_ctx_orig / (2π β)) / (2 ln base)`, floored / ceiled and clamped to
/// `[0, n_rot - 1]`.
pub fn rope_angles(cfg: &RopeConfig, pos: i64) -> Vec<(f64, f64)> {
    let n = cfg.n_rot as f64;
    let base = cfg.freq_base as f64;
    let fs = cfg.freq_scale as f64;
    let (ext, mscale, lo, hi) = match &cfg.yarn {
        None => (0.0, 1.0, 0.0, 0.0),
        Some(y) => {
            let ext = y.ext_factor as f64;
            let mut m = y.attn_factor as f64;
            let dim = |beta: f32| {
                n * (y.n_ctx_orig as f64 / (2.0 * std::f64::consts::PI * beta as f64)).ln()
                    / (2.0 * base.ln())
            };
            let (lo, hi) = (
                dim(y.beta_fast).floor().max(0.0),
                dim(y.beta_slow).ceil().min(n - 1.0),
            );
            if ext != 0.0 {
                m *= 1.0 + 0.1 * (1.0 / fs).ln();
            }
            (ext, m, lo, hi)
        }
    };
    (0..cfg.n_rot / 2)
        .map(|i| {
            let ff = cfg.freq_factors.as_ref().map_or(1.0, |f| f[i] as f64);
            let extrap = pos as f64 * base.powf(-2.0 * i as f64 / n) / ff;
            let interp = fs * extrap;
            let theta = if ext != 0.0 {
                let y = (i as f64 - lo) / (hi - lo).max(0.001);
                let mix = (1.0 - y.clamp(0.0, 1.0)) * ext;
                interp * (1.0 - mix) + extrap * mix
            } else {
                interp
            };
            (theta.cos() * mscale, theta.sin() * mscale)
        })
        .collect()
}

/// Each token's chosen `(expert, weight)`, best first (ties: the lower index first).
/// `B(A·x)` of a LoRA pair, unscaled.
fn lora_delta(w: &LowRank, x: &[f32]) -> Result<Vec<f64>> {
    let a = w.a.to_f32()?;
    let (k, r) = (w.a.cols, w.rank);
    let t: Vec<f64> = (0..r)
        .map(|j| {
            a[j * k..(j + 1) * k]
                .iter()
                .zip(x)
                .map(|(&p, &q)| p as f64 * q as f64)
                .sum()
        })
        .collect();
    Ok((0..w.out)
        .map(|c| (0..r).map(|j| t[j] * w.bt.b(r, j, c) as f64).sum())
        .collect())
}

/// `y += Σ s · B(A·x)` over the deltas group `g` has on `w`.
fn add_lora(
    lora: &dyn MoeLora,
    g: Option<usize>,
    w: &Weight,
    x: &[f32],
    y: &mut [f64],
) -> Result<()> {
    let Some(g) = g else { return Ok(()) };
    lora.each(g, w, &mut |pair, s| {
        for (v, d) in y.iter_mut().zip(lora_delta(pair, x)?) {
            *v += s as f64 * d;
        }
        Ok(())
    })
}

fn route(w: &MoeWeights, logits: Vec<f64>) -> Vec<(usize, f64)> {
    let probs: Vec<f64> = match w.gating {
        Gating::Sigmoid => logits.iter().map(|&l| 1.0 / (1.0 + (-l).exp())).collect(),
        Gating::Softmax => {
            let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = logits.iter().map(|&l| (l - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|v| v / s).collect()
        }
    };
    let sel: Vec<f64> = match &w.probs_bias {
        Some(b) => probs.iter().zip(b).map(|(&p, &b)| p + b as f64).collect(),
        None => probs.clone(),
    };
    let mut idx: Vec<usize> = (0..probs.len()).collect();
    idx.sort_by(|&a, &b| sel[b].total_cmp(&sel[a]).then(a.cmp(&b)));
    let mut chosen: Vec<(usize, f64)> = idx[..w.n_used].iter().map(|&e| (e, probs[e])).collect();
    if w.norm_weights {
        let s: f64 = chosen.iter().map(|c| c.1).sum();
        // ggml clamps the sum away from zero (the smallest normal f16)
        let s = s.max(6.103_515_625e-5);
        chosen.iter_mut().for_each(|c| c.1 /= s);
    }
    chosen
        .iter_mut()
        .for_each(|c| c.1 *= w.weights_scale as f64);
    chosen
}

impl Backend for Reference {
    type Tensor = RefTensor;
    type Kv = RefKv;
    type Ctx = ();

    fn name(&self) -> &'static str {
        "reference"
    }

    fn new_kv(
        &self,
        spec: KvSpec,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> RefKv {
        assert_eq!(spec.for_dims(head_dim, head_dim_v), spec);
        RefKv {
            spec,
            k_rot: Rotation::for_side(spec.k, head_dim, spec.rotate, true),
            v_rot: Rotation::for_side(spec.v, head_dim_v, spec.rotate, false),
            n_ctx,
            n_kv_head,
            head_dim,
            head_dim_v,
            k: vec![0.0; n_ctx * n_kv_head * head_dim],
            v: vec![0.0; n_ctx * n_kv_head * head_dim_v],
            kb: vec![0; n_ctx * n_kv_head * spec.k.row_bytes(head_dim)],
            vb: vec![0; n_ctx * n_kv_head * spec.v.row_bytes(head_dim_v)],
            stored: vec![false; n_ctx],
        }
    }

    fn zeros(&self, rows: usize, cols: usize) -> RefTensor {
        RefTensor::new(rows, cols)
    }

    fn fill_zero(&self, _cx: &mut (), t: &mut RefTensor) {
        t.data.fill(0.0);
    }

    fn upload(&self, _cx: &mut (), data: &[f32], rows: usize, cols: usize, t: &mut RefTensor) {
        assert_eq!(data.len(), rows * cols, "upload: {rows} x {cols}");
        *t = RefTensor {
            data: data.to_vec(),
            rows,
            cols,
        };
    }

    fn download(&self, _cx: &mut (), t: &RefTensor, out: &mut Vec<f32>) {
        out.clear();
        out.extend_from_slice(&t.data);
    }

    fn shape(&self, t: &RefTensor) -> (usize, usize) {
        (t.rows, t.cols)
    }

    /// Contents are unspecified after a reshape: a new shape starts as NaN, so a result that
    /// depends on them shows.
    fn reshape(&self, t: &mut RefTensor, rows: usize, cols: usize) {
        if (t.rows, t.cols) != (rows, cols) {
            *t = RefTensor {
                data: vec![f32::NAN; rows * cols],
                rows,
                cols,
            };
        }
    }

    fn embed(
        &self,
        _cx: &mut (),
        table: &Weight,
        _tied: &Weight,
        tokens: &[u32],
        out: &mut RefTensor,
    ) -> Result<()> {
        let (d, rb) = (table.cols, table.row_bytes());
        let mut o = RefTensor::new(tokens.len(), d);
        for (t, &id) in tokens.iter().enumerate() {
            let r = id as usize;
            if r >= table.rows {
                return Err(Error::TokenOutOfRange {
                    id,
                    n_vocab: table.rows,
                });
            }
            quant::dequantize(table.ty, &table.data()[r * rb..(r + 1) * rb], o.row_mut(t))?;
        }
        *out = o;
        Ok(())
    }

    fn matmul(
        &self,
        _cx: &mut (),
        ops: &mut [(&Weight, &mut RefTensor)],
        x: &RefTensor,
    ) -> Result<()> {
        for (w, out) in ops.iter_mut() {
            if x.cols != w.cols {
                return Err(Error::QuantShape {
                    ty: w.ty.name(),
                    reason: format!("{}: input rows of {}, expected {}", w.name, x.cols, w.cols),
                });
            }
            let wf = dequant(w)?;
            let mut o = RefTensor::new(x.rows, w.rows);
            for t in 0..x.rows {
                for (ov, v) in o.row_mut(t).iter_mut().zip(matvec(&wf, x.row(t))) {
                    *ov = v as f32;
                }
            }
            **out = o;
        }
        Ok(())
    }

    fn rms_norm(&self, cx: &mut (), x: &RefTensor, w: &[f32], eps: f32, out: &mut RefTensor) {
        *out = x.clone();
        self.rms_norm_inplace(cx, out, w, eps);
    }

    fn rms_norm_inplace(&self, _cx: &mut (), x: &mut RefTensor, w: &[f32], eps: f32) {
        let n = w.len();
        assert!(
            n > 0 && x.cols.is_multiple_of(n),
            "rms_norm: segments of {n}"
        );
        for seg in x.data.chunks_exact_mut(n) {
            let ms = seg.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
            let s = 1.0 / (ms + eps as f64).sqrt();
            for (v, &g) in seg.iter_mut().zip(w) {
                *v = (*v as f64 * s * g as f64) as f32;
            }
        }
    }

    fn layer_norm(
        &self,
        _cx: &mut (),
        x: &RefTensor,
        w: &[f32],
        b: &[f32],
        eps: f32,
        out: &mut RefTensor,
    ) {
        assert!(w.len() == x.cols && b.len() == x.cols, "layer_norm: width");
        let mut o = x.clone();
        for row in o.data.chunks_exact_mut(x.cols) {
            let n = row.len() as f64;
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
            let s = 1.0 / (var + eps as f64).sqrt();
            for ((v, &g), &c) in row.iter_mut().zip(w).zip(b) {
                *v = ((*v as f64 - mean) * s * g as f64 + c as f64) as f32;
            }
        }
        *out = o;
    }

    fn activate(&self, _cx: &mut (), x: &mut RefTensor, act: Act) {
        let f = match act {
            Act::Silu => silu,
            Act::Gelu => gelu,
        };
        for v in &mut x.data {
            *v = f(*v as f64) as f32;
        }
    }

    fn add(&self, _cx: &mut (), x: &mut RefTensor, y: &RefTensor) {
        assert_eq!((x.rows, x.cols), (y.rows, y.cols), "add: shapes differ");
        for (a, &b) in x.data.iter_mut().zip(&y.data) {
            *a = (*a as f64 + b as f64) as f32;
        }
    }

    fn lora(
        &self,
        _cx: &mut (),
        out: &mut RefTensor,
        x: &RefTensor,
        rows: Option<&[usize]>,
        w: &LowRank,
        s: f32,
    ) -> Result<()> {
        assert_eq!(out.cols, w.out, "lora: output width");
        let a = w.a.to_f32()?;
        let (k, r, o) = (w.a.cols, w.rank, w.out);
        assert_eq!(x.cols, k, "lora: input width");
        for i in 0..x.rows {
            let xi = x.row(i).to_vec();
            let t: Vec<f64> = (0..r)
                .map(|j| {
                    a[j * k..(j + 1) * k]
                        .iter()
                        .zip(&xi)
                        .map(|(&p, &q)| p as f64 * q as f64)
                        .sum()
                })
                .collect();
            let row = rows.map_or(i, |rs| rs[i]);
            assert!(row < out.rows, "lora: row {row} of {}", out.rows);
            for (c, v) in out.row_mut(row).iter_mut().enumerate().take(o) {
                let d: f64 = (0..r).map(|j| t[j] * w.bt.b(r, j, c) as f64).sum();
                *v = (*v as f64 + s as f64 * d) as f32;
            }
        }
        Ok(())
    }

    fn lora_embed(
        &self,
        _cx: &mut (),
        out: &mut RefTensor,
        tokens: &[u32],
        rows: Option<&[usize]>,
        w: &LowRank,
        s: f32,
    ) -> Result<()> {
        assert_eq!(out.cols, w.out, "lora_embed: output width");
        let (r, mut t) = (w.rank, vec![0f32; w.rank]);
        for (i, &tok) in tokens.iter().enumerate() {
            w.a.row_f32(tok as usize, &mut t)?;
            let row = rows.map_or(i, |rs| rs[i]);
            for (c, v) in out.row_mut(row).iter_mut().enumerate() {
                let d: f64 = (0..r).map(|j| t[j] as f64 * w.bt.b(r, j, c) as f64).sum();
                *v = (*v as f64 + s as f64 * d) as f32;
            }
        }
        Ok(())
    }

    fn scale(&self, _cx: &mut (), x: &mut RefTensor, s: f32) {
        for a in &mut x.data {
            *a = (*a as f64 * s as f64) as f32;
        }
    }

    fn add_bias(&self, _cx: &mut (), x: &mut RefTensor, bias: &[f32]) {
        assert_eq!(x.cols, bias.len(), "add_bias: width");
        for r in 0..x.rows {
            for (a, &b) in x.row_mut(r).iter_mut().zip(bias) {
                *a = (*a as f64 + b as f64) as f32;
            }
        }
    }

    fn glu(&self, _cx: &mut (), gate: &mut RefTensor, up: &RefTensor, act: Act) {
        assert_eq!((gate.rows, gate.cols), (up.rows, up.cols), "glu: shapes");
        let f = match act {
            Act::Silu => silu,
            Act::Gelu => gelu,
        };
        for (g, &u) in gate.data.iter_mut().zip(&up.data) {
            *g = (f(*g as f64) * u as f64) as f32;
        }
    }

    fn softcap(&self, _cx: &mut (), x: &mut RefTensor, cap: f32) {
        let c = cap as f64;
        for v in &mut x.data {
            *v = (c * (*v as f64 / c).tanh()) as f32;
        }
    }

    fn copy_cols(&self, _cx: &mut (), src: &RefTensor, col0: usize, n: usize, dst: &mut RefTensor) {
        assert!(col0 + n <= src.cols, "copy_cols past the row");
        let mut o = RefTensor::new(src.rows, n);
        for r in 0..src.rows {
            o.row_mut(r).copy_from_slice(&src.row(r)[col0..col0 + n]);
        }
        *dst = o;
    }

    fn gather_rows(&self, _cx: &mut (), src: &RefTensor, rows: &[usize], dst: &mut RefTensor) {
        let mut o = RefTensor::new(rows.len(), src.cols);
        for (i, &r) in rows.iter().enumerate() {
            assert!(r < src.rows, "gather_rows: row {r} of {}", src.rows);
            o.row_mut(i).copy_from_slice(src.row(r));
        }
        *dst = o;
    }

    fn rope(
        &self,
        _cx: &mut (),
        x: &mut RefTensor,
        n_head: usize,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    ) {
        assert_eq!(pos.len(), x.rows, "rope: one position per row");
        assert!(
            n_head * head_dim <= x.cols && cfg.n_rot <= head_dim && cfg.n_rot.is_multiple_of(2)
        );
        for (r, &p) in pos.iter().enumerate() {
            let cs = rope_angles(cfg, p as i64);
            for h in 0..n_head {
                rotate(
                    cfg,
                    &mut x.row_mut(r)[h * head_dim..(h + 1) * head_dim],
                    &cs,
                );
            }
        }
    }

    fn kv_save(&self, kv: &RefKv, n: usize, out: &mut Vec<u8>) {
        let (h, d, dv) = (kv.n_kv_head, kv.head_dim, kv.head_dim_v);
        for (bytes, rb) in [
            (&kv.kb, kv.spec.k.row_bytes(d)),
            (&kv.vb, kv.spec.v.row_bytes(dv)),
        ] {
            for g in 0..h {
                for p in 0..n {
                    out.extend_from_slice(&bytes[(p * h + g) * rb..][..rb]);
                }
            }
        }
    }

    fn kv_load(&self, kv: &mut RefKv, n: usize, src: &[u8]) -> Result<()> {
        let want = kv.saved_len(n);
        if n > kv.n_ctx || src.len() != want {
            return Err(crate::Error::Model(format!(
                "restoring a KV cache layer: {} bytes for {n} positions, expected {want} \
                 (cache of {})",
                src.len(),
                kv.n_ctx
            )));
        }
        let h = kv.n_kv_head;
        let mut at = 0;
        for is_k in [true, false] {
            let side = kv.side(is_k);
            let rb = side.ty.row_bytes(side.w);
            for g in 0..h {
                for p in 0..n {
                    kv.put_bytes(is_k, p * h + g, &src[at..at + rb]);
                    at += rb;
                }
            }
        }
        for s in &mut kv.stored[..n] {
            *s = true;
        }
        Ok(())
    }

    fn kv_shift(
        &self,
        kv: &mut RefKv,
        keep: usize,
        n_discard: usize,
        n_past: usize,
        rope: Option<&RopeConfig>,
    ) {
        assert!(keep + n_discard <= n_past && n_past <= kv.n_ctx);
        let (h, d, dv) = (kv.n_kv_head, kv.head_dim, kv.head_dim_v);
        let cs = rope.map(|r| rope_angles(r, -(n_discard as i64)));
        let (rk, rv) = (kv.spec.k.row_bytes(d), kv.spec.v.row_bytes(dv));
        for p in keep..n_past - n_discard {
            let from = p + n_discard;
            kv.k.copy_within(from * h * d..(from + 1) * h * d, p * h * d);
            kv.v.copy_within(from * h * dv..(from + 1) * h * dv, p * h * dv);
            kv.kb
                .copy_within(from * h * rk..(from + 1) * h * rk, p * h * rk);
            kv.vb
                .copy_within(from * h * rv..(from + 1) * h * rv, p * h * rv);
            if let (Some(r), Some(cs)) = (rope, &cs) {
                for g in 0..h {
                    let mut head = kv.k[(p * h + g) * d..][..d].to_vec();
                    rotate(r, &mut head, cs);
                    kv.put_values(true, p * h + g, &head);
                }
            }
        }
        for s in &mut kv.stored[n_past - n_discard..n_past] {
            *s = false;
        }
    }

    fn kv_store(&self, _cx: &mut (), kv: &mut RefKv, k: &RefTensor, v: &RefTensor, s: SeqSpan) {
        let (h, d, dv) = (kv.n_kv_head, kv.head_dim, kv.head_dim_v);
        assert_eq!(k.cols, h * d, "kv_store: key width");
        assert_eq!(v.cols, h * dv, "kv_store: value width");
        assert!(s.row0 + s.n <= k.rows && s.row0 + s.n <= v.rows);
        assert!(s.pos0 + s.n <= kv.n_ctx, "kv_store past the cache");
        for t in 0..s.n {
            let p = s.pos0 + t;
            for g in 0..h {
                kv.put_values(true, p * h + g, &k.row(s.row0 + t)[g * d..(g + 1) * d]);
                kv.put_values(false, p * h + g, &v.row(s.row0 + t)[g * dv..(g + 1) * dv]);
            }
            kv.stored[p] = true;
        }
    }

    fn attention(
        &self,
        _cx: &mut (),
        q: &RefTensor,
        kv: &[&RefKv],
        spans: &[SeqSpan],
        p: &AttentionParams,
        out: &mut RefTensor,
    ) {
        assert_eq!(kv.len(), spans.len(), "attention: one cache per sequence");
        assert!(p.n_kv_head > 0 && p.n_head.is_multiple_of(p.n_kv_head));
        assert_eq!(q.cols, p.n_head * p.head_dim, "attention: query width");
        let group = p.n_head / p.n_kv_head;
        let (d, dv) = (p.head_dim, p.head_dim_v);
        self.reshape(out, q.rows, p.n_head * dv);
        for (c, s) in kv.iter().zip(spans) {
            assert_eq!(
                (c.n_kv_head, c.head_dim, c.head_dim_v),
                (p.n_kv_head, d, dv),
                "attention: cache shape"
            );
            assert!(s.row0 + s.n <= q.rows && s.pos0 + s.n <= c.n_ctx);
            for t in 0..s.n {
                let qpos = s.pos0 + t;
                let first = p.window.map_or(0, |w| (qpos + 1).saturating_sub(w));
                // an encoder's query sees its whole sequence of the step
                let last = if p.causal { qpos } else { s.pos0 + s.n - 1 };
                let qrow = q.row(s.row0 + t);
                let mut orow = vec![0f32; p.n_head * dv];
                for h in 0..p.n_head {
                    let g = h / group;
                    let qh = &qrow[h * d..(h + 1) * d];
                    let scores: Vec<f64> = (first..=last)
                        .map(|j| {
                            assert!(c.stored[j], "attention reads position {j}, never stored");
                            let kh = &c.k[(j * p.n_kv_head + g) * d..][..d];
                            let x = dot(qh, kh) * p.scale as f64;
                            match p.softcap {
                                Some(cap) => cap as f64 * (x / cap as f64).tanh(),
                                None => x,
                            }
                        })
                        .collect();
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|&x| (x - m).exp()).collect();
                    let den: f64 = e.iter().sum();
                    let mut acc = vec![0f64; dv];
                    for (jj, &w) in e.iter().enumerate() {
                        let vh = &c.v[((first + jj) * p.n_kv_head + g) * dv..][..dv];
                        for (a, &x) in acc.iter_mut().zip(vh) {
                            *a += w * x as f64;
                        }
                    }
                    for (o, a) in orow[h * dv..(h + 1) * dv].iter_mut().zip(acc) {
                        *o = (a / den) as f32;
                    }
                }
                out.row_mut(s.row0 + t).copy_from_slice(&orow);
            }
        }
    }

    fn short_conv(
        &self,
        _cx: &mut (),
        bcx: &RefTensor,
        kernel: &[f32],
        state: &mut RefTensor,
        s: SeqSpan,
        out: &mut RefTensor,
    ) {
        let d = bcx.cols / 3;
        assert_eq!(bcx.cols, 3 * d, "short_conv: rows are [B | C | x]");
        let l = kernel.len() / d.max(1);
        assert!(
            l >= 1 && kernel.len() == l * d,
            "short_conv: kernel of {d} x {l}"
        );
        assert_eq!(
            (out.rows, out.cols),
            (bcx.rows, d),
            "short_conv: output shape"
        );
        assert_eq!(
            (state.rows, state.cols),
            (l - 1, d),
            "short_conv: state shape"
        );
        assert!(s.row0 + s.n <= bcx.rows);
        // the inputs, oldest first: the state's rows, then B ⊙ x of the span's rows
        let mut seq: Vec<f32> = state.data.clone();
        for t in 0..s.n {
            let row = bcx.row(s.row0 + t);
            seq.extend((0..d).map(|c| (row[c] as f64 * row[2 * d + c] as f64) as f32));
        }
        for t in 0..s.n {
            let cgate = &bcx.row(s.row0 + t)[d..2 * d];
            let o = out.row_mut(s.row0 + t);
            for ch in 0..d {
                let conv: f64 = (0..l)
                    .map(|k| kernel[ch * l + k] as f64 * seq[(t + k) * d + ch] as f64)
                    .sum();
                o[ch] = (conv * cgate[ch] as f64) as f32;
            }
        }
        state.data.copy_from_slice(&seq[s.n * d..]);
    }

    fn moe(
        &self,
        _cx: &mut (),
        w: &MoeWeights,
        h: &RefTensor,
        lora: &dyn MoeLora,
        out: &mut RefTensor,
    ) -> Result<()> {
        let d = w.gate_inp.cols;
        assert_eq!(h.cols, d, "moe: input width");
        let router = dequant(&w.gate_inp)?;
        // the dequantized (gate, up, down) of the experts chosen so far
        let mut experts: HashMap<usize, [Vec<f32>; 3]> = HashMap::new();
        let mut o = RefTensor::new(h.rows, d);
        for t in 0..h.rows {
            let x = h.row(t);
            let g = lora.group_of(t);
            let mut y = vec![0f64; d];
            let mut logits = matvec(&router, x);
            add_lora(lora, g, &w.gate_inp, x, &mut logits)?;
            for (e, wt) in route(w, logits) {
                let [gm, um, dn] = match experts.entry(e) {
                    std::collections::hash_map::Entry::Occupied(m) => m.into_mut(),
                    std::collections::hash_map::Entry::Vacant(slot) => slot.insert([
                        dequant(&w.gate[e])?,
                        dequant(&w.up[e])?,
                        dequant(&w.down[e])?,
                    ]),
                };
                let (mut gv, mut uv) = (matvec(gm, x), matvec(um, x));
                add_lora(lora, g, &w.gate[e], x, &mut gv)?;
                add_lora(lora, g, &w.up[e], x, &mut uv)?;
                let act: Vec<f32> = gv
                    .into_iter()
                    .zip(uv)
                    .map(|(g, u)| (silu(g) * u) as f32)
                    .collect();
                let mut dv = matvec(dn, &act);
                add_lora(lora, g, &w.down[e], &act, &mut dv)?;
                for (a, v) in y.iter_mut().zip(dv) {
                    *a += wt * v;
                }
            }
            for (ov, a) in o.row_mut(t).iter_mut().zip(y) {
                *ov = a as f32;
            }
        }
        *out = o;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RopeScaling;

    fn t(data: &[f32], rows: usize, cols: usize) -> RefTensor {
        RefTensor {
            data: data.to_vec(),
            rows,
            cols,
        }
    }

    /// Hand-checked values, so that the yardstick itself is not only checked against the CPU.
    #[test]
    fn known_answers() {
        let r = Reference;
        // rms_norm per segment of 2: [3, 4] has rms sqrt(12.5)
        let mut x = t(&[3.0, 4.0, 1.0, 1.0], 1, 4);
        r.rms_norm_inplace(&mut (), &mut x, &[1.0, 2.0], 0.0);
        let s = 1.0 / 12.5f64.sqrt();
        assert!((x.data[0] as f64 - 3.0 * s).abs() < 1e-6);
        assert!((x.data[1] as f64 - 8.0 * s).abs() < 1e-6);
        assert_eq!(&x.data[2..], &[1.0, 2.0]);

        // rope, normal layout, n_rot 4, base 100 at position 2: pair 1 turns by 2 / 10 rad
        let cfg = RopeConfig::new(RopeKind::Normal, 4, 100.0);
        let mut x = t(&[1.0, 0.0, 1.0, 0.0, 7.0], 1, 5);
        r.rope(&mut (), &mut x, 1, 4, &[2], &cfg);
        assert!((x.data[0] - 2f32.cos()).abs() < 1e-6 && (x.data[1] - 2f32.sin()).abs() < 1e-6);
        assert!((x.data[2] - 0.2f32.cos()).abs() < 1e-6);
        assert!((x.data[3] - 0.2f32.sin()).abs() < 1e-6);
        assert_eq!(x.data[4], 7.0);
        // YaRN with ext_factor 0 only scales the magnitude by attn_factor
        let mut y = cfg.clone();
        y.yarn = Some(RopeScaling {
            ext_factor: 0.0,
            attn_factor: 0.5,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: 4096,
        });
        let (c, s) = rope_angles(&y, 2)[0];
        assert!((c - 0.5 * 2f64.cos()).abs() < 1e-12 && (s - 0.5 * 2f64.sin()).abs() < 1e-12);

        // attention: two equal scores average the values; a window of 1 sees only the last key
        let mut kv = r.new_kv(KvSpec::same(KvType::F32), 2, 1, 2, 1);
        let k = t(&[1.0, 0.0, 1.0, 0.0], 2, 2);
        let v = t(&[2.0, 4.0], 2, 1);
        let span = SeqSpan {
            row0: 0,
            n: 2,
            pos0: 0,
        };
        r.kv_store(&mut (), &mut kv, &k, &v, span);
        let q = t(&[0.0, 1.0, 0.0, 1.0], 2, 2);
        let mut p = AttentionParams {
            n_head: 1,
            n_kv_head: 1,
            head_dim: 2,
            head_dim_v: 1,
            scale: 1.0,
            softcap: None,
            window: None,
            causal: true,
        };
        let mut out = RefTensor::default();
        r.attention(&mut (), &q, &[&kv], &[span], &p, &mut out);
        assert_eq!(out.data, vec![2.0, 3.0]);
        p.window = Some(1);
        r.attention(&mut (), &q, &[&kv], &[span], &p, &mut out);
        assert_eq!(out.data, vec![2.0, 4.0]);

        // short_conv: taps [1, 10] (oldest first) over B ⊙ x, times C; the state keeps the last
        let bcx = t(&[1.0, 5.0, 2.0, 1.0, 1.0, 3.0], 2, 3);
        let mut state = t(&[0.5], 1, 1);
        let mut out = t(&[0.0, 0.0], 2, 1);
        let span = SeqSpan {
            row0: 0,
            n: 2,
            pos0: 0,
        };
        r.short_conv(&mut (), &bcx, &[1.0, 10.0], &mut state, span, &mut out);
        assert_eq!(out.data, vec![5.0 * (0.5 + 20.0), 1.0 * (2.0 + 30.0)]);
        assert_eq!(state.data, vec![3.0]);
    }
}
