//! `cera batched-bench` speaks llama-batched-bench's flags (one-dash `-npp -ntg -npl -pps`),
//! its markdown columns and its JSONL keys, with its definitions of N_KV and the speeds.

use std::process::Command;

fn cera(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn jsonl_records_have_llama_batched_bench_keys() {
    let (ok, out, err) = cera(&[
        "batched-bench",
        "-m",
        "smollm2",
        "-t",
        "1",
        "-npp",
        "8,12",
        "-ntg",
        "4",
        "-npl",
        "1,3",
        "--output-format",
        "jsonl",
    ]);
    assert!(ok, "{err}");
    let recs: Vec<serde_json::Value> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 4, "{out}");
    let keys = [
        "n_kv_max",
        "n_batch",
        "n_ubatch",
        "flash_attn",
        "is_pp_shared",
        "n_gpu_layers",
        "n_threads",
        "n_threads_batch",
        "pp",
        "tg",
        "pl",
        "n_kv",
        "t_pp",
        "speed_pp",
        "t_tg",
        "speed_tg",
        "t",
        "speed",
    ];
    for r in &recs {
        for k in keys {
            assert!(!r[k].is_null(), "missing {k} in {r}");
        }
        assert_eq!(r.as_object().unwrap().len(), keys.len(), "{r}");
        let (pp, tg, pl) = (
            r["pp"].as_f64().unwrap(),
            r["tg"].as_f64().unwrap(),
            r["pl"].as_f64().unwrap(),
        );
        assert_eq!(r["n_kv"].as_f64().unwrap(), pl * (pp + tg));
        let (t_pp, t_tg, t) = (
            r["t_pp"].as_f64().unwrap(),
            r["t_tg"].as_f64().unwrap(),
            r["t"].as_f64().unwrap(),
        );
        assert!(t_pp > 0.0 && t_tg > 0.0 && (t - t_pp - t_tg).abs() < 1e-9);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.max(1.0);
        assert!(
            close(r["speed_pp"].as_f64().unwrap(), pl * pp / t_pp),
            "{r}"
        );
        assert!(
            close(r["speed_tg"].as_f64().unwrap(), pl * tg / t_tg),
            "{r}"
        );
        assert!(
            close(r["speed"].as_f64().unwrap(), (pl * pp + pl * tg) / t),
            "{r}"
        );
        assert_eq!(r["n_threads"], 1);
        assert_eq!(r["is_pp_shared"], 0);
    }
    let combos: Vec<(u64, u64)> = recs
        .iter()
        .map(|r| (r["pp"].as_u64().unwrap(), r["pl"].as_u64().unwrap()))
        .collect();
    assert_eq!(combos, [(8, 1), (8, 3), (12, 1), (12, 3)]);
}

#[test]
fn markdown_table_shared_prompt_and_kv_budget() {
    let (ok, out, err) = cera(&[
        "batched-bench",
        "-m",
        "smollm2",
        "-t",
        "1",
        "-npp",
        "16",
        "-ntg",
        "4",
        "-npl",
        "1,2,4",
        "-pps",
        "-c",
        "60",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("is_pp_shared = 1"), "{out}");
    let rows: Vec<Vec<String>> = out
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect();
    assert_eq!(
        rows[0],
        [
            "PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"
        ]
    );
    // B=4 needs 4 * (16 + 4) = 80 > 60 KV cells: skipped, as llama-batched-bench skips it
    let body: Vec<&Vec<String>> = rows[2..].iter().collect();
    assert_eq!(body.len(), 2, "{out}");
    for (r, b) in body.iter().zip(["1", "2"]) {
        assert_eq!(r[2], b);
        assert_eq!(r.len(), 10);
    }
    // a shared prompt counts once: S_PP = PP / T_PP
    let (ok, out, err) = cera(&[
        "batched-bench",
        "-m",
        "smollm2",
        "-t",
        "1",
        "-npp",
        "16",
        "-ntg",
        "4",
        "-npl",
        "3",
        "-pps",
        "--output-format",
        "jsonl",
    ]);
    assert!(ok, "{err}");
    let r: serde_json::Value =
        serde_json::from_str(out.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
    let f = |k: &str| r[k].as_f64().unwrap();
    assert!(
        (f("speed_pp") - 16.0 / f("t_pp")).abs() < 1e-6 * f("speed_pp"),
        "{r}"
    );
    assert!(
        (f("speed") - (16.0 + 12.0) / f("t")).abs() < 1e-6 * f("speed"),
        "{r}"
    );
    assert_eq!(r["is_pp_shared"], 1);
}

#[test]
fn bad_flags_are_clear_errors() {
    let (ok, _, err) = cera(&["batched-bench", "-m", "smollm2", "-npl", "0"]);
    assert!(!ok && err.contains("-npl"), "{err}");
    let (ok, _, err) = cera(&["batched-bench", "-m", "smollm2", "--output-format", "xml"]);
    assert!(!ok && err.contains("md or jsonl"), "{err}");
}
