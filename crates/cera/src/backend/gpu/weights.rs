//! Weights on the device and the ops that read them: the matrix product (a GEMV for a few
//! tokens, a tiled GEMM for more) and the embedding lookup. Both dequantize in registers with
//! the format's `wload4`, reading the blocks as the GGUF file stores them.

use std::sync::{Arc, Weak};

use super::kernels::{Bind, bytes_of, fbits, quant_source};
use super::{Gpu, GpuCtx, GpuTensor};
use crate::backend::{Act, Weight};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// Tokens up to which the product runs as a GEMV (each workgroup one weight row, all tokens):
/// the weights are read once per step either way, and below this the GEMM's tiles are empty.
const GEMV_MAX_TOKENS: usize = 8; // the GEMV defs' `MAX_T` (`gemv_defs!`)

/// One binding's worth of a weight's rows.
pub(super) struct Part {
    buf: wgpu::Buffer,
    row0: usize,
    rows: usize,
}

/// A weight resident on the device.
pub(super) struct GpuWeight {
    /// Keeps the file's address (part of the cache key) from being reused while cached.
    _file: Weak<GgufFile>,
    parts: Vec<Part>,
    row_bytes: usize,
}

/// Weights a product fuses into one dispatch at most (Q, K and V).
pub(super) const MAX_FUSED: usize = 3;

/// The device copy of `ws` (one weight, or several of one type and width read by one
/// product, their rows concatenated), uploaded on first use.
fn resident(gpu: &Gpu, ws: &[&Weight]) -> Result<Arc<GpuWeight>> {
    for w in ws {
        if quant_source(w.ty).is_none() {
            return Err(Error::Gpu(format!(
                "tensor {} has type {}, which the GPU kernels do not read (use --device cpu)",
                w.name, w.ty
            )));
        }
    }
    let mut key = [(0, 0, 0); MAX_FUSED];
    for (k, w) in key.iter_mut().zip(ws) {
        *k = w.resident_key();
    }
    if let Some(r) = gpu.weights.lock().expect("weights").get(&key) {
        return Ok(Arc::clone(r));
    }
    let rb = ws[0].row_bytes();
    let ty = ws[0].ty;
    // blocks whose size is not whole words are padded to it on the device, so that the
    // kernels' word reads are aligned (one load each, not two)
    let (sb, db) = match ty.block_bytes() {
        Some(b) if ty.block_elems().is_some_and(|e| e > 1) => (b, b.next_multiple_of(4)),
        _ => (rb.max(1), rb.max(1)),
    };
    let drb = rb / sb * db;
    let rows: usize = ws.iter().map(|w| w.rows).sum();
    // row r of the concatenation: (weight, row within it)
    let locate = |mut r: usize| {
        for w in ws {
            if r < w.rows {
                return (*w, r);
            }
            r -= w.rows;
        }
        unreachable!("row within the total")
    };
    // rows per binding: the adapter's binding limit, in whole rows
    let per = ((gpu.info.max_binding as usize) / drb.max(1)).max(1);
    let mut parts = Vec::new();
    let mut r0 = 0;
    while r0 < rows {
        let n = per.min(rows - r0);
        let buf = if ws.len() == 1 && sb == db {
            let src = &ws[0].data()[r0 * rb..(r0 + n) * rb];
            gpu.buffer_with(src, wgpu::BufferUsages::STORAGE)
        } else {
            let mut bytes = Vec::with_capacity(n * drb);
            let mut r = r0;
            while r < r0 + n {
                let (w, i) = locate(r);
                let take = (w.rows - i).min(r0 + n - r);
                let src = &w.data()[i * rb..(i + take) * rb];
                if sb == db {
                    bytes.extend_from_slice(src);
                } else {
                    let scale_last = scale_last(ty);
                    for blk in src.chunks_exact(sb) {
                        if scale_last {
                            bytes.extend_from_slice(&blk[2..]);
                            bytes.extend_from_slice(&blk[..2]);
                        } else {
                            bytes.extend_from_slice(blk);
                        }
                        bytes.resize(bytes.len() + db - sb, 0);
                    }
                }
                r += take;
            }
            gpu.buffer_with(&bytes, wgpu::BufferUsages::STORAGE)
        };
        parts.push(Part {
            buf,
            row0: r0,
            rows: n,
        });
        r0 += n;
    }
    let gw = Arc::new(GpuWeight {
        _file: ws[0].file_handle(),
        parts,
        row_bytes: drb,
    });
    gpu.weights
        .lock()
        .expect("weights")
        .insert(key, Arc::clone(&gw));
    Ok(gw)
}

