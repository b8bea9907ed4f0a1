//! The GPU backend: the [`Backend`] ops as WGSL compute shaders through wgpu (Vulkan, Metal,
//! DX12; WebGPU in the browser). Models run on it unchanged.
//!
//! - Activations are device buffers ([`GpuTensor`]) that only grow; a step's ops are recorded
//!   into a command encoder held by the step's [`GpuCtx`], submitted every few dozen dispatches
//!   (the device starts on the first layers while the rest is recorded) and when the step
//!   reads back (its logits) or ends ([`Backend::finish`]).
//! - Every op is a dispatch, and a decode step's time is mostly the fixed cost of each, so the
//!   fused ops of [`Backend::fuses_ops`] are single dispatches here: runs of same-format
//!   weights (Q/K/V, gate/up) multiply as one concatenated weight; the GEMV reads its input
//!   through the block's RMSNorm or the FFN's GLU and can add to its output (the residual).
//!   `CERA_GPU_PROFILE=1` prints the host's time per dispatch, `=2` the device's time per op.
//! - Each dispatch's parameters and the host slices an op takes (token ids, positions, RoPE
//!   angles) are staged in one upload buffer per step and written once before the submit.
//! - Weights are uploaded on first use as the file holds them (ggml's blocks, each padded to
//!   whole words, split into parts where a tensor is larger than one binding may be) and
//!   dequantized in registers by the format's `wload4` (`shaders/quant/`), shared by the GEMV,
//!   the GEMM and the embedding lookup.
//! - Small model parameters (norm weights, biases, convolution taps) are uploaded once, keyed by
//!   their address, length and contents.
//! - KV caches are device buffers, head-major (`[head][position][row]`) in f32 or f16; saving
//!   and loading convert to the layout of [`KvCache::saved_len`], so snapshots move between
//!   backends.

mod device;
mod host;
mod kernels;
mod kv;
mod kv_slab;
mod lora;
mod moe;
mod ops;
mod select;
mod weights;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use device::{AdapterInfo, adapters};
#[cfg(target_arch = "wasm32")]
pub use host::set_host_yield;
pub use kv::GpuKv;
pub use weights::GemvKind;

use super::moe::{MoeLora, MoeWeights};
use super::{
    Act, AttentionParams, Backend, KvCache as _, KvSpec, LowRank, RopeConfig, SeqSpan, Weight,
};
use crate::error::{Error, Result};
use kernels::{FxMap, Pipelines};
use weights::GpuWeight;

/// Slots of the dummy output buffer (an op's absent outputs bind one each) and their stride
/// (WebGPU's largest storage offset alignment).
const UNUSED_SLOTS: u64 = 4;
const UNUSED_SLOT: u64 = 256;

/// Whether the GPU kernels read weights of type `ty`.
pub fn reads_type(ty: crate::quant::GgmlType) -> bool {
    kernels::quant_source(ty).is_some()
}

