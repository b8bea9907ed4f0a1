//! `cera perplexity` against `llama-perplexity` (build 11434, `-c 512 --no-repack`) on the GPL-3
//! text every Debian machine has: the running estimate (all 14 chunks for SmolLM2, the first 8 for
//! Qwen, to keep CI short) must be within 0.5%. Measured over all 14 chunks: SmolLM2 18.3840 vs
//! 18.3914 (0.04%), Qwen2.5-Coder 5.3203 vs 5.3279 (0.14%).
//! Reference values: fixtures/perplexity.json (copied from llama-perplexity's output).

use std::process::Command;

fn check(model: &str, chunks: usize) {
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/perplexity.json")).unwrap();
    let entry = &fx[model];
    let file = entry["file"].as_str().unwrap();
    assert!(
        std::path::Path::new(file).exists(),
        "{file} is missing (it ships with Debian's base-files)"
    );
    let want = entry["running"].as_array().unwrap()[chunks - 1]
        .as_f64()
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args([
            "perplexity",
            "-m",
            model,
            "-f",
            file,
            "-c",
            "512",
            "-t",
            "2",
            "--chunks",
            &chunks.to_string(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cera perplexity failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ppl: f64 = stdout
        .split("PPL = ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no PPL in output: {stdout}"));
    let rel = (ppl - want).abs() / want;
    eprintln!(
        "{model}: cera {ppl:.4}, llama.cpp {want:.4} after {chunks} chunks ({:.3}%)",
        rel * 100.0
    );
    assert!(
        rel < 0.005,
        "{model}: perplexity {ppl} vs llama.cpp {want} ({:.2}% apart)",
        rel * 100.0
    );
}

#[test]
fn smollm2_perplexity_matches_llama_cpp() {
    check("smollm2-135m-instruct-q4_1", 14);
}

#[test]
fn qwen25_perplexity_matches_llama_cpp() {
    check("qwen2.5-coder-0.5b-instruct-q4_k_m", 8);
}
