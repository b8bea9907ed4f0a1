//! The backend an engine runs on, chosen at load time (`--device cpu|gpu|auto`): one type that
//! forwards every op to the CPU or the GPU backend, so sessions, batches and models are
//! compiled once for both. Tensors, caches and contexts carry the variant of the backend that
//! made them; an output of the other variant (a `Default` one) is replaced on first use.

use super::moe::{MoeLora, MoeWeights};
use super::{
    Act, AttentionParams, Backend, Cpu, CpuCtx, CpuTensor, KvCache, KvLayer, KvSpec, LowRank,
    RopeConfig, SeqSpan, Weight,
};
use crate::error::Result;

#[cfg(feature = "gpu")]
use super::gpu::{Gpu, GpuCtx, GpuKv, GpuTensor};

/// Which backend runs the model.
#[allow(clippy::large_enum_variant)]
pub enum Device {
    Cpu(Cpu),
    #[cfg(feature = "gpu")]
    Gpu(Gpu),
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu(c) => c.fmt(f),
            #[cfg(feature = "gpu")]
            Device::Gpu(g) => g.fmt(f),
        }
    }
}

impl Device {
    /// The CPU backend, when that is what runs.
    pub fn as_cpu(&self) -> Option<&Cpu> {
        match self {
            Device::Cpu(c) => Some(c),
            #[cfg(feature = "gpu")]
            Device::Gpu(_) => None,
        }
    }
}

/// A tensor of either backend.
#[derive(Clone)]
pub enum DevTensor {
    Cpu(CpuTensor),
    #[cfg(feature = "gpu")]
    Gpu(GpuTensor),
}

impl Default for DevTensor {
    fn default() -> Self {
        DevTensor::Cpu(CpuTensor::default())
    }
}

/// A KV cache layer of either backend.
#[derive(Clone)]
pub enum DevKv {
    Cpu(KvLayer),
    #[cfg(feature = "gpu")]
    Gpu(GpuKv),
}

/// A step context of either backend.
#[allow(clippy::large_enum_variant)]
pub enum DevCtx {
    Cpu(CpuCtx),
    #[cfg(feature = "gpu")]
    Gpu(GpuCtx),
}

impl Default for DevCtx {
    fn default() -> Self {
        DevCtx::Cpu(CpuCtx::default())
    }
}

impl DevCtx {
    /// The CPU context, when the CPU runs (MoE routing margins live there).
    pub fn as_cpu(&mut self) -> Option<&mut CpuCtx> {
        match self {
            DevCtx::Cpu(c) => Some(c),
            #[cfg(feature = "gpu")]
            DevCtx::Gpu(_) => None,
        }
    }
}

/// Views of a value of either backend as the one backend `T`'s type: `r` for inputs (the
/// wrong variant is a bug), `w` for outputs (the wrong variant is replaced by a default one).
trait View<T> {
    fn r(&self) -> &T;
    fn w(&mut self) -> &mut T;
}

macro_rules! views {
    ($outer:ident, $variant:ident, $inner:ty, $fresh:expr) => {
        impl View<$inner> for $outer {
            fn r(&self) -> &$inner {
                match self {
                    $outer::$variant(v) => v,
                    #[allow(unreachable_patterns)]
                    _ => panic!(concat!(
                        stringify!($outer),
                        " of another backend passed to the ",
                        stringify!($variant),
                        " backend"
                    )),
                }
            }
            fn w(&mut self) -> &mut $inner {
                #[allow(irrefutable_let_patterns)]
                if !matches!(self, $outer::$variant(_)) {
                    *self = $outer::$variant($fresh);
                }
                match self {
                    $outer::$variant(v) => v,
                    #[allow(unreachable_patterns)]
                    _ => unreachable!(),
                }
            }
        }
    };
}

views!(DevTensor, Cpu, CpuTensor, CpuTensor::default());
views!(DevCtx, Cpu, CpuCtx, CpuCtx::default());
#[cfg(feature = "gpu")]
views!(DevTensor, Gpu, GpuTensor, GpuTensor::default());
#[cfg(feature = "gpu")]
views!(DevCtx, Gpu, GpuCtx, GpuCtx::default());

