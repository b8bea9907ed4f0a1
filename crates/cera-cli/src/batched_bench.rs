//! `cera batched-bench`: throughput of several sequences decoded together, with
//! `llama-batched-bench`'s flags, columns and JSONL keys.
//!
//! For each (PP, TG, B): B prompts of PP random tokens are prefilled (packed into steps of at
//! most `-ub` tokens; with `-pps` one prompt is prefilled and shared by all B sequences), then
//! TG steps each decode one token of every sequence together (with `-tgs`, each sequence
//! decodes its TG tokens on its own, one after the other). As llama-batched-bench:
//! N_KV = B·(PP+TG) (shared: PP·B + B·TG, llama.cpp's figure without a unified cache),
//! S_PP = prompt tokens / T_PP, S_TG = B·TG / T_TG, S = (prompt tokens + B·TG) / T.

use std::time::Instant;

use anyhow::{Context, bail};
use cera::batch::StepLogits;
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::models::Logits;
use cera::sample::Rng;
use cera::session::Session;

use crate::common::resolve_model;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file or catalog name (default model when omitted).
    #[arg(short = 'm', long = "model")]
    model: Option<String>,
    /// Where the model runs: cpu, gpu or auto.
    #[arg(long = "device", default_value = "cpu")]
    device: cera::engine::DeviceKind,
    /// Threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// KV budget over all sequences: combinations that need more are skipped (0: no limit).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    n_kv_max: usize,
    /// Logical batch size (reported; prefill steps are cut at `-ub`).
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    n_batch: usize,
    /// Tokens per forward step at most during prefill.
    #[arg(long = "ubatch-size", visible_alias = "ub", default_value_t = 512)]
    n_ubatch: usize,
    /// Prompt lengths.
    #[arg(long = "npp", value_delimiter = ',', default_values_t = [128])]
    npp: Vec<usize>,
    /// Generated tokens per sequence.
    #[arg(long = "ntg", value_delimiter = ',', default_values_t = [128])]
    ntg: Vec<usize>,
    /// Sequences decoded together.
    #[arg(long = "npl", value_delimiter = ',', default_values_t = [1, 2, 4, 8])]
    npl: Vec<usize>,
    /// The prompt is shared by all sequences (prefilled once).
    #[arg(long = "pps")]
    pps: bool,
    /// Text generation separated across the sequences (one after another).
    #[arg(long = "tgs")]
    tgs: bool,
    /// Output format: md or jsonl.
    #[arg(long = "output-format", default_value = "md")]
    output_format: String,
}

struct Row {
    pp: usize,
    tg: usize,
    pl: usize,
    n_kv: usize,
    t_pp: f64,
    t_tg: f64,
}

