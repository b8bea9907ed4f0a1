//! Figures of saved state (benchmarks/README.md, "Sessions that last"): checkpoint size and
//! save / load time of a 2,000-token session, and the prefix cache's time to first token for
//! a second session sharing a 1,000-token system prompt, median of 5 rounds.
//!
//!   cargo run --release --example bench_state [MODEL.gguf]

use std::time::{Duration, Instant};

use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::state::PrefixCache;

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() -> cera::Result<()> {
    let path = match std::env::args().nth(1) {
        Some(p) => p.into(),
        None => cera::fetch::ensure(cera::fetch::lookup("smollm2")?, &mut |_| {})?,
    };
    let eng = Engine::load(&path, EngineOptions::default())?;
    let mut o = SessionOptions::default();
    o.n_ctx = 4096;
    let text = "Checkpoints let a long conversation survive a restart. ".repeat(300);
    let toks = eng.tokenizer().encode(&text, true, false);
    let mut s = eng.session(o.clone());
    s.append_tokens(&toks[..2000])?;
    let file = std::env::temp_dir().join("cera-bench-state.ckpt");
    let (mut to_bytes, mut save, mut load, mut restore) = (vec![], vec![], vec![], vec![]);
    let mut size = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let b = s.checkpoint()?;
        to_bytes.push(t.elapsed());
        size = b.len();
        let t = Instant::now();
        s.save_checkpoint(&file)?;
        save.push(t.elapsed());
        let mut r = eng.session(o.clone());
        let t = Instant::now();
        r.load_checkpoint(&file)?;
        load.push(t.elapsed());
        let t = Instant::now();
        r.restore(&b)?;
        restore.push(t.elapsed());
        assert_eq!(r.logits(), s.logits());
    }
    println!(
        "{}: 2000-token checkpoint {:.1} MiB: to bytes {:.1} ms, save to file (fsync) {:.1} ms, \
         load from file {:.1} ms, restore from bytes {:.1} ms",
        path.display(),
        size as f64 / (1 << 20) as f64,
        median(to_bytes),
        median(save),
        median(load),
        median(restore)
    );
    let _ = std::fs::remove_file(&file);

    // a rollback of 3 decoded tokens (what a rejected speculative draft costs): truncate and
    // feed one token, against prefilling the kept context again (what truncate did before
    // recurrent state had snapshots)
    let mut s = eng.session(o.clone());
    s.append_tokens(&toks[..500])?;
    for &t in &toks[500..508] {
        s.append_tokens(&[t])?;
    }
    let (mut cut, mut again) = (vec![], vec![]);
    for _ in 0..5 {
        let mut f = s.fork();
        let t = Instant::now();
        f.truncate(505);
        f.append_tokens(&[toks[505]])?;
        cut.push(t.elapsed());
        let mut g = eng.session(o.clone());
        let t = Instant::now();
        g.append_tokens(&toks[..506])?;
        again.push(t.elapsed());
        assert_eq!(f.logits(), g.logits());
    }
    println!(
        "rollback of 3 tokens at depth 508: {:.2} ms (truncate + 1 token), re-prefilling the \
         505 kept tokens {:.1} ms",
        median(cut),
        median(again)
    );

    let system =
        "Rule: answer politely, cite the policy section, keep notes internal. ".repeat(100);
    let sys_toks = eng.tokenizer().encode(&system, true, false);
    let sys_toks = &sys_toks[..1000];
    let user = |i: u32| -> Vec<u32> {
        let mut t = sys_toks.to_vec();
        t.extend(
            eng.tokenizer()
                .encode(&format!(" Question {i}: what now?"), false, false),
        );
        t
    };
    let (mut cold, mut warm) = (vec![], vec![]);
    let mut reused = 0;
    let mut s = eng.session(o.clone());
    s.append_tokens(&toks[..64])?; // first-use weight packing outside the measurement
    for round in 0..5 {
        let cache = PrefixCache::in_memory(1 << 30);
        let mut a = eng.session(o.clone());
        let t = Instant::now();
        a.prefill_cached(&user(2 * round), &cache)?;
        cold.push(t.elapsed());
        let mut b = eng.session(o.clone());
        let t = Instant::now();
        let r = b.prefill_cached(&user(2 * round + 1), &cache)?;
        warm.push(t.elapsed());
        // a recurrent model resumes at the last 64-token snapshot of the shared part
        assert!(r.from_cache >= 1000 - 64);
        reused = r.from_cache;
    }
    let (c, w) = (median(cold), median(warm));
    println!(
        "prefix cache, 1000-token shared prompt: TTFT {c:.1} ms cold, {w:.1} ms with {reused} \
         tokens from the cache ({:.1}%)",
        100.0 * w / c
    );
    Ok(())
}
