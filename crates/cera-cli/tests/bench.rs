//! `cera bench` speaks llama-bench's formats: JSON records with its field names, a markdown
//! table with its columns, CSV with a header.

use std::process::Command;

fn cera(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cera {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn json_records_have_llama_bench_fields() {
    let out = cera(&[
        "bench", "-m", "smollm2", "-t", "1", "-p", "16", "-n", "4", "-d", "0,8", "-r", "2", "-o",
        "json",
    ]);
    let recs: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(recs.len(), 4, "pp and tg at two depths");
    let names: Vec<&str> = recs.iter().map(|r| r["test"].as_str().unwrap()).collect();
    assert_eq!(names, ["pp16", "tg4", "pp16 @ d8", "tg4 @ d8"]);
    for r in &recs {
        for key in [
            "n_prompt",
            "n_gen",
            "n_depth",
            "n_threads",
            "avg_ts",
            "stddev_ts",
            "samples_ts",
            "model_size",
            "model_n_params",
        ] {
            assert!(!r[key].is_null(), "missing {key} in {r}");
        }
        assert_eq!(r["samples_ts"].as_array().unwrap().len(), 2);
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0);
        assert_eq!(r["n_threads"], 1);
    }
    assert_eq!(recs[2]["n_depth"], 8);
    assert_eq!(recs[1]["n_gen"], 4);
}

#[test]
fn markdown_table_and_csv() {
    let md = cera(&[
        "bench", "-m", "smollm2", "-t", "1", "-p", "8", "-n", "0", "-r", "1",
    ]);
    let lines: Vec<&str> = md.lines().collect();
    assert!(
        lines[0].starts_with("| model") && lines[0].trim_end().ends_with("t/s |"),
        "{md}"
    );
    assert!(lines[2].contains("pp8") && lines[2].contains(" ± "), "{md}");
    let csv = cera(&[
        "bench", "-m", "smollm2", "-t", "1", "-p", "0", "-n", "2", "-r", "1", "-o", "csv",
    ]);
    let mut rows = csv.lines();
    assert!(
        rows.next()
            .unwrap()
            .starts_with("model_filename,model_type")
    );
    assert!(rows.next().unwrap().contains("\"tg2\""));
    let bad = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(["bench", "-o", "xml"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected md, json or csv"));
}
