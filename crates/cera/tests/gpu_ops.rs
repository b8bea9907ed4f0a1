//! Every op of the `Backend` trait on the GPU backend (wgpu; in CI, Mesa's lavapipe), against
//! the f64 reference through the harness of `backend_ops.rs`. Needs a Vulkan (or Metal, DX12)
//! adapter: without one the test fails, naming what to install.
#![cfg(feature = "gpu")]

#[path = "common/backend_ops/mod.rs"]
mod backend_ops;

use backend_ops::{Failure, run_groups};
use cera::backend::gpu::Gpu;
use cera::backend::{Backend, KvSpec, KvType};

fn gpu() -> Gpu {
    Gpu::new().unwrap_or_else(|e| {
        panic!("{e}\n(the GPU tests need a Vulkan driver: apt-get install mesa-vulkan-drivers)")
    })
}

/// The ops the GPU backend does not run yet answer with an error naming them; every other
/// check must pass.
const NOT_YET: [&str; 0] = [];

fn check(groups: &[&str]) {
    check_on(gpu(), groups)
}

fn check_on(g: Gpu, groups: &[&str]) {
    eprintln!("adapter: {:?}", g.info());
    let fails: Vec<Failure> = run_groups(&g, groups);
    let (expected, real): (Vec<&Failure>, Vec<&Failure>) =
        fails.iter().partition(|f| NOT_YET.contains(&f.op.as_str()));
    // each op not run yet says so (its other failures follow from that: unchanged rows)
    for op in NOT_YET {
        let said = expected
            .iter()
            .any(|f| f.op == op && f.what.contains("not supported on the GPU backend yet"));
        let failed = expected.iter().any(|f| f.op == op);
        assert!(
            said || !failed,
            "{op} failed without naming what is missing"
        );
    }
    let list: Vec<String> = real.iter().take(40).map(|f| f.to_string()).collect();
    assert!(
        real.is_empty(),
        "{} GPU op checks failed:\n{}",
        real.len(),
        list.join("\n")
    );
}

#[test]
fn gpu_memory_elementwise_rope() {
    check(&["memory", "elementwise", "rope", "errors"]);
}

#[test]
fn gpu_matmul_every_format() {
    check(&["matmul", "embed"]);
}

/// The GEMV's variants other than the adapter's own that it can run (on lavapipe, which picks
/// an invocation per row and has no subgroup shuffles: a workgroup per row), so CI checks the
/// one GPUs without subgroups run; each with the super-block formats read in fours and in
/// sixteens (`wload16`: GPUs' default and lavapipe's).
#[test]
fn gpu_matmul_other_gemv_variants() {
    use cera::backend::gpu::GemvKind;
    let own = gpu().gemv();
    let mut checked = 0;
    for kind in [
        GemvKind::PerRow,
        GemvKind::Workgroup,
        GemvKind::Subgroup,
        GemvKind::WorkgroupTeams,
    ] {
        for w16 in [false, true] {
            let g = gpu();
            if kind != own && kind.runs_on(g.info()) {
                eprintln!("GEMV {kind:?}, sixteens {w16}");
                check_on(g.with_gemv(kind).with_wload16(w16), &["matmul"]);
                checked += 1;
            }
        }
    }
    assert!(checked >= 1, "no other GEMV variant to check than {own:?}");
    // the adapter's own variant with the pipelines built for each row width (off by default)
    let g = gpu();
    let kc = g.gemv_width_constant();
    check_on(g.with_gemv_width_constant(!kc), &["matmul"]);
    // where the adapter has cooperative matrices (the H200), the plain GEMM as well
    let g = gpu();
    if g.uses_coop() {
        check_on(g.without_coop(), &["matmul"]);
    }
}

/// Every op with its parameters in a uniform buffer (WebGPU's path) where the adapter takes
/// them as immediates (Vulkan, Metal, DX12; lavapipe too).
#[test]
fn gpu_ops_with_uniform_parameters() {
    let g = gpu();
    assert!(
        g.uses_immediates() || g.info().immediates < 128,
        "the adapter has {} bytes of immediates but the backend does not use them",
        g.info().immediates
    );
    if !g.uses_immediates() {
        eprintln!("the adapter has no immediates: every other test ran the uniform path");
        return;
    }
    check_on(
        g.without_immediates(),
        &[
            "memory",
            "elementwise",
            "rope",
            "matmul",
            "embed",
            "attention",
            "short_conv",
            "moe",
        ],
    );
}

#[test]
fn gpu_attention_and_kv_state() {
    check(&["attention", "kv_state"]);
}

/// The decode step's RoPE, cache store and attention in one dispatch where the backend does
/// them apart by default, and apart where it fuses them (`rope_store_attend` in the attention
/// group: decode steps at 5, 6, 300 and 301 keys).
#[test]
fn gpu_attention_fused_or_apart() {
    let g = gpu();
    let fused = g.fuses_attention();
    check_on(g.with_fused_attention(!fused), &["attention"]);
}

#[test]
fn gpu_short_conv_and_moe() {
    check(&["short_conv", "moe"]);
}

#[test]
fn gpu_kv_types() {
    let g = gpu();
    for t in [KvType::F32, KvType::F16, KvType::Q8_0] {
        assert!(g.kv_supported(KvSpec::same(t), 64, 64), "{t:?}");
    }
    assert!(!g.kv_supported(KvSpec::same(KvType::Q4_0), 64, 64));
}