impl DevKv {
    fn cpu(&self) -> &KvLayer {
        match self {
            DevKv::Cpu(k) => k,
            #[cfg(feature = "gpu")]
            DevKv::Gpu(_) => panic!("a GPU KV cache passed to the CPU backend"),
        }
    }
    fn cpu_mut(&mut self) -> &mut KvLayer {
        match self {
            DevKv::Cpu(k) => k,
            #[cfg(feature = "gpu")]
            DevKv::Gpu(_) => panic!("a GPU KV cache passed to the CPU backend"),
        }
    }
    #[cfg(feature = "gpu")]
    fn gpu(&self) -> &GpuKv {
        match self {
            DevKv::Gpu(k) => k,
            DevKv::Cpu(_) => panic!("a CPU KV cache passed to the GPU backend"),
        }
    }
    #[cfg(feature = "gpu")]
    fn gpu_mut(&mut self) -> &mut GpuKv {
        match self {
            DevKv::Gpu(k) => k,
            DevKv::Cpu(_) => panic!("a CPU KV cache passed to the GPU backend"),
        }
    }
}

impl KvCache for DevKv {
    fn n_ctx(&self) -> usize {
        match self {
            DevKv::Cpu(k) => k.n_ctx(),
            #[cfg(feature = "gpu")]
            DevKv::Gpu(k) => k.n_ctx(),
        }
    }
    fn bytes(&self) -> usize {
        match self {
            DevKv::Cpu(k) => k.bytes(),
            #[cfg(feature = "gpu")]
            DevKv::Gpu(k) => k.bytes(),
        }
    }
    fn spec(&self) -> KvSpec {
        match self {
            DevKv::Cpu(k) => k.spec(),
            #[cfg(feature = "gpu")]
            DevKv::Gpu(k) => k.spec(),
        }
    }
    fn dims(&self) -> (usize, usize, usize) {
        match self {
            DevKv::Cpu(k) => k.dims(),
            #[cfg(feature = "gpu")]
            DevKv::Gpu(k) => k.dims(),
        }
    }
}

/// `f` over `ops` as one backend's tensors: lists of up to three (Q/K/V, gate/up) on the
/// stack, so a decode step allocates nothing.
fn with_ops<T, R>(
    ops: &mut [(&Weight, &mut DevTensor)],
    f: impl FnOnce(&mut [(&Weight, &mut T)]) -> R,
) -> R
where
    DevTensor: View<T>,
{
    match ops {
        [] => f(&mut []),
        [(w0, t0)] => f(&mut [(*w0, t0.w())]),
        [(w0, t0), (w1, t1)] => f(&mut [(*w0, t0.w()), (*w1, t1.w())]),
        [(w0, t0), (w1, t1), (w2, t2)] => f(&mut [(*w0, t0.w()), (*w1, t1.w()), (*w2, t2.w())]),
        _ => {
            let mut v: Vec<_> = ops.iter_mut().map(|(w, t)| (*w, t.w())).collect();
            f(&mut v)
        }
    }
}

/// Runs `$body` with `$b` bound to the backend in use (and `$kv`/`$kvm` the cache accessors
/// of its variant).
macro_rules! on {
    ($s:expr, $b:ident, $kv:ident, $kvm:ident => $body:expr) => {
        match $s {
            Device::Cpu($b) => {
                #[allow(unused_macros)]
                macro_rules! $kv {
                    ($x:expr) => {
                        $x.cpu()
                    };
                }
                #[allow(unused_macros)]
                macro_rules! $kvm {
                    ($x:expr) => {
                        $x.cpu_mut()
                    };
                }
                $body
            }
            #[cfg(feature = "gpu")]
            Device::Gpu($b) => {
                #[allow(unused_macros)]
                macro_rules! $kv {
                    ($x:expr) => {
                        $x.gpu()
                    };
                }
                #[allow(unused_macros)]
                macro_rules! $kvm {
                    ($x:expr) => {
                        $x.gpu_mut()
                    };
                }
                $body
            }
        }
    };
    ($s:expr, $b:ident => $body:expr) => {
        on!($s, $b, _kv, _kvm => $body)
    };
}

