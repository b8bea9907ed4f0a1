//! Shaders, pipelines and recording: WGSL sources assembled from one file per op plus the
//! shared pieces it needs (the weight format's dequantization), compiled once per variant;
//! dispatches recorded into the step's command encoder with their parameters and host slices
//! staged in one upload buffer per step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Gpu, GpuCtx};
use crate::quant::GgmlType;

/// Bytes of the per-step upload buffer (parameters and host slices); a step that needs more
/// is submitted in parts.
const ARENA_BYTES: u64 = 1 << 20;
/// Host slices larger than this get a buffer of their own instead of arena space.
const LARGE_UPLOAD: usize = 64 << 10;
/// Bind groups a step context keeps before it forgets them all (they hold their buffers).
const MAX_BIND_GROUPS: usize = 4096;
/// Timestamps per submission with `CERA_GPU_PROFILE=2` (later dispatches go unstamped).
const MAX_STAMPS: u32 = 4096;
/// Workgroups per dimension WebGPU guarantees.
const MAX_GROUPS: u32 = 65535;

const COMMON: &str = include_str!("shaders/common.wgsl");
const QUANT_COMMON: &str = include_str!("shaders/quant/common.wgsl");

/// The op's own WGSL file.
fn op_source(op: &str) -> &'static str {
    match op {
        "gemv" => include_str!("shaders/gemv.wgsl"),
        "gemm" => include_str!("shaders/gemm.wgsl"),
        "gemm_coop" => include_str!("shaders/gemm_coop.wgsl"),
        "gemm_reduce" => include_str!("shaders/gemm_reduce.wgsl"),
        "embed" => include_str!("shaders/embed.wgsl"),
        "rms_norm" => include_str!("shaders/rms_norm.wgsl"),
        "layer_norm" => include_str!("shaders/layer_norm.wgsl"),
        "add" => include_str!("shaders/add.wgsl"),
        "scale" => include_str!("shaders/scale.wgsl"),
        "add_bias" => include_str!("shaders/add_bias.wgsl"),
        "activate" => include_str!("shaders/activate.wgsl"),
        "glu" => include_str!("shaders/glu.wgsl"),
        "softcap" => include_str!("shaders/softcap.wgsl"),
        "copy_cols" => include_str!("shaders/copy_cols.wgsl"),
        "gather_rows" => include_str!("shaders/gather_rows.wgsl"),
        "rope" => include_str!("shaders/rope.wgsl"),
        "rope_store" => include_str!("shaders/rope_store.wgsl"),
        "kv_store" => include_str!("shaders/kv_store.wgsl"),
        "kv_store_q8" => include_str!("shaders/kv_store_q8.wgsl"),
        "attention" => include_str!("shaders/attention.wgsl"),
        "attention_combine" => include_str!("shaders/attention_combine.wgsl"),
        "attention_tile" => include_str!("shaders/attention_tile.wgsl"),
        "short_conv" => include_str!("shaders/short_conv.wgsl"),
        "short_conv_state" => include_str!("shaders/short_conv_state.wgsl"),
        "upload" => include_str!("shaders/upload.wgsl"),
        "moe_scatter" => include_str!("shaders/moe_scatter.wgsl"),
        "moe_sum" => include_str!("shaders/moe_sum.wgsl"),
        "lora_delta" => include_str!("shaders/lora_delta.wgsl"),
        "top_k" => include_str!("shaders/top_k.wgsl"),
        other => unreachable!("no shader for op {other}"),
    }
}

