//! Batched equals alone: several sequences of different lengths run together in one step
//! (`Engine::batch`) get exactly the logits and greedy tokens each gets when run alone, on every
//! architecture's tiny parity model and on both real models. The schedule mixes a prefill chunk
//! of one sequence with the decode tokens of others, holds back one sequence's logits for a
//! step (`Logits::None`), and asks all rows of one prompt (`Logits::All`).
//!
//! The CPU kernels give a token the same arithmetic whatever else is in its matmul tile or step
//! (the GEMM's accumulators are per token, attention rows are per sequence), so the comparison
//! is exact: any difference is cross-talk between sequences or a wrong position, not rounding.

use std::path::PathBuf;

use cera::backend::argmax;
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::models::Logits;
use cera::session::Session;

#[path = "common/arch_models.rs"]
mod arch_models;
#[path = "common/models.rs"]
mod models;
use models::{real_model, tokenizer};

/// `name` written to a file of its own for test `tag` (tests run in parallel).
fn tiny_model(name: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cera-batched-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.gguf"));
    std::fs::write(
        &path,
        arch_models::build(&arch_models::variant(name), tokenizer()),
    )
    .unwrap();
    path
}

const STEPS: usize = 6;

fn session(eng: &Engine) -> Session {
    let mut o = SessionOptions::default();
    o.n_ctx = 256;
    eng.session(o)
}

/// The reference: the prompt prefilled alone, then greedy decoding alone. Returns the logits
/// after the prompt and after each fed token, and the greedy tokens.
fn alone(eng: &Engine, prompt: &[u32], steps: usize) -> (Vec<Vec<f32>>, Vec<u32>) {
    let mut s = session(eng);
    s.append_tokens(prompt).unwrap();
    let mut logits = vec![s.logits().to_vec()];
    let mut toks = Vec::new();
    for _ in 0..steps {
        let t = argmax(s.logits()) as u32;
        toks.push(t);
        s.append_tokens(&[t]).unwrap();
        logits.push(s.logits().to_vec());
    }
    (logits, toks)
}

fn assert_same(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: logits length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        let max = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        panic!(
            "{what}: logit {i} is {} batched, {} alone (max |diff| {max:e})",
            got[i], want[i]
        );
    }
}

/// Four sequences with prompts of different lengths plus one `Logits::All` prompt, scheduled so
/// that one step mixes a prefill chunk with decode tokens.
fn check(name: &str, eng: &Engine, prompts: &[Vec<u32>]) {
    assert!(prompts.len() >= 4 && prompts[3].len() >= 2);
    let n = prompts.len();
    let want: Vec<_> = prompts.iter().map(|p| alone(eng, p, STEPS)).collect();
    // the all-rows prompt, alone: logits of every one of its tokens
    let all_prompt = &prompts[0];
    let want_all = session(eng).append_tokens_all_logits(all_prompt).unwrap();

    let mut sess: Vec<Session> = (0..n).map(|_| session(eng)).collect();
    let mut all_sess = session(eng);
    let mut got: Vec<Vec<Vec<f32>>> = vec![Vec::new(); n];
    let mut toks: Vec<Vec<u32>> = vec![Vec::new(); n];
    let last = n - 1;
    let half = prompts[last].len() / 2;

    // step 0: every prompt but the last sequence's, which sends its first half without logits
    {
        let mut step = eng.batch();
        for (i, s) in sess.iter_mut().enumerate() {
            if i == last {
                step.add(s, &prompts[i][..half], Logits::None).unwrap();
            } else {
                step.add(s, &prompts[i], Logits::Last).unwrap();
            }
        }
        step.add(&mut all_sess, all_prompt, Logits::All).unwrap();
        let out = step.run().unwrap();
        assert!(out.get(last).is_empty(), "{name}: a None entry got logits");
        assert!(sess[last].logits().is_empty());
        assert_same(&format!("{name}: all-rows prompt"), out.get(n), &want_all);
        for i in 0..last {
            got[i].push(sess[i].logits().to_vec());
        }
    }
    // then: the last sequence's second half joins the others' decode tokens; after that all
    // decode together (the last one a step behind)
    let mut feed: Vec<Vec<u32>> = vec![Vec::new(); n];
    for k in 0..STEPS + 1 {
        let mut step = eng.batch();
        for (i, s) in sess.iter_mut().enumerate() {
            let behind = usize::from(i == last);
            if k == 0 && i == last {
                feed[i] = prompts[i][half..].to_vec();
            } else if k < STEPS + behind {
                let t = argmax(s.logits()) as u32;
                toks[i].push(t);
                feed[i] = vec![t];
            } else {
                feed[i].clear();
            }
        }
        for (i, (s, f)) in sess.iter_mut().zip(&feed).enumerate() {
            if !f.is_empty() {
                step.add(s, f, Logits::Last)
                    .unwrap_or_else(|e| panic!("{name} {i}: {e}"));
            }
        }
        step.run().unwrap();
        for (i, s) in sess.iter().enumerate() {
            if !feed[i].is_empty() {
                got[i].push(s.logits().to_vec());
            }
        }
    }
    for i in 0..n {
        let (wl, wt) = &want[i];
        assert_eq!(got[i].len(), wl.len(), "{name} seq {i}: steps");
        for (j, (g, w)) in got[i].iter().zip(wl).enumerate() {
            assert_same(&format!("{name} seq {i} step {j}"), g, w);
        }
        assert_eq!(&toks[i], wt, "{name} seq {i}: greedy tokens");
        assert_eq!(
            sess[i].tokens().len(),
            prompts[i].len() + STEPS,
            "{name} seq {i}: context length"
        );
    }
}