impl Row {
    fn prompt_tokens(&self, shared: bool) -> usize {
        if shared { self.pp } else { self.pl * self.pp }
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !matches!(a.output_format.as_str(), "md" | "jsonl") {
        bail!("--output-format {}: expected md or jsonl", a.output_format);
    }
    for (flag, v) in [("-npp", &a.npp), ("-ntg", &a.ntg), ("-npl", &a.npl)] {
        if v.is_empty() || v.contains(&0) {
            bail!("{flag}: every value must be at least 1");
        }
    }
    if a.n_ubatch == 0 {
        bail!("-ub must be at least 1");
    }
    let path = resolve_model(a.model.as_deref())?;
    let mut eo = EngineOptions::default();
    eo.n_threads = a.threads;
    eo.device = a.device;
    // the most sequences a test steps together: on a GPU their caches share buffers per layer
    eo.n_seq_max = a.npl.iter().copied().max().unwrap_or(1);
    let engine = Engine::load(&path, eo).with_context(|| format!("loading {}", path.display()))?;
    crate::common::report_device(&engine);
    let n_vocab = engine.n_vocab() as u64;
    let mut rng = Rng::new(1234);
    let mut tok = move || (rng.next_u64() % n_vocab) as u32;

    // warm-up: page in and pack the weights, size the buffers
    let mut w = session(&engine, 32);
    let warm: Vec<u32> = (0..16).map(|_| tok()).collect();
    w.append_tokens(&warm)?;
    drop(w);

    println!();
    println!(
        "main: n_kv_max = {}, n_batch = {}, n_ubatch = {}, flash_attn = 1, is_pp_shared = {}, \
         is_tg_separate = {}, n_gpu_layers = 0, n_threads = {t}, n_threads_batch = {t}",
        a.n_kv_max,
        a.n_batch,
        a.n_ubatch,
        u8::from(a.pps),
        u8::from(a.tgs),
        t = engine.n_threads()
    );
    println!();
    let md = a.output_format == "md";
    if md {
        println!(
            "|{:>6} | {:>6} | {:>4} | {:>6} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} |",
            "PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"
        );
        println!(
            "|{:->6}-|-{:->6}-|-{:->4}-|-{:->6}-|-{:->8}-|-{:->8}-|-{:->8}-|-{:->8}-|-{:->8}-|-{:->8}-|",
            "", "", "", "", "", "", "", "", "", ""
        );
    }
    for &pp in &a.npp {
        for &tg in &a.ntg {
            for &pl in &a.npl {
                let n_kv = pl * (pp + tg);
                if a.n_kv_max > 0 && n_kv > a.n_kv_max {
                    continue;
                }
                let row = measure(&engine, &a, pp, tg, pl, &mut tok)?;
                print_row(&a, &engine, &row, md);
            }
        }
    }
    println!();
    Ok(())
}

fn session(engine: &Engine, n_ctx: usize) -> Session {
    let mut o = SessionOptions::default();
    o.n_ctx = n_ctx;
    engine.session(o)
}

fn measure(
    engine: &Engine,
    a: &Args,
    pp: usize,
    tg: usize,
    pl: usize,
    tok: &mut impl FnMut() -> u32,
) -> anyhow::Result<Row> {
    let n_seq_prompts = if a.pps { 1 } else { pl };
    let prompts: Vec<Vec<u32>> = (0..n_seq_prompts)
        .map(|_| (0..pp).map(|_| tok()).collect())
        .collect();
    let mut sess: Vec<Session> = (0..n_seq_prompts)
        .map(|_| session(engine, pp + tg))
        .collect();

    // logits rows of every step, reused (as a scheduler would)
    let mut out = StepLogits::default();
    // prefill: the prompts packed into steps of at most n_ubatch tokens
    let t0 = Instant::now();
    let mut done = vec![0usize; n_seq_prompts];
    while done.iter().any(|&d| d < pp) {
        let mut budget = a.n_ubatch;
        let mut step = engine.batch();
        for ((s, d), p) in sess.iter_mut().zip(done.iter_mut()).zip(&prompts) {
            if *d == pp || budget == 0 {
                continue;
            }
            let n = (pp - *d).min(budget);
            let logits = if *d + n == pp {
                Logits::Last
            } else {
                Logits::None
            };
            step.add(s, &p[*d..*d + n], logits)?;
            *d += n;
            budget -= n;
        }
        step.run_into(&mut out)?;
    }
    let t_pp = t0.elapsed().as_secs_f64();
    if a.pps {
        let first = &sess[0];
        let forks: Vec<Session> = (1..pl).map(|_| first.fork()).collect();
        sess.extend(forks);
    }

    let feed: Vec<Vec<u32>> = (0..tg).map(|_| (0..pl).map(|_| tok()).collect()).collect();
    let t0 = Instant::now();
    if a.tgs {
        for (j, s) in sess.iter_mut().enumerate() {
            for f in &feed {
                let mut step = engine.batch();
                step.add(s, &f[j..j + 1], Logits::Last)?;
                step.run_into(&mut out)?;
            }
        }
    } else {
        for f in &feed {
            let mut step = engine.batch();
            for (j, s) in sess.iter_mut().enumerate() {
                step.add(s, &f[j..j + 1], Logits::Last)?;
            }
            step.run_into(&mut out)?;
        }
    }
    let t_tg = t0.elapsed().as_secs_f64();
    Ok(Row {
        pp,
        tg,
        pl,
        n_kv: pl * (pp + tg),
        t_pp,
        t_tg,
    })
}

fn print_row(a: &Args, engine: &Engine, r: &Row, md: bool) {
    let npt = r.prompt_tokens(a.pps);
    let t = r.t_pp + r.t_tg;
    let speed_pp = npt as f64 / r.t_pp;
    let speed_tg = (r.pl * r.tg) as f64 / r.t_tg;
    let speed = (npt + r.pl * r.tg) as f64 / t;
    if md {
        println!(
            "|{:>6} | {:>6} | {:>4} | {:>6} | {:>8.3} | {:>8.2} | {:>8.3} | {:>8.2} | {:>8.3} | {:>8.2} |",
            r.pp, r.tg, r.pl, r.n_kv, r.t_pp, speed_pp, r.t_tg, speed_tg, t, speed
        );
    } else {
        let rec = serde_json::json!({
            "n_kv_max": a.n_kv_max,
            "n_batch": a.n_batch,
            "n_ubatch": a.n_ubatch,
            "flash_attn": 1,
            "is_pp_shared": u8::from(a.pps),
            "n_gpu_layers": 0,
            "n_threads": engine.n_threads(),
            "n_threads_batch": engine.n_threads(),
            "pp": r.pp,
            "tg": r.tg,
            "pl": r.pl,
            "n_kv": r.n_kv,
            "t_pp": r.t_pp,
            "speed_pp": speed_pp,
            "t_tg": r.t_tg,
            "speed_tg": speed_tg,
            "t": t,
            "speed": speed,
        });
        println!("{rec}");
    }
}
