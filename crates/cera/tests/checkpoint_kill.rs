//! A checkpoint file survives the process being killed mid-save: 100 times, a child process
//! saves two different sessions over the same file in a loop and is SIGKILLed at a random
//! moment; every time, the file is a complete checkpoint of one of the two (the old or the
//! new), never a torn one. The child is this test binary itself, re-run with an environment
//! variable that turns it into the writer.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::fetch;

const CHILD: &str = "CERA_CHECKPOINT_WRITER";

fn engine() -> Engine {
    let entry = fetch::lookup("smollm2").unwrap();
    let path = fetch::ensure(entry, &mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch SmolLM2: {e}"));
    let mut o = EngineOptions::default();
    o.n_threads = Some(1);
    Engine::load(path, o).unwrap()
}

fn opts() -> SessionOptions {
    let mut o = SessionOptions::default();
    o.n_ctx = 512;
    o
}

fn sessions(eng: &Engine) -> (cera::session::Session, cera::session::Session) {
    let o = opts();
    let text = "A checkpoint must be whole or absent. ".repeat(40);
    let toks = eng.tokenizer().encode(&text, true, false);
    let mut a = eng.session(o.clone());
    a.append_tokens(&toks[..150]).unwrap();
    let mut b = eng.session(o);
    b.append_tokens(&toks[..190]).unwrap();
    (a, b)
}

/// The writer: saves A and B alternately to the file until killed.
#[test]
fn writer_child() {
    let Ok(file) = std::env::var(CHILD) else {
        return; // only runs as the child of `killed_saves_leave_a_whole_file`
    };
    let eng = engine();
    // the parent prefilled them once; restoring is cheap
    let mut a = eng.session(opts());
    a.load_checkpoint(format!("{file}.a")).unwrap();
    let mut b = eng.session(opts());
    b.load_checkpoint(format!("{file}.b")).unwrap();
    a.save_checkpoint(&file).unwrap();
    println!("ready");
    loop {
        b.save_checkpoint(&file).unwrap();
        a.save_checkpoint(&file).unwrap();
    }
}

#[test]
fn killed_saves_leave_a_whole_file() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("cera-kill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file: PathBuf = dir.join("session.ckpt");
    let eng = engine();
    let (mut a, mut b) = sessions(&eng);
    a.save_checkpoint(format!("{}.a", file.display())).unwrap();
    b.save_checkpoint(format!("{}.b", file.display())).unwrap();
    let mut s = eng.session(opts());
    let me = std::env::current_exe().unwrap();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut seen = [0usize; 2];
    for round in 0..100 {
        let mut child = Command::new(&me)
            .args(["writer_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, &file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        // wait for the first complete save, then kill at a random moment of the loop
        loop {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "writer exited early");
            if line.contains("ready") {
                break;
            }
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_micros(seed % 40_000));
        child.kill().unwrap();
        child.wait().unwrap();
        s.load_checkpoint(&file)
            .unwrap_or_else(|e| panic!("round {round}: the file is torn: {e}"));
        match s.tokens().len() {
            150 => seen[0] += 1,
            190 => seen[1] += 1,
            n => panic!("round {round}: a checkpoint of {n} tokens"),
        }
    }
    // leftover temporary files of killed writers are the only debris
    let stray: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            !name.starts_with('.') && !name.starts_with("session.ckpt")
        })
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    eprintln!(
        "100 kills: {} times A whole, {} times B whole",
        seen[0], seen[1]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
