//! The state flags as a user types them: `cera chat --save/--load` and `/save`, `/load`
//! resume a conversation across processes; `cera run --prompt-cache FILE` and
//! `--prompt-cache-dir DIR` reuse the previous run's prompt (and say so) with the same output;
//! `--context-shift --keep N` goes past the context while without it the overflow is a clear
//! error; a corrupted cache file is an error naming it, never a panic.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn cera(args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = c.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    c.wait_with_output().unwrap()
}

fn ok(args: &[&str], stdin: Option<&str>) -> (String, String) {
    let out = cera(args, stdin);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "cera {args:?} failed: {err}");
    (String::from_utf8(out.stdout).unwrap(), err)
}

fn fails(args: &[&str]) -> String {
    let out = cera(args, None);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "cera {args:?} succeeded");
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cera-cli-state-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

const CHAT: &[&str] = &[
    "chat", "-m", "smollm2", "-t", "2", "--temp", "0", "-n", "24",
];

#[test]
fn chat_save_and_load_resume_the_conversation() {
    let file = tmp("conv.ckpt");
    let f = file.to_str().unwrap();
    // one process: three turns
    let (all, _) = ok(CHAT, Some("Hi! Who are you?\nWhat is 2+2?\nAnd 3+3?\n"));
    // two processes: the first two turns saved, the third after --load
    let mut a = CHAT.to_vec();
    a.extend(["--save", f]);
    let (first, _) = ok(&a, Some("Hi! Who are you?\nWhat is 2+2?\n"));
    let mut b = CHAT.to_vec();
    b.extend(["--load", f, "-v"]);
    let (rest, err) = ok(&b, Some("And 3+3?\n"));
    assert!(err.contains("resumed 4 messages"), "{err}");
    assert!(err.contains("reused"), "{err}");
    assert_eq!(
        format!("{first}{rest}"),
        all,
        "the resumed conversation differs"
    );
    // /save and /load inside a session
    let cmd_file = tmp("cmd.ckpt");
    let c = cmd_file.to_str().unwrap();
    let (_, err) = ok(CHAT, Some(&format!("Hi! Who are you?\n/save {c}\n")));
    assert!(err.contains("saved 2 messages"), "{err}");
    let (out, err) = ok(CHAT, Some(&format!("/load {c}\nWhat is 2+2?\nAnd 3+3?\n")));
    assert!(err.contains("loaded 2 messages"), "{err}");
    let first_reply = all.lines().next().unwrap();
    assert_eq!(format!("{first_reply}\n{out}"), all);
    // a file that is not a checkpoint
    std::fs::write(&file, b"not a checkpoint at all").unwrap();
    let mut b = CHAT.to_vec();
    b.extend(["--load", f]);
    let err = fails(&b);
    assert!(err.contains("not a Cera checkpoint"), "{err}");
}

#[test]
fn chat_takes_the_structured_output_flags() {
    let mut a = CHAT[..CHAT.len() - 2].to_vec();
    a.extend(["--json", "-n", "160"]);
    let (out, _) = ok(&a, Some("Describe a cat as JSON.\nNow a dog.\n"));
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
    }
}

const RUN: &[&str] = &[
    "run", "-m", "smollm2", "-t", "2", "--temp", "0", "-n", "16", "-p",
];

#[test]
fn run_prompt_cache_file_and_dir() {
    let file = tmp("prompt.cache");
    let prompt = "Explain in one paragraph why the sky is blue, for a curious child.";
    let mut a = RUN.to_vec();
    a.extend([prompt, "--prompt-cache", file.to_str().unwrap()]);
    let (out1, err1) = ok(&a, None);
    assert!(err1.contains("0 reused"), "{err1}");
    let (out2, err2) = ok(&a, None);
    assert!(
        !err2.contains(" 0 reused"),
        "the second run reused nothing: {err2}"
    );
    assert_eq!(out1, out2);
    // a corrupted cache file: a clear error
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x55;
    std::fs::write(&file, bytes).unwrap();
    let err = fails(&a);
    assert!(
        err.contains("checksum") && err.contains("prompt.cache"),
        "{err}"
    );

    let dir = tmp("prefix-dir");
    let mut a = RUN.to_vec();
    a.extend([prompt, "--prompt-cache-dir", dir.to_str().unwrap()]);
    let (o1, e1) = ok(&a, None);
    assert!(e1.contains("(0 from the prefix cache)"), "{e1}");
    let (o2, e2) = ok(&a, None);
    assert!(!e2.contains("(0 from the prefix cache)"), "{e2}");
    assert_eq!(o1, o2);
}

#[test]
fn context_shift_flags() {
    let base = [
        "run",
        "-m",
        "smollm2",
        "-t",
        "2",
        "--temp",
        "0",
        "--raw",
        "-c",
        "128",
        "-n",
        "400",
        "-p",
        "The history of the Roman Empire",
    ];
    let err = fails(&base);
    assert!(
        err.contains("context overflow") && err.contains("128") && err.contains("--context-shift"),
        "{err}"
    );
    let mut a = base.to_vec();
    a.extend(["--context-shift", "--keep", "16", "-v"]);
    let (_, err) = ok(&a, None);
    assert!(
        err.contains("generated 400 tokens") || err.contains("finish: eog"),
        "{err}"
    );
    assert!(err.contains("shifted"), "{err}");
    let mut a = base.to_vec();
    a.extend(["--keep", "16"]);
    let err = fails(&a);
    assert!(err.contains("--context-shift"), "{err}");
}