/// Whether blocks of `ty` go to the device with their leading f16 scale moved to the end:
/// the formats whose payload follows a 2-byte scale (Q4_0, IQ4_NL, Q5_0, Q8_0) would have
/// every word of it straddle two (two loads and shifts per word read, in every product); after
/// the move the payload starts the block and every read is one aligned load. The shaders'
/// `wload4` of these formats read this layout.
fn scale_last(ty: crate::quant::GgmlType) -> bool {
    use crate::quant::GgmlType as T;
    matches!(ty, T::Q4_0 | T::IQ4_NL | T::Q5_0 | T::Q8_0)
}

/// The split-K GEMM's constants: the partial sums' binding.
const SPLIT_DEFS: &str =
    "const SPLIT: bool = true;\n@group(0) @binding(6) var<storage, read_write> part: array<f32>;";

/// Workgroups a GEMM should have to fill a large GPU (a few per compute unit).
const GEMM_MIN_GROUPS: usize = 256;

/// Rows shorter than this are not split: their K loop is short anyway, and on the H200 the
/// split made SmolLM2's GEMMs (K 576 and 1536) three times slower while it made those with
/// K of 4608-4864 (FFN down of LFM2-350M and Qwen2.5-0.5B) faster.
const SPLIT_K_FROM: usize = 2048;

/// How a GEMM of `tiles` output tiles over `k` columns splits K: (splits, columns per split,
/// a multiple of the 16-column tile step). Each split keeps at least 512 columns, so the
/// partial sums' extra traffic stays small next to the product.
fn split_k(tiles: usize, k: usize) -> (usize, usize) {
    let want = GEMM_MIN_GROUPS.div_ceil(tiles.max(1));
    let splits = if k < SPLIT_K_FROM {
        1
    } else {
        want.min(k / 512).max(1)
    };
    let chunk = k.div_ceil(splits).next_multiple_of(16);
    (k.div_ceil(chunk), chunk)
}

/// The cooperative-matrix GEMM's defs for an adapter that multiplies 16 × 16 × 16 f16 into
/// f32 and runs one subgroup size (its workgroup is four subgroups), unless
/// `CERA_GPU_COOP=0`. Its weight tiles read super-block formats in sixteens (`wload16`, each
/// sub-block's scale decoded once for 16 elements; H100, pp512 two rounds: LFM2-350M Q4_K_M
/// 30.6k, 30.9k t/s against 26.7k, 26.6k in fours; Qwen2.5, whose K-quant rows are long
/// enough for the plain GEMM, unchanged); `CERA_GPU_COOP16=0` reads them in fours.
pub(super) fn coop_defs(info: &super::AdapterInfo) -> Option<&'static str> {
    if std::env::var("CERA_GPU_COOP").is_ok_and(|v| v == "0")
        || !info.f16
        || !info.coop_shapes.iter().any(|s| s == "16x16x16 f16→f32")
        || info.subgroup_min != info.subgroup_max
    {
        return None;
    }
    let w16 = !std::env::var("CERA_GPU_COOP16").is_ok_and(|v| v == "0");
    coop_defs_for(info.subgroup_min, w16)
}

/// The cooperative-matrix GEMM's defs for a subgroup size, with or without sixteens.
fn coop_defs_for(subgroup: u32, w16: bool) -> Option<&'static str> {
    macro_rules! defs {
        ($wg:literal, $w16:literal) => {
            concat!(
                "enable f16;\nenable wgpu_cooperative_matrix;\nconst WG: u32 = ",
                $wg,
                ";\nconst COOP_WLOAD16: bool = ",
                $w16,
                ";"
            )
        };
    }
    Some(match (subgroup, w16) {
        (32, false) => defs!("128u", "false"),
        (32, true) => defs!("128u", "true"),
        (64, false) => defs!("256u", "false"),
        (64, true) => defs!("256u", "true"),
        (16, false) => defs!("64u", "false"),
        (16, true) => defs!("64u", "true"),
        _ => return None,
    })
}

