//! `cera run --spec`: the same greedy output as plain decoding with prompt lookup and with a
//! draft model, the acceptance line on stderr, and clear errors for a missing or mismatched
//! draft model.

use std::process::{Command, Output};

fn cera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(args)
        .output()
        .unwrap()
}

const BASE: &[&str] = &[
    "run",
    "-m",
    "smollm2",
    "-t",
    "2",
    "--temp",
    "0",
    "-n",
    "40",
    "-p",
    "Repeat this sentence three times: the quick brown fox jumps over the lazy dog.",
];

fn ok(extra: &[&str]) -> (String, String) {
    let mut a = BASE.to_vec();
    a.extend_from_slice(extra);
    let out = cera(&a);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{a:?}: {err}");
    (String::from_utf8(out.stdout).unwrap(), err)
}

#[test]
fn speculative_output_equals_plain() {
    let (plain, _) = ok(&[]);
    let (ngram, err) = ok(&["--spec", "ngram"]);
    assert_eq!(ngram, plain);
    assert!(err.contains("speculative (ngram): drafted"), "{err}");
    let (draft, err) = ok(&["--spec", "draft", "-md", "smollm2", "--draft-max", "4"]);
    assert_eq!(draft, plain);
    assert!(err.contains("speculative (draft)"), "{err}");
}

#[test]
fn draft_model_errors() {
    let mut a = BASE.to_vec();
    a.extend(["--spec", "draft"]);
    let out = cera(&a);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("-md"));
    let mut a = BASE.to_vec();
    a.extend(["--spec", "draft", "-md", "qwen"]);
    let out = cera(&a);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cannot draft"),
        "{err}"
    );
    assert!(!err.contains("panicked"));
}

#[test]
fn chat_speculates_with_the_same_replies() {
    let chat = |extra: &[&str]| {
        let mut a = vec![
            "chat", "-m", "smollm2", "-t", "2", "--temp", "0", "-n", "40", "-v",
        ];
        a.extend_from_slice(extra);
        let mut c = Command::new(env!("CARGO_BIN_EXE_cera"))
            .args(&a)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let mut i = c.stdin.take().unwrap();
        i.write_all(
            b"Repeat twice: the quick brown fox jumps over the lazy dog.\nAgain, three times.\n",
        )
        .unwrap();
        drop(i);
        let o = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{err}");
        (String::from_utf8(o.stdout).unwrap(), err)
    };
    let (plain, _) = chat(&[]);
    let (spec, err) = chat(&["--spec", "ngram"]);
    assert_eq!(spec, plain);
    assert_eq!(
        err.matches("speculative (ngram): drafted").count(),
        2,
        "{err}"
    );
}

#[test]
fn bench_reports_plain_and_speculative() {
    let out = cera(&[
        "bench", "-m", "smollm2", "-t", "2", "-n", "48", "-r", "1", "--spec", "ngram", "-o", "json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v[0];
    assert_eq!(r["test"], "tg48");
    assert_eq!(r["spec"], "ngram");
    assert_eq!(r["mismatched_tokens"], 0, "{r}");
    assert!(r["plain_ts"].as_f64().unwrap() > 0.0 && r["spec_ts"].as_f64().unwrap() > 0.0);
    // the default prompt is a code edit: prompt lookup finds drafts in it
    assert!(r["drafted"].as_u64().unwrap() > 0, "{r}");
    assert!(r["accepted"].as_u64().unwrap() <= r["drafted"].as_u64().unwrap());
    let out = cera(&["bench", "-m", "smollm2", "--spec", "ngram", "-o", "csv"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("-o csv is not available with --spec"));
}