/// The wgpu backend on one adapter.
pub struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: AdapterInfo,
    pipelines: Pipelines,
    /// Weights resident on the device, by the [`Weight::resident_key`] of each weight in it
    /// (products of several weights concatenate them).
    #[allow(clippy::type_complexity)]
    weights: Mutex<FxMap<[(usize, usize, usize); weights::MAX_FUSED], Arc<GpuWeight>>>,
    /// Small parameter vectors resident on the device, by where they came from, with a copy
    /// of the contents they were made from (see [`Gpu::param_keyed`]).
    params: Mutex<FxMap<ParamKey, (Vec<f32>, wgpu::Buffer)>>,
    /// LoRA B matrices, by (A's resident key, B's address, width), with a weak handle on A's
    /// file.
    #[allow(clippy::type_complexity)]
    lora_b: Mutex<
        HashMap<
            ((usize, usize, usize), usize, usize),
            (Arc<std::sync::Weak<crate::gguf::GgufFile>>, wgpu::Buffer),
        >,
    >,
    /// `CERA_GPU_PROFILE=1`: where step time goes, printed when the backend is dropped.
    profile: Option<Mutex<Profile>>,
    /// `CERA_GPU_PROFILE=2`: a timestamp after every dispatch, device time summed per op.
    timing: bool,
    /// Bound where an op's optional tensor is absent (bindings cannot be left out): one for
    /// outputs, one for inputs (a dispatch may not use a buffer both ways).
    dummy: wgpu::Buffer,
    dummy_in: wgpu::Buffer,
    /// How the GEMV spreads rows over invocations: on a CPU adapter (lavapipe, where each of
    /// a workgroup's barriers costs a pass through all its invocations; SmolLM2's LM head took
    /// 245 ms a token as a workgroup per row, 163 ms as an invocation per row) an invocation
    /// per row; on GPUs a workgroup per row, summed by shuffles within its teams of 32 lanes
    /// and one exchange where subgroups allow (`teams`), else through workgroup memory
    /// (`workgroup`); `subgroup` (four rows a workgroup, a team each) measured slower.
    gemv: weights::GemvKind,
    /// Whether the GEMV reads formats of 256-element super-blocks in sixteens (`wload16`:
    /// each invocation decodes a sub-block's scale once for 16 elements, not once per 4): on
    /// CPU adapters (lavapipe: Qwen2.5's Q6_K FFN-down GEMV 23 -> 20 ms), off on GPUs, where
    /// runs of 16 contiguous elements an invocation cost more than the decoding saves (H100,
    /// tg64 two rounds: LFM2-350M Q4_K_M 410, 416 t/s against 529, 511 in fours; Qwen2.5 375,
    /// 378 against 411, 392); `CERA_GPU_WLOAD16=1|0` chooses.
    wload16: bool,
    /// Whether each GEMV pipeline is built for its row width (the pipeline constant `KC`, so
    /// that an invocation's passes over the row unroll): off unless `CERA_GPU_GEMV_KC=1`, as
    /// measured (H100, tg128 two rounds, with against without: SmolLM2 Q4_1 569, 563 against
    /// 574, 631 t/s; LFM2-350M Q4_K_M 519, 518 against 548, 646; Qwen2.5 423, 478 against
    /// 399, 497).
    gemv_kc: bool,
    /// `CERA_GPU_PROBE=OP:N` (`*` for every op): each dispatch of that op recorded N more
    /// times, each after a barrier (its results are then wrong: a measurement probe only). The
    /// step's time with and without gives what those dispatches cost the device inside a
    /// step, without timestamps between them.
    probe: Option<(String, u32)>,
    /// Whether a decode step's RoPE, cache store and attention go as one dispatch
    /// ([`Backend::rope_store_attend`]): off unless `CERA_GPU_FUSE_ATTN=1`, as measured (H100,
    /// tg128 three rounds: Qwen2.5 Q4_K_M 440, 434, 425 t/s fused against 483, 457, 457 apart;
    /// LFM2-350M 623, 640, 590 against 631, 622, 585): the dispatch it saves costs less than
    /// the work it repeats in every workgroup (the query's rotation, the step's own key).
    fuse_attn: bool,
    /// The prefill GEMM's cooperative-matrix variant's defs (its `enable` directives and
    /// workgroup size), where the adapter multiplies 16 × 16 × 16 f16 matrices into f32 and
    /// has one subgroup size; `CERA_GPU_COOP=0` turns it off.
    coop: Option<&'static str>,
    /// `CERA_GPU_CHECKS=1`: compile shaders with naga's runtime checks (index clamps, loop
    /// counters, guarded divisions), as untrusted WGSL gets; off by default (see
    /// `Gpu::pipeline`).
    checked_shaders: bool,
    /// Whether pipelines zero their workgroup memory at the start of each workgroup (WebGPU's
    /// rule, wgpu's default): off, as every shader writes its workgroup arrays before reading
    /// them; `CERA_GPU_ZERO_WG=1` puts it back.
    zero_workgroup_memory: bool,
    /// Dispatches after which a step's recording so far is submitted: (the first part, the
    /// later ones); `CERA_GPU_SUBMIT=FIRST,EVERY` sets them.
    submit_after: (u32, u32),
    /// Parameters pushed as immediates (adapters with them: Vulkan, Metal, DX12), else
    /// staged in a uniform buffer (WebGPU); `CERA_GPU_IMMEDIATES=0` stages them.
    immediates: bool,
    /// Where KV caches live: slots of buffers shared by the same layer of several sequences
    /// (see [`Gpu::set_kv_sequences`]).
    kv_pool: Arc<kv_slab::KvPool>,
}

/// Totals over the steps since the backend was made (`CERA_GPU_PROFILE=1`).
#[derive(Default, Debug)]
struct Profile {
    /// Submissions.
    submits: u64,
    dispatches: u64,
    /// Host time from a submission's first recorded dispatch to its submit returning.
    record: std::time::Duration,
    /// Host time blocked waiting for the device (read backs).
    wait: std::time::Duration,
    /// Of `record`: inside [`Gpu::dispatch_staged`], and finishing and submitting.
    in_dispatch: std::time::Duration,
    submit: std::time::Duration,
    /// Device nanoseconds and dispatches by (op, weight format), with `timing`.
    per_op: HashMap<(&'static str, Option<crate::quant::GgmlType>), (f64, u64)>,
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if let Some(p) = &self.profile {
            let p = p.lock().expect("profile");
            let n = p.submits.max(1) as f64;
            eprintln!(
                "gpu profile: {} submits, {:.1} dispatches each; recording {:.1} us/submit \
                 ({:.2} us/dispatch, of which {:.2} in dispatch, {:.2} submitting), waiting \
                 {:.1} us/submit",
                p.submits,
                p.dispatches as f64 / n,
                p.record.as_secs_f64() * 1e6 / n,
                p.record.as_secs_f64() * 1e6 / p.dispatches.max(1) as f64,
                p.in_dispatch.as_secs_f64() * 1e6 / p.dispatches.max(1) as f64,
                p.submit.as_secs_f64() * 1e6 / p.dispatches.max(1) as f64,
                p.wait.as_secs_f64() * 1e6 / n,
            );
            let mut ops: Vec<_> = p.per_op.iter().collect();
            ops.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
            let total: f64 = ops.iter().map(|o| o.1.0).sum();
            for ((op, ty), (ns, count)) in ops {
                let ty = ty.map(|t| t.to_string()).unwrap_or_default();
                eprintln!(
                    "  {op:>18} {ty:<7} {:>6.1}%  {:>10.1} us/submit  {:>8.2} us each  ({:.1} per submit)",
                    100.0 * ns / total.max(1.0),
                    ns / 1e3 / n,
                    ns / 1e3 / *count as f64,
                    *count as f64 / n,
                );
            }
        }
    }
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gpu({} on {})", self.info.name, self.info.api)
    }
}

