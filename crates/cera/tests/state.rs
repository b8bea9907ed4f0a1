//! Saved state: checkpoints restore bit-identically (the next logits and the continuation
//! equal the uninterrupted session's) on attention-only, sliding-window and recurrent models
//! with every KV cache type; hostile checkpoints (truncated at every length, bit flips, another
//! model, another KV type, a context too small) are refused with an error naming the problem
//! and leave the session empty; truncating a recurrent session restores a convolution snapshot
//! instead of re-prefilling; and the prefix cache restores exactly what a prefill computes.

use std::path::PathBuf;

use cera::backend::{KvType, argmax};
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::session::Session;
use cera::state::{PrefixCache, PrefixCacheOptions};

#[path = "common/arch_models.rs"]
mod arch_models;
#[path = "common/models.rs"]
mod models;
use models::{real_model, tokenizer};

fn tiny_model(name: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cera-state-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.gguf"));
    std::fs::write(
        &path,
        arch_models::build(&arch_models::variant(name), tokenizer()),
    )
    .unwrap();
    path
}

fn engine(path: &PathBuf) -> Engine {
    let mut o = EngineOptions::default();
    o.n_threads = Some(2);
    Engine::load(path, o).unwrap()
}

fn opts(n_ctx: usize, kv: KvType) -> SessionOptions {
    let mut o = SessionOptions::default();
    o.n_ctx = n_ctx;
    o.kv_type = kv;
    o.n_ubatch = 16;
    o
}

fn prompt(eng: &Engine, n: usize) -> Vec<u32> {
    let text = "The quick brown fox jumps over the lazy dog while the farmer counts sheep. ";
    let mut toks = eng
        .tokenizer()
        .encode(&text.repeat(n / 10 + 1), true, false);
    toks.truncate(n);
    toks
}

/// Greedy tokens from the session's logits, fed one by one.
fn greedy(s: &mut Session, n: usize) -> Vec<u32> {
    let mut out = Vec::new();
    for _ in 0..n {
        let t = argmax(s.logits()) as u32;
        out.push(t);
        s.append_tokens(&[t]).unwrap();
    }
    out
}

/// Checkpoint mid-way, restore into a new session, continue: equal logits and tokens.
fn checkpoint_roundtrip(eng: &Engine, kv: KvType) {
    let mut a = eng.session(opts(200, kv));
    a.append_tokens(&prompt(eng, 40)).unwrap();
    greedy(&mut a, 5);
    let bytes = a.checkpoint().unwrap();
    let header = cera::state::checkpoint::read_header(&bytes).unwrap();
    assert_eq!(header.n_tokens, 45);
    let mut b = eng.session(opts(300, kv));
    b.restore(&bytes).unwrap();
    assert_eq!(b.tokens(), a.tokens());
    assert_eq!(b.logits(), a.logits(), "logits after restore");
    let ta = greedy(&mut a, 8);
    let tb = greedy(&mut b, 8);
    assert_eq!(ta, tb);
    assert_eq!(b.logits(), a.logits(), "logits after continuing");
}

#[test]
fn checkpoints_restore_bit_identically() {
    let smol = engine(&real_model("smollm2"));
    // every cache type keeps its own precision through a checkpoint (rotated rows as stored)
    for kv in KvType::ALL {
        checkpoint_roundtrip(&smol, kv);
    }
    for name in ["lfm2_f32", "lfm2_swa_f32", "gemma2_f32", "gemma3_f32"] {
        let eng = engine(&tiny_model(name, "ckpt"));
        for kv in [KvType::F16, KvType::Q8_0, KvType::Q4_0, KvType::TQ3] {
            checkpoint_roundtrip(&eng, kv);
        }
    }
}

