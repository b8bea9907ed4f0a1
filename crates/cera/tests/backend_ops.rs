//! Every op of the `Backend` trait on the CPU backend, on every CPU tier this host runs and on
//! 1, 2 and 3 threads, against the f64 reference backend (`cera::backend::reference`), through
//! the generic harness in `common/backend_ops.rs`; and proof that the harness fails: a backend
//! that delegates to the CPU but gets one op slightly wrong is caught, on that op alone.
//!
//! A new backend is checked the same way: `backend_ops::check_all("name", &backend)`.

#[path = "common/backend_ops/mod.rs"]
mod backend_ops;

use backend_ops::{Failure, check_all, run_all, run_groups};
use cera::backend::Dispatch;
use cera::backend::moe::MoeWeights;
use cera::backend::reference::Reference;
use cera::backend::{
    Act, AttentionParams, Backend, Cpu, CpuCtx, CpuTensor, KvLayer, KvSpec, KvType, RopeConfig,
    SeqSpan, Weight,
};
use cera::kernels::{CpuTier, KernelTable};

fn table(tier: CpuTier) -> &'static KernelTable {
    Box::leak(Box::new(KernelTable::for_tier(tier).unwrap()))
}

fn cpu_tier(tier: CpuTier) {
    let t = table(tier);
    for threads in [1, 2, 3] {
        check_all(
            &format!("cpu {tier} t{threads}"),
            &Cpu::with_table(threads, t),
        );
    }
}

#[test]
fn cpu_scalar() {
    cpu_tier(CpuTier::Scalar);
}

/// Every SIMD tier the host supports (the scalar tier has its own test).
#[test]
fn cpu_simd_tiers() {
    for tier in CpuTier::supported() {
        if tier != CpuTier::Scalar {
            cpu_tier(tier);
        }
    }
}

/// The CPU's per-token MoE dispatch (`CERA_MOE_DISPATCH=token`) computes the same layer.
#[test]
fn cpu_moe_per_token() {
    let cpu = Cpu::with_table(2, KernelTable::get());
    cpu.set_moe_dispatch(Dispatch::PerToken);
    let fails = run_groups(&cpu, &["moe"]);
    assert!(fails.is_empty(), "{}", fails[0]);
}

/// The harness passes the reference itself with no error at all: it compares like with like.
#[test]
fn reference_passes_itself() {
    check_all("reference", &Reference);
}

/// One way of getting an op slightly wrong.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// rms_norm's output off by 1e-4 relative
    RmsNormScale,
    /// rope at the next position
    RopePosition,
    /// attention lets one more key into the window
    AttentionWindow,
    /// matmul's last token is not written for 5 or more tokens (a GEMM remainder bug)
    MatmulRemainder,
    /// short_conv keeps its state instead of rolling it
    ConvState,
    /// every KV cache is f16, whatever type was asked for
    KvPrecision,
    /// MoE routing ignores the selection bias
    MoeBias,
    /// the context shift rotates the moved keys back by one position too few
    ShiftRotation,
}

/// The CPU backend with one fault.
struct Faulty {
    cpu: Cpu,
    fault: Fault,
}

impl Backend for Faulty {
    type Tensor = CpuTensor;
    type Kv = KvLayer;
    type Ctx = CpuCtx;