/// Whether `a` and `b` can be one product (same format and width).
pub(super) fn fusable(a: &Weight, b: &Weight) -> bool {
    a.ty == b.ty && a.cols == b.cols
}

/// A GEMV variant's defs: the most tokens it takes (`MAX_T`: 1, decode's, or
/// [`GEMV_MAX_TOKENS`]), its workgroup size, whether an invocation takes a row, its teams per
/// workgroup and their sum.
macro_rules! gemv_defs {
    ($max_t:literal, $wg:literal, $per_row:literal, $teams:literal, $sum:ident) => {
        gemv_defs!($max_t, $wg, $per_row, $teams, $sum, "1u")
    };
    ($max_t:literal, $wg:literal, $per_row:literal, $teams:literal, $sum:ident, $span:literal) => {
        concat!(
            "const MAX_T: u32 = ",
            $max_t,
            ";\nconst WG: u32 = ",
            $wg,
            ";\nconst PER_ROW: bool = ",
            $per_row,
            ";\nconst TEAMS: u32 = ",
            $teams,
            ";\nconst SPAN: u32 = ",
            $span,
            ";\n",
            $sum!()
        )
    };
}

/// A team's sum where there are no teams.
macro_rules! PLAIN_SUM {
    () => {
        "const SHUFFLES: bool = false;\nfn team_sum(v: f32) -> f32 { return v; }"
    };
}

/// The subgroup variant's team sum (naga takes subgroup built-ins without `enable subgroups`,
/// which it rejects, when the device has the feature): a butterfly over its 32 lanes, every
/// lane getting it.
macro_rules! SUBGROUP_SUM {
    () => {
        concat!(
            "const SHUFFLES: bool = true;\n",
            "fn team_sum(v: f32) -> f32 {\n",
            "    var s = v;\n",
            "    s += subgroupShuffleXor(s, 16u);\n",
            "    s += subgroupShuffleXor(s, 8u);\n",
            "    s += subgroupShuffleXor(s, 4u);\n",
            "    s += subgroupShuffleXor(s, 2u);\n",
            "    s += subgroupShuffleXor(s, 1u);\n",
            "    return s;\n",
            "}"
        )
    };
}

/// How the GEMV spreads rows over invocations (the adapter's default: [`GemvKind::pick`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemvKind {
    /// An invocation per weight row, no barriers: for CPU adapters (lavapipe), where each of
    /// a workgroup's barriers costs a pass through all its invocations.
    PerRow,
    /// A workgroup per row (128 invocations for one token, 64 for several), summed through
    /// workgroup memory (any GPU).
    Workgroup,
    /// Teams of 32 invocations per row, four rows per workgroup, summed by subgroup shuffles
    /// (no barriers): adapters with subgroups of 32 or 64, when asked for.
    Subgroup,
    /// A workgroup per row as `Workgroup`, summed by shuffles within its teams of 32 and the
    /// teams' sums through workgroup memory: two barriers a sum, not log2(WG) + 2 (the
    /// default on GPUs with subgroups of 32 or 64).
    WorkgroupTeams,
}

impl GemvKind {
    /// The variant for an adapter: `CERA_GPU_GEMV=row|workgroup|subgroup|teams` chooses one (for
    /// measuring them against each other; a subgroup variant the adapter lacks is not taken).
    pub(super) fn pick(info: &super::AdapterInfo) -> GemvKind {
        let subgroup_ok = GemvKind::Subgroup.runs_on(info);
        match std::env::var("CERA_GPU_GEMV").as_deref() {
            Ok("row") => return GemvKind::PerRow,
            Ok("workgroup") => return GemvKind::Workgroup,
            Ok("subgroup") if subgroup_ok => return GemvKind::Subgroup,
            Ok("teams") if subgroup_ok => return GemvKind::WorkgroupTeams,
            _ => {}
        }
        // (the subgroup variant, the default for small-block formats until the shaders lost
        // naga's runtime checks, then measured slower on the H200: SmolLM2 Q4_1 tg128 528-540
        // against 576-579 t/s a workgroup per row; Qwen2.5's Q5_0/Q8_0 within 2%)
        // (teams: H100, tg64 two rounds, LFM2-350M Q4_K_M 548, 586 against 529, 511 t/s a
        // workgroup per row summed through workgroup memory; Qwen2.5 419, 448 against 411, 392)
        if info.device_type == "Cpu" {
            GemvKind::PerRow
        } else if GemvKind::WorkgroupTeams.runs_on(info) {
            GemvKind::WorkgroupTeams
        } else {
            GemvKind::Workgroup
        }
    }