#[test]
fn hostile_checkpoints_are_refused() {
    let eng = engine(&real_model("smollm2"));
    let mut a = eng.session(opts(128, KvType::F16));
    a.append_tokens(&prompt(&eng, 20)).unwrap();
    let good = a.checkpoint().unwrap();
    let mut b = eng.session(opts(128, KvType::F16));
    let mut refuse = |bytes: &[u8], needle: &str| {
        b.append_tokens(&[1, 2, 3]).unwrap();
        let e = b.restore(bytes).expect_err("a bad checkpoint was accepted");
        let msg = e.to_string();
        assert!(
            msg.contains(needle),
            "error {msg:?} does not say {needle:?}"
        );
        assert!(b.tokens().is_empty(), "a refused restore left state behind");
    };
    // every truncation (coarsely, then the last bytes one by one)
    for len in (0..good.len())
        .step_by(997)
        .chain(good.len() - 40..good.len())
    {
        let needle = if len < 8 { "not a Cera checkpoint" } else { "" };
        refuse(&good[..len], needle);
    }
    // bit flips anywhere
    for at in (0..good.len()).step_by(1009) {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        refuse(&bad, "");
    }
    let mut bad = good.clone();
    bad[10] ^= 1;
    refuse(&bad, "version");
    let mut bad = good.clone();
    bad[100] ^= 1;
    refuse(&bad, "checksum");
    // another model
    let other = engine(&tiny_model("lfm2_f32", "hostile"));
    let mut o = other.session(opts(128, KvType::F16));
    let e = o.restore(&good).unwrap_err().to_string();
    assert!(e.contains("another model"), "{e}");
    // another KV type; a context too small
    let mut q = eng.session(opts(128, KvType::Q8_0));
    let e = q.restore(&good).unwrap_err().to_string();
    assert!(
        e.contains("K f16 / V f16 in the checkpoint") && e.contains("K q8_0 / V q8_0 (rotated)"),
        "{e}"
    );
    // the same quantized type with and without the rotation is not the same cache
    let mut rot = eng.session(opts(128, KvType::Q4_0));
    rot.append_tokens(&prompt(&eng, 20)).unwrap();
    let rotated = rot.checkpoint().unwrap();
    let mut o = opts(128, KvType::Q4_0);
    o.kv_rotate = false;
    let mut plain = eng.session(o);
    let e = plain.restore(&rotated).unwrap_err().to_string();
    assert!(
        e.contains("(rotated) in the checkpoint, K q4_0 / V q4_0 in"),
        "{e}"
    );
    let mut tq = eng.session(opts(128, KvType::TQ3));
    let e = tq.restore(&rotated).unwrap_err().to_string();
    assert!(e.contains("K tq3 / V tq3 in this session"), "{e}");
    let mut small = eng.session(opts(10, KvType::F16));
    let e = small.restore(&good).unwrap_err().to_string();
    assert!(e.contains("do not fit"), "{e}");
    // and the good one still works after all that
    b.restore(&good).unwrap();
    assert_eq!(b.logits(), a.logits());
}

/// A recurrent session cut back to a recent position restores a convolution snapshot: no
/// re-prefill, and the state is the one it had there.
#[test]
fn recurrent_truncate_uses_snapshots() {
    let eng = engine(&tiny_model("lfm2_f32", "trunc"));
    let mut a = eng.session(opts(200, KvType::F16));
    a.append_tokens(&prompt(&eng, 30)).unwrap();
    greedy(&mut a, 10);
    let full = a.tokens().to_vec();
    let cut = full.len() - 4;
    let mut reference = eng.session(opts(200, KvType::F16));
    reference.append_tokens(&full[..cut + 1]).unwrap();
    a.truncate(cut);
    assert_eq!(a.pending_replay(), None, "a decode position has a snapshot");
    a.append_tokens(&full[cut..cut + 1]).unwrap();
    assert_eq!(a.logits(), reference.logits());
    // a cut inside the prompt replays only from the last chunk end before it (chunks of 16)
    a.truncate(20);
    assert_eq!(a.pending_replay(), Some(16));
    let mut r2 = eng.session(opts(200, KvType::F16));
    r2.append_tokens(&a.tokens()[..20]).unwrap();
    r2.append_tokens(&[5]).unwrap();
    a.append_tokens(&[5]).unwrap();
    assert_eq!(a.logits(), r2.logits());
}

