//! An op-level test harness for [`Backend`]s, in the spirit of llama.cpp's `test-backend-ops`:
//! [`check_all`] runs every op of the trait on the backend under test and on
//! [`Reference`] (plain f64 scalar code) with the same random inputs and compares the results
//! within a per-op error bound ([`bounds`]). Nothing here knows about any backend but the
//! reference: a new backend calls `check_all("name", &backend)`.
//!
//! Each result is compared with two measures, both of which must hold:
//! - `nmse = Σ(got − want)² / Σ want²` (llama.cpp's normalized mean squared error): catches a
//!   small error spread over the whole tensor;
//! - `max_rel = max|got − want| / max|want|`: catches a large error in a few elements (one
//!   wrong row, one masked key too many) that the mean would dilute.
//!
//! matmul measures each output's error against the size of its terms instead (see
//! [`bounds::matmul`]), since a single dot product may cancel to near zero.
//!
//! What runs ([`GROUPS`]):
//! - memory: upload/download, zeros, fill_zero, reshape, new_kv (odd and empty shapes);
//! - elementwise: rms_norm, rms_norm_inplace and rms_norm_pair per row and per head, add, scale,
//!   add_bias, glu (SiLU, GELU), softcap, copy_cols, gather_rows (repeats, empty), 1 to 257 rows;
//!   top_k (exact: vocabulary-sized rows, ties, -inf and NaN);
//! - rope: normal and NeoX, full and partial rotation, extra columns after the heads, head
//!   sizes 24 to 256, plain / linear scaling / frequency factors / YaRN (and YaRN with
//!   `ext_factor` 0), positions 0 to [`MAX_POS`];
//! - matmul: every weight format Cera multiplies ([`matmul_types`]), 2–4 row widths each
//!   (1, 7, 33, 100 for the float formats), 1, 3, 7, 8, 33, 257 and 520 rows, 0 to 9 and 17
//!   tokens; several weights of different formats sharing one input, twice in a row;
//! - embed: ten formats, untied and tied to the output projection (looked up before and after
//!   it multiplies), no tokens;
//! - attention: kv_store and attention over F32, F16, Q8_0 and Q8_0/F16 caches, head sizes 8
//!   to 256 (value heads of another size too), GQA groups 1, 2 and 7, windows (1 to 100) and
//!   softcaps, three sequences through prefill, mixed and decode steps (one storing nothing,
//!   rows not in sequence order), forty sequences in one step, one 300-token sequence;
//! - kv_state: kv_save / kv_load (length, bit-exact restore into a bigger cache, bytes read
//!   across backends, a short buffer refused) and kv_shift, for F32, F16 and Q8_0 caches;
//! - short_conv: three sequences per step, state carried across steps;
//! - moe: softmax and sigmoid gating, with and without selection bias, normalized or not
//!   (and scaled), 1, 5 and 17 tokens, F32 and quantized experts, all experts used;
//! - errors: an embedding id past the table, a matmul input of the wrong width.
//!
//! Shapes are odd on purpose, and every output is written into a tensor that holds NaN
//! garbage of another shape, so an op that depends on its output's old contents or shape
//! fails. Data is deterministic (a fixed seed). Set `CERA_OPS_REPORT=1` to print the worst
//! observed errors per op.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cera::backend::moe::{Gating, MoeWeights};
use cera::backend::reference::{RefKv, RefTensor, Reference};
use cera::backend::{
    Act, AttentionParams, Backend, KvCache, KvSpec, KvType, RopeConfig, RopeKind, RopeScaling,
    SeqSpan, Weight,
};
use cera::gguf::{GgufFile, GgufWriter};
use cera::kernels::KernelTable;
use cera::quant::GgmlType;

mod encoder;
mod fused;
mod groups;
mod select;
use encoder::*;
use fused::*;
use groups::*;
use select::*;

