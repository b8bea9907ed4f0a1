//! Embeddings against llama.cpp's `llama-embedding` (fixtures from
//! `scripts/gen-embedding-fixtures.py`) on both real models, for each pooling (none, mean,
//! cls, last) and with and without L2 normalization: every vector's cosine with llama.cpp's
//! is at least 0.9999, or within twice llama.cpp's own spread between its attention paths
//! where that is wider (per-token vectors of these quantized models move by up to 8e-4 in
//! llama.cpp itself). Also: many texts in one step equal each text alone, bit for bit; a text
//! longer than a step is chunked; LoRA adapters change embeddings (scale 0 does not); bad
//! inputs are errors.

use std::path::PathBuf;

use cera::embed::{EmbedOptions, Normalize, Pooling};
use cera::engine::{Engine, EngineOptions};

#[path = "common/bert_model.rs"]
mod bert_model;
#[path = "common/models.rs"]
mod models;

/// The random-weight BERT at the bge-small shape, rebuilt (checked against the fixture's
/// hash) and written once per test binary.
fn bge_small(sha: &str) -> std::path::PathBuf {
    static P: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| bert_file("bge-small", &bert_model::BGE_SMALL, sha))
        .clone()
}

fn bert_file(name: &str, shape: &bert_model::BertShape, sha: &str) -> std::path::PathBuf {
    {
        let data = cera::fetch::llama_cpp_data(&mut |_| {})
            .unwrap_or_else(|e| panic!("could not fetch llama.cpp test data: {e}"));
        let vocab =
            cera::gguf::GgufFile::open(data.join("models").join("ggml-vocab-bert-bge.gguf"))
                .unwrap();
        let bytes = bert_model::build(name, shape, cera::quant::GgmlType::F16, &vocab);
        use sha2::Digest;
        let got: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(got, sha, "the generator no longer makes the fixture's BERT");
        let p = std::env::temp_dir().join(format!("cera-{name}-{}.gguf", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

#[test]
fn reranker_scores_match_llama_embedding_rank_pooling() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/embed/bge_small_rerank.json");
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let path = bert_file(
        "bge-small-rerank",
        &bert_model::BGE_SMALL_RERANK,
        fx["sha256"].as_str().unwrap(),
    );
    let eng = Engine::load(path, EngineOptions::default()).unwrap();
    assert_eq!(eng.default_pooling(), Pooling::Rank);
    let docs: Vec<&str> = fx["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    let got = eng
        .rerank(
            fx["query"].as_str().unwrap(),
            &docs,
            &EmbedOptions::default(),
        )
        .unwrap();
    let (on, off) = (
        fx["scores"].as_array().unwrap(),
        fx["scores_fa_off"].as_array().unwrap(),
    );
    for (i, g) in got.iter().enumerate() {
        let (w, w2) = (on[i].as_f64().unwrap(), off[i].as_f64().unwrap());
        let bound = (5e-3f64).max(2.0 * (w - w2).abs());
        assert!(
            (*g as f64 - w).abs() <= bound,
            "document {i}: score {g} vs llama.cpp {w} (its own other path {w2})"
        );
    }
    // the order is llama.cpp's
    let rank = |s: &[f64]| {
        let mut o: Vec<usize> = (0..s.len()).collect();
        o.sort_by(|&a, &b| s[b].total_cmp(&s[a]));
        o
    };
    let want: Vec<f64> = on.iter().map(|v| v.as_f64().unwrap()).collect();
    let ours: Vec<f64> = got.iter().map(|&v| v as f64).collect();
    assert_eq!(rank(&ours), rank(&want));
    // a model without a head cannot rerank
    let plain =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/embed/bge_small.json");
    let fx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(plain).unwrap()).unwrap();
    let e = Engine::load(
        bge_small(fx["sha256"].as_str().unwrap()),
        EngineOptions::default(),
    )
    .unwrap();
    let err = e
        .rerank("q", &["d"], &EmbedOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("classifier head"), "{err}");
}

fn engine(name: &str) -> Engine {
    let mut o = EngineOptions::default();
    o.n_threads = Some(2);
    Engine::load(models::real_model(name), o).unwrap()
}

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y;
        aa += x as f64 * x as f64;
        bb += y * y;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

fn check(name: &str) {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/embed")
        .join(format!("{name}.json"));
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let eng = match fx["model"].as_str() {
        Some(file) => {
            let e = engine(name);
            assert_eq!(e.path().file_name().unwrap().to_str().unwrap(), file);
            e
        }
        None => {
            let mut o = EngineOptions::default();
            o.n_threads = Some(2);
            Engine::load(bge_small(fx["sha256"].as_str().unwrap()), o).unwrap()
        }
    };
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for run in fx["runs"].as_array().unwrap() {
        // none in the fixture: the model's own
        let pooling = match run["pooling"].as_str() {
            Some(p) => Pooling::from_name(p).unwrap(),
            None => eng.default_pooling(),
        };
        let norm = Normalize::from_llama(run["normalize"].as_i64().unwrap() as i32).unwrap();
        let texts: Vec<&str> = run["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let mut o = EmbedOptions::default();
        o.pooling = Some(pooling);
        o.normalize = norm;
        let e = eng.embed(&texts, &o).unwrap();
        assert_eq!(e.steps, 1, "the texts run in one step");
        let ours: Vec<&Vec<f32>> = e.items.iter().flat_map(|i| &i.vectors).collect();
        let want = run["vectors"].as_array().unwrap();
        let selfc = run["self_cosine"].as_array().unwrap();
        let tag = format!("{name} pooling {} normalize {norm:?}", pooling.name());
        if ours.len() != want.len() {
            failures.push(format!(
                "{tag}: {} vectors, llama.cpp has {}",
                ours.len(),
                want.len()
            ));
            continue;
        }
        let mut worst = 1f64;
        for (j, (o, w)) in ours.iter().zip(want).enumerate() {
            let w: Vec<f64> = w
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            assert_eq!(o.len(), w.len(), "{tag}: width");
            let c = cosine(o, &w);
            worst = worst.min(c);
            let own = selfc[j].as_f64().unwrap();
            let bound = 1.0 - (1e-4f64).max(2.0 * (1.0 - own));
            if c < bound {
                failures.push(format!(
                    "{tag}: vector {j}: cosine {c:.6} < {bound:.6} (llama.cpp's own {own:.6})"
                ));
            }
            if norm == Normalize::Euclidean {
                let l2: f64 = o.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
                assert!((l2 - 1.0).abs() < 1e-5, "{tag}: vector {j} has norm {l2}");
            } else {
                // unnormalized: the magnitudes agree too
                let (a, b): (f64, f64) = (
                    o.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt(),
                    w.iter().map(|x| x * x).sum::<f64>().sqrt(),
                );
                if (a / b - 1.0).abs() > 1e-2 {
                    failures.push(format!("{tag}: vector {j}: norm {a} vs llama.cpp {b}"));
                }
            }
        }
        report.push(format!(
            "{tag}: {} vectors, worst cosine {worst:.6}",
            ours.len()
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn smollm2_embeddings_match_llama_embedding() {
    check("smollm2");
}

#[test]
fn qwen_embeddings_match_llama_embedding() {
    check("qwen");
}

#[test]
fn bert_embeddings_match_llama_embedding() {
    check("bge_small");
}

#[test]
fn bert_is_an_encoder() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/embed/bge_small.json");
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let eng = Engine::load(
        bge_small(fx["sha256"].as_str().unwrap()),
        EngineOptions::default(),
    )
    .unwrap();
    assert_eq!(eng.default_pooling(), Pooling::Cls);
    // its tokens see each other: the first token's vector depends on what follows
    let mut o = EmbedOptions::default();
    o.pooling = Some(Pooling::Cls);
    let e = eng.embed(&["the cat", "the dog"], &o).unwrap();
    assert_ne!(e.items[0].vectors, e.items[1].vectors);
    // it cannot generate, and a text must fit one step
    let mut s = eng.session(cera::engine::SessionOptions::default());
    let err = s.append_tokens(&[101, 2000]).unwrap_err().to_string();
    assert!(err.contains("embedding model"), "{err}");
    o.batch_tokens = 4;
    let err = eng
        .embed(&["a sentence longer than four tokens"], &o)
        .unwrap_err()
        .to_string();
    assert!(err.contains("one step"), "{err}");
    // positions past the position embeddings are refused
    let long = vec![1000u32; 600];
    o.batch_tokens = 2048;
    let err = eng.embed_tokens(&[long], &o).unwrap_err().to_string();
    assert!(err.contains("context"), "{err}");
}

#[test]
fn many_texts_in_one_step_equal_each_alone() {
    let eng = engine("smollm2");
    let texts: Vec<String> = (0..64)
        .map(|i| {
            format!(
                "Sentence number {i} talks about topic {} at some length.",
                i % 7
            )
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    for pooling in [Pooling::Mean, Pooling::Last, Pooling::None] {
        let mut o = EmbedOptions::default();
        o.pooling = Some(pooling);
        let all = eng.embed(&refs, &o).unwrap();
        assert!(all.steps <= 2, "{} steps for 64 short texts", all.steps);
        for (i, t) in refs.iter().enumerate().step_by(9) {
            let one = eng.embed(&[t], &o).unwrap();
            assert_eq!(
                one.items[0].vectors, all.items[i].vectors,
                "text {i}, {pooling:?}"
            );
        }
    }
    // a budget smaller than the texts: more steps, the same vectors
    let mut o = EmbedOptions::default();
    o.pooling = Some(Pooling::Mean);
    let big = eng.embed(&refs[..8], &o).unwrap();
    o.batch_tokens = 40;
    let small = eng.embed(&refs[..8], &o).unwrap();
    assert!(small.steps > big.steps);
    for (a, b) in big.items.iter().zip(&small.items) {
        assert_eq!(a.vectors, b.vectors);
    }
}

#[test]
fn a_text_longer_than_a_step_is_chunked() {
    let eng = engine("smollm2");
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
    let mut o = EmbedOptions::default();
    o.pooling = Some(Pooling::Mean);
    let whole = eng.embed(&[&text], &o).unwrap();
    o.batch_tokens = 64;
    let chunked = eng.embed(&[&text], &o).unwrap();
    assert!(chunked.steps > 1 && whole.steps == 1);
    let w: Vec<f64> = whole.items[0].vectors[0]
        .iter()
        .map(|&x| x as f64)
        .collect();
    let c = cosine(&chunked.items[0].vectors[0], &w);
    assert!(c > 0.99999, "cosine {c}");
    o.pooling = Some(Pooling::Last);
    let last = eng.embed(&[&text], &o).unwrap();
    assert_eq!(last.items[0].vectors.len(), 1);
}

#[test]
fn bad_inputs_are_errors() {
    let eng = engine("smollm2");
    let o = EmbedOptions::default();
    let e = eng
        .embed_tokens(&[vec![1, 2], vec![]], &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("input 1 has no tokens"), "{e}");
    let long = vec![1u32; eng.n_ctx_train() + 1];
    let e = eng.embed_tokens(&[long], &o).unwrap_err().to_string();
    assert!(e.contains("context"), "{e}");
    let e = eng
        .embed_tokens(&[vec![u32::MAX]], &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("out of range"), "{e}");
    assert_eq!(eng.default_pooling(), Pooling::None);
}