/// A prefix restored from the cache gives exactly the logits of a full prefill, on every
/// kind of model; the second prompt computes only what follows the shared part.
#[test]
fn prefix_cache_restores_what_prefill_computes() {
    let smol = real_model("smollm2");
    let names = [
        (smol.clone(), "smollm2"),
        (tiny_model("lfm2_f32", "prefix"), "lfm2"),
        (tiny_model("gemma3_f32", "prefix"), "gemma3"),
    ];
    for ((path, name), kv) in names
        .into_iter()
        .zip([KvType::Q4_0, KvType::TQ3, KvType::F16])
    {
        let eng = engine(&path);
        let cache = PrefixCache::in_memory(1 << 30);
        // another cache type's entries are never used
        let mut other = eng.session(opts(256, KvType::Q8_0));
        other.prefill_cached(&prompt(&eng, 70), &cache).unwrap();
        let shared = prompt(&eng, 64);
        let mut p1 = shared.clone();
        p1.extend([100, 200, 300]);
        let mut p2 = shared.clone();
        p2.extend([400, 500]);
        let mut a = eng.session(opts(256, kv));
        let r1 = a.prefill_cached(&p1, &cache).unwrap();
        assert_eq!(r1.from_cache, 0);
        let mut b = eng.session(opts(256, kv));
        let r2 = b.prefill_cached(&p2, &cache).unwrap();
        // recurrent: the last chunk end (16-token chunks) at or before the shared part
        assert_eq!(r2.from_cache, 64, "{name} {kv}: {r2:?}");
        assert_eq!(r2.prefilled, 2, "{name}");
        let mut c = eng.session(opts(256, kv));
        c.append_tokens(&p2).unwrap();
        assert_eq!(b.logits(), c.logits(), "{name}: restored prefix differs");
        assert_eq!(greedy(&mut b, 6), greedy(&mut c, 6), "{name}");
    }
}

/// A recurrent model resumes a long shared prefix within 64 tokens of its end, whatever the
/// prefill chunk size (recurrent prefills end chunks at multiples of 64, where snapshots stay).
#[test]
fn recurrent_prefix_granularity() {
    let eng = engine(&tiny_model("lfm2_f32", "granularity"));
    let cache = PrefixCache::in_memory(1 << 30);
    let shared = prompt(&eng, 300);
    let mut o = opts(1024, KvType::F16);
    o.n_ubatch = 512;
    let mut a = eng.session(o.clone());
    let mut p1 = shared.clone();
    p1.extend([11, 12, 13]);
    a.prefill_cached(&p1, &cache).unwrap();
    let mut p2 = shared.clone();
    p2.extend([21, 22]);
    let mut b = eng.session(o.clone());
    let r = b.prefill_cached(&p2, &cache).unwrap();
    assert_eq!(r.from_cache, 256, "{r:?}");
    let mut c = eng.session(o);
    c.append_tokens(&p2).unwrap();
    assert_eq!(b.logits(), c.logits());
}