/// An error bound on one op's result: both measures must hold (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    pub nmse: f64,
    pub max_rel: f64,
}

/// The per-op bounds, and why each is what it is. Inputs are O(1) (uniform in ±1 or roughly
/// normal, with occasional 8× outliers), so `max|want|` is O(1) too.
pub mod bounds {
    use super::{Bound, GgmlType, KvType};

    /// Copies (upload/download, zeros, copy_cols, gather_rows): no arithmetic, equal bits.
    pub const EXACT: Bound = Bound {
        nmse: 0.0,
        max_rel: 0.0,
    };
    /// Embedding lookup: a row of ggml's dequantization formula (`d·q`, `d·q + m`, …). The
    /// reference uses the scalar dequantizer; a backend that fuses a multiply-add may differ in
    /// the last bit.
    pub const EMBED: Bound = Bound {
        nmse: 1e-13,
        max_rel: 2e-7,
    };
    /// add, scale, add_bias: one IEEE operation per element, correctly rounded on both sides
    /// (the reference rounds its f64 result once, which for +, × of two f32 is the same
    /// value); one ulp of slack for hardware that flushes or fuses.
    pub const ONE_OP: Bound = Bound {
        nmse: 1e-13,
        max_rel: 2e-7,
    };
    /// rms_norm: the backend may sum squares in f32 and round the scale `1/√(ms + ε)` and
    /// two products to f32: a few ulps (2^-24 ≈ 6e-8 each).
    pub const RMS_NORM: Bound = Bound {
        nmse: 1e-12,
        max_rel: 1e-6,
    };
    /// glu (SiLU, GELU-tanh), softcap: f32 `exp`/`tanh` (libm: about one ulp) and a product.
    pub const TRANSCENDENTAL: Bound = Bound {
        nmse: 1e-12,
        max_rel: 2e-6,
    };
    /// RoPE at positions up to [`super::MAX_POS`]: the CPU builds `θ_i = p·base^(-2i/n)` in
    /// f32 by repeated multiplication (as ggml does), so θ carries a relative error of about
    /// `i·2^-24`, i.e. an absolute one of up to ~`p·1e-7` rad on the first pairs, and
    /// `cos`/`sin` of an f32 angle near 4096 rad is off by its rounding, ≤ 2.4e-4 rad. The
    /// rotated values move by as many radians times their magnitude.
    pub const ROPE: Bound = Bound {
        nmse: 5e-8,
        max_rel: 1e-3,
    };
    /// lora: `base + s·B(A·x)` with the activations rounded to A's type (as the matmul), `A·x`
    /// summed in f32 by the GEMM kernel and the rank sum in f32; against an O(1) base.
    pub fn lora(ty: GgmlType) -> Bound {
        match ty {
            GgmlType::F32 => Bound {
                nmse: 1e-12,
                max_rel: 1e-5,
            },
            GgmlType::F16 => Bound {
                nmse: 1e-7,
                max_rel: 2e-3,
            },
            _ => Bound {
                nmse: 1e-5,
                max_rel: 2e-2,
            },
        }
    }
    /// short_conv: `l` (≤ 4) products per output summed in f32, then one more product.
    pub const SHORT_CONV: Bound = Bound {
        nmse: 1e-12,
        max_rel: 1e-6,
    };