/// Activations on the device: `rows` × `cols` f32, row-major; the buffer only grows.
#[derive(Default)]
pub struct GpuTensor {
    buf: Option<wgpu::Buffer>,
    rows: usize,
    cols: usize,
    /// The device that made the buffer (a clone copies on it).
    dev: Option<(wgpu::Device, wgpu::Queue)>,
    /// Bind groups binding `buf` when it is a sequence's state (see [`kernels::Bind::Seq`]).
    binds: kernels::SeqBinds,
}

/// A copy of `src` in a new buffer of its size, submitted at once (clones happen between
/// steps: a fork of a session).
fn copy_buffer(dev: &wgpu::Device, queue: &wgpu::Queue, src: &wgpu::Buffer) -> wgpu::Buffer {
    let dst = dev.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: src.size(),
        usage: src.usage(),
        mapped_at_creation: false,
    });
    let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    enc.copy_buffer_to_buffer(src, 0, &dst, 0, src.size());
    queue.submit([enc.finish()]);
    dst
}

impl Clone for GpuTensor {
    fn clone(&self) -> Self {
        let buf = match (&self.buf, &self.dev) {
            (Some(b), Some((d, q))) => Some(copy_buffer(d, q, b)),
            _ => None,
        };
        GpuTensor {
            buf,
            rows: self.rows,
            cols: self.cols,
            dev: self.dev.clone(),
            binds: Default::default(),
        }
    }
}

impl GpuTensor {
    /// (rows, cols).
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// The buffer (every op's output was reshaped first, so it exists).
    fn buf(&self) -> &wgpu::Buffer {
        self.buf
            .as_ref()
            .expect("a GPU tensor read before any op shaped it")
    }
}

