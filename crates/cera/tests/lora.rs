//! LoRA adapters against llama.cpp (fixtures from `scripts/gen-lora-fixtures.py`): random PEFT
//! adapters (ranks 8 and 16, every linear projection) for SmolLM2, Qwen2.5-0.5B and a tiny
//! LFM2, rebuilt here by the generator that made the fixtures (`tests/common/lora_gen.rs`,
//! checked by hash).
//!
//! - Read directly, the PEFT files give, tensor for tensor, the bytes llama.cpp's
//!   `convert_lora_to_gguf.py` wrote (names, layout, the llama Q/K permutation), and loading
//!   that GGUF form gives the very same logits as the PEFT form.
//! - With the adapter at scales 1 and 0.5, the last-position logits (the reference's 64
//!   largest) and 16 greedy tokens agree with llama.cpp run with the same adapter, within the
//!   tolerances of the generation tests (2 × llama.cpp's own flash-attention spread, at least
//!   2e-2 of the logits' std; greedy equal up to a near-tie).
//! - Scale 0 equals no adapter, detaching restores the base logits exactly, a batched step
//!   mixing sessions with different adapters equals each alone, state saved with an adapter
//!   is refused without it, and bad adapters are errors naming what is wrong.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::gguf::GgufFile;
use cera::models::Logits;
use cera::session::{Control, GenerateOptions};

#[path = "common/arch_models.rs"]
mod arch_models;
#[path = "common/lora_gen.rs"]
mod lora_gen;
#[path = "common/models.rs"]
mod models;