/// The dequantization of a weight format: `wload4(row_base_byte, element) -> vec4<f32>`.
pub(super) fn quant_source(ty: GgmlType) -> Option<&'static str> {
    use GgmlType as T;
    Some(match ty {
        T::F32 => include_str!("shaders/quant/f32.wgsl"),
        T::F16 => include_str!("shaders/quant/f16.wgsl"),
        T::BF16 => include_str!("shaders/quant/bf16.wgsl"),
        T::Q4_0 => include_str!("shaders/quant/q4_0.wgsl"),
        T::Q4_1 => include_str!("shaders/quant/q4_1.wgsl"),
        T::Q5_0 => include_str!("shaders/quant/q5_0.wgsl"),
        T::Q5_1 => include_str!("shaders/quant/q5_1.wgsl"),
        T::Q8_0 => include_str!("shaders/quant/q8_0.wgsl"),
        T::Q2_K => include_str!("shaders/quant/q2_k.wgsl"),
        T::Q3_K => include_str!("shaders/quant/q3_k.wgsl"),
        T::Q4_K => include_str!("shaders/quant/q4_k.wgsl"),
        T::Q5_K => include_str!("shaders/quant/q5_k.wgsl"),
        T::Q6_K => include_str!("shaders/quant/q6_k.wgsl"),
        T::IQ4_NL => include_str!("shaders/quant/iq4_nl.wgsl"),
        T::IQ4_XS => include_str!("shaders/quant/iq4_xs.wgsl"),
        _ => return None,
    })
}

/// A compiled variant: the op, its constants (`defs`, WGSL declarations put first), the
/// weight format it reads, if any, and the value of its pipeline constant `KC` (0: none; the
/// GEMV's row width, see gemv.wgsl).
#[derive(Clone, Copy)]
struct Key {
    op: &'static str,
    defs: &'static str,
    ty: Option<GgmlType>,
    kc: u32,
}

impl Key {
    /// The cache's key: the strings by address (each call site passes its own constants, so
    /// equal texts at two addresses at most compile twice), not hashing and comparing the
    /// defs' text on every dispatch.
    fn id(&self) -> KeyId {
        (
            self.op.as_ptr() as usize,
            self.defs.as_ptr() as usize,
            self.defs.len(),
            self.ty,
            self.kc,
        )
    }
}

type KeyId = (usize, usize, usize, Option<GgmlType>, u32);

#[derive(Default)]
pub(super) struct Pipelines {
    map: Mutex<FxMap<KeyId, Arc<wgpu::ComputePipeline>>>,
}