/// The disk tier survives a restart (a new cache over the same directory), and a corrupted
/// entry is skipped with a warning, never loaded.
#[test]
fn prefix_cache_disk_tier() {
    let eng = engine(&real_model("smollm2"));
    let dir = std::env::temp_dir().join(format!("cera-prefix-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = PrefixCacheOptions::in_memory(1 << 30).with_disk(&dir, 1 << 30);
    let p = prompt(&eng, 80);
    {
        let cache = PrefixCache::new(o.clone()).unwrap();
        let mut a = eng.session(opts(256, KvType::F16));
        a.prefill_cached(&p, &cache).unwrap();
        assert_eq!(cache.stats().disk_entries, 1);
    }
    let cache = PrefixCache::new(o.clone()).unwrap();
    assert!(cache.take_warnings().is_empty());
    let mut q = p.clone();
    q.push(42);
    let mut b = eng.session(opts(256, KvType::F16));
    let r = b.prefill_cached(&q, &cache).unwrap();
    assert_eq!(r.from_cache, 80);
    assert_eq!(cache.stats().disk_loads, 1);
    let mut c = eng.session(opts(256, KvType::F16));
    c.append_tokens(&q).unwrap();
    assert_eq!(b.logits(), c.logits());
    // corrupt every entry file: the next process skips them
    for d in std::fs::read_dir(&dir).unwrap().flatten() {
        for f in std::fs::read_dir(d.path()).unwrap().flatten() {
            let mut bytes = std::fs::read(f.path()).unwrap();
            let n = bytes.len();
            bytes[n / 2] ^= 0xff;
            std::fs::write(f.path(), bytes).unwrap();
        }
    }
    let cache = PrefixCache::new(o).unwrap();
    let mut d = eng.session(opts(256, KvType::F16));
    let mut q2 = p.clone();
    q2.push(7);
    let r = d.prefill_cached(&q2, &cache).unwrap();
    assert_eq!(r.from_cache, 0, "a corrupted entry was used");
    let w = cache.take_warnings();
    assert!(w.iter().any(|w| w.contains("checksum")), "{w:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// splitmix64
fn rng(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e3779b97f4a7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

/// Re-seals a mutated checkpoint with a valid checksum, so the parser behind the checksum
/// sees hostile structure (lengths, counts, flags, types) and must still refuse it cleanly.
fn reseal(bytes: &mut [u8]) {
    let n = bytes.len() - 16;
    let sum = cera::state::checksum(&bytes[..n]);
    bytes[n..].copy_from_slice(&sum);
}

/// Fuzzes the checkpoint reader: random overwrites, huge length fields, insertions and
/// deletions, each re-sealed with a valid checksum; restores of a recurrent model's
/// checkpoint too. Nothing panics; what is accepted restores a usable session.
#[test]
fn fuzz_the_checkpoint_reader() {
    let smol = engine(&real_model("smollm2"));
    let lfm = engine(&tiny_model("lfm2_f32", "fuzz"));
    let mut seed = 7u64;
    for eng in [&smol, &lfm] {
        let mut a = eng.session(opts(64, KvType::F16));
        a.append_tokens(&prompt(eng, 12)).unwrap();
        let good = a.checkpoint().unwrap();
        let mut s = eng.session(opts(64, KvType::F16));
        let (mut accepted, mut refused) = (0, 0);
        for i in 0..600 {
            let mut bad = good.clone();
            let body = bad.len() - 32;
            match i % 4 {
                0 => {
                    for _ in 0..1 + rng(&mut seed) % 4 {
                        let at = (rng(&mut seed) as usize) % body;
                        bad[at] = rng(&mut seed) as u8;
                    }
                }
                1 => {
                    // a length or count field (u64 or u32) somewhere in the first KB
                    let at = (rng(&mut seed) as usize) % body.min(1024);
                    let v = [u64::MAX, 1 << 40, u32::MAX as u64, 0][i / 4 % 4];
                    let end = (at + 8).min(body);
                    bad[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
                }
                2 => {
                    let at = (rng(&mut seed) as usize) % body;
                    bad.insert(at, rng(&mut seed) as u8);
                }
                _ => {
                    let at = (rng(&mut seed) as usize) % body;
                    bad.remove(at);
                }
            }
            reseal(&mut bad);
            match s.restore(&bad) {
                Ok(()) => {
                    accepted += 1;
                    // whatever got in is a working session
                    if s.tokens().len() < s.n_ctx() {
                        s.append_tokens(&[1]).unwrap();
                    }
                }
                Err(e) => {
                    refused += 1;
                    assert!(s.tokens().is_empty(), "{e}: state left behind");
                }
            }
        }
        assert!(refused > 300, "{accepted} accepted, {refused} refused");
    }
}

/// Hostile files in the prefix cache's directory: garbage, truncated entries, huge counts,
/// another version: all skipped with a warning when indexed or used, none loaded.
#[test]
fn hostile_prefix_cache_files() {
    let eng = engine(&real_model("smollm2"));
    let dir = std::env::temp_dir().join(format!("cera-prefix-hostile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = PrefixCacheOptions::in_memory(1 << 30).with_disk(&dir, 1 << 30);
    let p = prompt(&eng, 40);
    {
        let cache = PrefixCache::new(o.clone()).unwrap();
        let mut a = eng.session(opts(128, KvType::F16));
        a.prefill_cached(&p, &cache).unwrap();
    }
    let ns = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let good_file = std::fs::read_dir(&ns)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let good = std::fs::read(&good_file).unwrap();
    let mut seed = 11u64;
    let mut variants: Vec<Vec<u8>> = vec![
        b"garbage".to_vec(),
        good[..20].to_vec(),
        good[..good.len() / 2].to_vec(),
    ];
    let mut v = good.clone();
    v[8] = 9; // version
    variants.push(v);
    let mut v = good.clone();
    v[30..38].copy_from_slice(&u64::MAX.to_le_bytes()); // token count
    variants.push(v);
    for _ in 0..20 {
        let mut v = good.clone();
        let at = 38 + (rng(&mut seed) as usize) % (v.len() - 38);
        v[at] ^= 1 + (rng(&mut seed) as u8 % 255);
        variants.push(v);
    }
    std::fs::remove_file(&good_file).unwrap();
    for (i, v) in variants.iter().enumerate() {
        std::fs::write(ns.join(format!("bad{i}.cpfx")), v).unwrap();
    }
    let cache = PrefixCache::new(o).unwrap();
    let mut s = eng.session(opts(128, KvType::F16));
    let mut q = p.clone();
    q.push(9);
    let r = s.prefill_cached(&q, &cache).unwrap();
    assert_eq!(r.from_cache, 0, "a hostile entry was restored");
    let w = cache.take_warnings();
    assert!(w.len() >= 5, "{w:?}");
    let mut c = eng.session(opts(128, KvType::F16));
    c.append_tokens(&q).unwrap();
    assert_eq!(s.logits(), c.logits());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two sessions share a 1,000-token system prompt: the second's time to first token (the
/// prefill, cache lookup and store included) is at most 10% of the first's, on both real
/// models. Both are reported.
#[test]
fn prefix_cache_time_to_first_token() {
    for name in ["smollm2", "qwen2.5-coder-0.5b"] {
        let eng = engine(&real_model(name));
        let tmpl = cera::chat::ChatTemplate::from_gguf(eng.gguf()).unwrap();
        let mut system = String::new();
        let mut i = 0;
        while eng.tokenizer().encode(&system, false, false).len() < 1000 {
            system.push_str(&format!(
                "Rule {i}: answer politely, cite the policy section {i}, and never reveal \
                 internal notes. "
            ));
            i += 1;
        }
        let render = |user: &str| {
            let msgs = [
                cera::chat::Message::system(system.clone()),
                cera::chat::Message::user(user),
            ];
            let ro = cera::chat::RenderOptions::new().add_generation_prompt(true);
            eng.tokenizer()
                .encode(&tmpl.render(&msgs, &ro).unwrap(), true, true)
        };
        let cache = PrefixCache::in_memory(1 << 30);
        let mut o = opts(2048, KvType::F16);
        o.n_ubatch = 512;
        let ttft = |toks: &[u32], cache: &PrefixCache| {
            let mut s = eng.session(o.clone());
            let t0 = std::time::Instant::now();
            let r = s.prefill_cached(toks, cache).unwrap();
            let _first = argmax(s.logits());
            (t0.elapsed(), r)
        };
        // warm the weights (first-use packing) outside the measurement, in another cache
        ttft(&render("warm up")[..64], &PrefixCache::in_memory(1 << 30));
        let (t1, r1) = ttft(&render("What is your refund policy?"), &cache);
        let (t2, r2) = ttft(&render("How do I reset my password?"), &cache);
        eprintln!(
            "{name}: TTFT {:.1} ms for {} tokens cold, {:.1} ms with {} from the prefix cache \
             and {} prefilled ({:.1}%)",
            t1.as_secs_f64() * 1e3,
            r1.prefilled,
            t2.as_secs_f64() * 1e3,
            r2.from_cache,
            r2.prefilled,
            100.0 * t2.as_secs_f64() / t1.as_secs_f64()
        );
        assert!(r2.from_cache >= 1000, "{r2:?}");
        assert!(
            t2.as_secs_f64() <= 0.10 * t1.as_secs_f64(),
            "{name}: {t2:?} is more than 10% of {t1:?}"
        );
    }
}