    /// Whether the adapter can run the variant (the subgroup one needs subgroups of 32 or 64).
    pub fn runs_on(self, info: &super::AdapterInfo) -> bool {
        !matches!(self, GemvKind::Subgroup | GemvKind::WorkgroupTeams)
            || (info.subgroups && info.subgroup_min >= 32 && info.subgroup_max <= 64)
    }

    /// The variant's WGSL defs and its rows per workgroup for weights of type `ty` and `t`
    /// tokens (the one-token variant is decode's: its accumulators stay in registers). The
    /// subgroup variant only for formats of small blocks (on the H200 it took a Q4_K or Q6_K
    /// row of 896 from 30 to 46 us, its 32 lanes each decoding twice the 256-element blocks'
    /// scales a workgroup's 64 do; Q5_0 went from 25 to 22.5, the Q8_0 LM head from 123 to 83).
    fn defs(self, ty: crate::quant::GgmlType, t: usize, w16: bool) -> (&'static str, usize) {
        let super_blocks = ty.block_elems() == Some(256);
        let sixteens = super_blocks && w16;
        let kind = match (super_blocks, sixteens) {
            (true, false) if self == GemvKind::Subgroup => GemvKind::Workgroup,
            _ => self,
        };
        if let (GemvKind::Workgroup, true, Some(defs)) = (kind, t == 1, decode_override()) {
            return (defs, 1);
        }
        if sixteens {
            // Super-block formats in sixteens (see `Gpu::wload16`): runs of 16 elements an
            // invocation, each decoding its sub-block's scale once. A workgroup per row is
            // then 64 invocations, 1024 elements a pass: the hidden width of the LFM2-350M.
            return match (kind, t == 1) {
                (GemvKind::PerRow, true) => {
                    (gemv_defs!("1u", "64u", "true", "0u", PLAIN_SUM, "4u"), 64)
                }
                (GemvKind::PerRow, false) => {
                    (gemv_defs!("8u", "64u", "true", "0u", PLAIN_SUM, "4u"), 64)
                }
                (GemvKind::Workgroup, true) => {
                    (gemv_defs!("1u", "64u", "false", "0u", PLAIN_SUM, "4u"), 1)
                }
                (GemvKind::Workgroup, false) => {
                    (gemv_defs!("8u", "64u", "false", "0u", PLAIN_SUM, "4u"), 1)
                }
                (GemvKind::Subgroup, true) => (
                    gemv_defs!("1u", "128u", "false", "4u", SUBGROUP_SUM, "4u"),
                    4,
                ),
                (GemvKind::Subgroup, false) => (
                    gemv_defs!("8u", "128u", "false", "4u", SUBGROUP_SUM, "4u"),
                    4,
                ),
                (GemvKind::WorkgroupTeams, true) => (
                    gemv_defs!("1u", "64u", "false", "0u", SUBGROUP_SUM, "4u"),
                    1,
                ),
                (GemvKind::WorkgroupTeams, false) => (
                    gemv_defs!("8u", "64u", "false", "0u", SUBGROUP_SUM, "4u"),
                    1,
                ),
            };
        }
        match (kind, t == 1) {
            (GemvKind::PerRow, true) => (gemv_defs!("1u", "64u", "true", "0u", PLAIN_SUM), 64),
            (GemvKind::PerRow, false) => (gemv_defs!("8u", "64u", "true", "0u", PLAIN_SUM), 64),
            // (decode's: 128 invocations a row, measured on the H200 against 64 and 256, tg128
            // two rounds: SmolLM2 Q4_1 593, 571 against 579, 565 and 533, 528; Qwen2.5 433, 430
            // against 411, 416 and 338, 318; LFM2 545, 538 against 550, 537 and 485, 491)
            (GemvKind::Workgroup, true) => (gemv_defs!("1u", "128u", "false", "0u", PLAIN_SUM), 1),
            (GemvKind::Workgroup, false) => (gemv_defs!("8u", "64u", "false", "0u", PLAIN_SUM), 1),
            (GemvKind::Subgroup, true) => {
                (gemv_defs!("1u", "128u", "false", "4u", SUBGROUP_SUM), 4)
            }
            (GemvKind::Subgroup, false) => {
                (gemv_defs!("8u", "128u", "false", "4u", SUBGROUP_SUM), 4)
            }
            (GemvKind::WorkgroupTeams, true) => {
                (gemv_defs!("1u", "128u", "false", "0u", SUBGROUP_SUM), 1)
            }
            (GemvKind::WorkgroupTeams, false) => {
                (gemv_defs!("8u", "64u", "false", "0u", SUBGROUP_SUM), 1)
            }
        }
    }
}