/// One binding of a dispatch (in binding order after the parameters at binding 0).
pub(super) enum Bind<'a> {
    Whole(&'a wgpu::Buffer),
    Range(&'a wgpu::Buffer, u64, u64),
    /// A whole buffer owned by a sequence (a KV cache, a convolution state): bind groups
    /// holding one are kept by its owner (the [`SeqBinds`] given), so a finished session's
    /// cache is freed with it.
    Seq(&'a wgpu::Buffer, &'a SeqBinds),
    /// A range (offset, size) of a buffer whose bind groups its owner keeps, as `Seq`: a
    /// sequence's slot of a shared KV buffer (see `kv_slab`).
    SeqRange(&'a wgpu::Buffer, u64, u64, &'a SeqBinds),
}

/// Bind groups that bind a sequence's buffers, kept by the sequence's state (its KV cache,
/// its convolution state) and dropped with it.
#[derive(Default)]
pub struct SeqBinds(Mutex<BindGroups>);

/// Bind groups an owner keeps before it forgets them all.
const MAX_SEQ_BIND_GROUPS: usize = 256;

/// What a bind group binds: (buffer, offset, size) at bindings 0.. (the parameters first).
type BgKey = [Option<(wgpu::Buffer, u64, u64)>; 9];

/// Bind groups by what they bind, for reuse from step to step: keyed by a hash of the
/// pipeline and bindings, each entry checked against its bindings on a hit (so a dispatch
/// that finds its group clones no buffer handles).
#[derive(Default)]
pub(super) struct BindGroups(FxMap<u64, Vec<(usize, BgKey, wgpu::BindGroup)>>);

impl BindGroups {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// A binding as (buffer, offset, size).
fn bind_range<'a>(b: &Bind<'a>) -> (&'a wgpu::Buffer, u64, u64) {
    match *b {
        Bind::Whole(buf) | Bind::Seq(buf, _) => (buf, 0, buf.size()),
        Bind::Range(buf, off, size) | Bind::SeqRange(buf, off, size, _) => (buf, off, size),
    }
}

/// A multiply-rotate hasher (FxHash's step): the bind group lookup hashes a few words per
/// dispatch, where SipHash's setup dominated.
#[derive(Default)]
pub(super) struct Fx(u64);

/// A map hashed by [`Fx`]: the maps looked up on every dispatch or product (pipelines, bind
/// groups, resident weights and parameters), whose keys are addresses and sizes, not input
/// anyone chooses (SipHash took 4% of a decode step's host time).
pub(super) type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fx>>;

impl std::hash::Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// Words of the immediates every pipeline declares when the device takes them (each op's `P`
/// padded to this, so that one layout size serves all and a dispatch pushes them whole).
pub(super) const IMMEDIATE_WORDS: usize = 32;

/// The line every op declares its parameters with (as a uniform at binding 0).
const PARAMS_UNIFORM: &str = "@group(0) @binding(0) var<uniform> p: P;";

/// An op's source with its parameters as immediates (pushed with each dispatch, read from
/// registers: no load from a uniform buffer at the start of every kernel, nor its staging on
/// the host): `P` padded with unused fields to [`IMMEDIATE_WORDS`] words.
fn immediate_params(src: &str) -> String {
    let start = src.find("struct P {").expect("every op declares struct P");
    let end = start + src[start..].find('}').expect("struct P closes");
    let fields = src[start..end].matches(':').count();
    assert!(
        fields <= IMMEDIATE_WORDS && src.contains(PARAMS_UNIFORM),
        "struct P of {fields} u32 fields, declared as a uniform at binding 0"
    );
    let pad: String = (fields..IMMEDIATE_WORDS)
        .map(|i| format!(" _pad{i}: u32,"))
        .collect();
    let body = src[start..end].trim_end();
    let sep = if body.ends_with(',') { "" } else { "," };
    let mut out = String::with_capacity(src.len() + pad.len());
    out.push_str(&src[..start]);
    out.push_str(body);
    out.push_str(sep);
    out.push_str(&pad);
    out.push('\n');
    out.push_str(&src[end..]);
    out.replace(PARAMS_UNIFORM, "var<immediate> p: P;")
}

/// A dispatch's parameters: staged in the upload buffer (bound at 0), or pushed with it (the
/// words' bytes, and how many bytes: no allocation on every dispatch's path).
pub(super) enum Params {
    Staged(Slot),
    Immediate([u8; IMMEDIATE_WORDS * 4], usize),
}

impl Params {
    /// `words`, then `last` if any, as immediates.
    fn immediate(words: &[u32], last: Option<u32>) -> Params {
        let mut bytes = [0u8; IMMEDIATE_WORDS * 4];
        let mut n = 0;
        for w in words.iter().chain(last.as_ref()) {
            bytes[n..n + 4].copy_from_slice(&w.to_le_bytes());
            n += 4;
        }
        Params::Immediate(bytes, n)
    }
}

/// Where staged host data landed.
#[derive(Clone)]
pub(super) struct Slot {
    buf: wgpu::Buffer,
    off: u64,
    size: u64,
}

impl Slot {
    pub(super) fn bind(&self) -> Bind<'_> {
        Bind::Range(&self.buf, self.off, self.size)
    }
}

/// The per-step upload buffer: staged on the host, written before each of the step's submits
/// (a step is submitted in parts: see [`SUBMIT_EVERY`]).
pub(super) struct Arena {
    buf: wgpu::Buffer,
    /// Bytes written by the step's earlier parts (aligned); `staged` goes after them.
    base: usize,
    staged: Vec<u8>,
}

/// Dispatches after which a step's recording so far is submitted, the first part and then
/// every later one: the device starts on the first layers while the host records the rest (a
/// decode step's recording takes about as long as its execution, so the device waits for the
/// first part only; each submit costs the host a few microseconds more).
const SUBMIT_FIRST: u32 = 16;
const SUBMIT_EVERY: u32 = 48;

