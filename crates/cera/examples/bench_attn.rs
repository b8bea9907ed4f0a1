//! Attention time at a context depth, per thread count: decode (one query token), or the last
//! `tokens` of a prefill (causal, with an optional sliding window).
//!
//! ```sh
//! cargo run --release -p cera --example bench_attn -- [depth] [n_head] [n_kv_head] [head_dim] [tokens] [window]
//! ```
//!
//! Defaults are SmolLM2-135M's shape (9 heads, 3 KV heads of 64) at depth 1024, one token. GB/s
//! counts the f16 keys and values read per call (once); each figure is the fastest of ~300 ms
//! of calls. Gemma 3 1B's prefill: `512 4 1 256 512 512`.

use std::time::{Duration, Instant};

use cera::backend::{AttentionParams, Cpu, KvLayer, KvType};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (depth, nh, nkv, hd) = (arg(0, 1024), arg(1, 9), arg(2, 3), arg(3, 64));
    let (n, window) = (arg(4, 1).clamp(1, depth + 1), arg(5, 0));
    let p = AttentionParams {
        n_head: nh,
        n_kv_head: nkv,
        head_dim: hd,
        head_dim_v: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        softcap: None,
        window: (window > 0).then_some(window),
        causal: true,
    };
    let mut seed = 1u32;
    let mut rnd = || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
    };
    let row = nkv * hd;
    let k: Vec<f32> = (0..(depth + 1) * row).map(|_| rnd()).collect();
    let v: Vec<f32> = (0..(depth + 1) * row).map(|_| rnd()).collect();
    let q: Vec<f32> = (0..n * nh * hd).map(|_| rnd()).collect();
    let mut kv = KvLayer::new(KvType::F16, depth + 1, nkv, hd, hd);
    kv.store(0, &k, &v);
    let mut out = vec![0f32; n * nh * hd];
    let bytes = 2.0 * 2.0 * ((depth + 1) * row) as f64;
    println!(
        "attention: {n} query tokens, {nh} heads, {nkv} KV heads of {hd}, depth {depth}, \
         window {window}, f16 cache"
    );
    for threads in [1, 2] {
        let cpu = Cpu::new(threads);
        let mut best = Duration::MAX;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            let t0 = Instant::now();
            cpu.attention(&q, &kv, depth + 1 - n, n, &p, &mut out);
            best = best.min(t0.elapsed());
        }
        println!(
            "{threads} thread(s): {:>8.1} µs  {:>6.2} GB/s",
            best.as_secs_f64() * 1e6,
            bytes / best.as_secs_f64() / 1e9
        );
    }
}
