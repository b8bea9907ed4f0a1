//! Architecture parity with llama.cpp on tiny random-weight models (one or more per architecture:
//! llama incl. Llama 3 `rope_freqs`, qwen2, qwen3, granite, gemma2, gemma3, phi3, olmo2; F32,
//! Q8_0 and mixed Q4_0/Q4_K weights), and the LFM2 family: lfm2 and lfm2moe, tiny and at the
//! LFM2-350M shape, F32/Q8_0/Q4_0/Q4_K, 12 prompts (4 at 350M) and 64 greedy steps each.
//!
//! The models are rebuilt here by the same generator that made the fixtures
//! (`tests/common/arch_models.rs`, with the SmolLM2 tokenizer fetched through the project's
//! fetch step); their sha256 must match the fixture, so a generator change is caught rather than
//! silently compared against stale references. Fixtures: `scripts/gen-arch-fixtures.py`
//! (llama.cpp's tokens, last-position logits and 32 greedy steps with top-2 logits per prompt).
//!
//! Checks per model and prompt: the last-position logits (max|Δ| / std < 2e-2; LFM2 fixtures keep
//! them for the first 4 prompts), the
//! greedy continuation (equal tokens; a divergence is allowed only where llama.cpp's top-2 logits
//! are within 1e-3, after which the sequences are no longer comparable), and per model that one
//! batched prefill gives the same logits as feeding the tokens one at a time.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cera::backend::{Backend, Cpu, KvSpec, KvType, argmax};
use cera::fetch;
use cera::gguf::GgufFile;
use cera::models::{Model, ModelState};

#[path = "common/arch_models.rs"]
mod arch_models;

const LOGIT_TOL: f32 = 2e-2;
/// The LFM2-350M shapes (16 layers of width 1024 through quantized activations) amplify
/// rounding-level differences more: on `lfm2_350m_q4_k` llama.cpp's own configurations (flash
/// attention or not, f16 or f32 KV) differ from each other by up to 2.8e-2 of the spread.
const LOGIT_TOL_350M: f32 = 4e-2;
const NEAR_TIE: f32 = 1e-3;
const PREFILL_DECODE_TOL: f32 = 1e-3;
/// Expert routing is discontinuous: where the last chosen expert and the best one left out
/// score within this much, rounding-level differences between engines (or between our batched
/// and one-token paths) can choose differently, after which outputs are no longer comparable.
/// Such a prompt or step is reported and not compared further, like a greedy near-tie.
const ROUTE_TIE: f32 = 1e-5;

/// Whether the forward passes since the last call routed a token within `ROUTE_TIE`.
fn routing_tie<B: Backend>(be: &B, st: &mut ModelState<B>) -> bool {
    routing_within(be, st, ROUTE_TIE)
}

/// Whether the forward passes since the last call routed a token within `gap`.
fn routing_within<B: Backend>(be: &B, st: &mut ModelState<B>, gap: f32) -> bool {
    be.take_routing_margin(&mut st.ws.cx)
        .is_some_and(|g| g < gap)
}

/// A fresh sequence state on `be`.
fn new_state<B: Backend>(model: &Model, be: &B, n_ctx: usize, spec: KvSpec) -> ModelState<B> {
    ModelState {
        seq: model.new_seq(be, n_ctx, spec),
        ws: Default::default(),
    }
}

fn tokenizer() -> &'static GgufFile {
    static TOK: OnceLock<GgufFile> = OnceLock::new();
    TOK.get_or_init(|| {
        let entry = fetch::lookup("smollm2").unwrap();
        let path = fetch::ensure(entry, &mut |_| {})
            .unwrap_or_else(|e| panic!("could not fetch SmolLM2 (tokenizer source): {e}"));
        GgufFile::open(path).unwrap()
    })
}

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/arch")
        .join(name)
}

fn read_json(p: PathBuf) -> serde_json::Value {
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).unwrap()
}