/// One step's recording: its command encoder and upload buffer.
#[derive(Default)]
pub struct GpuCtx {
    /// The open compute pass of `enc` (declared first: it ends before the encoder goes).
    pass: Option<wgpu::ComputePass<'static>>,
    enc: Option<wgpu::CommandEncoder>,
    arena: Option<kernels::Arena>,
    /// Dispatches recorded through this context (for `dispatches per token`).
    pub dispatches: u64,
    /// Dispatches recorded since the last submit.
    unsubmitted: u32,
    /// Submits of the step so far (the first comes sooner: see [`Gpu::submit_after`]).
    step_submits: u32,
    /// The MoE block's working tensors.
    moe: moe::MoeTensors,
    /// `A · x` of a LoRA delta.
    lora_t: GpuTensor,
    /// Attention's partial results when a row's keys are split.
    attn_part: GpuTensor,
    /// A split-K GEMM's partial sums.
    gemm_part: GpuTensor,
    /// Top-k candidates per chunk of a row, and per row (see `select.rs`).
    topk_part: GpuTensor,
    topk_out: GpuTensor,
    /// The step's RoPE angle tables by (config, positions), most recent last: staged in the
    /// arena, so they last until the step's uploads start over (see [`kernels::Arena`]).
    rope_tables: Vec<(crate::backend::RopeConfig, Vec<usize>, kernels::Slot)>,
    /// The step's last table of sequences (position, first key and value words of each in
    /// its layer's shared cache buffers; see `kv::seq_table`), staged once for every layer
    /// whose caches sit alike.
    seq_table: Option<(Vec<u32>, kernels::Slot)>,
    /// Where read backs land (mappable; grows only).
    staging: Option<wgpu::Buffer>,
    /// The smallest MoE routing gap since it was last taken (see
    /// [`Backend::take_routing_margin`]).
    min_gap: Option<f32>,
    /// Bind groups by (pipeline, bindings), reused from step to step.
    bind_groups: kernels::BindGroups,
    /// When the unsubmitted recording began and its dispatches (for the profile).
    recording: Option<(crate::runtime::time::Instant, u64)>,
    /// With `Gpu::timing`: the query set and the ops stamped since the last submit.
    #[allow(clippy::type_complexity)]
    stamps: Option<(
        wgpu::QuerySet,
        Vec<(&'static str, Option<crate::quant::GgmlType>)>,
    )>,
}

impl Gpu {
    /// The backend on the adapter [`device::pick`] chooses (`CERA_GPU=N` names one).
    pub fn new() -> Result<Gpu> {
        let inst = device::instance();
        let (adapter, info) = device::pick(&inst)?;
        let mut limits = adapter.limits();
        // what the adapter allows, not the WebGPU defaults: weights need big bindings
        limits.max_compute_workgroups_per_dimension =
            limits.max_compute_workgroups_per_dimension.min(65535);
        // CERA_GPU_PROFILE=2: device time per op from timestamps between dispatches
        let stamps =
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        let timing = std::env::var("CERA_GPU_PROFILE").is_ok_and(|v| v == "2")
            && adapter.features().contains(stamps);
        let immediates = adapter.features().contains(wgpu::Features::IMMEDIATES)
            && limits.max_immediate_size as usize >= kernels::IMMEDIATE_WORDS * 4
            && std::env::var("CERA_GPU_IMMEDIATES").map_or(true, |v| v != "0");
        let coop = weights::coop_defs(&info);
        let coop_features = if coop.is_some() {
            wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16
        } else {
            wgpu::Features::empty()
        };
        let (device, queue) = host::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("cera"),
            required_features: (if timing {
                stamps
            } else {
                wgpu::Features::empty()
            }) | (adapter.features() & wgpu::Features::SUBGROUP)
                | coop_features
                | (if immediates {
                    wgpu::Features::IMMEDIATES
                } else {
                    wgpu::Features::empty()
                }),
            required_limits: limits,
            // SAFETY: the one experimental feature requested is cooperative matrices, used
            // only by the GEMM variant that the op tests check against the CPU on the adapter
            experimental_features: if coop.is_some() {
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            ..Default::default()
        }))?
        .map_err(|e| Error::Gpu(format!("{}: cannot open the device: {e}", info.name)))?;
        let unused = || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("unused binding"),
                size: UNUSED_SLOTS * UNUSED_SLOT,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        let gemv = weights::GemvKind::pick(&info);
        Ok(Gpu {
            dummy: unused(),
            dummy_in: unused(),
            gemv,
            wload16: match std::env::var("CERA_GPU_WLOAD16").as_deref() {
                Ok("1") => true,
                Ok("0") => false,
                _ => gemv == weights::GemvKind::PerRow,
            },
            fuse_attn: std::env::var("CERA_GPU_FUSE_ATTN").is_ok_and(|v| v == "1"),
            gemv_kc: std::env::var("CERA_GPU_GEMV_KC").is_ok_and(|v| v == "1"),
            probe: std::env::var("CERA_GPU_PROBE").ok().and_then(|v| {
                let (op, n) = v.split_once(':')?;
                Some((op.to_string(), n.parse().ok()?))
            }),
            coop,
            checked_shaders: std::env::var("CERA_GPU_CHECKS").is_ok_and(|v| v == "1"),
            zero_workgroup_memory: std::env::var("CERA_GPU_ZERO_WG").is_ok_and(|v| v == "1"),
            submit_after: kernels::submit_after_from_env(),
            immediates,
            kv_pool: Arc::new(kv_slab::KvPool::new(&device, &queue)),
            device,
            queue,
            info,
            pipelines: Pipelines::default(),
            weights: Mutex::default(),
            params: Mutex::default(),
            lora_b: Mutex::default(),
            profile: std::env::var_os("CERA_GPU_PROFILE").map(|_| Mutex::default()),
            timing,
        })
    }

    /// Where an op writes an output it does not have: slot `i` of the dummy buffer (two
    /// writable bindings of one range in a dispatch are a WebGPU validation error).
    fn unused_out(&self, i: usize) -> kernels::Bind<'_> {
        let i = i as u64 % UNUSED_SLOTS;
        kernels::Bind::Range(&self.dummy, i * UNUSED_SLOT, 16)
    }

    /// The backend with the GEMV variant chosen, whatever the adapter picked: tests run each
    /// variant the adapter can on one adapter.
    pub fn with_gemv(mut self, kind: GemvKind) -> Gpu {
        self.gemv = kind;
        self
    }

    /// The backend with the GEMV's sixteens for super-block formats on or off (see
    /// [`Gpu::uses_wload16`]), whatever the adapter's default.
    pub fn with_wload16(mut self, on: bool) -> Gpu {
        self.wload16 = on;
        self
    }

    /// The backend with each GEMV pipeline built for its row width or not (see
    /// [`Gpu::gemv_width_constant`]), whatever the adapter's default.
    pub fn with_gemv_width_constant(mut self, on: bool) -> Gpu {
        self.gemv_kc = on;
        self
    }

    /// Whether each GEMV pipeline is built for its row width (its loops' trip counts
    /// constants the compiler unrolls).
    pub fn gemv_width_constant(&self) -> bool {
        self.gemv_kc
    }

    /// How many sequences this backend's KV caches are laid out for (llama.cpp's
    /// `n_seq_max`; default 1): each attention layer's caches of up to `n` sequences share
    /// one buffer, made whole with the first of them, so that a batched decode step stores
    /// and attends for all of them in one dispatch per layer instead of one per sequence.
    /// Caches made before keep their layout; a further sequence starts another buffer.
    pub fn set_kv_sequences(&self, n: usize) {
        self.kv_pool.set_per_slab(n);
    }

    /// See [`Gpu::set_kv_sequences`].
    pub fn kv_sequences(&self) -> usize {
        self.kv_pool.per_slab()
    }

    /// The backend with a decode step's RoPE, cache store and attention in one dispatch or
    /// apart (see [`Gpu::fuses_attention`]), whatever the default.
    pub fn with_fused_attention(mut self, on: bool) -> Gpu {
        self.fuse_attn = on;
        self
    }

    /// Whether a decode step's RoPE, cache store and attention go as one dispatch.
    pub fn fuses_attention(&self) -> bool {
        self.fuse_attn
    }

    /// Whether the GEMV reads formats of 256-element super-blocks 16 elements an invocation,
    /// their sub-block's scale decoded once for them.
    pub fn uses_wload16(&self) -> bool {
        self.wload16
    }

    /// The GEMV variant in use.
    pub fn gemv(&self) -> GemvKind {
        self.gemv
    }

    /// Whether prefill GEMMs of super-block formats run on cooperative matrices.
    pub fn uses_coop(&self) -> bool {
        self.coop.is_some()
    }

    /// The backend with the cooperative-matrix GEMM turned off (tests check the plain GEMM on
    /// adapters that have them).
    pub fn without_coop(mut self) -> Gpu {
        self.coop = None;
        self
    }

    /// Whether ops take their parameters as immediates (else from a uniform buffer).
    pub fn uses_immediates(&self) -> bool {
        self.immediates
    }

    /// The backend reading every op's parameters from a uniform buffer, as on adapters
    /// without immediates (WebGPU): tests check that path where the adapter has them. Call
    /// it on a fresh backend (its pipelines are built for one or the other).
    pub fn without_immediates(mut self) -> Gpu {
        self.immediates = false;
        self
    }

    /// The adapter in use.
    pub fn info(&self) -> &AdapterInfo {
        &self.info
    }

    fn new_buffer(&self, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes.max(16).next_multiple_of(16),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// `t` shaped `rows` × `cols` (a new buffer only when it must grow).
    fn shape_to(&self, t: &mut GpuTensor, rows: usize, cols: usize) {
        let need = (rows * cols * 4) as u64;
        if t.buf.as_ref().is_none_or(|b| b.size() < need) {
            t.buf = Some(self.new_buffer(need));
            t.dev = Some((self.device.clone(), self.queue.clone()));
            t.binds = Default::default();
        }
        t.rows = rows;
        t.cols = cols;
    }

    /// Products of `x` (through `input`) by each weight, runs of fusable weights (Q/K/V,
    /// gate/up) in one dispatch, each output's bias (`biases[i]`, if any) added.
    fn products(
        &self,
        cx: &mut GpuCtx,
        ops: &mut [(&Weight, &mut GpuTensor)],
        x: &GpuTensor,
        input: weights::Input<'_>,
        biases: &[Option<&[f32]>],
    ) -> Result<()> {
        let bias_of = |i: usize| biases.get(i).copied().flatten();
        // runs of fusable weights (Q/K/V, gate/up) go as one product
        let mut rest = ops;
        let mut first = 0;
        while !rest.is_empty() {
            let mut n = 1;
            while n < rest.len().min(weights::MAX_FUSED) && weights::fusable(rest[0].0, rest[n].0) {
                n += 1;
            }
            let (run, tail) = rest.split_at_mut(n);
            let mut ws = [run[0].0; weights::MAX_FUSED];
            for (w, (rw, _)) in ws.iter_mut().zip(run.iter()) {
                *w = rw;
            }
            let run_biases: Vec<Option<&[f32]>> = (first..first + n).map(bias_of).collect();
            // the GEMV adds the run's biases as it stores (one buffer, concatenated as the
            // weights are); after a GEMM they are dispatches of their own
            let fused = weights::fuses_input(x.rows) && run_biases.iter().any(Option::is_some);
            let bias = fused.then(|| {
                let rows: Vec<usize> = run.iter().map(|(w, _)| w.rows).collect();
                self.param_concat(&run_biases, &rows)
            });
            let mut outs: Vec<&mut GpuTensor> = run.iter_mut().map(|(_, o)| &mut **o).collect();
            weights::matmul_bias(
                self,
                cx,
                &ws[..n],
                x,
                input,
                &mut outs,
                false,
                bias.as_ref(),
            )?;
            if !fused {
                for (out, b) in outs.into_iter().zip(&run_biases) {
                    if let Some(b) = b {
                        ops::add_bias(self, cx, out, b);
                    }
                }
            }
            first += n;
            rest = tail;
        }
        Ok(())
    }

    /// The concatenation of `parts` (`rows[i]` values each; an absent part is zeros) resident
    /// on the device, cached as [`Gpu::param`] is, by the parts' addresses.
    fn param_concat(&self, parts: &[Option<&[f32]>], rows: &[usize]) -> wgpu::Buffer {
        assert!(parts.len() <= weights::MAX_FUSED && parts.len() == rows.len());
        let mut key = [(0, 0); weights::MAX_FUSED];
        let mut v = Vec::with_capacity(rows.iter().sum());
        for ((k, p), &n) in key.iter_mut().zip(parts).zip(rows) {
            match p {
                Some(b) => {
                    assert_eq!(b.len(), n, "a bias per output row");
                    *k = (b.as_ptr() as usize, n);
                    v.extend_from_slice(b);
                }
                None => {
                    *k = (0, n);
                    v.resize(v.len() + n, 0.0);
                }
            }
        }
        self.param_keyed(key, &v)
    }

    /// A small parameter vector resident on the device.
    fn param(&self, v: &[f32]) -> wgpu::Buffer {
        let mut key = [(0, 0); weights::MAX_FUSED];
        key[0] = (v.as_ptr() as usize, v.len());
        self.param_keyed(key, v)
    }

    /// `v` resident on the device by `key` (the addresses it came from), checked against a
    /// copy of the contents: the addresses alone could be reused by others, and comparing is
    /// a memcmp where hashing the contents on every use (a norm's weights, twice per layer
    /// and token) was a serial loop.
    fn param_keyed(&self, key: ParamKey, v: &[f32]) -> wgpu::Buffer {
        let mut map = self.params.lock().expect("params");
        if let Some((copy, buf)) = map.get(&key)
            && kernels::bytes_of(copy) == kernels::bytes_of(v)
        {
            return buf.clone();
        }
        let buf = self.buffer_with(kernels::bytes_of(v), wgpu::BufferUsages::STORAGE);
        map.insert(key, (v.to_vec(), buf.clone()));
        buf
    }
}