fn tiny_prompts() -> Vec<Vec<u32>> {
    [7usize, 19, 3, 12]
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            (0..n as u32)
                .map(|i| 1 + (i * 37 + s as u32 * 101) % 400)
                .collect()
        })
        .collect()
}

#[test]
fn every_architecture_batched_equals_alone() {
    let names: Vec<&str> = arch_models::variants()
        .into_iter()
        .chain(arch_models::lfm2_variants())
        .map(|v| v.name)
        .filter(|n| !n.contains("350m"))
        .collect();
    assert!(names.len() >= 28, "{names:?}");
    for name in names {
        let path = tiny_model(name, "arch");
        let eng = Engine::load(&path, EngineOptions::default()).unwrap();
        check(name, &eng, &tiny_prompts());
    }
}

fn real_prompts(eng: &Engine) -> Vec<Vec<u32>> {
    [
        "The capital of France is",
        "Write a Rust function that reverses a string. Explain each step, then give a test.",
        "1, 2, 3,",
        "Once upon a time, in a small village by the sea, there lived",
    ]
    .iter()
    .map(|t| eng.tokenizer().encode(t, true, false))
    .collect()
}

#[test]
fn smollm2_batched_equals_alone() {
    let eng = Engine::load(real_model("smollm2"), EngineOptions::default()).unwrap();
    check("smollm2", &eng, &real_prompts(&eng));
}

#[test]
fn qwen_batched_equals_alone() {
    let eng = Engine::load(
        real_model("qwen2.5-coder-0.5b-instruct-q4_k_m"),
        EngineOptions::default(),
    )
    .unwrap();
    check("qwen", &eng, &real_prompts(&eng));
}

/// Bad steps are refused before anything runs, naming what is wrong.
#[test]
fn batch_refuses_bad_entries() {
    let eng = Engine::load(tiny_model("llama_f32", "bad"), EngineOptions::default()).unwrap();
    let other = Engine::load(tiny_model("qwen2_f32", "bad"), EngineOptions::default()).unwrap();
    let mut a = session(&eng);
    let mut b = other.session(SessionOptions::default());
    // a failed add keeps its borrow of the session for the step's lifetime: one step each
    let e = eng.batch().add(&mut b, &[1, 2], Logits::Last).unwrap_err();
    assert!(e.to_string().contains("another engine"), "{e}");
    let e = eng.batch().add(&mut a, &[], Logits::Last).unwrap_err();
    assert!(e.to_string().contains("no tokens"), "{e}");
    let e = eng
        .batch()
        .add(&mut a, &[u32::MAX], Logits::Last)
        .unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let long = vec![1u32; 300];
    let e = eng.batch().add(&mut a, &long, Logits::Last).unwrap_err();
    assert!(e.to_string().contains("context overflow"), "{e}");
    // an empty step is a no-op
    assert!(eng.batch().run().unwrap().is_empty());
    assert!(a.tokens().is_empty());
}

/// Sessions with different cache types (f16, q8_0, f32 keys with q8_0 values) share one step:
/// each attends over its own cache in its own types and gets what it gets alone.
#[test]
fn sessions_with_different_cache_types_share_a_step() {
    use cera::backend::KvType;
    let eng = Engine::load(real_model("smollm2"), EngineOptions::default()).unwrap();
    let types = [
        (KvType::F16, None),
        (KvType::Q8_0, None),
        (KvType::F32, Some(KvType::Q8_0)),
    ];
    let open = |(k, v): (KvType, Option<KvType>)| {
        let mut o = SessionOptions::default();
        o.n_ctx = 128;
        o.kv_type = k;
        o.kv_type_v = v;
        eng.session(o)
    };
    let prompts = real_prompts(&eng);
    let mut want = Vec::new();
    for (ty, p) in types.iter().zip(&prompts) {
        let mut s = open(*ty);
        s.append_tokens(p).unwrap();
        let t = argmax(s.logits()) as u32;
        s.append_tokens(&[t]).unwrap();
        want.push((t, s.logits().to_vec()));
    }
    let mut sess: Vec<Session> = types.iter().map(|t| open(*t)).collect();
    let mut step = eng.batch();
    for (s, p) in sess.iter_mut().zip(&prompts) {
        step.add(s, p, Logits::Last).unwrap();
    }
    step.run().unwrap();
    let next: Vec<[u32; 1]> = sess.iter().map(|s| [argmax(s.logits()) as u32]).collect();
    let mut step = eng.batch();
    for (s, t) in sess.iter_mut().zip(&next) {
        step.add(s, t, Logits::Last).unwrap();
    }
    step.run().unwrap();
    for (i, (s, (t, w))) in sess.iter().zip(&want).enumerate() {
        assert_eq!(next[i][0], *t, "session {i}: greedy token");
        assert_same(&format!("cache types {:?}", types[i]), s.logits(), w);
    }
}