fn fixture(name: &str) -> serde_json::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lora")
        .join(name)
        .join("fixture.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn tmp_dir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("cera-lora-{tag}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The base model file of a fixture: a catalog model, or a tiny test model rebuilt here.
fn base_path(base: &str) -> PathBuf {
    static TINY: OnceLock<std::sync::Mutex<std::collections::HashMap<String, PathBuf>>> =
        OnceLock::new();
    if let Some(name) = base.strip_prefix("test:") {
        let mut m = TINY.get_or_init(Default::default).lock().unwrap();
        return m
            .entry(name.to_owned())
            .or_insert_with(|| {
                let bytes = arch_models::build(&arch_models::variant(name), models::tokenizer());
                let p = tmp_dir("base").join(format!("{name}.gguf"));
                std::fs::write(&p, bytes).unwrap();
                p
            })
            .clone();
    }
    let catalog = if base.starts_with("SmolLM2") {
        "smollm2"
    } else {
        "qwen"
    };
    let p = models::real_model(catalog);
    assert!(
        p.file_name().unwrap().to_str().unwrap() == base,
        "fixture base {base} is not the catalog's {}",
        p.display()
    );
    p
}

fn engine(path: &Path) -> Engine {
    let mut o = EngineOptions::default();
    o.n_threads = Some(2);
    Engine::load(path, o).unwrap()
}

/// Writes the fixture's PEFT adapter (checked against the recorded hash) to a new directory.
fn write_peft(fx: &serde_json::Value, base: &GgufFile, tag: &str) -> PathBuf {
    let g = lora_gen::LoraGen {
        rank: fx["rank"].as_u64().unwrap() as usize,
        alpha: fx["alpha"].as_f64().unwrap() as f32,
        seed: fx["seed"].as_u64().unwrap(),
        amplitude: fx["amplitude"].as_f64().unwrap() as f32,
        embed: fx["embed"].as_bool().unwrap_or(false),
    };
    let (config, st) = lora_gen::peft_adapter(base, &g);
    assert_eq!(
        arch_models::sha256_hex(&st),
        fx["safetensors_sha256"].as_str().unwrap(),
        "the generator no longer makes the fixture's adapter"
    );
    let dir = tmp_dir(tag);
    std::fs::write(dir.join("adapter_config.json"), config).unwrap();
    std::fs::write(dir.join("adapter_model.safetensors"), st).unwrap();
    dir
}

fn greedy(n: usize) -> GenerateOptions {
    let mut o = GenerateOptions::default();
    o.sampler = cera::sample::SamplerConfig::greedy();
    o.max_tokens = n;
    o
}

const FIXTURES: &[&str] = &[
    "smollm2_r8",
    "smollm2_r16",
    "qwen_r8",
    "lfm2_q8_0_r8",
    "lfm2_q8_0_r16",
    "lfm2moe_q8_0_r8",
    "lfm2moe_untied_r8_embd",
];

fn check_fixture(name: &str) {
    let fx = fixture(name);
    let path = base_path(fx["base"].as_str().unwrap());
    let eng = engine(&path);
    let peft = write_peft(&fx, eng.gguf(), name);

    // the PEFT files read as llama.cpp's converter writes them
    let bytes = cera::models::peft::to_gguf(&peft, eng.gguf()).unwrap();
    let ours = GgufFile::from_bytes(bytes.clone()).unwrap();
    let want = fx["gguf_tensor_sha256"].as_object().unwrap();
    let mut failures = Vec::new();
    for (tname, sha) in want {
        match ours.tensor(tname) {
            None => failures.push(format!("{tname}: missing from our conversion")),
            Some(t) => {
                if arch_models::sha256_hex(ours.tensor_data(t)) != sha.as_str().unwrap() {
                    failures.push(format!("{tname}: bytes differ from llama.cpp's conversion"));
                }
            }
        }
    }
    if ours.tensors.len() != want.len() {
        failures.push(format!(
            "{} tensors, llama.cpp's conversion has {}",
            ours.tensors.len(),
            want.len()
        ));
    }
    assert!(failures.is_empty(), "{name}:\n{}", failures.join("\n"));

    // ... and the GGUF form of it gives the same logits as the PEFT form
    let gguf_path = peft.join("adapter.gguf");
    std::fs::write(&gguf_path, &bytes).unwrap();
    let from_peft = eng.load_lora(&peft).unwrap();
    let from_gguf = eng.load_lora(&gguf_path).unwrap();

    let mut report = Vec::new();
    for run in fx["runs"].as_array().unwrap() {
        let scale = run["scale"].as_f64().unwrap() as f32;
        let p = run["prompt"].as_u64().unwrap();
        let ptoks: Vec<u32> = run["prompt_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let mut s = eng.session(SessionOptions::default());
        s.attach_lora(&from_peft, scale).unwrap();
        s.append_tokens(&ptoks).unwrap();
        let got = s.logits().to_vec();
        let mut g = eng.session(SessionOptions::default());
        g.attach_lora(&from_gguf, scale).unwrap();
        g.append_tokens(&ptoks).unwrap();
        assert_eq!(
            got,
            g.logits(),
            "{name} prompt {p} scale {scale}: GGUF and PEFT forms differ"
        );

        let std = run["logit_std"].as_f64().unwrap();
        let spread = run["self_spread"].as_f64().unwrap();
        let noise = spread * std;
        let max_d = run["top"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let id = e[0].as_u64().unwrap() as usize;
                (got[id] as f64 - e[1].as_f64().unwrap()).abs()
            })
            .fold(0.0, f64::max);
        let bound = (2.0 * spread).max(2e-2);
        let tag = format!("{name} prompt {p} scale {scale}");
        if max_d / std > bound {
            failures.push(format!(
                "{tag}: logits max|d|/std {:.4} > {bound:.4} (llama.cpp's own spread {spread:.4})",
                max_d / std
            ));
        }
        let steps = run["steps"].as_array().unwrap();
        let summary = s
            .generate(&greedy(steps.len()), &mut |_t: u32, _p: &str| {
                Control::Continue
            })
            .unwrap();
        let mut matched = 0;
        let mut note = String::new();
        for (k, st) in steps.iter().enumerate() {
            let want_tok = st["token"].as_u64().unwrap() as u32;
            let gap = (st["top1"].as_f64().unwrap() - st["top2"].as_f64().unwrap()).abs();
            match summary.tokens.get(k) {
                Some(&t) if t == want_tok => matched += 1,
                Some(&t) if gap < noise => {
                    note = format!(" (near-tie at step {k}: gap {gap:.4} < noise {noise:.4})");
                    let _ = t;
                    break;
                }
                Some(&t) => {
                    failures.push(format!(
                        "{tag}: step {k}: token {t} vs llama.cpp {want_tok} (gap {gap:.4} >= noise {noise:.4})"
                    ));
                    break;
                }
                None => {
                    failures.push(format!("{tag}: stopped after {k} tokens"));
                    break;
                }
            }
        }
        report.push(format!(
            "{tag}: {matched}/{} greedy equal{note}; top-64 logits max|d|/std {:.4} (llama.cpp FA vs no-FA {spread:.4})",
            steps.len(),
            max_d / std
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn smollm2_adapters_match_llama_cpp() {
    check_fixture("smollm2_r8");
    check_fixture("smollm2_r16");
}

#[test]
fn qwen_adapter_matches_llama_cpp() {
    check_fixture("qwen_r8");
}

#[test]
fn lfm2_adapters_match_llama_cpp() {
    check_fixture("lfm2_q8_0_r8");
    check_fixture("lfm2_q8_0_r16");
}

/// Every linear projection of an lfm2moe, the MoE router and each expert's gate, up and down
/// included (stacked per expert in the GGUF form); then the same with a pair on the token
/// embeddings too, on a model with an untied output (llama.cpp aborts on an embedding pair
/// when the output is tied: it applies the pair to the output projection as well).
#[test]
fn moe_and_embedding_adapters_match_llama_cpp() {
    check_fixture("lfm2moe_q8_0_r8");
    check_fixture("lfm2moe_untied_r8_embd");
}

#[test]
fn every_fixture_is_checked() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lora");
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    found.sort();
    let mut listed: Vec<String> = FIXTURES.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed);
}

/// SmolLM2 with its rank-8 fixture adapter loaded.
fn smollm2_with_adapter() -> (Engine, Arc<cera::lora::LoraAdapter>) {
    let fx = fixture("smollm2_r8");
    let eng = engine(&base_path(fx["base"].as_str().unwrap()));
    let dir = write_peft(&fx, eng.gguf(), "smol-api");
    let a = eng.load_lora(&dir).unwrap();
    (eng, a)
}

fn logits_of(
    eng: &Engine,
    toks: &[u32],
    attach: &[(&Arc<cera::lora::LoraAdapter>, f32)],
) -> Vec<f32> {
    let mut s = eng.session(SessionOptions::default());
    for (a, sc) in attach {
        s.attach_lora(a, *sc).unwrap();
    }
    s.append_tokens(toks).unwrap();
    s.logits().to_vec()
}

#[test]
fn scale_zero_detach_and_batched_steps() {
    let (eng, a) = smollm2_with_adapter();
    let toks = eng.tokenizer().encode("Once upon a time", true, false);
    let base = logits_of(&eng, &toks, &[]);
    let with = logits_of(&eng, &toks, &[(&a, 1.0)]);
    let half = logits_of(&eng, &toks, &[(&a, 0.5)]);
    // the adapter changes the model, or none of this tests anything
    let d = base
        .iter()
        .zip(&with)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(d > 1.0, "the adapter barely changes the logits ({d})");
    assert_eq!(logits_of(&eng, &toks, &[(&a, 0.0)]), base, "scale 0");

    // detaching restores the base model exactly, on the same session
    let mut s = eng.session(SessionOptions::default());
    s.attach_lora(&a, 1.0).unwrap();
    s.append_tokens(&toks).unwrap();
    assert_eq!(s.logits(), &with[..]);
    assert!(s.detach_lora(&a));
    assert!(
        s.tokens().is_empty(),
        "changing adapters clears the context"
    );
    s.append_tokens(&toks).unwrap();
    assert_eq!(s.logits(), &base[..], "after detach");
    assert!(!s.detach_lora(&a));

    // one step: base, adapter, adapter at 0.5, adapter again; each as if alone
    let mut ss: Vec<_> = [None, Some(1.0), Some(0.5), Some(1.0)]
        .iter()
        .map(|sc| {
            let mut s = eng.session(SessionOptions::default());
            if let Some(sc) = sc {
                s.attach_lora(&a, *sc).unwrap();
            }
            s
        })
        .collect();
    let mut step = eng.batch();
    for s in ss.iter_mut() {
        step.add(s, &toks, Logits::Last).unwrap();
    }
    let out = step.run().unwrap();
    for (i, want) in [&base, &with, &half, &with].iter().enumerate() {
        assert_eq!(out.get(i), &want[..], "batched entry {i}");
    }
    // and decode steps mixing them
    let next = [cera::backend::argmax(&base) as u32];
    let mut step = eng.batch();
    for s in ss.iter_mut() {
        step.add(s, &next, Logits::Last).unwrap();
    }
    let out = step.run().unwrap();
    let mut ext = toks.clone();
    ext.push(next[0]);
    assert_eq!(out.get(0), &logits_of(&eng, &ext, &[])[..]);
    assert_eq!(out.get(2), &logits_of(&eng, &ext, &[(&a, 0.5)])[..]);
}

/// On the MoE model with the adapter that also changes the embeddings, router and experts: one
/// step mixing sessions with no adapter, the adapter and the adapter at another scale equals
/// each alone, in prefill and in decode (the grouped MoE dispatch shares experts between
/// sequences whose deltas differ).
#[test]
fn moe_batched_steps_equal_alone() {
    let fx = fixture("lfm2moe_untied_r8_embd");
    let eng = engine(&base_path(fx["base"].as_str().unwrap()));
    let dir = write_peft(&fx, eng.gguf(), "moe-batch");
    let a = eng.load_lora(&dir).unwrap();
    let toks = eng
        .tokenizer()
        .encode("The capital of France is", true, false);
    let base = logits_of(&eng, &toks, &[]);
    let with = logits_of(&eng, &toks, &[(&a, 1.0)]);
    let low = logits_of(&eng, &toks, &[(&a, 0.3)]);
    assert_ne!(base, with, "the adapter changes nothing");
    let mut ss: Vec<_> = [Some(1.0), None, Some(0.3), Some(1.0)]
        .iter()
        .map(|sc| {
            let mut s = eng.session(SessionOptions::default());
            if let Some(sc) = sc {
                s.attach_lora(&a, *sc).unwrap();
            }
            s
        })
        .collect();
    let mut step = eng.batch();
    for s in ss.iter_mut() {
        step.add(s, &toks, Logits::Last).unwrap();
    }
    let out = step.run().unwrap();
    for (i, want) in [&with, &base, &low, &with].iter().enumerate() {
        assert_eq!(out.get(i), &want[..], "prefill entry {i}");
    }
    let next = [cera::backend::argmax(&with) as u32];
    let mut step = eng.batch();
    for s in ss.iter_mut() {
        step.add(s, &next, Logits::Last).unwrap();
    }
    let out = step.run().unwrap();
    let mut ext = toks.clone();
    ext.push(next[0]);
    assert_eq!(
        out.get(0),
        &logits_of(&eng, &ext, &[(&a, 1.0)])[..],
        "decode 0"
    );
    assert_eq!(out.get(1), &logits_of(&eng, &ext, &[])[..], "decode 1");
    assert_eq!(
        out.get(2),
        &logits_of(&eng, &ext, &[(&a, 0.3)])[..],
        "decode 2"
    );
}

/// The fixture adapter again with every tensor stored as `ty` (a GGUF adapter file).
fn adapter_as(eng: &Engine, ty: cera::quant::GgmlType, tag: &str) -> Arc<cera::lora::LoraAdapter> {
    let fx = fixture("smollm2_r8");
    let dir = write_peft(&fx, eng.gguf(), tag);
    let f32_form =
        GgufFile::from_bytes(cera::models::peft::to_gguf(&dir, eng.gguf()).unwrap()).unwrap();
    let mut w = cera::gguf::GgufWriter::new();
    for (k, v) in &f32_form.metadata {
        w.set(k.clone(), v.clone());
    }
    for t in &f32_form.tensors {
        let vals = f32_form.tensor_f32(&t.name).unwrap();
        w.add_tensor_f32(t.name.clone(), ty, &t.shape, &vals)
            .unwrap();
    }
    let path = dir.join(format!("adapter-{ty}.gguf"));
    w.write_file(&path).unwrap();
    eng.load_lora(&path).unwrap()
}

#[test]
fn half_precision_adapters_match_their_f32_form() {
    let (eng, a) = smollm2_with_adapter();
    let toks = eng.tokenizer().encode("Once upon a time", true, false);
    let base = logits_of(&eng, &toks, &[]);
    let want = logits_of(&eng, &toks, &[(&a, 1.0)]);
    let effect = want
        .iter()
        .zip(&base)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    for ty in [cera::quant::GgmlType::F16, cera::quant::GgmlType::BF16] {
        let h = adapter_as(&eng, ty, &format!("half-{ty}"));
        let got = logits_of(&eng, &toks, &[(&h, 1.0)]);
        let d = got
            .iter()
            .zip(&want)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        // rounding the adapter's weights (and, for A, the activations to A's precision, as
        // ggml does) moves the logits by about as much as llama.cpp's own attention paths
        // differ on this model (~0.2 of the logits' std, see the fixtures), far less than the
        // adapter itself does
        let n = want.len() as f32;
        let mean = want.iter().sum::<f32>() / n;
        let std = (want.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / n).sqrt();
        eprintln!(
            "{ty}: max|d| {d:.4} = {:.4} std; adapter effect {effect:.3}",
            d / std
        );
        assert!(
            d / std < 0.35 && d < 0.3 * effect,
            "{ty}: max|d| {d} ({} std) against an adapter effect of {effect}",
            d / std
        );
        assert_eq!(
            cera::backend::argmax(&got),
            cera::backend::argmax(&want),
            "{ty}: top-1"
        );
        assert_eq!(
            logits_of(&eng, &toks, &[(&h, 0.0)]),
            base,
            "{ty} at scale 0"
        );
    }
}

#[test]
fn embeddings_reflect_the_adapter() {
    let (eng, a) = smollm2_with_adapter();
    let mut o = cera::embed::EmbedOptions::default();
    o.pooling = Some(cera::embed::Pooling::Mean);
    let texts = ["a castle", "a dog"];
    let base = eng.embed(&texts, &o).unwrap();
    let mut with = o.clone();
    with.lora.attach(Arc::clone(&a), 1.0);
    let adapted = eng.embed(&texts, &with).unwrap();
    let dot: f32 = base.items[0].vectors[0]
        .iter()
        .zip(&adapted.items[0].vectors[0])
        .map(|(x, y)| x * y)
        .sum();
    // (without it the same inputs give bit-identical vectors)
    assert!(
        dot < 0.999,
        "the adapter should move the embedding (cosine {dot})"
    );
    let toks = eng.tokenizer().encode("a castle", true, true);
    let mut l = o.clone();
    l.pooling = Some(cera::embed::Pooling::Last);
    l.lora.attach(Arc::clone(&a), 1.0);
    let last = eng.embed_tokens(&[toks], &l).unwrap();
    assert_eq!(last.items[0].vectors[0].len(), 576);
    let mut zero = o.clone();
    zero.lora.attach(Arc::clone(&a), 0.0);
    assert_eq!(
        eng.embed(&texts, &zero).unwrap().items[0].vectors,
        base.items[0].vectors
    );
}

#[test]
fn several_adapters_add_up() {
    let (eng, a) = smollm2_with_adapter();
    // the same file loaded twice is two adapters; both at scale 0.5 is one at scale 1 (up to
    // the rounding of adding two halves instead of one whole), and their order does not matter
    let fx = fixture("smollm2_r8");
    let b = eng.load_lora(write_peft(&fx, eng.gguf(), "twice")).unwrap();
    let toks = eng.tokenizer().encode("Once upon a time", true, false);
    let one = logits_of(&eng, &toks, &[(&a, 1.0)]);
    let two = logits_of(&eng, &toks, &[(&a, 0.5), (&b, 0.5)]);
    let rev = logits_of(&eng, &toks, &[(&b, 0.5), (&a, 0.5)]);
    let base = logits_of(&eng, &toks, &[]);
    let diff = |x: &[f32], y: &[f32]| {
        x.iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max)
    };
    let effect = diff(&one, &base);
    // rounding-level differences grow through SmolLM2's 30 layers to about what llama.cpp's
    // own attention paths differ by on it (~0.2 of the logits' std), far below the adapter's
    // own effect
    let n = one.len() as f32;
    let mean = one.iter().sum::<f32>() / n;
    let std = (one.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / n).sqrt();
    for (tag, x) in [("two halves", &two), ("reversed", &rev)] {
        let d = diff(x, &one);
        assert!(
            d / std < 0.3 && d < 0.3 * effect,
            "{tag}: max|d| {d} ({} std), adapter effect {effect}",
            d / std
        );
        assert_eq!(
            cera::backend::argmax(x),
            cera::backend::argmax(&one),
            "{tag}: top-1"
        );
    }
    // rescaling an attached adapter is attaching it again
    let mut s = eng.session(SessionOptions::default());
    s.attach_lora(&a, 0.25).unwrap();
    s.attach_lora(&a, 1.0).unwrap();
    assert_eq!(s.loras().attached().len(), 1);
    s.append_tokens(&toks).unwrap();
    assert_eq!(s.logits(), &one[..]);
    s.clear_loras();
    assert!(s.loras().is_empty() && s.tokens().is_empty());
}

#[test]
fn saved_state_is_keyed_by_the_adapters() {
    let (eng, a) = smollm2_with_adapter();
    let toks = eng.tokenizer().encode("Once upon a time", true, false);
    let mut s = eng.session(SessionOptions::default());
    s.attach_lora(&a, 1.0).unwrap();
    s.append_tokens(&toks).unwrap();
    let ck = s.checkpoint().unwrap();
    let mut plain = eng.session(SessionOptions::default());
    let e = plain.restore(&ck).unwrap_err().to_string();
    assert!(e.contains("LoRA"), "{e}");
    let mut other = eng.session(SessionOptions::default());
    other.attach_lora(&a, 0.5).unwrap();
    assert!(other.restore(&ck).is_err(), "another scale");
    let mut same = eng.session(SessionOptions::default());
    same.attach_lora(&a, 1.0).unwrap();
    same.restore(&ck).unwrap();
    assert_eq!(same.logits(), s.logits());
}

fn write_adapter(dir: &Path, config: &serde_json::Value, st: Option<&[u8]>) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("adapter_config.json"), config.to_string()).unwrap();
    if let Some(st) = st {
        std::fs::write(dir.join("adapter_model.safetensors"), st).unwrap();
    }
}

