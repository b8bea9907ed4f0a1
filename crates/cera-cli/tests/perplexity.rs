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

/// `-ctk/-ctv` quantized caches, with and without the Hadamard rotation, against
/// llama-perplexity with the same types (its rotation on by default, off with
/// `LLAMA_ATTN_ROT_DISABLE=1`; fixture and figures: scripts/gen-kv-perplexity-fixture.py), 4
/// chunks of 512. What a cache type costs is compared, each engine against its own f16 cache:
/// ln(PPL(Q) / PPL(f16)) and the mean KL divergence of the logits from the f16 run's.
///
/// The bounds are llama-perplexity's own standard errors of those two means, 3·√2 of them (a
/// difference of two independent estimates; the KL with a 15% floor). A fixed percentage of
/// perplexity does not hold: this small model's q8_1 activations (and a 4-bit cache) round
/// differently under any other summation order, and the rounding differences carry through
/// the layers, so equally exact builds land apart. llama.cpp itself, run on an Intel AVX-512
/// machine and on an AMD AVX2 one: f16 cache 18.3363 vs 18.2554 (0.44%), q4_0 rotated 19.2028
/// vs 19.5106 (1.6%), q4_0 unrotated 21.5696 vs 22.3981 (3.8%); cera's AVX2 and scalar tiers on
/// the AMD one: 18.3407 vs 18.2563 with f16, KL of q8_0 0.00464 vs 0.00431. Observed (AMD,
/// AVX2 tier, against the fixture): ln ratio 0.55, 0.17 and 0.16 of its bound apart for q8_0,
/// q4_0 rotated, q4_0 unrotated; KL 0.70, 0.02, 0.10. (llama.cpp's Intel figures sit 0.38 and
/// 0.41 of the bound from its AMD ones for the two q4_0 cases.)
/// And the rotation lowering q4_0's perplexity and its KL divergence, as it does llama.cpp's.
#[test]
fn kv_cache_types_match_llama_cpp() {
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/perplexity.json")).unwrap();
    let kv = &fx["kv_cache_types"];
    let file = kv["file"].as_str().unwrap();
    let mut kl_q4 = Vec::new();
    for case in kv["cases"].as_array().unwrap() {
        let ty = case["type"].as_str().unwrap();
        let rotate = if case["rotate"].as_bool().unwrap() {
            "on"
        } else {
            "off"
        };
        let out = Command::new(env!("CARGO_BIN_EXE_cera"))
            .args([
                "perplexity",
                "-m",
                kv["model"].as_str().unwrap(),
                "-f",
                file,
                "-c",
                "512",
                "-t",
                "2",
                "--chunks",
                "4",
                "-ctk",
                ty,
                "-ctv",
                ty,
                "--kv-rotate",
                rotate,
                "--kl-base-cache",
                "f16",
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "cera perplexity failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let num = |after: &str| -> f64 {
            stdout
                .split(after)
                .nth(1)
                .and_then(|s| s.split([' ', ',', '\n']).next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no '{after}' in output: {stdout}"))
        };
        let (ppl, kl, base) = (num("PPL = "), num("mean "), num("baseline PPL = "));
        let want = |k: &str| case[k].as_f64().unwrap();
        let ln_ratio = (ppl / base).ln();
        let ratio_bound = 3.0 * 2f64.sqrt() * want("ln_ppl_ratio_err");
        let kl_bound = (3.0 * 2f64.sqrt() * want("kld_err")).max(0.15 * want("kld"));
        eprintln!(
            "{ty} rotation {rotate}: cera PPL {ppl:.4} / f16 {base:.4} (ln {ln_ratio:.5}), KL \
             {kl:.5}; llama.cpp PPL {:.4} (ln {:.5} ± {:.5}), KL {:.5} ± {:.5}",
            want("ppl"),
            want("ln_ppl_ratio"),
            want("ln_ppl_ratio_err"),
            want("kld"),
            want("kld_err")
        );
        assert!(
            (ln_ratio - want("ln_ppl_ratio")).abs() < ratio_bound,
            "{ty} rotation {rotate}: ln(PPL / PPL f16) {ln_ratio:.5} vs llama.cpp's {:.5}, more \
             than {ratio_bound:.5} apart",
            want("ln_ppl_ratio")
        );
        assert!(
            (kl - want("kld")).abs() < kl_bound,
            "{ty} rotation {rotate}: KL from f16 {kl:.5} vs llama.cpp's {:.5}, more than \
             {kl_bound:.5} apart",
            want("kld")
        );
        if ty == "q4_0" {
            kl_q4.push((rotate, ppl, kl));
        }
    }
    let (on, off) = (kl_q4[0], kl_q4[1]);
    assert!(
        on.1 < off.1 && on.2 < off.2,
        "rotation did not help q4_0: {on:?} vs {off:?}"
    );
}

/// A sampling option out of range is refused naming its flag, before the model loads.
#[test]
fn sampling_flags_out_of_range_are_named() {
    for (flag, value) in [
        ("--top-p", "5"),
        ("--min-p", "1.5"),
        ("--repeat-penalty", "0"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cera"))
            .args([
                "run",
                "-m",
                "no-such-model.gguf",
                "-p",
                "x",
                "-n",
                "1",
                flag,
                value,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains(flag) && err.contains(value), "{flag}: {err}");
    }
}

/// A cache type or rotation value that does not exist is refused naming the choices.
#[test]
fn unknown_cache_types_are_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(["run", "-m", "smollm2", "-p", "x", "-n", "1", "-ctk", "q3_k"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("unsupported KV cache type 'q3_k'") && err.contains("tq3"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args([
            "run",
            "-m",
            "smollm2",
            "-p",
            "x",
            "-n",
            "1",
            "--kv-rotate",
            "maybe",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("expected on or off, not 'maybe'"), "{err}");
}
