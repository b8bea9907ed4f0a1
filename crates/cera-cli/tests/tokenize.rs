//! `cera tokenize` prints what `llama-tokenize --ids` prints: the expected ids come from the
//! tokenizer fixtures, which llama-tokenize produced (scripts/gen-tokenizer-fixtures.py).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cera/tests/fixtures/tokenizer")
}

fn json(name: &str) -> Value {
    let p = fixtures().join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn corpus() -> Vec<String> {
    serde_json::from_value(json("corpus")).unwrap()
}

/// The ids llama-tokenize printed for corpus string `text` in `mode`.
fn expected(vocab: &str, mode: &str, text: &str) -> String {
    let idx = corpus().iter().position(|t| t == text).expect("in corpus");
    let fx = json(vocab);
    let case = fx["modes"][mode]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c[0].as_u64() == Some(idx as u64))
        .unwrap_or_else(|| panic!("{vocab}/{mode}: no case for {text:?}"));
    let ids: Vec<String> = case[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    format!("[{}]\n", ids.join(", "))
}

fn vocab(name: &str) -> String {
    let dir = cera::fetch::llama_cpp_data(&mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch llama.cpp test data: {e}"));
    dir.join("models")
        .join(format!("ggml-vocab-{name}.gguf"))
        .to_str()
        .unwrap()
        .to_owned()
}

fn cera(args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cera"))
        .arg("tokenize")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or("").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "cera tokenize {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn prompt_matches_llama_tokenize() {
    let chat = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n";
    for v in ["llama-spm", "qwen2", "llama-bpe", "phi-3", "bert-bge"] {
        let m = vocab(v);
        // no backslashes in these texts, so escape processing changes nothing
        for text in ["Hello world", chat] {
            assert_eq!(
                cera(&["-m", &m, "-p", text], None),
                expected(v, "default", text),
                "{v}"
            );
        }
        // the other modes were recorded for texts with special-token-looking parts
        assert_eq!(
            cera(&["-m", &m, "-p", chat, "--no-parse-special"], None),
            expected(v, "no_parse_special", chat),
            "{v}"
        );
        assert_eq!(
            cera(&["-m", &m, "-p", chat, "--no-bos"], None),
            expected(v, "no_bos", chat),
            "{v}"
        );
    }
}

#[test]
fn file_and_stdin_are_byte_exact() {
    let m = vocab("qwen2");
    let dir = std::env::temp_dir().join(format!("cera-tokenize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for text in [
        "end with newline\n",
        "def hello():\n    print(\"Hello, world!\")\n",
        "\n\n\n",
    ] {
        let want = expected("qwen2", "default", text);
        let f = dir.join("in.txt");
        std::fs::write(&f, text).unwrap();
        let fs = f.to_str().unwrap();
        assert_eq!(cera(&["-m", &m, "-f", fs, "--no-escape"], None), want);
        assert_eq!(
            cera(&["-m", &m, "-p", "-", "--no-escape"], Some(text)),
            want
        );
        assert_eq!(
            cera(&["-m", &m, "--stdin", "--no-escape"], Some(text)),
            want
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn escapes_are_processed_by_default() {
    let m = vocab("qwen2");
    let want = expected("qwen2", "default", "end with newline\n");
    assert_eq!(cera(&["-m", &m, "-p", r"end with newline\n"], None), want);
}

#[test]
fn show_pieces_and_default_model() {
    let m = vocab("qwen2");
    let out = cera(&["-m", &m, "-p", "Hello world", "--show-pieces"], None);
    assert_eq!(out, "  9707 -> 'Hello'\n  1879 -> ' world'\n");
    // no -m: the default catalog model (SmolLM2)
    assert_eq!(
        cera(&["-p", "Hello world"], None),
        expected("smollm2-135m-instruct-q4_1", "default", "Hello world")
    );
}