/// Where a resident parameter vector's parts came from: (address, length) each.
type ParamKey = [(usize, usize); weights::MAX_FUSED];

impl Backend for Gpu {
    type Tensor = GpuTensor;
    type Kv = GpuKv;
    type Ctx = GpuCtx;

    fn name(&self) -> &'static str {
        match self.info.api.as_str() {
            "Vulkan" => "Vulkan",
            "Metal" => "Metal",
            "Dx12" => "DX12",
            "BrowserWebGpu" => "WebGPU",
            _ => "GPU",
        }
    }

    fn kv_supported(&self, spec: KvSpec, head_dim: usize, head_dim_v: usize) -> bool {
        kv::supported(spec, head_dim, head_dim_v)
    }

    fn finish(&self, cx: &mut GpuCtx) {
        self.flush(cx);
    }

    fn take_routing_margin(&self, cx: &mut GpuCtx) -> Option<f32> {
        cx.min_gap.take()
    }

    fn new_kv(
        &self,
        spec: KvSpec,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> GpuKv {
        GpuKv::new(self, None, spec, n_ctx, n_kv_head, head_dim, head_dim_v)
    }

    fn new_layer_kv(
        &self,
        layer: usize,
        spec: KvSpec,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> GpuKv {
        GpuKv::new(
            self,
            Some(layer),
            spec,
            n_ctx,
            n_kv_head,
            head_dim,
            head_dim_v,
        )
    }

    fn zeros(&self, rows: usize, cols: usize) -> GpuTensor {
        let mut t = GpuTensor::default();
        self.shape_to(&mut t, rows, cols);
        // new buffers are zeroed by wgpu
        t
    }

    fn fill_zero(&self, cx: &mut GpuCtx, t: &mut GpuTensor) {
        if t.len() > 0 {
            let n = (t.len() * 4) as u64;
            self.encoder(cx).clear_buffer(t.buf(), 0, Some(n));
        }
    }

    fn upload(&self, cx: &mut GpuCtx, data: &[f32], rows: usize, cols: usize, t: &mut GpuTensor) {
        assert_eq!(data.len(), rows * cols, "upload: {rows} x {cols}");
        self.shape_to(t, rows, cols);
        if data.is_empty() {
            return;
        }
        ops::upload(self, cx, data, t.buf());
    }

    fn download(&self, cx: &mut GpuCtx, t: &GpuTensor, out: &mut Vec<f32>) {
        out.clear();
        if t.len() == 0 {
            self.flush(cx);
            return;
        }
        self.read_back_with(cx, t.buf(), 0, (t.len() * 4) as u64, |bytes| {
            out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            )
        });
    }

    fn top_k(&self, cx: &mut GpuCtx, t: &GpuTensor, k: usize, out: &mut Vec<(u32, f32)>) {
        if select::fits(t.cols, k) {
            return select::top_k(self, cx, t, k, out);
        }
        let mut v = Vec::new();
        self.download(cx, t, &mut v);
        crate::backend::top_k_rows(&v, t.cols, k, out);
    }

    fn shape(&self, t: &GpuTensor) -> (usize, usize) {
        (t.rows, t.cols)
    }

    fn reshape(&self, t: &mut GpuTensor, rows: usize, cols: usize) {
        self.shape_to(t, rows, cols);
    }

    fn embed(
        &self,
        cx: &mut GpuCtx,
        table: &Weight,
        _tied: &Weight,
        tokens: &[u32],
        out: &mut GpuTensor,
    ) -> Result<()> {
        weights::embed(self, cx, table, tokens, out)
    }

    fn matmul(
        &self,
        cx: &mut GpuCtx,
        ops: &mut [(&Weight, &mut GpuTensor)],
        x: &GpuTensor,
    ) -> Result<()> {
        self.products(cx, ops, x, weights::Input::Plain, &[])
    }

    fn fuses_ops(&self) -> bool {
        true
    }

    fn norm_matmul(
        &self,
        cx: &mut GpuCtx,
        x: &GpuTensor,
        w: &[f32],
        eps: f32,
        h: &mut GpuTensor,
        ops: &mut [(&Weight, &mut GpuTensor)],
    ) -> Result<()> {
        if weights::fuses_input(x.rows) && w.len() == x.cols {
            return self.products(cx, ops, x, weights::Input::Norm(w, eps), &[]);
        }
        ops::rms_norm(self, cx, x, w, eps, h);
        self.products(cx, ops, h, weights::Input::Plain, &[])
    }

    fn norm_matmul_bias(
        &self,
        cx: &mut GpuCtx,
        x: &GpuTensor,
        w: &[f32],
        eps: f32,
        h: &mut GpuTensor,
        ops: &mut [(&Weight, &mut GpuTensor)],
        biases: &[Option<&[f32]>],
    ) -> Result<()> {
        if weights::fuses_input(x.rows) && w.len() == x.cols {
            return self.products(cx, ops, x, weights::Input::Norm(w, eps), biases);
        }
        ops::rms_norm(self, cx, x, w, eps, h);
        self.products(cx, ops, h, weights::Input::Plain, biases)
    }

    fn glu_matmul_add(
        &self,
        cx: &mut GpuCtx,
        gate: &mut GpuTensor,
        up: &GpuTensor,
        act: Act,
        w: &Weight,
        out: &mut GpuTensor,
    ) -> Result<()> {
        if weights::fuses_input(gate.rows) {
            let input = weights::Input::Glu(up, act);
            return weights::matmul(self, cx, &[w], gate, input, &mut [out], true);
        }
        ops::glu(self, cx, gate, up, act);
        weights::matmul(
            self,
            cx,
            &[w],
            gate,
            weights::Input::Plain,
            &mut [out],
            true,
        )
    }

    fn matmul_add(
        &self,
        cx: &mut GpuCtx,
        w: &Weight,
        x: &GpuTensor,
        out: &mut GpuTensor,
    ) -> Result<()> {
        weights::matmul(self, cx, &[w], x, weights::Input::Plain, &mut [out], true)
    }

    fn rope_qk(
        &self,
        cx: &mut GpuCtx,
        q: &mut GpuTensor,
        n_head: usize,
        k: &mut GpuTensor,
        n_kv_head: usize,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    ) {
        ops::rope(
            self,
            cx,
            q,
            n_head,
            Some((k, n_kv_head)),
            head_dim,
            pos,
            cfg,
        );
    }

    fn rope_qk_store(
        &self,
        cx: &mut GpuCtx,
        q: &mut GpuTensor,
        n_head: usize,
        k: &mut GpuTensor,
        v: &GpuTensor,
        kv: &mut GpuKv,
        span: SeqSpan,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    ) {
        // one dispatch instead of two: decode's cost is per dispatch
        if head_dim == kv.dims().1 && kv::rope_store(self, cx, q, n_head, k, v, kv, span, pos, cfg)
        {
            return;
        }
        let n_kv_head = kv.dims().0;
        self.rope_qk(cx, q, n_head, k, n_kv_head, head_dim, pos, cfg);
        self.kv_store(cx, kv, k, v, span);
    }

    fn rope_store_attend(
        &self,
        cx: &mut GpuCtx,
        q: &mut GpuTensor,
        k: &mut GpuTensor,
        v: &GpuTensor,
        kv: &mut GpuKv,
        span: SeqSpan,
        pos: &[usize],
        cfg: &RopeConfig,
        p: &AttentionParams,
        out: &mut GpuTensor,
    ) {
        // decoding: one dispatch instead of two (a step's cost is per dispatch)
        if kv::rope_store_attend(self, cx, q, k, v, kv, span, pos, cfg, p, out) {
            return;
        }
        self.rope_qk_store(cx, q, p.n_head, k, v, kv, span, p.head_dim, pos, cfg);
        self.attention(cx, q, &[&*kv], &[span], p, out);
    }

    fn rms_norm(&self, cx: &mut GpuCtx, x: &GpuTensor, w: &[f32], eps: f32, out: &mut GpuTensor) {
        ops::rms_norm(self, cx, x, w, eps, out);
    }

    fn rms_norm_inplace(&self, cx: &mut GpuCtx, x: &mut GpuTensor, w: &[f32], eps: f32) {
        ops::rms_norm_inplace(self, cx, x, w, eps);
    }

    fn rms_norm_pair(
        &self,
        cx: &mut GpuCtx,
        q: &mut GpuTensor,
        wq: &[f32],
        k: &mut GpuTensor,
        wk: &[f32],
        eps: f32,
    ) {
        if wq.len() == wk.len() {
            ops::rms_norm_pair(self, cx, q, wq, k, wk, eps);
        } else {
            ops::rms_norm_inplace(self, cx, q, wq, eps);
            ops::rms_norm_inplace(self, cx, k, wk, eps);
        }
    }

    fn layer_norm(
        &self,
        cx: &mut GpuCtx,
        x: &GpuTensor,
        w: &[f32],
        b: &[f32],
        eps: f32,
        out: &mut GpuTensor,
    ) {
        ops::layer_norm(self, cx, x, w, b, eps, out);
    }

    fn activate(&self, cx: &mut GpuCtx, x: &mut GpuTensor, act: Act) {
        ops::activate(self, cx, x, act);
    }

    fn add(&self, cx: &mut GpuCtx, x: &mut GpuTensor, y: &GpuTensor) {
        ops::add(self, cx, x, y);
    }

    fn lora(
        &self,
        cx: &mut GpuCtx,
        out: &mut GpuTensor,
        x: &GpuTensor,
        rows: Option<&[usize]>,
        w: &LowRank,
        s: f32,
    ) -> Result<()> {
        lora::lora(self, cx, out, x, rows, w, s)
    }

    fn lora_embed(
        &self,
        cx: &mut GpuCtx,
        out: &mut GpuTensor,
        tokens: &[u32],
        rows: Option<&[usize]>,
        w: &LowRank,
        s: f32,
    ) -> Result<()> {
        lora::lora_embed(self, cx, out, tokens, rows, w, s)
    }

    fn scale(&self, cx: &mut GpuCtx, x: &mut GpuTensor, s: f32) {
        ops::scale(self, cx, x, s);
    }

    fn add_bias(&self, cx: &mut GpuCtx, x: &mut GpuTensor, bias: &[f32]) {
        ops::add_bias(self, cx, x, bias);
    }

    fn glu(&self, cx: &mut GpuCtx, gate: &mut GpuTensor, up: &GpuTensor, act: Act) {
        ops::glu(self, cx, gate, up, act);
    }

    fn softcap(&self, cx: &mut GpuCtx, x: &mut GpuTensor, cap: f32) {
        ops::softcap(self, cx, x, cap);
    }

    fn copy_cols(
        &self,
        cx: &mut GpuCtx,
        src: &GpuTensor,
        col0: usize,
        n: usize,
        dst: &mut GpuTensor,
    ) {
        ops::copy_cols(self, cx, src, col0, n, dst);
    }

    fn gather_rows(&self, cx: &mut GpuCtx, src: &GpuTensor, rows: &[usize], dst: &mut GpuTensor) {
        ops::gather_rows(self, cx, src, rows, dst);
    }

    fn rope(
        &self,
        cx: &mut GpuCtx,
        x: &mut GpuTensor,
        n_head: usize,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    ) {
        ops::rope(self, cx, x, n_head, None, head_dim, pos, cfg);
    }

    fn kv_store(
        &self,
        cx: &mut GpuCtx,
        kv: &mut GpuKv,
        k: &GpuTensor,
        v: &GpuTensor,
        span: SeqSpan,
    ) {
        kv::store(self, cx, kv, k, v, span);
    }

    fn kv_store_seqs(
        &self,
        cx: &mut GpuCtx,
        kv: &[&GpuKv],
        k: &GpuTensor,
        v: &GpuTensor,
        spans: &[SeqSpan],
    ) -> bool {
        kv::store_seqs(self, cx, kv, k, v, spans)
    }

    fn kv_save(&self, kv: &GpuKv, n: usize, out: &mut Vec<u8>) {
        kv::save(self, kv, n, out);
    }

    fn kv_load(&self, kv: &mut GpuKv, n: usize, src: &[u8]) -> Result<()> {
        kv::load(self, kv, n, src)
    }

    fn kv_shift(
        &self,
        kv: &mut GpuKv,
        keep: usize,
        n_discard: usize,
        n_past: usize,
        rope: Option<&RopeConfig>,
    ) {
        kv::shift(self, kv, keep, n_discard, n_past, rope);
    }

    fn attention(
        &self,
        cx: &mut GpuCtx,
        q: &GpuTensor,
        kv: &[&GpuKv],
        spans: &[SeqSpan],
        p: &AttentionParams,
        out: &mut GpuTensor,
    ) {
        kv::attention(self, cx, q, kv, spans, p, out);
    }

    fn short_conv(
        &self,
        cx: &mut GpuCtx,
        bcx: &GpuTensor,
        kernel: &[f32],
        state: &mut GpuTensor,
        span: SeqSpan,
        out: &mut GpuTensor,
    ) {
        ops::short_conv(self, cx, bcx, kernel, state, span, out);
    }

    fn moe(
        &self,
        cx: &mut GpuCtx,
        w: &MoeWeights,
        h: &GpuTensor,
        lora: &dyn MoeLora,
        out: &mut GpuTensor,
    ) -> Result<()> {
        moe::moe(self, cx, w, h, lora, out)
    }
}