/// For measuring the decode GEMV's shape (a workgroup per row): `CERA_GPU_GEMV_WG=N` its
/// workgroup size, `CERA_GPU_GEMV_SPAN=N` the runs of four elements each invocation takes in a
/// row (contiguous: N = 8 is a whole 32-element block). None: the default (64, 1).
fn decode_override() -> Option<&'static str> {
    static DEFS: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *DEFS.get_or_init(|| {
        let get = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
        let (wg, span) = (get("CERA_GPU_GEMV_WG"), get("CERA_GPU_GEMV_SPAN"));
        if wg.is_none() && span.is_none() {
            return None;
        }
        let defs = format!(
            "const MAX_T: u32 = 1u;\nconst WG: u32 = {}u;\nconst PER_ROW: bool = false;\n\
             const TEAMS: u32 = 0u;\nconst SPAN: u32 = {}u;\n{}",
            wg.unwrap_or(64).clamp(32, 256).next_power_of_two(),
            span.unwrap_or(1).clamp(1, 16),
            PLAIN_SUM!()
        );
        Some(&*Box::leak(defs.into_boxed_str()))
    })
}

/// What a product reads: `x` itself, or an op of it done as it is read (GEMV only).
#[derive(Clone, Copy)]
pub(super) enum Input<'a> {
    Plain,
    /// RMSNorm of each row of `x` (the whole row) times these weights, with this epsilon.
    Norm(&'a [f32], f32),
    /// `act(x) · up`.
    Glu(&'a GpuTensor, Act),
}

/// Whether a product of `rows` tokens reads its input through the GEMV, which does the
/// [`Input`] ops itself (the GEMM takes `x` as it is).
pub(super) fn fuses_input(rows: usize) -> bool {
    rows <= GEMV_MAX_TOKENS
}

/// `outs[i] = x' · ws[i]ᵀ` in one dispatch per binding-sized part (the weights fusable), or
/// `outs[0] += x' · ws[0]ᵀ` with `acc` (`outs[0]` already shaped); `x'` is `x` through `input`.
#[allow(clippy::too_many_arguments)]
pub(super) fn matmul(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    ws: &[&Weight],
    x: &GpuTensor,
    input: Input<'_>,
    outs: &mut [&mut GpuTensor],
    acc: bool,
) -> Result<()> {
    matmul_bias(gpu, cx, ws, x, input, outs, acc, None)
}

/// [`matmul`] with the outputs' biases (concatenated as the weights are) added by the GEMV
/// as it stores them; GEMV products only (see [`fuses_input`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn matmul_bias(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    ws: &[&Weight],
    x: &GpuTensor,
    input: Input<'_>,
    outs: &mut [&mut GpuTensor],
    acc: bool,
    bias: Option<&wgpu::Buffer>,
) -> Result<()> {
    assert!(
        (1..=MAX_FUSED).contains(&ws.len()) && ws.len() == outs.len() && (!acc || ws.len() == 1),
        "matmul: 1..={MAX_FUSED} weights with an output each"
    );
    let t = x.rows;
    for (w, out) in ws.iter().zip(outs.iter_mut()) {
        if x.cols != w.cols {
            return Err(Error::QuantShape {
                ty: w.ty.name(),
                reason: format!("{}: input rows of {}, expected {}", w.name, x.cols, w.cols),
            });
        }
        if acc {
            if (out.rows, out.cols) != (t, w.rows) {
                return Err(Error::QuantShape {
                    ty: w.ty.name(),
                    reason: format!(
                        "{}: adding {t} x {} to a {} x {} tensor",
                        w.name, w.rows, out.rows, out.cols
                    ),
                });
            }
        } else {
            gpu.shape_to(out, t, w.rows);
        }
    }
    let gw = resident(gpu, ws)?;
    if t == 0 {
        return Ok(());
    }
    let gemv = fuses_input(t);
    let (mode, eps, act, aux) = match input {
        Input::Plain => (0, 0.0, 0, None),
        Input::Norm(g, eps) => {
            assert_eq!(g.len(), x.cols, "matmul: the norm spans the row");
            (1, eps, 0, Some(gpu.param(g)))
        }
        Input::Glu(up, act) => {
            assert_eq!((up.rows, up.cols), (x.rows, x.cols), "matmul: GLU shapes");
            (2, 0.0, u32::from(act != Act::Silu), Some(up.buf().clone()))
        }
    };
    assert!(
        gemv || (mode == 0 && bias.is_none()),
        "matmul: the GEMM reads its input plainly and adds no bias"
    );
    let aux = aux.as_ref().unwrap_or(&gpu.dummy_in);
    let n = |i: usize| ws.get(i).map_or(0, |w| w.rows);
    let w0 = ws[0];
    for part in &gw.parts {
        // (an absent output binds its own slot of the dummy: WebGPU rejects two writable
        // bindings of one range in a dispatch)
        let o = |i: usize| {
            outs.get(i)
                .map_or(gpu.unused_out(i), |o| Bind::Whole(o.buf()))
        };
        let mut head = [
            w0.cols as u32,
            part.rows as u32,
            gw.row_bytes as u32,
            t as u32,
            part.row0 as u32,
            u32::from(acc),
            n(0) as u32,
            n(1) as u32,
            n(2) as u32,
            mode,
            fbits(eps),
            act,
        ];
        if gemv {
            let binds = [
                Bind::Whole(&part.buf),
                Bind::Whole(x.buf()),
                Bind::Whole(aux),
                o(0),
                o(1),
                o(2),
                Bind::Whole(bias.unwrap_or(&gpu.dummy_in)),
            ];
            let (defs, per) = gpu.gemv.defs(w0.ty, t, gpu.wload16);
            let groups = part.rows.div_ceil(per) as u32;
            let mut params = head.to_vec();
            params.push(u32::from(bias.is_some()));
            let kc = if gpu.gemv_width_constant() {
                w0.cols as u32
            } else {
                0
            };
            gpu.dispatch_const(cx, "gemv", defs, Some(w0.ty), kc, &params, &binds, groups);
        } else if let Some(defs) = gpu.coop
            && w0.ty.block_elems() == Some(256)
            && w0.cols < SPLIT_K_FROM
        {
            // tensor cores for the 256-element super-block formats, whose dequantization
            // makes the plain GEMM's inner loop expensive (H200, pp512: LFM2-350M Q4_K_M 2080
            // -> 3160 t/s); Q4_1 and Q5_0 models ran 15-20% slower through it (their tiles'
            // loads and f16 conversions, not the products, bound it), and f16 products would
            // not keep F32 weights exact. Long rows stay with the plain GEMM's K split (Qwen's
            // K-quant FFN down, K 4864: 12.8k -> 10.9k t/s through unsplit tensor-core tiles).
            let binds = [
                Bind::Whole(&part.buf),
                Bind::Whole(x.buf()),
                o(0),
                o(1),
                o(2),
            ];
            head[9] = 1;
            head[10] = w0.cols as u32;
            let groups = (part.rows.div_ceil(64) * t.div_ceil(64)) as u32;
            gpu.dispatch(
                cx,
                "gemm_coop",
                defs,
                Some(w0.ty),
                &head[..11],
                &binds,
                groups,
            );
        } else {
            let tiles = part.rows.div_ceil(64) * t.div_ceil(64);
            let (splits, kchunk) = split_k(tiles, w0.cols);
            let mut partial = std::mem::take(&mut cx.gemm_part);
            if splits > 1 {
                gpu.shape_to(&mut partial, splits * t, part.rows);
            }
            let binds = [
                Bind::Whole(&part.buf),
                Bind::Whole(x.buf()),
                o(0),
                o(1),
                o(2),
                if splits > 1 {
                    Bind::Whole(partial.buf())
                } else {
                    gpu.unused_out(3)
                },
            ];
            head[9] = splits as u32;
            head[10] = kchunk as u32;
            let groups = (tiles * splits) as u32;
            let (defs, nb) = if splits > 1 {
                (SPLIT_DEFS, 6)
            } else {
                (
                    "const SPLIT: bool = false;\nvar<private> part: array<f32, 1>;",
                    5,
                )
            };
            gpu.dispatch(
                cx,
                "gemm",
                defs,
                Some(w0.ty),
                &head[..11],
                &binds[..nb],
                groups,
            );
            if splits > 1 {
                let params = [
                    part.rows as u32,
                    t as u32,
                    part.row0 as u32,
                    u32::from(acc),
                    n(0) as u32,
                    n(1) as u32,
                    n(2) as u32,
                    splits as u32,
                ];
                let binds = [Bind::Whole(partial.buf()), o(0), o(1), o(2)];
                let groups = (t * part.rows).div_ceil(256) as u32;
                gpu.dispatch(cx, "gemm_reduce", "", None, &params, &binds, groups);
            }
            cx.gemm_part = partial;
        }
    }
    Ok(())
}

