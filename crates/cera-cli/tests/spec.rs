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