/// `CERA_GPU_SUBMIT=FIRST,EVERY` (for measuring them), else the defaults.
pub(super) fn submit_after_from_env() -> (u32, u32) {
    let v = std::env::var("CERA_GPU_SUBMIT").unwrap_or_default();
    let mut it = v
        .split(',')
        .map(|x| x.trim().parse::<u32>().ok().filter(|&n| n > 0));
    match (it.next().flatten(), it.next().flatten()) {
        (Some(a), Some(b)) => (a, b),
        _ => (SUBMIT_FIRST, SUBMIT_EVERY),
    }
}

/// The WGSL of a variant: its defs, the shared functions, the weight format's dequantization,
/// the op; parameters as immediates where the device takes them.
fn module_source(key: Key, immediates: bool) -> String {
    let mut src = String::new();
    src.push_str(key.defs);
    src.push('\n');
    src.push_str(COMMON);
    if let Some(ty) = key.ty {
        src.push_str(QUANT_COMMON);
        let q = quant_source(ty).expect("checked by the caller");
        src.push_str(q);
        if !q.contains("HAS_WLOAD16") {
            src.push_str(include_str!("shaders/quant/wload16.wgsl"));
        }
    }
    if matches!(key.op, "gemv" | "gemm" | "gemm_coop" | "gemm_reduce") {
        src.push_str(include_str!("shaders/out.wgsl"));
    }
    src.push_str(op_source(key.op));
    if immediates {
        src = immediate_params(&src);
    }
    src
}