/// `out[t] = table[tokens[t]]`.
pub(super) fn embed(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    table: &Weight,
    tokens: &[u32],
    out: &mut GpuTensor,
) -> Result<()> {
    if let Some(&id) = tokens.iter().find(|&&id| id as usize >= table.rows) {
        return Err(Error::TokenOutOfRange {
            id,
            n_vocab: table.rows,
        });
    }
    let gw = resident(gpu, &[table])?;
    gpu.shape_to(out, tokens.len(), table.cols);
    for part in &gw.parts {
        // (output row, row within the part) of the tokens this part holds
        let pairs: Vec<u32> = tokens
            .iter()
            .enumerate()
            .filter(|(_, id)| (part.row0..part.row0 + part.rows).contains(&(**id as usize)))
            .flat_map(|(t, &id)| [t as u32, id - part.row0 as u32])
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let n = (pairs.len() / 2) as u32;
        let params = [table.cols as u32, gw.row_bytes as u32, n, n, 0, 0, 0, 0];
        let (slots_p, slots) = gpu.stage_params(cx, &params, &[bytes_of(&pairs)]);
        gpu.dispatch_staged(
            cx,
            "embed",
            "",
            Some(table.ty),
            &slots_p,
            &[
                Bind::Whole(&part.buf),
                slots[0].bind(),
                Bind::Whole(out.buf()),
            ],
            n,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::kernels::check_wgsl;
    use super::*;
    use crate::quant::GgmlType as T;

    /// Every product variant of every weight format compiles and validates (naga, every
    /// capability on): CI's lavapipe runs only the per-row GEMV, the workgroup and subgroup
    /// ones and the plain GEMM, never the cooperative-matrix GEMM, which a GPU alone takes.
    #[test]
    fn every_product_variant_validates() {
        let types = [
            T::F32,
            T::F16,
            T::BF16,
            T::Q4_0,
            T::Q4_1,
            T::Q5_0,
            T::Q5_1,
            T::Q8_0,
            T::Q2_K,
            T::Q3_K,
            T::Q4_K,
            T::Q5_K,
            T::Q6_K,
            T::IQ4_NL,
            T::IQ4_XS,
        ];
        let mut checked = 0;
        for ty in types {
            for kind in [
                GemvKind::PerRow,
                GemvKind::Workgroup,
                GemvKind::Subgroup,
                GemvKind::WorkgroupTeams,
            ] {
                for t in [1, 2] {
                    for w16 in [false, true] {
                        let (defs, _) = kind.defs(ty, t, w16);
                        check_wgsl("gemv", defs, Some(ty));
                        checked += 1;
                    }
                }
            }
            for sg in [16, 32, 64] {
                for w16 in [false, true] {
                    check_wgsl("gemm_coop", coop_defs_for(sg, w16).unwrap(), Some(ty));
                    checked += 1;
                }
            }
            for split in [
                SPLIT_DEFS,
                "const SPLIT: bool = false;\nvar<private> part: array<f32, 1>;",
            ] {
                check_wgsl("gemm", split, Some(ty));
                checked += 1;
            }
        }
        assert_eq!(checked, types.len() * (16 + 6 + 2));
    }
}
