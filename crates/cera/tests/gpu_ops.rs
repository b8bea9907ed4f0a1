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

/// Sequences' caches of a layer kept together (`Gpu::set_kv_sequences`): a decode step of
/// three sequences stores its keys and values in one dispatch and attends in one (and one
/// combine where keys split), where each sequence alone takes its own; and the attention group
/// against the reference with that layout (its decode steps of 3 and 40 sequences in row
/// order take the shared path, the other steps the per-sequence one).
#[test]
fn gpu_attention_sequences_sharing_caches() {
    use cera::backend::{AttentionParams, SeqSpan};
    let g = gpu();
    g.set_kv_sequences(40);
    let (nkv, hd) = (2, 64);
    let spec = KvSpec::same(KvType::F16);
    let caches: Vec<_> = (0..3)
        .map(|_| g.new_layer_kv(5, spec, 64, nkv, hd, hd))
        .collect();
    let mut caches = caches;
    let mut cx = Default::default();
    let lens = [10usize, 3, 7];
    let vals = |n: usize, salt: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 31 + salt * 17) % 23) as f32 / 11.0 - 1.0)
            .collect()
    };
    for (s, c) in caches.iter_mut().enumerate() {
        let (mut k, mut v) = (g.zeros(1, 1), g.zeros(1, 1));
        g.upload(
            &mut cx,
            &vals(lens[s] * nkv * hd, s),
            lens[s],
            nkv * hd,
            &mut k,
        );
        g.upload(
            &mut cx,
            &vals(lens[s] * nkv * hd, s + 7),
            lens[s],
            nkv * hd,
            &mut v,
        );
        let span = SeqSpan {
            row0: 0,
            n: lens[s],
            pos0: 0,
        };
        g.kv_store(&mut cx, c, &k, &v, span);
    }
    let spans: Vec<SeqSpan> = (0..3)
        .map(|i| SeqSpan {
            row0: i,
            n: 1,
            pos0: lens[i],
        })
        .collect();
    let (mut q, mut k, mut v) = (g.zeros(1, 1), g.zeros(1, 1), g.zeros(1, 1));
    g.upload(&mut cx, &vals(3 * 4 * hd, 3), 3, 4 * hd, &mut q);
    g.upload(&mut cx, &vals(3 * nkv * hd, 4), 3, nkv * hd, &mut k);
    g.upload(&mut cx, &vals(3 * nkv * hd, 5), 3, nkv * hd, &mut v);
    let list: Vec<_> = caches.iter().collect();
    let before = cx.dispatches;
    assert!(
        g.kv_store_seqs(&mut cx, &list, &k, &v, &spans),
        "the caches share buffers: one store for all"
    );
    assert_eq!(cx.dispatches - before, 1, "dispatches of the shared store");
    let p = AttentionParams {
        n_head: 4,
        n_kv_head: nkv,
        head_dim: hd,
        head_dim_v: hd,
        scale: 0.125,
        softcap: None,
        window: None,
        causal: true,
    };
    let mut out = g.zeros(1, 1);
    let before = cx.dispatches;
    g.attention(&mut cx, &q, &list, &spans, &p, &mut out);
    let shared = cx.dispatches - before;
    assert!(
        shared <= 2,
        "{shared} dispatches attending for three sequences"
    );
    let mut got = Vec::new();
    g.download(&mut cx, &out, &mut got);
    // each sequence on its own: the same rows
    let mut want = vec![0f32; got.len()];
    for (i, c) in caches.iter().enumerate() {
        let mut one = g.zeros(1, 1);
        let row = |x: &[f32], w: usize| x[i * w..(i + 1) * w].to_vec();
        let mut q1 = g.zeros(1, 1);
        g.upload(
            &mut cx,
            &row(&vals(3 * 4 * hd, 3), 4 * hd),
            1,
            4 * hd,
            &mut q1,
        );
        let span = SeqSpan {
            row0: 0,
            n: 1,
            pos0: lens[i],
        };
        g.attention(&mut cx, &q1, &[c], &[span], &p, &mut one);
        let mut o = Vec::new();
        g.download(&mut cx, &one, &mut o);
        want[i * 4 * hd..(i + 1) * 4 * hd].copy_from_slice(&o);
    }
    let diff = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff < 1e-5, "shared against alone: max |Δ| {diff:e}");
    drop(list);
    // snapshots of a slot past the slab's first: what a cache of its own holds after the same
    // stores; restored into another slot, and copied (a checkpoint), the same bytes again
    let mut own = g.new_kv(spec, 64, nkv, hd, hd);
    let (mut k2, mut v2) = (g.zeros(1, 1), g.zeros(1, 1));
    g.upload(
        &mut cx,
        &vals(lens[2] * nkv * hd, 2),
        lens[2],
        nkv * hd,
        &mut k2,
    );
    g.upload(
        &mut cx,
        &vals(lens[2] * nkv * hd, 9),
        lens[2],
        nkv * hd,
        &mut v2,
    );
    let prefix = SeqSpan {
        row0: 0,
        n: lens[2],
        pos0: 0,
    };
    g.kv_store(&mut cx, &mut own, &k2, &v2, prefix);
    g.kv_store(
        &mut cx,
        &mut own,
        &k,
        &v,
        SeqSpan {
            row0: 2,
            ..spans[2]
        },
    );
    g.finish(&mut cx);
    let n = lens[2] + 1;
    let (mut a, mut b, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    g.kv_save(&caches[2], n, &mut a);
    g.kv_save(&own, n, &mut b);
    assert!(
        a == b,
        "a shared slot's snapshot differs from a cache of its own"
    );
    let mut restored = g.new_layer_kv(5, spec, 64, nkv, hd, hd);
    g.kv_load(&mut restored, n, &a).unwrap();
    g.kv_save(&restored, n, &mut c);
    assert!(a == c, "restored into another slot");
    g.kv_save(&caches[2].clone(), n, &mut d);
    assert!(a == d, "a copy of a shared slot");
    drop(caches);
    check_on(g, &["attention"]);
}