#[test]
fn bad_adapters_are_clear_errors() {
    let (eng, _) = smollm2_with_adapter();
    let g = lora_gen::LoraGen {
        rank: 4,
        alpha: 8.0,
        seed: 9,
        amplitude: 0.5,
        embed: false,
    };
    let (config, st) = lora_gen::peft_adapter(eng.gguf(), &g);
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    let root = tmp_dir("bad");
    let err = |dir: &Path| eng.load_lora(dir).unwrap_err().to_string();

    let mut c = config.clone();
    c["use_dora"] = true.into();
    write_adapter(&root.join("dora"), &c, Some(&st));
    assert!(err(&root.join("dora")).contains("DoRA"));

    let mut c = config.clone();
    c["modules_to_save"] = serde_json::json!(["lm_head"]);
    write_adapter(&root.join("mts"), &c, Some(&st));
    assert!(err(&root.join("mts")).contains("modules_to_save"));

    write_adapter(&root.join("nost"), &config, None);
    assert!(err(&root.join("nost")).contains("adapter_model.safetensors"));

    write_adapter(&root.join("corrupt"), &config, Some(&st[..st.len() / 2]));
    let e = err(&root.join("corrupt"));
    assert!(e.contains("do not hold") || e.contains("fit"), "{e}");

    // an adapter made for another model of the same architecture: wrong dimensions, named
    let tiny = GgufFile::open(base_path("test:llama_f32")).unwrap();
    let (c2, st2) = lora_gen::peft_adapter(&tiny, &g);
    write_adapter(
        &root.join("dims"),
        &serde_json::from_str(&c2).unwrap(),
        Some(&st2),
    );
    let e = err(&root.join("dims"));
    assert!(
        e.contains("'blk.0.attn_k.weight' is [576 -> 192] in the model"),
        "{e}"
    );

    // one for another architecture
    let lfm = GgufFile::open(base_path("test:lfm2_q8_0")).unwrap();
    let bytes = cera::models::peft::to_gguf(
        &{
            let (c3, st3) = lora_gen::peft_adapter(&lfm, &g);
            let d = root.join("lfm");
            write_adapter(&d, &serde_json::from_str(&c3).unwrap(), Some(&st3));
            d
        },
        &lfm,
    )
    .unwrap();
    std::fs::write(root.join("lfm.gguf"), bytes).unwrap();
    let e = err(&root.join("lfm.gguf"));
    assert!(e.contains("'lfm2'") && e.contains("'llama'"), "{e}");

    // a model file is not an adapter
    let e = err(&base_path("test:llama_f32"));
    assert!(e.contains("general.type"), "{e}");
    let _ = std::fs::remove_dir_all(&root);
}