    /// matmul against weights of `ty`, each output's error measured against the L2 norm of
    /// its terms `S = √Σ_c (w_c·x_c)²` (the typical size of a sum of random-signed terms, free
    /// of the chance cancellation that makes a single output near zero), with activations
    /// uniform in ±1. The reference multiplies the dequantized weights by the f32 activations
    /// in f64; the error the CPU adds is rounding the activations to ggml's paired type
    /// (`vec_dot_type`), plus f32 summation. An activation error `δ_c` gives `Σ w_c·δ_c`,
    /// of RMS `S · rms(δ) / rms(x)`:
    /// - F32: summation order only (observed nmse ~4e-14, max 6e-7);
    /// - F16: ≤ 2^-12 relative per element, RMS 1.4e-4 (observed 2e-7, 7e-4);
    /// - BF16: ≤ 2^-9, RMS 1.1e-3 (observed 1e-5, 7e-3);
    /// - the quantized formats: to Q8_0 / Q8_1 / Q8_K, 8-bit codes with `d = amax/127` per
    ///   block of 32 or 256, so `δ` is uniform in ±d/2 and RMS(δ)/RMS(x) = d/2 ≈ 0.4%, i.e.
    ///   nmse ~1.5e-5 on average; the worst of ~20 000 outputs, several of only 32 terms, is
    ///   ~5σ (observed nmse up to 1.6e-4 on one-output cases, max 3e-2).
    pub fn matmul(ty: GgmlType) -> Bound {
        match ty {
            GgmlType::F32 => Bound {
                nmse: 1e-12,
                max_rel: 5e-6,
            },
            GgmlType::F16 => Bound {
                nmse: 2e-6,
                max_rel: 3e-3,
            },
            GgmlType::BF16 => Bound {
                nmse: 1e-4,
                max_rel: 2e-2,
            },
            _ => Bound {
                nmse: 5e-4,
                max_rel: 5e-2,
            },
        }
    }

    /// Attention over a cache of keys `k` and values `v`. Both sides store the keys and values
    /// rounded to the cache type (the reference rounds on store; see `backend::reference`), so
    /// the difference is how the backend computes with them: the CPU rounds each query to the
    /// key type for the dot product, as llama.cpp does (f16: ≤ 2^-12 relative per element;
    /// Q8_0: uniform in ±amax/254 per block, about 0.4% RMS of a query element), sums in f32
    /// and takes f32 `exp` (the SIMD tiers: a polynomial with relative error < 2e-7). A query
    /// error moves each score by `scale·Σ k·Δq`, the softmax weights by about as much
    /// relatively, and the output (a weighted mean of values of O(1)) by about that. Observed:
    /// F32 nmse 9e-14, max 5e-7; F16 6e-8, 3e-4; Q8_0 keys 1.2e-5, 6e-3 (queries in ±3 give
    /// peaked softmaxes, which amplify score errors).
    pub fn attention(k: KvType, _v: KvType) -> Bound {
        match k {
            KvType::F32 => Bound {
                nmse: 1e-11,
                max_rel: 1e-5,
            },
            KvType::F16 => Bound {
                nmse: 1e-6,
                max_rel: 3e-3,
            },
            // TurboQuant leaves the query unrounded: only the rotation's f32 error is left
            KvType::TQ3 | KvType::TQ4 => Bound {
                nmse: 1e-9,
                max_rel: 1e-4,
            },
            _ => Bound {
                nmse: 1e-4,
                max_rel: 2e-2,
            },
        }
    }

    /// A MoE layer with experts of `ty` (errors against the largest output). The router is
    /// F32 and the harness only uses inputs whose expert choice has a clear margin, so both
    /// sides pick the same experts: a wrong choice, gate weight or normalization moves outputs
    /// by O(1).
    /// - F32 experts: f32 summation and f32 `exp` in the gating only (observed ~1e-14, 5e-7),
    ///   so the routing arithmetic itself is checked tightly;
    /// - quantized experts: two rounds of activation rounding (gate and up read the input
    ///   rounded to the paired type, down reads `silu(g)·u` rounded again; the latter is
    ///   heavy-tailed, so its blocks' `amax` is large against a typical element and its
    ///   relative rounding error several times matmul's). Observed: nmse 4e-4, max 2e-2.
    pub fn moe(ty: GgmlType) -> Bound {
        match ty {
            GgmlType::F32 => Bound {
                nmse: 1e-11,
                max_rel: 1e-5,
            },
            _ => Bound {
                nmse: 2e-3,
                max_rel: 6e-2,
            },
        }
    }
}

