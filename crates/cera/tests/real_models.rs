//! The two real models: our reader lists exactly the tensors, types and shapes that the `gguf`
//! Python reader reports, and every tensor dequantizes to exactly gguf's values (compared by the
//! sha256 of the f32 little-endian bytes). Fixtures: `scripts/gen-quant-fixtures.py model`.
//!
//! Models come through the project's fetch step (pip); a failed fetch fails the test.

use std::collections::BTreeMap;

use cera::fetch;
use cera::gguf::GgufFile;
use sha2::{Digest, Sha256};

fn model(name: &str) -> GgufFile {
    let entry = fetch::lookup(name).unwrap();
    let path = fetch::ensure(entry, &mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch test model {name}: {e}"));
    GgufFile::open(path).unwrap()
}

fn fixture(name: &str) -> serde_json::Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/models")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn check_model(name: &str, expect_counts: &[(&str, usize)]) {
    let g = model(name);
    let fx = fixture(name);
    let tensors = fx["tensors"].as_array().unwrap();
    assert_eq!(g.tensors.len(), tensors.len(), "{name}: tensor count");

    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for (t, want) in g.tensors.iter().zip(tensors) {
        assert_eq!(t.name, want["name"].as_str().unwrap());
        assert_eq!(t.ty.name(), want["type"].as_str().unwrap(), "{}", t.name);
        let shape: Vec<u64> = want["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(t.shape, shape, "{}", t.name);
        assert_eq!(t.size, want["bytes"].as_u64().unwrap(), "{}", t.name);
        *counts.entry(t.ty.name()).or_default() += 1;

        let values = g.tensor_f32(&t.name).unwrap();
        let mut h = Sha256::new();
        for v in &values {
            h.update(v.to_le_bytes());
        }
        let got: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        if got != want["sha256_f32"].as_str().unwrap() {
            failures.push(format!("{} ({})", t.name, t.ty));
        }
    }
    let want_counts: BTreeMap<&str, usize> = expect_counts.iter().copied().collect();
    assert_eq!(counts, want_counts, "{name}: tensors per type");
    assert!(
        failures.is_empty(),
        "{name}: dequantization differs from gguf for {failures:?}"
    );
}

#[test]
fn smollm2_tensors_and_dequantization_match_gguf() {
    check_model(
        "smollm2-135m-instruct-q4_1",
        &[("Q4_1", 210), ("F32", 61), ("Q8_0", 1)],
    );
}

#[test]
fn qwen25_tensors_and_dequantization_match_gguf() {
    check_model(
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
        &[
            ("Q5_0", 133),
            ("Q8_0", 13),
            ("Q4_K", 12),
            ("Q6_K", 12),
            ("F32", 121),
        ],
    );
}

#[test]
fn smollm2_metadata() {
    let g = model("smollm2");
    assert_eq!(g.version, 3);
    assert_eq!(g.architecture().unwrap(), "llama");
    assert_eq!(g.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(
        g.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        49152
    );
    assert_eq!(
        g.get_str_array("tokenizer.ggml.merges").unwrap().len(),
        48900
    );
    let params: u64 = g.tensors.iter().map(|t| t.n_elements()).sum();
    assert_eq!(params, 134_515_008);
}