fn read_f32(p: PathBuf) -> Vec<f32> {
    let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn std_dev(x: &[f32]) -> f32 {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    (x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt() as f32
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

struct Step {
    token: u32,
    top1: f32,
    top2: f32,
}

fn steps(fx: &serde_json::Value) -> Vec<Step> {
    fx["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Step {
            token: s["token"].as_u64().unwrap() as u32,
            top1: s["top1"].as_f64().unwrap() as f32,
            top2: s["top2"].as_f64().unwrap() as f32,
        })
        .collect()
}

fn check(name: &str) {
    check_on(name, &Cpu::new(2), Tol::CPU);
}

/// How close a backend must come to llama.cpp's CPU backend.
#[derive(Clone, Copy)]
struct Tol {
    /// Last-position logits, max|Δ| / std (the LFM2-350M shapes take `LOGIT_TOL_350M`).
    logits: f32,
    /// A greedy divergence is a near-tie when llama.cpp's top-2 gap is below this much
    /// (absolute), or below `tie_std` times the logits' std.
    tie: f32,
    tie_std: f32,
    /// Batched prefill against one token at a time, max|Δ| / std.
    prefill_decode: f32,
    /// A routing gap below this may choose other experts than llama.cpp (see `ROUTE_TIE`).
    route_tie: f32,
    /// Where a model with expert routing parts from llama.cpp beyond `logits`, whether the
    /// prompt may instead be held to the f64 reference backend (see `EXACT_TOL`).
    exact_fallback: bool,
}

/// A backend that computes in f32 against the f64 reference backend (the same model code, every
/// product exact), max|Δ| / std.
const EXACT_TOL: f32 = 1e-4;

impl Tol {
    /// The CPU quantizes activations as llama.cpp's CPU backend does, so it sits close.
    const CPU: Tol = Tol {
        logits: LOGIT_TOL,
        tie: NEAR_TIE,
        tie_std: 0.0,
        prefill_decode: PREFILL_DECODE_TOL,
        route_tie: ROUTE_TIE,
        exact_fallback: false,
    };
    /// The GPU multiplies f32 activations (it equals the f64 reference backend to ~1e-7, see
    /// gpu_model.rs), so it sits further from llama.cpp's 8-bit activations on quantized
    /// weights; its GEMM (prefill) and GEMV (decode) sum in different orders.
    #[allow(dead_code)]
    const GPU: Tol = Tol {
        logits: LOGIT_TOL_350M,
        tie: NEAR_TIE,
        tie_std: 2.0 * LOGIT_TOL_350M,
        prefill_decode: 5e-3,
        // router logits from f32 activations sit ~1e-3 from llama.cpp's 8-bit ones
        route_tie: 1e-4,
        // llama.cpp rounds the router's input to 8 bits, the GPU does not: on the tiny lfm2moe
        // models (every routing gap under 1e-3) that alone can choose another expert, and the
        // logits part by more than any tolerance; such a prompt is held to exact arithmetic
        exact_fallback: true,
    };
}

/// The parity checks of model `name` run on backend `be`.
fn check_on<B: Backend>(name: &str, be: &B, t: Tol) {
    let v = arch_models::variant(name);
    let dir = fixture_dir(name);
    let meta = read_json(dir.join("model.json"));
    let bytes = arch_models::build(&v, tokenizer());
    assert_eq!(
        arch_models::sha256_hex(&bytes),
        meta["sha256"].as_str().unwrap(),
        "{name}: the generator no longer makes the model the fixtures were made from \
         (re-run scripts/gen-arch-fixtures.py {name})"
    );
    let model = Model::load(Arc::new(GgufFile::from_bytes(bytes).unwrap()))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let cpu = be;
    let n_prompts = meta["n_prompts"].as_u64().unwrap() as usize;
    // the KV cache type the reference used (f32 for models with expert routing)
    let kv_type = match meta["kv"].as_str() {
        Some("f32") => KvType::F32,
        _ => KvType::F16,
    };
    let mut logits = Vec::new();
    let mut report = Vec::new();
    let mut worst = 0f32;
    let mut compared = 0;
    // prompts held to the f64 reference instead (see `Tol::exact_fallback`)
    let mut by_exact = 0;
    let mut pd_compared = 0;
    let tol = if name.contains("350m") {
        LOGIT_TOL_350M.max(t.logits)
    } else {
        t.logits
    };
    for i in 0..n_prompts {
        let fx = read_json(dir.join(format!("{i}.json")));
        let logits_file = dir.join(format!("{i}.logits"));
        let want = logits_file.exists().then(|| read_f32(logits_file));
        let prompt: Vec<u32> = fx["prompt_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        let steps = steps(&fx);
        let mut st = new_state(
            &model,
            cpu,
            prompt.len() + steps.len() + 8,
            KvSpec::same(kv_type),
        );
        model
            .forward(cpu, &mut st, &prompt, 0, false, &mut logits)
            .unwrap();
        let margin = cpu.take_routing_margin(&mut st.ws.cx);
        if margin.is_some_and(|g| g < t.route_tie) {
            report.push("routing near-tie in the prompt".to_owned());
            continue;
        }
        let sd = std_dev(want.as_deref().unwrap_or(&logits));
        assert!(sd > 0.1, "{name} prompt {i}: degenerate logits");
        if let Some(want) = &want {
            let rel = max_abs_diff(&logits, want) / sd;
            if rel >= tol && t.exact_fallback && margin.is_some() {
                let exact = reference_logits(&model, &prompt, KvSpec::same(kv_type));
                let e = max_abs_diff(&logits, &exact) / std_dev(&exact);
                assert!(
                    e < EXACT_TOL,
                    "{name} prompt {i}: last-position logits max|Δ|/std = {rel:.2e} from \
                     llama.cpp and {e:.2e} from the f64 reference"
                );
                report.push(format!(
                    "routing parts from llama.cpp's ({rel:.1e}); the f64 reference's within {e:.1e}"
                ));
                by_exact += 1;
                continue;
            }
            compared += 1;
            worst = worst.max(rel);
            assert!(
                rel < tol,
                "{name} prompt {i}: last-position logits max|Δ|/std = {rel:.2e}"
            );
        } else {
            compared += 1;
        }

        // greedy: compare each step; feed the (common) token
        let mut pos = prompt.len();
        let mut matched = 0;
        let mut diverged = None;
        for (k, s) in steps.iter().enumerate() {
            let ours = argmax(&logits) as u32;
            // the reference's winning logit, as we compute it
            let drift = (logits[s.token as usize] - s.top1).abs() / sd;
            worst = worst.max(drift);
            assert!(
                drift < tol,
                "{name} prompt {i} step {k}: logit of token {} is {} here, {} in llama.cpp",
                s.token,
                logits[s.token as usize],
                s.top1
            );
            if ours != s.token {
                assert!(
                    s.top1 - s.top2 < t.tie.max(t.tie_std * sd),
                    "{name} prompt {i} step {k}: greedy token {ours}, llama.cpp {} \
                     (its top-2 logits {} and {} are not a near-tie)",
                    s.token,
                    s.top1,
                    s.top2
                );
                diverged = Some((k, "near-tie"));
                break;
            }
            matched += 1;
            if k + 1 < steps.len() {
                model
                    .forward(cpu, &mut st, &[ours], pos, false, &mut logits)
                    .unwrap();
                pos += 1;
                if routing_within(cpu, &mut st, t.route_tie) {
                    diverged = Some((k + 1, "routing near-tie"));
                    break;
                }
            }
        }
        report.push(match diverged {
            None => format!("{matched}/{}", steps.len()),
            Some((k, why)) => format!("{matched}/{} ({why} at {k})", steps.len()),
        });

        // from the second prompt on, until one prompt gets compared (a routing near-tie
        // stops a comparison early)
        if i >= 1 && pd_compared == 0 {
            pd_compared =
                prefill_matches_decode(name, &model, cpu, &prompt, &steps, t.prefill_decode);
        }
    }
    assert!(
        pd_compared > 0,
        "{name}: prefill vs decode could not be compared on any prompt (routing near-ties)"
    );
    println!(
        "{name:14} greedy {}  max|Δ|/std {worst:.2e}",
        report.join(", ")
    );
    assert!(
        (compared + by_exact) * 2 >= n_prompts && compared > 0,
        "{name}: only {compared} of {n_prompts} prompts could be compared with llama.cpp \
         ({by_exact} more with the f64 reference)"
    );
}

/// Last-position logits of `prompt` from the f64 reference backend.
fn reference_logits(model: &Model, prompt: &[u32], spec: KvSpec) -> Vec<f32> {
    let r = cera::backend::reference::Reference;
    let mut st = new_state(model, &r, prompt.len() + 1, spec);
    let mut logits = Vec::new();
    model
        .forward(&r, &mut st, prompt, 0, false, &mut logits)
        .unwrap();
    logits
}

/// All logits of one batched prefill against feeding the same tokens one at a time.
/// Returns how many positions were compared (fewer than all when a routing near-tie stops it).
fn prefill_matches_decode<B: Backend>(
    name: &str,
    model: &Model,
    cpu: &B,
    prompt: &[u32],
    steps: &[Step],
    tol: f32,
) -> usize {
    let mut toks = prompt.to_vec();
    toks.extend(steps.iter().take(8).map(|s| s.token));
    let n = toks.len();
    let vocab = model.n_vocab();
    let mut batch = Vec::new();
    let mut st = new_state(model, cpu, n, KvSpec::same(KvType::F16));
    model
        .forward(cpu, &mut st, &toks, 0, true, &mut batch)
        .unwrap();
    assert_eq!(batch.len(), n * vocab);
    if routing_tie(cpu, &mut st) {
        println!("{name}: prefill vs decode not compared (routing near-tie)");
        return 0;
    }
    let mut st = new_state(model, cpu, n, KvSpec::same(KvType::F16));
    let mut one = Vec::new();
    for (p, &t) in toks.iter().enumerate() {
        model
            .forward(cpu, &mut st, &[t], p, false, &mut one)
            .unwrap();
        if routing_tie(cpu, &mut st) {
            println!("{name}: prefill vs decode compared up to position {p} (routing near-tie)");
            return p;
        }
        let row = &batch[p * vocab..(p + 1) * vocab];
        let rel = max_abs_diff(row, &one) / std_dev(row);
        assert!(
            rel < tol,
            "{name}: position {p}: batched prefill and one-at-a-time decode differ by {rel:.2e} std"
        );
    }
    n
}

#[test]
fn every_model_is_tested_and_has_fixtures() {
    let names: Vec<&str> = arch_models::variants().iter().map(|v| v.name).collect();
    assert_eq!(names, TESTED, "parity!() must list every test model");
    for name in names {
        assert!(
            fixture_dir(name).join("model.json").exists(),
            "{name}: no fixtures (run scripts/gen-arch-fixtures.py {name})"
        );
    }
}

/// A minimal GGUF: an architecture name and one tensor.
fn tiny_gguf(arch: &str, ty: cera::quant::GgmlType) -> Arc<GgufFile> {
    let mut w = cera::gguf::GgufWriter::new();
    w.set("general.architecture", arch);
    let shape = [256u64, 2];
    let bytes = ty.bytes_for(512).unwrap() as usize;
    w.add_tensor_raw("blk.0.attn_q.weight", ty, &shape, vec![0; bytes])
        .unwrap();
    Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

#[test]
fn unsupported_architecture_fails_at_load_with_its_name() {
    let err = Model::load(tiny_gguf("bloom", cera::quant::GgmlType::F32)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("bloom"), "{msg}");
    for arch in [
        "llama", "qwen2", "qwen3", "granite", "gemma2", "gemma3", "phi3", "olmo2", "lfm2",
        "lfm2moe",
    ] {
        assert!(msg.contains(arch), "{msg}");
    }
}

#[test]
fn unsupported_tensor_type_fails_at_load_with_its_name() {
    let err = Model::load(tiny_gguf("llama", cera::quant::GgmlType::IQ2_XXS)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.to_lowercase().contains("iq2_xxs"), "{msg}");
}

macro_rules! parity {
    ($($name:ident $([$slow:ident])?),* $(,)?) => {
        const TESTED: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                check(stringify!($name));
            }
        )*
        /// The same checks with the model on the GPU backend (CI: lavapipe): llama.cpp's
        /// logits and greedy tokens, and prefill against decode, through the WGSL kernels.
        #[cfg(feature = "gpu")]
        mod gpu {
            fn gpu() -> &'static cera::backend::gpu::Gpu {
                static G: std::sync::OnceLock<cera::backend::gpu::Gpu> =
                    std::sync::OnceLock::new();
                G.get_or_init(|| {
                    cera::backend::gpu::Gpu::new().unwrap_or_else(|e| {
                        panic!("{e} (the GPU tests need a Vulkan driver: mesa-vulkan-drivers)")
                    })
                })
            }
            $(gpu_test!($name $(, $slow)?);)*
        }
    };
}

/// One model's GPU parity test; `slow` ones (the LFM2-350M shapes, minutes each under
/// lavapipe, a CPU running the shaders) are ignored by default and reported as such: run them
/// with `--ignored` on a real GPU. They use the tiny lfm2 models' kernels at a larger width.
#[cfg(feature = "gpu")]
macro_rules! gpu_test {
    ($name:ident) => {
        #[test]
        fn $name() {
            super::check_on(stringify!($name), gpu(), super::Tol::GPU);
        }
    };
    ($name:ident, slow) => {
        #[test]
        #[ignore = "minutes under lavapipe; run with --ignored on a real GPU"]
        fn $name() {
            super::check_on(stringify!($name), gpu(), super::Tol::GPU);
        }
    };
}

parity!(
    llama_f32,
    llama_q8_0,
    llama3_f32,
    llama3_q4_0,
    qwen2_f32,
    qwen2_q8_0,
    qwen3_f32,
    qwen3_q8_0,
    granite_f32,
    granite_q8_0,
    gemma2_f32,
    gemma2_q8_0,
    gemma3_f32,
    gemma3_swa_f32,
    gemma3_q4_0,
    phi3_f32,
    phi3_q8_0,
    olmo2_f32,
    olmo2_q8_0,
    lfm2_f32,
    lfm2_swa_f32,
    lfm2_q8_0,
    lfm2_q4_0,
    lfm2_q4_k,
    lfm2_350m_q8_0[slow],
    lfm2_350m_q4_0[slow],
    lfm2_350m_q4_k[slow],
    lfm2moe_f32,
    lfm2moe_q8_0,
    lfm2moe_q4_0,
    lfm2moe_q4_k,
);

/// The LFM2 family's own checks, beyond parity.
mod lfm2 {
    use super::*;
    use cera::backend::Dispatch;
    use cera::engine::{Engine, EngineOptions, SessionOptions};
    use cera::gguf::{GgufWriter, Value};

    fn load(bytes: Vec<u8>) -> cera::Result<Model> {
        Model::load(Arc::new(GgufFile::from_bytes(bytes)?))
    }

    fn bytes(name: &str) -> Vec<u8> {
        arch_models::build(&arch_models::variant(name), tokenizer())
    }

    /// The same file with metadata key `key` replaced.
    fn with_key(bytes: Vec<u8>, key: &str, value: Value) -> Vec<u8> {
        let g = GgufFile::from_bytes(bytes).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in &g.metadata {
            w.set(k.clone(), if k == key { value.clone() } else { v.clone() });
        }
        for t in &g.tensors {
            w.add_tensor_raw(&t.name, t.ty, &t.shape, g.tensor_data(t).to_vec())
                .unwrap();
        }
        w.to_bytes().unwrap()
    }

    /// A prompt of `n` tokens from the middle of the vocabulary.
    fn prompt(n: usize) -> Vec<u32> {
        (0..n as u32).map(|i| 1000 + i * 37 % 5000).collect()
    }

    #[test]
    fn layer_types_must_agree_with_tensors() {
        // layer 0 is a convolution layer: calling it an attention layer must fail at load
        let kv: Vec<u32> = vec![2, 0, 2, 0, 2, 0];
        let err = load(with_key(
            bytes("lfm2_f32"),
            "lfm2.attention.head_count_kv",
            Value::from(kv),
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("blk.0") && err.contains("convolution tensors"),
            "{err}"
        );
        // and the reverse: layer 2 (attention) marked as a convolution layer
        let kv: Vec<u32> = vec![0, 0, 0, 0, 2, 0];
        let err = load(with_key(
            bytes("lfm2_f32"),
            "lfm2.attention.head_count_kv",
            Value::from(kv),
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("blk.2") && err.contains("attention tensors"),
            "{err}"
        );
        // a missing kernel length is an error naming the key
        let g = GgufFile::from_bytes(bytes("lfm2_f32")).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in g
            .metadata
            .iter()
            .filter(|(k, _)| k != "lfm2.shortconv.l_cache")
        {
            w.set(k.clone(), v.clone());
        }
        for t in &g.tensors {
            w.add_tensor_raw(&t.name, t.ty, &t.shape, g.tensor_data(t).to_vec())
                .unwrap();
        }
        let err = load(w.to_bytes().unwrap()).unwrap_err().to_string();
        assert!(err.contains("shortconv.l_cache"), "{err}");
    }

    /// Grouping a batch's tokens by expert changes only the order of work, not the result.
    #[test]
    fn grouped_expert_dispatch_equals_per_token() {
        for name in ["lfm2moe_f32", "lfm2moe_q4_0"] {
            let model = load(bytes(name)).unwrap();
            let cpu = Cpu::new(2);
            // (all logits, whether routing came within ROUTE_TIE of choosing differently)
            let run = |model: &Model, toks: &[u32]| {
                let mut st = model.new_state(64, KvSpec::same(KvType::F16));
                let mut out = Vec::new();
                model
                    .forward(&cpu, &mut st, toks, 0, true, &mut out)
                    .unwrap();
                (out, routing_tie(&cpu, &mut st))
            };
            // a batched matmul may sum in another order than a one-token one; where routing is
            // that close to a tie the two may choose differently, so such prompts are skipped
            let mut compared = 0;
            for n in [40, 33, 27, 21, 16] {
                let toks = prompt(n);
                cpu.set_moe_dispatch(Dispatch::Grouped);
                let (grouped, tie_g) = run(&model, &toks);
                cpu.set_moe_dispatch(Dispatch::PerToken);
                let (per_token, tie_t) = run(&model, &toks);
                if tie_g || tie_t {
                    continue;
                }
                let rel = max_abs_diff(&grouped, &per_token) / std_dev(&grouped);
                assert!(
                    rel < 1e-4,
                    "{name}, {n} tokens: grouped vs per-token differ by {rel:.2e} std"
                );
                compared += 1;
            }
            assert!(
                compared >= 2,
                "{name}: routing near-ties in almost every prompt"
            );
        }
    }

    /// The convolution state cannot rewind: a forward pass that does not continue it fails
    /// instead of computing something else.
    #[test]
    fn convolution_state_refuses_a_gap() {
        let model = load(bytes("lfm2_f32")).unwrap();
        let cpu = Cpu::new(2);
        let mut st = model.new_state(32, KvSpec::same(KvType::F16));
        let mut out = Vec::new();
        model
            .forward(&cpu, &mut st, &prompt(5), 0, false, &mut out)
            .unwrap();
        let err = model
            .forward(&cpu, &mut st, &[7], 3, false, &mut out)
            .unwrap_err()
            .to_string();
        assert!(err.contains("convolution state"), "{err}");
        // past the context: an error, not a panic
        assert!(
            model
                .forward(&cpu, &mut st, &prompt(40), 5, false, &mut out)
                .is_err()
        );
    }

    /// Session truncate / reset on a model with convolution state give what a fresh session
    /// gives for the same tokens (truncate restores a convolution snapshot and re-prefills
    /// only the tokens after it).
    #[test]
    fn session_truncate_and_reset_with_convolution_state() {
        let dir = std::env::temp_dir().join(format!("cera-lfm2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lfm2_f32.gguf");
        std::fs::write(&path, bytes("lfm2_f32")).unwrap();
        let eng = Engine::load(&path, EngineOptions::default()).unwrap();
        let (a, b) = (prompt(12), prompt(20)[12..].to_vec());
        let mut opts = SessionOptions::default();
        opts.n_ubatch = 5;
        let fresh = |toks: &[u32]| {
            let mut s = eng.session(opts.clone());
            s.append_tokens(toks).unwrap();
            s.logits().to_vec()
        };
        let mut s = eng.session(opts.clone());
        s.append_tokens(&a).unwrap();
        s.truncate(7);
        s.append_tokens(&b).unwrap();
        let mut want_toks = a[..7].to_vec();
        want_toks.extend_from_slice(&b);
        assert_eq!(s.tokens(), want_toks.as_slice());
        let want = fresh(&want_toks);
        assert!(max_abs_diff(s.logits(), &want) / std_dev(&want) < 1e-5);
        // truncate back to a position with a convolution snapshot: nothing is recomputed (no
        // logits until the next token), and continuing gives what a fresh prefill gives
        s.truncate(7);
        assert_eq!(s.pending_replay(), None);
        s.append_tokens(&[]).unwrap();
        assert!(s.logits().is_empty());
        s.append_tokens(&b[..3]).unwrap();
        let want = fresh(&want_toks[..10]);
        assert!(max_abs_diff(s.logits(), &want) / std_dev(&want) < 1e-5);
        s.reset();
        s.append_tokens(&b).unwrap();
        let want = fresh(&b);
        assert!(max_abs_diff(s.logits(), &want) / std_dev(&want) < 1e-5);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