    fn name(&self) -> &'static str {
        "faulty CPU"
    }
    fn new_kv(&self, spec: KvSpec, n: usize, h: usize, d: usize, dv: usize) -> KvLayer {
        if self.fault == Fault::KvPrecision {
            return self.cpu.new_kv(KvSpec::same(KvType::F16), n, h, d, dv);
        }
        self.cpu.new_kv(spec, n, h, d, dv)
    }
    fn zeros(&self, rows: usize, cols: usize) -> CpuTensor {
        self.cpu.zeros(rows, cols)
    }
    fn fill_zero(&self, cx: &mut CpuCtx, t: &mut CpuTensor) {
        self.cpu.fill_zero(cx, t)
    }
    fn upload(&self, cx: &mut CpuCtx, d: &[f32], r: usize, c: usize, t: &mut CpuTensor) {
        self.cpu.upload(cx, d, r, c, t)
    }
    fn download(&self, cx: &mut CpuCtx, t: &CpuTensor, out: &mut Vec<f32>) {
        self.cpu.download(cx, t, out)
    }
    fn shape(&self, t: &CpuTensor) -> (usize, usize) {
        self.cpu.shape(t)
    }
    fn reshape(&self, t: &mut CpuTensor, rows: usize, cols: usize) {
        self.cpu.reshape(t, rows, cols)
    }
    fn embed(
        &self,
        cx: &mut CpuCtx,
        table: &Weight,
        tied: &Weight,
        tokens: &[u32],
        out: &mut CpuTensor,
    ) -> cera::Result<()> {
        self.cpu.embed(cx, table, tied, tokens, out)
    }
    fn matmul(
        &self,
        cx: &mut CpuCtx,
        ops: &mut [(&Weight, &mut CpuTensor)],
        x: &CpuTensor,
    ) -> cera::Result<()> {
        Backend::matmul(&self.cpu, cx, ops, x)?;
        if self.fault == Fault::MatmulRemainder && x.rows() >= 5 {
            for (_, o) in ops.iter_mut() {
                let (n, c) = (o.rows(), o.cols());
                o.data_mut()[(n - 1) * c..].fill(0.0);
            }
        }
        Ok(())
    }
    fn rms_norm(&self, cx: &mut CpuCtx, x: &CpuTensor, w: &[f32], eps: f32, o: &mut CpuTensor) {
        self.cpu.rms_norm(cx, x, w, eps, o);
        if self.fault == Fault::RmsNormScale {
            self.cpu.scale(cx, o, 1.0 + 1e-4);
        }
    }
    fn rms_norm_inplace(&self, cx: &mut CpuCtx, x: &mut CpuTensor, w: &[f32], eps: f32) {
        self.cpu.rms_norm_inplace(cx, x, w, eps)
    }
    fn add(&self, cx: &mut CpuCtx, x: &mut CpuTensor, y: &CpuTensor) {
        self.cpu.add(cx, x, y)
    }
    fn lora(
        &self,
        cx: &mut CpuCtx,
        out: &mut CpuTensor,
        x: &CpuTensor,
        rows: Option<&[usize]>,
        w: &cera::backend::LowRank,
        s: f32,
    ) -> cera::Result<()> {
        self.cpu.lora(cx, out, x, rows, w, s)
    }
    fn lora_embed(
        &self,
        cx: &mut CpuCtx,
        out: &mut CpuTensor,
        tokens: &[u32],
        rows: Option<&[usize]>,
        w: &cera::backend::LowRank,
        s: f32,
    ) -> cera::Result<()> {
        self.cpu.lora_embed(cx, out, tokens, rows, w, s)
    }
    fn layer_norm(
        &self,
        cx: &mut CpuCtx,
        x: &CpuTensor,
        w: &[f32],
        b: &[f32],
        eps: f32,
        out: &mut CpuTensor,
    ) {
        self.cpu.layer_norm(cx, x, w, b, eps, out)
    }
    fn activate(&self, cx: &mut CpuCtx, x: &mut CpuTensor, act: Act) {
        self.cpu.activate(cx, x, act)
    }
    fn scale(&self, cx: &mut CpuCtx, x: &mut CpuTensor, s: f32) {
        self.cpu.scale(cx, x, s)
    }
    fn add_bias(&self, cx: &mut CpuCtx, x: &mut CpuTensor, bias: &[f32]) {
        self.cpu.add_bias(cx, x, bias)
    }
    fn glu(&self, cx: &mut CpuCtx, gate: &mut CpuTensor, up: &CpuTensor, act: Act) {
        self.cpu.glu(cx, gate, up, act)
    }
    fn softcap(&self, cx: &mut CpuCtx, x: &mut CpuTensor, cap: f32) {
        self.cpu.softcap(cx, x, cap)
    }
    fn copy_cols(&self, cx: &mut CpuCtx, s: &CpuTensor, c0: usize, n: usize, d: &mut CpuTensor) {
        self.cpu.copy_cols(cx, s, c0, n, d)
    }
    fn gather_rows(&self, cx: &mut CpuCtx, s: &CpuTensor, rows: &[usize], d: &mut CpuTensor) {
        self.cpu.gather_rows(cx, s, rows, d)
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
        let shifted: Vec<usize> = pos.iter().map(|p| p + 1).collect();
        let pos = if self.fault == Fault::RopePosition {
            &shifted
        } else {
            pos
        };
        self.cpu.rope(cx, x, n_head, head_dim, pos, cfg)
    }
    fn kv_store(
        &self,
        cx: &mut CpuCtx,
        kv: &mut KvLayer,
        k: &CpuTensor,
        v: &CpuTensor,
        span: SeqSpan,
    ) {
        self.cpu.kv_store(cx, kv, k, v, span)
    }
    fn kv_save(&self, kv: &KvLayer, n: usize, out: &mut Vec<u8>) {
        self.cpu.kv_save(kv, n, out)
    }
    fn kv_load(&self, kv: &mut KvLayer, n: usize, src: &[u8]) -> cera::Result<()> {
        self.cpu.kv_load(kv, n, src)
    }
    fn kv_shift(
        &self,
        kv: &mut KvLayer,
        keep: usize,
        n_discard: usize,
        n_past: usize,
        rope: Option<&RopeConfig>,
    ) {
        self.cpu.kv_shift(kv, keep, n_discard, n_past, rope);
        if self.fault == Fault::ShiftRotation
            && let Some(r) = rope
        {
            // one position forward again: the keys end up rotated back by n_discard - 1
            kv.rotate(keep, n_past - n_discard, 1, r);
        }
    }
    fn attention(
        &self,
        cx: &mut CpuCtx,
        q: &CpuTensor,
        kv: &[&KvLayer],
        spans: &[SeqSpan],
        p: &AttentionParams,
        out: &mut CpuTensor,
    ) {
        let mut p = p.clone();
        if self.fault == Fault::AttentionWindow {
            p.window = p.window.map(|w| w + 1);
        }
        Backend::attention(&self.cpu, cx, q, kv, spans, &p, out)
    }
    fn short_conv(
        &self,
        cx: &mut CpuCtx,
        bcx: &CpuTensor,
        kernel: &[f32],
        state: &mut CpuTensor,
        span: SeqSpan,
        out: &mut CpuTensor,
    ) {
        let before = state.clone();
        self.cpu.short_conv(cx, bcx, kernel, state, span, out);
        if self.fault == Fault::ConvState {
            *state = before;
        }
    }
    fn moe(
        &self,
        cx: &mut CpuCtx,
        w: &MoeWeights,
        h: &CpuTensor,
        lora: &dyn cera::backend::MoeLora,
        out: &mut CpuTensor,
    ) -> cera::Result<()> {
        if self.fault == Fault::MoeBias {
            let unbiased = MoeWeights {
                gate_inp: w.gate_inp.clone(),
                probs_bias: None,
                gate: w.gate.clone(),
                up: w.up.clone(),
                down: w.down.clone(),
                packed_all: Default::default(),
                ..*w
            };
            return self.cpu.moe(cx, &unbiased, h, lora, out);
        }
        self.cpu.moe(cx, w, h, lora, out)
    }
}