impl Gpu {
    fn pipeline(&self, key: Key) -> Arc<wgpu::ComputePipeline> {
        let mut map = self.pipelines.map.lock().expect("pipeline cache");
        if let Some(p) = map.get(&key.id()) {
            return Arc::clone(p);
        }
        let src = module_source(key, self.immediates);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(key.op),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        };
        let module = if self.checked_shaders {
            self.device.create_shader_module(desc)
        } else {
            // SAFETY: these are our own shaders, whose every index stays in its array (the op
            // tests run them on every path against the CPU, with `CERA_GPU_CHECKS=1` too),
            // whose loops end, and whose integer divisors are never zero; buffer accesses stay
            // bounds-checked by the driver where wgpu enables robust buffer access. Without
            // the runtime checks naga injects (index clamps, a counter in every loop, guarded
            // divisions) the compiler can unroll loops and keep small arrays in registers.
            unsafe {
                self.device
                    .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
            }
        };
        let kc = [("KC", f64::from(key.kc))];
        let p = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(key.op),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &kc[..usize::from(key.kc != 0)],
                    zero_initialize_workgroup_memory: self.zero_workgroup_memory,
                },
                cache: None,
            });
        let p = Arc::new(p);
        map.insert(key.id(), Arc::clone(&p));
        p
    }

    fn align(&self) -> u64 {
        let l = self.device.limits();
        (l.min_uniform_buffer_offset_alignment as u64)
            .max(l.min_storage_buffer_offset_alignment as u64)
    }

    /// Stages `items` (parameters, host slices) for the step's next dispatch, all in the same
    /// submission: if the arena cannot hold them all, the step so far is submitted first.
    pub(super) fn stage(&self, cx: &mut GpuCtx, items: &[&[u8]]) -> Vec<Slot> {
        let a = self.align() as usize;
        let small: usize = items
            .iter()
            .filter(|b| b.len() <= LARGE_UPLOAD)
            .map(|b| b.len().max(4).next_multiple_of(a))
            .sum();
        let used = cx.arena.as_ref().map_or(0, |ar| ar.base + ar.staged.len());
        if used + small > ARENA_BYTES as usize {
            self.flush(cx);
        }
        let arena = cx.arena.get_or_insert_with(|| Arena {
            buf: self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("arena"),
                size: ARENA_BYTES,
                usage: wgpu::BufferUsages::UNIFORM
                    | wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            base: 0,
            staged: Vec::new(),
        });
        items
            .iter()
            .map(|b| {
                let size = b.len().max(4).next_multiple_of(4);
                if b.len() > LARGE_UPLOAD {
                    let buf = self.buffer_with(b, wgpu::BufferUsages::STORAGE);
                    return Slot {
                        buf,
                        off: 0,
                        size: size as u64,
                    };
                }
                let off = arena.staged.len().next_multiple_of(a);
                arena.staged.resize(off, 0);
                arena.staged.extend_from_slice(b);
                arena.staged.resize(off + size, 0);
                Slot {
                    buf: arena.buf.clone(),
                    off: (arena.base + off) as u64,
                    size: size as u64,
                }
            })
            .collect()
    }

    /// A new buffer holding `bytes` (padded with zeros to 16: shaders may read any buffer as
    /// whole `vec4`s, e.g. the GEMV's inputs).
    pub(super) fn buffer_with(&self, bytes: &[u8], usage: wgpu::BufferUsages) -> wgpu::Buffer {
        let size = bytes.len().max(16).next_multiple_of(16) as u64;
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage,
            mapped_at_creation: true,
        });
        // mapped ranges are whole words
        let padded;
        let bytes = if bytes.len() as u64 == size {
            bytes
        } else {
            let mut v = bytes.to_vec();
            v.resize(size as usize, 0);
            padded = v;
            &padded[..]
        };
        if !bytes.is_empty() {
            buf.slice(..bytes.len() as u64)
                .get_mapped_range_mut()
                .expect("mapped at creation")
                .copy_from_slice(bytes);
        }
        buf.unmap();
        buf
    }

    /// Records one dispatch of `groups` workgroups (laid out over x and y; shaders recover the
    /// linear index and skip the excess) of op `op` built with `defs` (and reading weights of
    /// `ty`), with `params` at binding 0 and `binds` after it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dispatch(
        &self,
        cx: &mut GpuCtx,
        op: &'static str,
        defs: &'static str,
        ty: Option<GgmlType>,
        params: &[u32],
        binds: &[Bind<'_>],
        groups: u32,
    ) {
        self.dispatch_const(cx, op, defs, ty, 0, params, binds, groups);
    }

    /// [`Gpu::dispatch`] of the variant built with its pipeline constant `KC` = `kc` (0: the
    /// shader's default).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dispatch_const(
        &self,
        cx: &mut GpuCtx,
        op: &'static str,
        defs: &'static str,
        ty: Option<GgmlType>,
        kc: u32,
        params: &[u32],
        binds: &[Bind<'_>],
        groups: u32,
    ) {
        if groups == 0 {
            return;
        }
        let params = if self.immediates && params.len() < IMMEDIATE_WORDS {
            Params::immediate(params, Some(groups))
        } else {
            let mut p = params.to_vec();
            p.push(groups);
            self.stage_params(cx, &p, &[]).0
        };
        let key = Key { op, defs, ty, kc };
        self.dispatch_keyed(cx, key, &params, binds, groups);
    }

    /// Stages a dispatch's parameters (`P`'s fields in order, `groups` last) with host slices
    /// of its, all in the same submission: the parameters as immediates where the device takes
    /// them (pushed with the dispatch), else in the step's upload buffer with the slices.
    pub(super) fn stage_params(
        &self,
        cx: &mut GpuCtx,
        params: &[u32],
        items: &[&[u8]],
    ) -> (Params, Vec<Slot>) {
        if self.immediates {
            assert!(
                params.len() <= IMMEDIATE_WORDS,
                "{} parameter words: at most {IMMEDIATE_WORDS}",
                params.len()
            );
            return (Params::immediate(params, None), self.stage(cx, items));
        }
        let mut p = params.to_vec();
        p.resize(p.len().next_multiple_of(4), 0);
        let bytes: Vec<u8> = p.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut all: Vec<&[u8]> = vec![&bytes];
        all.extend_from_slice(items);
        let mut slots = self.stage(cx, &all);
        let first = slots.remove(0);
        (Params::Staged(first), slots)
    }

    /// [`Gpu::dispatch`] with the parameters already staged (when host slices were staged
    /// with them, so that all land in one submission).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dispatch_staged(
        &self,
        cx: &mut GpuCtx,
        op: &'static str,
        defs: &'static str,
        ty: Option<GgmlType>,
        params: &Params,
        binds: &[Bind<'_>],
        groups: u32,
    ) {
        let key = Key {
            op,
            defs,
            ty,
            kc: 0,
        };
        self.dispatch_keyed(cx, key, params, binds, groups);
    }

    // (buffers hash by identity, which never changes: the key is not mutable)
    #[allow(clippy::mutable_key_type)]
    fn dispatch_keyed(
        &self,
        cx: &mut GpuCtx,
        key: Key,
        params: &Params,
        binds: &[Bind<'_>],
        groups: u32,
    ) {
        let (op, ty) = (key.op, key.ty);
        let t_in = self
            .profile
            .as_ref()
            .map(|_| crate::runtime::time::Instant::now());
        let pipe = self.pipeline(key);
        // a step's dispatches bind the same buffers at the same offsets every step (tensors
        // are reused, the arena fills in the same order), so bind groups are made once
        assert!(binds.len() < 9, "{op}: too many bindings");
        let pipe_id = Arc::as_ptr(&pipe) as usize;
        // (buffer, offset, size) by binding number: the parameters at 0 unless pushed
        let mut items: [Option<(&wgpu::Buffer, u64, u64)>; 9] = [None; 9];
        if let Params::Staged(p) = params {
            items[0] = Some((&p.buf, p.off, p.size));
        }
        for (i, b) in binds.iter().enumerate() {
            items[i + 1] = Some(bind_range(b));
        }
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = Fx::default();
            pipe_id.hash(&mut h);
            for (i, (buf, off, size)) in items
                .iter()
                .enumerate()
                .filter_map(|(i, b)| Some((i, (*b)?)))
            {
                h.write_usize(i);
                buf.hash(&mut h);
                h.write_u64(off);
                h.write_u64(size);
            }
            h.finish()
        };
        let same = |key: &BgKey| {
            key.iter().zip(&items).all(|(k, b)| match (k, b) {
                (None, None) => true,
                (Some((kb, ko, ks)), Some((b, o, s))) => kb == *b && ko == o && ks == s,
                _ => false,
            })
        };
        let make = || {
            let key: BgKey = items.map(|b| b.map(|(buf, off, size)| (buf.clone(), off, size)));
            let entries: Vec<wgpu::BindGroupEntry<'_>> = items
                .iter()
                .enumerate()
                .filter_map(|(i, b)| {
                    let (buf, off, size) = (*b)?;
                    Some(wgpu::BindGroupEntry {
                        binding: i as u32,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: buf,
                            offset: off,
                            size: wgpu::BufferSize::new(size),
                        }),
                    })
                })
                .collect();
            let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(op),
                layout: &pipe.get_bind_group_layout(0),
                entries: &entries,
            });
            (pipe_id, key, bg)
        };
        let lookup = |bgs: &mut BindGroups, limit: usize| {
            if bgs.len() > limit {
                bgs.clear();
            }
            let list = bgs.0.entry(hash).or_default();
            if let Some((_, _, bg)) = list.iter().find(|(p, k, _)| *p == pipe_id && same(k)) {
                return bg.clone();
            }
            let made = make();
            let bg = made.2.clone();
            list.push(made);
            bg
        };
        let seq = binds.iter().find_map(|b| match b {
            Bind::Seq(_, owner) | Bind::SeqRange(_, _, _, owner) => Some(*owner),
            _ => None,
        });
        let bg = if let Some(owner) = seq {
            lookup(
                &mut owner.0.lock().expect("bind groups"),
                MAX_SEQ_BIND_GROUPS,
            )
        } else {
            lookup(&mut cx.bind_groups, MAX_BIND_GROUPS)
        };
        let x = groups.min(MAX_GROUPS);
        let y = groups.div_ceil(x);
        if self.timing && cx.stamps.is_none() {
            let qs = self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("op times"),
                ty: wgpu::QueryType::Timestamp,
                count: MAX_STAMPS,
            });
            cx.stamps = Some((qs, Vec::new()));
        }
        // the first stamp of a submission marks its start
        let stamp = match &mut cx.stamps {
            Some((qs, ops)) if (ops.len() as u32) + 1 < MAX_STAMPS => {
                ops.push((op, ty));
                Some((qs.clone(), ops.len() as u32))
            }
            _ => None,
        };
        let pass = self.pass(cx);
        if let Some((qs, i)) = &stamp
            && *i == 1
        {
            pass.write_timestamp(qs, 0);
        }
        pass.set_pipeline(&pipe);
        if let Params::Immediate(bytes, n) = params {
            // (the op's own fields only: the padding after them is never read)
            pass.set_immediates(0, &bytes[..*n]);
        }
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups(x, y, 1);
        if let Some((probe, n)) = &self.probe
            && (probe == "*" || probe == op)
        {
            for _ in 0..*n {
                pass.dispatch_workgroups(x, y, 1);
            }
        }
        if let Some((qs, i)) = &stamp {
            pass.write_timestamp(qs, *i);
        }
        cx.dispatches += 1;
        cx.unsubmitted += 1;
        let after = if cx.step_submits == 0 {
            self.submit_after.0
        } else {
            self.submit_after.1
        };
        if cx.unsubmitted >= after && !self.timing {
            self.submit(cx, false);
        }
        if let (Some(p), Some(t_in)) = (&self.profile, t_in) {
            cx.recording.get_or_insert((t_in, 0)).1 += 1;
            p.lock().expect("profile").in_dispatch += t_in.elapsed();
        }
    }

    /// The step's open compute pass: consecutive dispatches share one (wgpu orders each
    /// dispatch after the writes it reads), and copies or clears end it.
    fn pass<'c>(&self, cx: &'c mut GpuCtx) -> &'c mut wgpu::ComputePass<'static> {
        if cx.pass.is_none() {
            let p = self
                .encoder(cx)
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("step"),
                    timestamp_writes: None,
                })
                .forget_lifetime();
            cx.pass = Some(p);
        }
        cx.pass.as_mut().expect("just opened")
    }

    /// The step's command encoder, for commands outside compute passes (an open pass ends).
    pub(super) fn encoder<'c>(&self, cx: &'c mut GpuCtx) -> &'c mut wgpu::CommandEncoder {
        cx.pass = None;
        cx.enc.get_or_insert_with(|| {
            self.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("step"),
                })
        })
    }

    /// With `timing`: waits for the stamped dispatches and adds their device times to the
    /// profile (a sync per submit: profiling only).
    fn read_stamps(&self, cx: &mut GpuCtx) {
        let Some((qs, ops)) = cx.stamps.as_mut() else {
            return;
        };
        if ops.is_empty() {
            return;
        }
        let ops = std::mem::take(ops);
        let qs = qs.clone();
        let n = ops.len() as u64 + 1;
        let resolved = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("stamps"),
            size: n * 8,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        self.encoder(cx)
            .resolve_query_set(&qs, 0..n as u32, &resolved, 0);
        let bytes = self.read_back(cx, &resolved, 0, n * 8);
        let t: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        let period = self.queue.get_timestamp_period() as f64;
        if let Some(p) = &self.profile {
            let mut p = p.lock().expect("profile");
            for (i, key) in ops.into_iter().enumerate() {
                let ns = t[i + 1].saturating_sub(t[i]) as f64 * period;
                let e = p.per_op.entry(key).or_default();
                e.0 += ns;
                e.1 += 1;
            }
        }
    }

    /// Submits what the step has recorded (its staged uploads first); the step ends.
    pub(super) fn flush(&self, cx: &mut GpuCtx) {
        if cx.stamps.as_ref().is_some_and(|s| !s.1.is_empty()) {
            // (read_back flushes again, with the stamps taken)
            return self.read_stamps(cx);
        }
        self.submit(cx, true);
    }

    /// Submits what the step has recorded so far; the next part's uploads go after this
    /// part's in the arena unless the step ends (`end`).
    fn submit(&self, cx: &mut GpuCtx, end: bool) {
        cx.unsubmitted = 0;
        cx.step_submits = if end { 0 } else { cx.step_submits + 1 };
        if let Some(a) = cx.arena.as_mut() {
            if !a.staged.is_empty() {
                self.queue.write_buffer(&a.buf, a.base as u64, &a.staged);
                a.base += a.staged.len().next_multiple_of(self.align() as usize);
                a.staged.clear();
            }
            if end {
                a.base = 0;
                // (their slots are overwritten from here on)
                cx.rope_tables.clear();
                cx.seq_table = None;
            }
        }
        cx.pass = None;
        let t_sub = crate::runtime::time::Instant::now();
        if let Some(enc) = cx.enc.take() {
            self.queue.submit([enc.finish()]);
        }
        if let Some(p) = &self.profile {
            p.lock().expect("profile").submit += t_sub.elapsed();
        }
        if let (Some(p), Some((t0, n))) = (&self.profile, cx.recording.take()) {
            let mut p = p.lock().expect("profile");
            p.submits += 1;
            p.dispatches += n;
            p.record += t0.elapsed();
        }
    }

    /// Submits the step and reads `size` bytes of `src` at `off` back to the host.
    pub(super) fn read_back(
        &self,
        cx: &mut GpuCtx,
        src: &wgpu::Buffer,
        off: u64,
        size: u64,
    ) -> Vec<u8> {
        self.read_back_with(cx, src, off, size, |b| b.to_vec())
    }

    /// [`Gpu::read_back`] handing the bytes to `f` where they are mapped (a row of logits per
    /// token, copied once into the caller's buffer).
    pub(super) fn read_back_with<R>(
        &self,
        cx: &mut GpuCtx,
        src: &wgpu::Buffer,
        off: u64,
        size: u64,
        f: impl FnOnce(&[u8]) -> R,
    ) -> R {
        if size == 0 {
            self.flush(cx);
            return f(&[]);
        }
        let size4 = size.next_multiple_of(4);
        // one mappable buffer per context, reused (a new one per read back cost a buffer and
        // its memory every token)
        if cx.staging.as_ref().is_none_or(|b| b.size() < size4) {
            cx.staging = Some(self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("read back"),
                size: size4.next_power_of_two().max(256),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let staging = cx.staging.clone().expect("just made");
        self.encoder(cx)
            .copy_buffer_to_buffer(src, off, &staging, 0, size4);
        self.flush(cx);
        let t0 = crate::runtime::time::Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        staging
            .slice(..size4)
            .map_async(wgpu::MapMode::Read, move |r| drop(tx.send(r)));
        // (the device was opened through the same waits, so they work here)
        super::host::wait_for(&self.device, &rx)
            .expect("waiting for a GPU read back")
            .expect("GPU read back failed");
        if let Some(p) = &self.profile {
            p.lock().expect("profile").wait += t0.elapsed();
        }
        let out = f(&staging.slice(..size4).get_mapped_range().expect("mapped")[..size as usize]);
        staging.unmap();
        out
    }
}

/// `u32`s of an `f32` (parameters are all 32-bit words).
pub(super) fn fbits(v: f32) -> u32 {
    v.to_bits()
}

/// The bytes of a slice of plain numbers.
pub(super) fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: T is a plain number type (u32, f32); any byte pattern of it is valid to read.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// Parses and validates a variant's WGSL with naga, every capability on, with its parameters
/// as a uniform and as immediates; panics with naga's report.
#[cfg(test)]
pub(super) fn check_wgsl(op: &'static str, defs: &'static str, ty: Option<GgmlType>) {
    use wgpu::naga::valid::{
        Capabilities, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator,
    };
    for immediates in [false, true] {
        let src = module_source(
            Key {
                op,
                defs,
                ty,
                kc: 0,
            },
            immediates,
        );
        let module = wgpu::naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{op} {ty:?} {defs:?}:\n{}", e.emit_to_string(&src)));
        Validator::new(ValidationFlags::all(), Capabilities::all())
            .subgroup_stages(ShaderStages::COMPUTE)
            .subgroup_operations(SubgroupOperationSet::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{op} {ty:?} {defs:?}:\n{}", e.emit_to_string(&src)));
    }
}