/// Largest RoPE position the harness uses.
pub const MAX_POS: usize = 4096;

/// One failed check.
#[derive(Clone, Debug)]
pub struct Failure {
    pub op: String,
    pub case: String,
    pub what: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{}]: {}", self.op, self.case, self.what)
    }
}

/// Runs every op on `be` and on the reference; panics listing every failed check.
pub fn check_all<B: Backend>(name: &str, be: &B) {
    let fails = run_all(be);
    if !fails.is_empty() {
        let list: Vec<String> = fails.iter().take(40).map(|f| f.to_string()).collect();
        panic!(
            "{name} ({}): {} op checks failed:\n{}",
            be.name(),
            fails.len(),
            list.join("\n")
        );
    }
}

/// The groups of checks, by the ops they exercise.
pub const GROUPS: [&str; 10] = [
    "memory",
    "elementwise",
    "rope",
    "matmul",
    "embed",
    "attention",
    "kv_state",
    "short_conv",
    "moe",
    "errors",
];

/// One group of checks.
type Check<'a, B> = fn(&mut H<'a, B>);

/// Runs every op on `be` and on the reference and returns the failed checks (empty: all
/// passed). A group that panics is one failure; the other groups still run.
pub fn run_all<B: Backend>(be: &B) -> Vec<Failure> {
    run_groups(be, &GROUPS)
}

/// [`run_all`] for some of the [`GROUPS`].
pub fn run_groups<B: Backend>(be: &B, only: &[&str]) -> Vec<Failure> {
    let mut h = H {
        be,
        cx: B::Ctx::default(),
        r: Reference,
        rng: Rng(0x5eed),
        fails: Vec::new(),
        worst: BTreeMap::new(),
        unsupported: Vec::new(),
    };
    let groups: [(&str, Check<'_, B>); 10] = [
        ("memory", memory),
        ("elementwise", elementwise),
        ("rope", rope),
        ("matmul", matmul),
        ("embed", embed),
        ("attention", attention),
        ("kv_state", kv_state),
        ("short_conv", short_conv),
        ("moe", moe),
        ("errors", errors),
    ];
    debug_assert_eq!(groups.map(|g| g.0), GROUPS);
    for (name, f) in groups {
        if !only.contains(&name) {
            continue;
        }
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(&mut h))) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            h.fail(name, "", &format!("panicked: {msg}"));
            h.cx = B::Ctx::default();
        }
    }
    if !h.unsupported.is_empty() {
        eprintln!(
            "{}: {} checks not run (the backend lacks them):\n  {}",
            be.name(),
            h.unsupported.len(),
            h.unsupported.join("\n  ")
        );
    }
    if std::env::var_os("CERA_OPS_REPORT").is_some() {
        eprintln!("{}: worst observed (nmse, max_rel) per op:", be.name());
        for (op, (n, m)) in &h.worst {
            eprintln!("  {op:<24} {n:9.2e} {m:9.2e}");
        }
    }
    h.fails
}

/// splitmix64: deterministic test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Uniform in ±`scale`.
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }
    /// Roughly normal, with an 8× outlier now and then (weights, activations).
    fn normal(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let s = (0..4).map(|_| self.uniform()).sum::<f32>() * 0.5;
                scale
                    * if self.next().is_multiple_of(97) {
                        8.0 * s
                    } else {
                        s
                    }
            })
            .collect()
    }
}

