//! `cera quantize`: SmolLM2 to Q8_0, F16 and Q4_K_M gives files whose matrices have that type,
//! which load and generate, and whose perplexity stays by the source's (within 1% for the
//! types finer than the source, 15% for Q4_K); a bad type or input is a clear error.

use std::process::{Command, Output};

fn cera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(args)
        .output()
        .unwrap()
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("cera-quantize-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Perplexity of the repository's README under `model` (2 chunks of 512).
fn ppl(model: &str) -> f64 {
    let text = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
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

#[test]
fn quantize_smollm2() {
    let base = ppl("smollm2");
    for (ty, tol) in [("Q8_0", 0.01), ("f16", 0.01), ("Q4_K_M", 0.15)] {
        let out = tmp(&format!("smol-{ty}.gguf"));
        let o = out.to_str().unwrap();
        let r = cera(&["quantize", "smollm2", o, ty]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(r.status.success(), "{ty}: {err}");
        assert!(err.contains("matrices quantized"), "{err}");
        let g = cera::gguf::GgufFile::open(&out).unwrap();
        let want = cera::gguf::requantize::parse_target(ty).unwrap().0;
        // ffn_down rows are 1536 long, whole blocks of every type (576-long rows are not of K types).
        let blk = g.tensor("blk.0.ffn_down.weight").unwrap();
        assert_eq!(blk.ty, want, "{ty}");
        assert!(g.tensor("blk.0.attn_norm.weight").unwrap().ty == cera::quant::GgmlType::F32);
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
        assert!(
            (p / base - 1.0).abs() < tol,
            "{ty}: perplexity {p} against the source's {base}"
        );
    }
    let r = cera(&[
        "quantize",
        "smollm2",
        tmp("x.gguf").to_str().unwrap(),
        "q9_9",
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() && err.contains("cannot quantize to 'q9_9'"),
        "{err}"
    );
    let r = cera(&[
        "quantize",
        "/nonexistent.gguf",
        tmp("y.gguf").to_str().unwrap(),
        "q8_0",
    ]);
    assert!(!r.status.success());
    assert!(!String::from_utf8_lossy(&r.stderr).contains("panicked"));
}