impl Backend for Device {
    type Tensor = DevTensor;
    type Kv = DevKv;
    type Ctx = DevCtx;

    fn name(&self) -> &'static str {
        on!(self, b => Backend::name(b, ))
    }

    fn kv_supported(&self, spec: KvSpec, head_dim: usize, head_dim_v: usize) -> bool {
        on!(self, b => Backend::kv_supported(b, spec, head_dim, head_dim_v))
    }

    fn take_routing_margin(&self, cx: &mut DevCtx) -> Option<f32> {
        on!(self, b => Backend::take_routing_margin(b, cx.w()))
    }

    fn finish(&self, cx: &mut DevCtx) {
        on!(self, b => Backend::finish(b, cx.w()))
    }

    fn new_kv(
        &self,
        spec: KvSpec,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> DevKv {
        match self {
            Device::Cpu(b) => DevKv::Cpu(Backend::new_kv(
                b, spec, n_ctx, n_kv_head, head_dim, head_dim_v,
            )),
            #[cfg(feature = "gpu")]
            Device::Gpu(b) => DevKv::Gpu(Backend::new_kv(
                b, spec, n_ctx, n_kv_head, head_dim, head_dim_v,
            )),
        }
    }

    fn new_layer_kv(
        &self,
        layer: usize,
        spec: KvSpec,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> DevKv {
        match self {
            Device::Cpu(b) => DevKv::Cpu(Backend::new_layer_kv(
                b, layer, spec, n_ctx, n_kv_head, head_dim, head_dim_v,
            )),
            #[cfg(feature = "gpu")]
            Device::Gpu(b) => DevKv::Gpu(Backend::new_layer_kv(
                b, layer, spec, n_ctx, n_kv_head, head_dim, head_dim_v,
            )),
        }
    }

    fn zeros(&self, rows: usize, cols: usize) -> DevTensor {
        match self {
            Device::Cpu(b) => DevTensor::Cpu(Backend::zeros(b, rows, cols)),
            #[cfg(feature = "gpu")]
            Device::Gpu(b) => DevTensor::Gpu(Backend::zeros(b, rows, cols)),
        }
    }

    fn fill_zero(&self, cx: &mut DevCtx, t: &mut DevTensor) {
        on!(self, b => Backend::fill_zero(b, cx.w(), t.w()))
    }

    fn upload(&self, cx: &mut DevCtx, data: &[f32], rows: usize, cols: usize, t: &mut DevTensor) {
        on!(self, b => Backend::upload(b, cx.w(), data, rows, cols, t.w()))
    }

    fn download(&self, cx: &mut DevCtx, t: &DevTensor, out: &mut Vec<f32>) {
        on!(self, b => Backend::download(b, cx.w(), t.r(), out))
    }

    fn top_k(&self, cx: &mut DevCtx, t: &DevTensor, k: usize, out: &mut Vec<(u32, f32)>) {
        on!(self, b => Backend::top_k(b, cx.w(), t.r(), k, out))
    }

    fn shape(&self, t: &DevTensor) -> (usize, usize) {
        match t {
            DevTensor::Cpu(t) => (t.rows(), t.cols()),
            #[cfg(feature = "gpu")]
            DevTensor::Gpu(t) => t.shape(),
        }
    }

    fn reshape(&self, t: &mut DevTensor, rows: usize, cols: usize) {
        on!(self, b => Backend::reshape(b, t.w(), rows, cols))
    }

    fn embed(
        &self,
        cx: &mut DevCtx,
        table: &Weight,
        tied: &Weight,
        tokens: &[u32],
        out: &mut DevTensor,
    ) -> Result<()> {
        on!(self, b => Backend::embed(b, cx.w(), table, tied, tokens, out.w()))
    }

    fn matmul(
        &self,
        cx: &mut DevCtx,
        ops: &mut [(&Weight, &mut DevTensor)],
        x: &DevTensor,
    ) -> Result<()> {
        on!(self, b => with_ops(ops, |v| Backend::matmul(b, cx.w(), v, x.r())))
    }

    fn matmul_encoder(
        &self,
        cx: &mut DevCtx,
        ops: &mut [(&Weight, &mut DevTensor)],
        x: &DevTensor,
    ) -> Result<()> {
        on!(self, b => with_ops(ops, |v| Backend::matmul_encoder(b, cx.w(), v, x.r())))
    }

    #[allow(clippy::too_many_arguments)]
    fn encoder_ffn(
        &self,
        cx: &mut DevCtx,
        x: &mut DevTensor,
        h: &DevTensor,
        up: (&Weight, Option<&[f32]>),
        down: (&Weight, Option<&[f32]>),
        act: Act,
        mid: &mut DevTensor,
        out: &mut DevTensor,
    ) -> Result<()> {
        on!(self, b => Backend::encoder_ffn(b, cx.w(), x.w(), h.r(), up, down, act, mid.w(), out.w()))
    }

    fn fuses_ops(&self) -> bool {
        on!(self, b => Backend::fuses_ops(b))
    }

    fn matmul_add(
        &self,
        cx: &mut DevCtx,
        w: &Weight,
        x: &DevTensor,
        out: &mut DevTensor,
    ) -> Result<()> {
        on!(self, b => Backend::matmul_add(b, cx.w(), w, x.r(), out.w()))
    }

    fn norm_matmul(
        &self,
        cx: &mut DevCtx,
        x: &DevTensor,
        w: &[f32],
        eps: f32,
        h: &mut DevTensor,
        ops: &mut [(&Weight, &mut DevTensor)],
    ) -> Result<()> {
        on!(self, b => with_ops(ops, |v| Backend::norm_matmul(b, cx.w(), x.r(), w, eps, h.w(), v)))
    }

    #[allow(clippy::too_many_arguments)]
    fn norm_matmul_bias(
        &self,
        cx: &mut DevCtx,
        x: &DevTensor,
        w: &[f32],
        eps: f32,
        h: &mut DevTensor,
        ops: &mut [(&Weight, &mut DevTensor)],
        biases: &[Option<&[f32]>],
    ) -> Result<()> {
        on!(self, b => with_ops(ops, |v| Backend::norm_matmul_bias(b, cx.w(), x.r(), w, eps, h.w(), v, biases)))
    }

    fn glu_matmul_add(
        &self,
        cx: &mut DevCtx,
        gate: &mut DevTensor,
        up: &DevTensor,
        act: Act,
        w: &Weight,
        out: &mut DevTensor,
    ) -> Result<()> {
        on!(self, b => Backend::glu_matmul_add(b, cx.w(), gate.w(), up.r(), act, w, out.w()))
    }

    #[allow(clippy::too_many_arguments)]
    fn rope_qk(
        &self,
        cx: &mut DevCtx,
        q: &mut DevTensor,
        n_head: usize,
        k: &mut DevTensor,
        n_kv_head: usize,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    ) {
        on!(self, b => Backend::rope_qk(b, cx.w(), q.w(), n_head, k.w(), n_kv_head, head_dim, pos, cfg))
    }

    fn rope_qk_store(
        &self,
        cx: &mut DevCtx,
        q: &mut DevTensor,
        n_head: usize,
        k: &mut DevTensor,
        v: &DevTensor,
        kv: &mut DevKv,
        span: SeqSpan,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    ) {
        on!(self, b, kvr, kvm => Backend::rope_qk_store(
            b, cx.w(), q.w(), n_head, k.w(), v.r(), kvm!(kv), span, head_dim, pos, cfg
        ))
    }

    fn rope_store_attend(
        &self,
        cx: &mut DevCtx,
        q: &mut DevTensor,
        k: &mut DevTensor,
        v: &DevTensor,
        kv: &mut DevKv,
        span: SeqSpan,
        pos: &[usize],
        cfg: &RopeConfig,
        p: &AttentionParams,
        out: &mut DevTensor,
    ) {
        on!(self, b, kvr, kvm => Backend::rope_store_attend(
            b, cx.w(), q.w(), k.w(), v.r(), kvm!(kv), span, pos, cfg, p, out.w()
        ))
    }

    fn matmul_lora(
        &self,
        cx: &mut DevCtx,
        ops: &mut [(&Weight, &mut DevTensor)],
        x: &DevTensor,
        deltas: &[(usize, &LowRank, f32)],
    ) -> Result<()> {
        on!(self, b => with_ops(ops, |v| Backend::matmul_lora(b, cx.w(), v, x.r(), deltas)))
    }

    fn rms_norm(&self, cx: &mut DevCtx, x: &DevTensor, w: &[f32], eps: f32, out: &mut DevTensor) {
        on!(self, b => Backend::rms_norm(b, cx.w(), x.r(), w, eps, out.w()))
    }

    fn rms_norm_inplace(&self, cx: &mut DevCtx, x: &mut DevTensor, w: &[f32], eps: f32) {
        on!(self, b => Backend::rms_norm_inplace(b, cx.w(), x.w(), w, eps))
    }

    fn rms_norm_pair(
        &self,
        cx: &mut DevCtx,
        q: &mut DevTensor,
        wq: &[f32],
        k: &mut DevTensor,
        wk: &[f32],
        eps: f32,
    ) {
        on!(self, b => Backend::rms_norm_pair(b, cx.w(), q.w(), wq, k.w(), wk, eps))
    }

    fn layer_norm(
        &self,
        cx: &mut DevCtx,
        x: &DevTensor,
        w: &[f32],
        bias: &[f32],
        eps: f32,
        out: &mut DevTensor,
    ) {
        on!(self, b => Backend::layer_norm(b, cx.w(), x.r(), w, bias, eps, out.w()))
    }

    fn activate(&self, cx: &mut DevCtx, x: &mut DevTensor, act: Act) {
        on!(self, b => Backend::activate(b, cx.w(), x.w(), act))
    }

    fn add(&self, cx: &mut DevCtx, x: &mut DevTensor, y: &DevTensor) {
        on!(self, b => Backend::add(b, cx.w(), x.w(), y.r()))
    }

    fn lora(
        &self,
        cx: &mut DevCtx,
        out: &mut DevTensor,
        x: &DevTensor,
        rows: Option<&[usize]>,
        w: &LowRank,
        s: f32,
    ) -> Result<()> {
        on!(self, b => Backend::lora(b, cx.w(), out.w(), x.r(), rows, w, s))
    }

    fn lora_embed(
        &self,
        cx: &mut DevCtx,
        out: &mut DevTensor,
        tokens: &[u32],
        rows: Option<&[usize]>,
        w: &LowRank,
        s: f32,
    ) -> Result<()> {
        on!(self, b => Backend::lora_embed(b, cx.w(), out.w(), tokens, rows, w, s))
    }

    fn scale(&self, cx: &mut DevCtx, x: &mut DevTensor, s: f32) {
        on!(self, b => Backend::scale(b, cx.w(), x.w(), s))
    }

    fn add_bias(&self, cx: &mut DevCtx, x: &mut DevTensor, bias: &[f32]) {
        on!(self, b => Backend::add_bias(b, cx.w(), x.w(), bias))
    }

    fn glu(&self, cx: &mut DevCtx, gate: &mut DevTensor, up: &DevTensor, act: Act) {
        on!(self, b => Backend::glu(b, cx.w(), gate.w(), up.r(), act))
    }

    fn softcap(&self, cx: &mut DevCtx, x: &mut DevTensor, cap: f32) {
        on!(self, b => Backend::softcap(b, cx.w(), x.w(), cap))
    }

    fn copy_cols(
        &self,
        cx: &mut DevCtx,
        src: &DevTensor,
        col0: usize,
        n: usize,
        dst: &mut DevTensor,
    ) {
        on!(self, b => Backend::copy_cols(b, cx.w(), src.r(), col0, n, dst.w()))
    }

    fn gather_rows(&self, cx: &mut DevCtx, src: &DevTensor, rows: &[usize], dst: &mut DevTensor) {
        on!(self, b => Backend::gather_rows(b, cx.w(), src.r(), rows, dst.w()))
    }

    fn rope(
        &self,
        cx: &mut DevCtx,
        x: &mut DevTensor,
        n_head: usize,
        head_dim: usize,
        pos: &[usize],
        cfg: &RopeConfig,
    ) {
        on!(self, b => Backend::rope(b, cx.w(), x.w(), n_head, head_dim, pos, cfg))
    }

    fn kv_store(
        &self,
        cx: &mut DevCtx,
        kv: &mut DevKv,
        k: &DevTensor,
        v: &DevTensor,
        span: SeqSpan,
    ) {
        on!(self, b, kvr, kvm => Backend::kv_store(b, cx.w(), kvm!(kv), k.r(), v.r(), span))
    }

    fn kv_store_seqs(
        &self,
        cx: &mut DevCtx,
        kv: &[&DevKv],
        k: &DevTensor,
        v: &DevTensor,
        spans: &[SeqSpan],
    ) -> bool {
        #[cfg(not(feature = "gpu"))]
        let _ = (cx, kv, k, v, spans);
        match self {
            // (the CPU stores each sequence: no list to make)
            Device::Cpu(_) => false,
            #[cfg(feature = "gpu")]
            Device::Gpu(b) => {
                let caches: Vec<_> = kv.iter().map(|c| c.gpu()).collect();
                Backend::kv_store_seqs(b, cx.w(), &caches, k.r(), v.r(), spans)
            }
        }
    }

    fn kv_save(&self, kv: &DevKv, n: usize, out: &mut Vec<u8>) {
        on!(self, b, kvr, kvm => Backend::kv_save(b, kvr!(kv), n, out))
    }

    fn kv_load(&self, kv: &mut DevKv, n: usize, src: &[u8]) -> Result<()> {
        on!(self, b, kvr, kvm => Backend::kv_load(b, kvm!(kv), n, src))
    }

    fn kv_shift(
        &self,
        kv: &mut DevKv,
        keep: usize,
        n_discard: usize,
        n_past: usize,
        rope: Option<&RopeConfig>,
    ) {
        on!(self, b, kvr, kvm => Backend::kv_shift(b, kvm!(kv), keep, n_discard, n_past, rope))
    }

    fn attention(
        &self,
        cx: &mut DevCtx,
        q: &DevTensor,
        kv: &[&DevKv],
        spans: &[SeqSpan],
        p: &AttentionParams,
        out: &mut DevTensor,
    ) {
        on!(self, b, kvr, kvm => match kv {
            // one sequence (decoding alone) without a list: steps allocate nothing
            [k] => Backend::attention(b, cx.w(), q.r(), &[kvr!(k)], spans, p, out.w()),
            _ => {
                let caches: Vec<_> = kv.iter().map(|k| kvr!(k)).collect();
                Backend::attention(b, cx.w(), q.r(), &caches, spans, p, out.w())
            }
        })
    }

    fn short_conv(
        &self,
        cx: &mut DevCtx,
        bcx: &DevTensor,
        kernel: &[f32],
        state: &mut DevTensor,
        span: SeqSpan,
        out: &mut DevTensor,
    ) {
        on!(self, b => Backend::short_conv(b, cx.w(), bcx.r(), kernel, state.w(), span, out.w()))
    }

    fn moe(
        &self,
        cx: &mut DevCtx,
        w: &MoeWeights,
        h: &DevTensor,
        lora: &dyn MoeLora,
        out: &mut DevTensor,
    ) -> Result<()> {
        on!(self, b => Backend::moe(b, cx.w(), w, h.r(), lora, out.w()))
    }
}