/// Error measures of `got` against `want`: (nmse, max_rel). With `scale`, each element's
/// error is measured against its own magnitude instead (`Σ Δ² / Σ scale²` and
/// `max |Δ| / scale`), for results that may cancel to near zero.
fn measure(got: &[f32], want: &[f32], scale: Option<&[f64]>) -> (f64, f64) {
    let (mut se, mut sr, mut md, mut mr, mut worst) = (0f64, 0f64, 0f64, 0f64, 0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g as f64, w as f64);
        let d = if g == w { 0.0 } else { (g - w).abs() };
        se += d * d;
        md = md.max(d);
        match scale {
            Some(s) => {
                sr += s[i] * s[i];
                if d > 0.0 {
                    worst = worst.max(d / s[i]);
                }
            }
            None => {
                sr += w * w;
                mr = mr.max(w.abs());
            }
        }
    }
    let ratio = |a: f64, b: f64| if a == 0.0 { 0.0 } else { a / b };
    match scale {
        Some(_) => (ratio(se, sr), worst),
        None => (ratio(se, sr), ratio(md, mr)),
    }
}

/// Per output of `x · wᵀ`: the L2 norm of its terms, `√Σ_c (w_rc·x_tc)²` (about the size of
/// a sum of random-signed terms, without its chance cancellation).
fn term_norms(w: &Weight, x: &[f32]) -> Vec<f64> {
    let wd = cera::quant::dequantize_to_vec(w.ty, w.data(), w.rows * w.cols).unwrap();
    let mut out = Vec::new();
    for xt in x.chunks_exact(w.cols) {
        for wr in wd.chunks_exact(w.cols) {
            let s: f64 = wr
                .iter()
                .zip(xt)
                .map(|(&a, &b)| (a as f64 * b as f64).powi(2))
                .sum();
            out.push(s.sqrt().max(f64::MIN_POSITIVE));
        }
    }
    out
}

/// The harness state: the backend, its context, the reference and the results so far.
struct H<'a, B: Backend> {
    be: &'a B,
    cx: B::Ctx,
    r: Reference,
    rng: Rng,
    fails: Vec<Failure>,
    /// per op: the worst (nmse, max_rel) seen
    worst: BTreeMap<String, (f64, f64)>,
    /// checks not run because the backend says it lacks the feature (printed, never silent)
    unsupported: Vec<String>,
}

type Pair<B> = (<B as Backend>::Tensor, RefTensor);

