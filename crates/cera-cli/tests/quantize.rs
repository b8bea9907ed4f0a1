//! `cera quantize` against llama-quantize (`fixtures/quantize.json`, made by
//! `scripts/gen-quantize-fixtures.sh`): from an F16 copy of each real model, every file type
//! and flag in the fixture gives a file byte for byte equal to llama-quantize's (same metadata,
//! tensor order, per-tensor types and blocks); a quantized file loads, generates and keeps its
//! perplexity near the source's; `fast-mse` brings the weights closer to the source; bad types,
//! requantizing without the flag and missing inputs are clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

fn cera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(args)
        .output()
        .unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cera-quantize-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn quantize(args: &[&str]) -> String {
    let mut all = vec!["quantize"];
    all.extend_from_slice(args);
    let r = cera(&all);
    let err = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(r.status.success(), "cera {all:?}: {err}");
    err
}

/// Perplexity of a fixed text under `model` (2 chunks of 512): the GPL-3 that every Debian
/// machine has, as the perplexity test uses (not the README, whose first 1024 tokens change
/// with every edit and moved the Q8_0/F16 ratio past its bound once).
fn ppl(model: &str) -> f64 {
    let text = "/usr/share/common-licenses/GPL-3";
    assert!(
        Path::new(text).exists(),
        "{text} is missing (it ships with Debian's base-files)"
    );
    let r = cera(&[
        "perplexity",
        "-m",
        model,
        "-f",
        text,
        "-c",
        "512",
        "--chunks",
        "2",
    ]);
    let out = String::from_utf8_lossy(&r.stderr).into_owned() + &String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{out}");
    let at = out
        .find("PPL = ")
        .unwrap_or_else(|| panic!("no PPL in {out}"));
    out[at + 6..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Every case of the fixture, byte for byte.
#[test]
fn bytes_equal_llama_quantize() {
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/quantize.json")).unwrap();
    let mut failures = Vec::new();
    for model in fx["models"].as_array().unwrap() {
        let name = model["model"].as_str().unwrap();
        // The F16 source: the real model's blocks dequantized, as llama-quantize
        // --allow-requantize F16 writes it.
        let f16 = tmp(&format!("{name}-f16.gguf"));
        let f16s = f16.to_str().unwrap();
        quantize(&[name, f16s, "F16", "--allow-requantize"]);
        let want = model["f16_sha256"].as_str().unwrap();
        if sha256(&f16) != want {
            failures.push(format!("{name} F16 source: {} != {want}", sha256(&f16)));
        }
        for case in model["cases"].as_array().unwrap() {
            let args: Vec<&str> = case["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            let out = tmp(&format!("{name}-{}.gguf", args.join("_")));
            let mut all = vec![f16s, out.to_str().unwrap()];
            // llama-quantize's order is IN OUT TYPE with the flags first; ours takes both.
            all.extend_from_slice(&args);
            quantize(&all);
            let got = sha256(&out);
            let want = case["sha256"].as_str().unwrap();
            if got != want {
                let g = cera::gguf::GgufFile::open(&out).unwrap();
                let types: Vec<String> = case["types"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(t, _)| {
                        g.tensor(t).map(|x| x.ty.name())
                            != Some(case["types"][t.as_str()].as_str().unwrap())
                    })
                    .map(|(t, w)| {
                        format!(
                            "{t}: {} != {w}",
                            g.tensor(t).map_or("missing", |x| x.ty.name())
                        )
                    })
                    .collect();
                failures.push(format!(
                    "{name} {args:?}: sha256 differs; types that differ: {types:?}"
                ));
            }
            std::fs::remove_file(&out).ok();
        }
        std::fs::remove_file(&f16).ok();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A quantized file runs, and its perplexity stays by the source's.
#[test]
fn quantized_smollm2_runs() {
    let f16 = tmp("run-f16.gguf");
    let f16s = f16.to_str().unwrap();
    quantize(&["smollm2", f16s, "f16", "--allow-requantize"]);
    let base = ppl(f16s);
    for (ty, tol) in [("Q8_0", 0.01), ("Q4_K_M", 0.15)] {
        let out = tmp(&format!("smol-{ty}.gguf"));
        let o = out.to_str().unwrap();
        let err = quantize(&[f16s, o, ty]);
        assert!(err.contains("matrices quantized"), "{err}");
        let g = cera::gguf::GgufFile::open(&out).unwrap();
        assert_eq!(
            g.tensor("blk.4.attn_norm.weight").unwrap().ty,
            cera::quant::GgmlType::F32
        );
        let out_run = cera(&[
            "run",
            "-m",
            o,
            "--raw",
            "-p",
            "The capital of France is",
            "-n",
            "8",
            "--temp",
            "0",
        ]);
        assert!(
            out_run.status.success(),
            "{}",
            String::from_utf8_lossy(&out_run.stderr)
        );
        assert!(!out_run.stdout.is_empty());
        let p = ppl(o);
        eprintln!("{ty}: perplexity {p:.4}, the F16 source's {base:.4}");
        assert!(
            (p / base - 1.0).abs() < tol,
            "{ty}: perplexity {p} against the source's {base}"
        );
    }
}

/// Squared error of every quantized matrix of `q` against the same tensor of `src`, each
/// element's weighted by its square (fast-mse's objective, ggml's weighting of its own scale
/// searches).
fn weight_error(src: &Path, q: &Path) -> f64 {
    let (s, q) = (
        cera::gguf::GgufFile::open(src).unwrap(),
        cera::gguf::GgufFile::open(q).unwrap(),
    );
    let mut total = 0.0;
    for t in &q.tensors {
        let st = s.tensor(&t.name).unwrap();
        if t.ty == st.ty {
            continue;
        }
        let n = t.n_elements() as usize;
        let a = cera::quant::dequantize_to_vec(st.ty, s.tensor_data(st), n).unwrap();
        let b = cera::quant::dequantize_to_vec(t.ty, q.tensor_data(t), n).unwrap();
        total += a
            .iter()
            .zip(&b)
            .map(|(x, y)| (*x as f64).powi(2) * ((x - y) as f64).powi(2))
            .sum::<f64>();
    }
    total
}

/// `--quant-strategy fast-mse`: every Q4_0 matrix searched, the weights closer to the F16
/// source than the reference quantizer's (llama-quantize's) in total, in the error it
/// minimizes, and the model runs with its perplexity near the source's.
#[test]
fn fast_mse_is_closer_to_the_source() {
    let f16 = tmp("mse-f16.gguf");
    let f16s = f16.to_str().unwrap();
    quantize(&["smollm2", f16s, "F16", "--allow-requantize"]);
    let (r, m) = (tmp("mse-ref.gguf"), tmp("mse-mse.gguf"));
    quantize(&[f16s, r.to_str().unwrap(), "Q4_0", "--pure"]);
    let err = quantize(&[
        f16s,
        m.to_str().unwrap(),
        "Q4_0",
        "--pure",
        "--quant-strategy",
        "fast-mse",
    ]);
    assert!(err.contains("fast-mse: 211 of 211"), "{err}");
    let (er, em) = (weight_error(&f16, &r), weight_error(&f16, &m));
    eprintln!("weighted squared weight error: reference {er:.4e}, fast-mse {em:.4e}");
    assert!(em < er * 0.97, "fast-mse {em} against the reference's {er}");
    let (pb, pm) = (ppl(f16s), ppl(m.to_str().unwrap()));
    assert!(
        pm / pb < 1.5,
        "fast-mse Q4_0 perplexity {pm} against the source's {pb}"
    );
    let bad = cera(&[
        "quantize",
        f16s,
        "x.gguf",
        "q4_0",
        "--quant-strategy",
        "best",
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("'best' is not a strategy"));
}

#[test]
fn bad_requests_are_clear_errors() {
    let out = tmp("x.gguf");
    let o = out.to_str().unwrap();
    let check = |args: &[&str], want: &str| {
        let r = cera(args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists(), "{args:?} left an output");
    };
    check(
        &["quantize", "smollm2", o, "q9_9"],
        "cannot quantize to 'q9_9'",
    );
    // SmolLM2 is Q4_1: quantizing it again needs the flag, as in llama-quantize.
    check(&["quantize", "smollm2", o, "q4_0"], "--allow-requantize");
    check(
        &["quantize", "smollm2", o, "IQ2_XXS", "--allow-requantize"],
        "importance matrix",
    );
    check(&["quantize", "/nonexistent.gguf", o, "q8_0"], "nonexistent");
    check(
        &[
            "quantize",
            "smollm2",
            o,
            "q4_0",
            "--output-tensor-type",
            "q7",
        ],
        "'q7'",
    );
}