fn faulty(fault: Fault) -> Faulty {
    Faulty {
        cpu: Cpu::with_table(2, KernelTable::get()),
        fault,
    }
}

/// Fused ops whose default implementations end in another op, not named after it.
const BUILT_ON: [(&str, &str); 2] = [
    ("rope_store_attend", "attention"),
    ("encoder_ffn", "matmul"),
];

/// `fails` is not empty and names only ops starting with `op` or fused ops built on it
/// (`norm_matmul`, `glu_matmul_add` run a faulty `matmul` through their default implementations,
/// `rope_store_attend` a faulty `attention`, `encoder_ffn` a faulty `matmul_encoder`).
fn assert_caught(fault: Fault, fails: &[Failure], op: &str) {
    assert!(!fails.is_empty(), "{fault:?} was not caught");
    let fused = format!("_{op}");
    for f in fails {
        assert!(
            f.op.starts_with(op)
                || f.op.contains(&fused)
                || BUILT_ON
                    .iter()
                    .any(|&(b, o)| f.op.starts_with(b) && o == op),
            "{fault:?}: unexpected failure {f}"
        );
    }
}

/// The whole harness, on a backend with a slightly wrong rms_norm: `check_all` panics, and the
/// run fails on rms_norm alone (the harness checks ops in isolation).
#[test]
fn harness_catches_a_slightly_wrong_op() {
    let be = faulty(Fault::RmsNormScale);
    let fails = run_all(&be);
    assert_caught(Fault::RmsNormScale, &fails, "rms_norm");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check_all("faulty", &be)));
    assert!(r.is_err(), "check_all passed a faulty backend");
}

/// Other faults, each on the group that exercises the op.
#[test]
fn harness_catches_other_faults() {
    let cases = [
        (Fault::RopePosition, "rope", "rope"),
        (Fault::AttentionWindow, "attention", "attention"),
        (Fault::MatmulRemainder, "matmul", "matmul"),
        (Fault::ConvState, "short_conv", "short_conv"),
        // f16 storage instead of the type asked for: the f32 caches and the 4-bit ones differ
        (Fault::KvPrecision, "attention", "attention"),
        (Fault::MoeBias, "moe", "moe"),
        (Fault::ShiftRotation, "kv_state", "kv_shift"),
    ];
    for (fault, group, op) in cases {
        let fails = run_groups(&faulty(fault), &[group]);
        assert_caught(fault, &fails, op);
    }
}