impl<B: Backend> H<'_, B> {
    /// A check the backend declines ([`Backend::kv_supported`]): listed on stderr.
    fn unsupported(&mut self, what: &str) {
        self.unsupported.push(what.to_string());
    }

    fn fail(&mut self, op: &str, case: &str, what: &str) {
        self.fails.push(Failure {
            op: op.into(),
            case: case.into(),
            what: what.into(),
        });
    }

    /// `data` as a tensor of both backends.
    fn up(&mut self, data: &[f32], rows: usize, cols: usize) -> Pair<B> {
        let mut t = B::Tensor::default();
        self.be.upload(&mut self.cx, data, rows, cols, &mut t);
        let mut rt = RefTensor::default();
        self.r.upload(&mut (), data, rows, cols, &mut rt);
        (t, rt)
    }

    /// An output tensor that holds NaN garbage of some other shape.
    fn garbage(&mut self) -> Pair<B> {
        let (r, c) = (1 + self.rng.below(40), 1 + self.rng.below(300));
        self.up(&vec![f32::NAN; r * c], r, c)
    }

    fn down(&mut self, t: &B::Tensor) -> Vec<f32> {
        let mut v = Vec::new();
        self.be.download(&mut self.cx, t, &mut v);
        v
    }

    /// Compares values with `want` (shape checked by the caller).
    fn check_vals(&mut self, op: &str, case: &str, got: &[f32], want: &[f32], b: Bound) {
        self.check_scaled(op, case, got, want, None, b)
    }

    /// [`H::check_vals`], measuring errors against `scale` if given (see [`measure`]).
    fn check_scaled(
        &mut self,
        op: &str,
        case: &str,
        got: &[f32],
        want: &[f32],
        scale: Option<&[f64]>,
        b: Bound,
    ) {
        if got.len() != want.len() {
            let what = format!("{} values, expected {}", got.len(), want.len());
            return self.fail(op, case, &what);
        }
        if let Some(i) = (0..got.len()).find(|&i| got[i].is_finite() != want[i].is_finite()) {
            let what = format!("[{i}] = {}, expected {}", got[i], want[i]);
            return self.fail(op, case, &what);
        }
        let (nmse, max_rel) = measure(got, want, scale);
        let w = self.worst.entry(op.to_string()).or_default();
        *w = (w.0.max(nmse), w.1.max(max_rel));
        if nmse > b.nmse || max_rel > b.max_rel {
            let i = (0..got.len())
                .max_by(|&a, &c| {
                    let d = |i: usize| (got[i] as f64 - want[i] as f64).abs();
                    d(a).total_cmp(&d(c))
                })
                .unwrap_or(0);
            let what = format!(
                "nmse {nmse:.3e} (bound {:.1e}), max_rel {max_rel:.3e} (bound {:.1e}); \
                 worst [{i}] = {}, expected {}",
                b.nmse, b.max_rel, got[i], want[i]
            );
            self.fail(op, case, &what);
        }
    }

    /// Compares a backend tensor with the reference's, shape included.
    fn check(&mut self, op: &str, case: &str, t: &B::Tensor, rt: &RefTensor, b: Bound) {
        self.check_with(op, case, t, rt, None, b)
    }

    /// [`H::check`], measuring errors against `scale` if given (see [`measure`]).
    fn check_with(
        &mut self,
        op: &str,
        case: &str,
        t: &B::Tensor,
        rt: &RefTensor,
        scale: Option<&[f64]>,
        b: Bound,
    ) {
        let shape = self.be.shape(t);
        if shape != (rt.rows, rt.cols) {
            let what = format!("shape {shape:?}, expected {:?}", (rt.rows, rt.cols));
            return self.fail(op, case, &what);
        }
        let got = self.down(t);
        self.check_scaled(op, case, &got, &rt.data, scale, b);
    }

    /// `x · wᵀ` on both backends, compared (errors per output against its terms' norm).
    fn matmul_case(&mut self, w: &Weight, x: &[f32], n: usize, case: &str) {
        let (xt, xr) = self.up(x, n, w.cols);
        let (mut o, mut or) = self.garbage();
        let e = self.be.matmul(&mut self.cx, &mut [(w, &mut o)], &xt);
        self.r.matmul(&mut (), &mut [(w, &mut or)], &xr).unwrap();
        let op = format!("matmul {}", w.ty);
        match e {
            Ok(()) => {
                let s = term_norms(w, x);
                self.check_with(&op, case, &o, &or, Some(&s), bounds::matmul(w.ty))
            }
            Err(e) => self.fail(&op, case, &e.to_string()),
        }
    }
}

/// Weights in an in-memory GGUF: `(name, type, ggml shape, values)`, quantized with the
/// reference quantizers.
fn gguf(tensors: &[(String, GgmlType, Vec<u64>, Vec<f32>)]) -> Arc<GgufFile> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "test");
    for (name, ty, shape, v) in tensors {
        w.add_tensor_f32(name.clone(), *ty, shape, v).unwrap();
    }
    Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

fn weight(f: &Arc<GgufFile>, name: &str) -> Weight {
    Weight::new(f, f.tensor(name).unwrap())
}

/// The weight formats Cera multiplies (those with a paired activation type): every backend
/// must run a model in any of them.
pub fn matmul_types() -> Vec<GgmlType> {
    GgmlType::ALL
        .iter()
        .copied()
        .filter(|&t| KernelTable::vec_dot_type(t).is_some())
        .collect()
}

/// Row widths to try for a format: odd ones where the format allows any width.
fn widths(ty: GgmlType) -> &'static [usize] {
    match ty.block_elems().unwrap() {
        1 => &[1, 7, 33, 100],
        32 => &[32, 96, 288],
        _ => &[256, 512],
    }
}
