//! `cera bench`: prompt-processing and generation throughput, with llama-bench's flags and
//! output formats (markdown table, JSON records with llama-bench's field names, CSV), so
//! scripts read both tools alike.

use std::time::Instant;

use anyhow::{Context, bail};
use cera::backend::{KvSpec, KvType};
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::sample::Rng;
use cera::session::Session;
use serde_json::json;

use crate::common::{human_bytes, human_count, resolve_model};
use crate::spec_args::SpecArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file or catalog name (default model when omitted).
    #[arg(short = 'm', long = "model")]
    model: Option<String>,
    /// Threads (comma-separated list allowed).
    #[arg(short = 't', long = "threads", value_delimiter = ',')]
    threads: Vec<usize>,
    /// Prompt lengths for the pp tests (0 disables).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    n_prompt: Vec<usize>,
    /// Generated tokens for the tg tests (0 disables).
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    n_gen: Vec<usize>,
    /// Context depth already in the KV cache before each test.
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    depth: Vec<usize>,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    /// Output format: md, json or csv.
    #[arg(short = 'o', long = "output", default_value = "md")]
    output: String,
    /// With --spec: generate -n tokens greedily from this prompt (through the chat template;
    /// `@FILE` reads a file), plainly and speculatively, and report both and the acceptance.
    #[arg(long = "spec-prompt")]
    spec_prompt: Option<String>,
    /// KV cache types of the keys (comma-separated list allowed, as llama-bench's -ctk).
    #[arg(
        long = "cache-type-k",
        visible_alias = "ctk",
        value_delimiter = ',',
        default_value = "f16"
    )]
    cache_type_k: Vec<KvType>,
    /// KV cache types of the values (comma-separated list allowed).
    #[arg(
        long = "cache-type-v",
        visible_alias = "ctv",
        value_delimiter = ',',
        default_value = "f16"
    )]
    cache_type_v: Vec<KvType>,
    /// Hadamard rotation of quantized caches (on, off).
    #[arg(long = "kv-rotate", default_value = "on", value_parser = crate::gen_args::parse_on_off, action = clap::ArgAction::Set)]
    kv_rotate: bool,
    /// Where the model runs: cpu, gpu or auto (the backend column says which).
    #[arg(long = "device", default_value = "cpu")]
    device: cera::engine::DeviceKind,
    #[command(flatten)]
    spec: SpecArgs,
    /// A multimodal projector (an mmproj GGUF): also time how long it takes to encode each
    /// --image / --audio file (per image; per clip and per second of audio).
    #[arg(long)]
    mmproj: Option<std::path::PathBuf>,
    /// An image or audio file to time through --mmproj (repeatable; `--audio` adds to the same
    /// list; each file is told by its first bytes).
    #[arg(long = "image", visible_alias = "audio", requires = "mmproj")]
    media: Vec<std::path::PathBuf>,
}

struct TestResult {
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    n_threads: usize,
    kv: KvSpec,
    /// KV cache bytes per token of context
    kv_bytes_per_token: f64,
    samples_ns: Vec<u64>,
}

impl TestResult {
    fn name(&self) -> String {
        let base = if self.n_prompt > 0 {
            format!("pp{}", self.n_prompt)
        } else {
            format!("tg{}", self.n_gen)
        };
        if self.n_depth > 0 {
            format!("{base} @ d{}", self.n_depth)
        } else {
            base
        }
    }
    fn samples_ts(&self) -> Vec<f64> {
        let n = (self.n_prompt + self.n_gen) as f64;
        self.samples_ns
            .iter()
            .map(|&ns| n / (ns as f64 / 1e9))
            .collect()
    }
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64
    } else {
        0.0
    };
    (m, var.sqrt())
}

/// One timed run: `depth` tokens prefilled untimed, then `n_prompt` tokens in one prefill or
/// `n_gen` tokens decoded one at a time.
/// One repetition on `s` (reset first): `depth` random tokens of context, then the timed
/// prompt (`n_prompt` tokens in one batch) or `n_gen` single-token decode steps.
fn run_once(
    engine: &Engine,
    s: &mut Session,
    n_prompt: usize,
    n_gen: usize,
    depth: usize,
    rng: &mut Rng,
) -> anyhow::Result<u64> {
    let n_vocab = engine.n_vocab() as u64;
    s.reset();
    let mut tok = || (rng.next_u64() % n_vocab) as u32;
    if depth > 0 {
        let d: Vec<u32> = (0..depth).map(|_| tok()).collect();
        s.append_tokens(&d)?;
    }
    let t0 = Instant::now();
    if n_prompt > 0 {
        let p: Vec<u32> = (0..n_prompt).map(|_| tok()).collect();
        s.append_tokens(&p)?;
    } else {
        for _ in 0..n_gen {
            s.append_tokens(&[tok()])?;
        }
    }
    Ok(t0.elapsed().as_nanos() as u64)
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !matches!(a.output.as_str(), "md" | "json" | "csv") {
        bail!("-o {}: expected md, json or csv", a.output);
    }
    if a.reps == 0 {
        bail!("-r must be at least 1");
    }
    let path = resolve_model(a.model.as_deref())?;
    let threads = if a.threads.is_empty() {
        vec![cera::runtime::topology::CpuTopology::get().default_threads()]
    } else {
        a.threads.clone()
    };
    if a.spec.spec != "off" {
        if a.output == "csv" {
            bail!("-o csv is not available with --spec (use md or json)");
        }
        return run_spec(&a, &path, &threads);
    }
    if a.spec_prompt.is_some() {
        bail!("--spec-prompt is for --spec ngram|draft");
    }
    let media = match &a.mmproj {
        Some(p) if a.media.is_empty() => bail!(
            "--mmproj {} without --image or --audio: nothing to time",
            p.display()
        ),
        Some(p) => {
            if a.output == "csv" {
                bail!("-o csv is not available with --mmproj (use md or json)");
            }
            Some(crate::bench_media::load(p, &a.media)?)
        }
        None => None,
    };
    let mut media_results = Vec::new();
    let mut results = Vec::new();
    let mut rng = Rng::new(1234);
    for &t in &threads {
        let mut eo = EngineOptions::default();
        eo.n_threads = Some(t);
        eo.device = a.device;
        let engine =
            Engine::load(&path, eo).with_context(|| format!("loading {}", path.display()))?;
        crate::common::report_device(&engine);
        for (&kt, &vt) in a.cache_type_k.iter().zip(&a.cache_type_v) {
            engine.check_kv(kt, vt)?;
        }
        let mut tests = Vec::new();
        for &kt in &a.cache_type_k {
            for &vt in &a.cache_type_v {
                for &d in &a.depth {
                    for &p in a.n_prompt.iter().filter(|&&p| p > 0) {
                        tests.push((p, 0, d, kt, vt));
                    }
                    for &n in a.n_gen.iter().filter(|&&n| n > 0) {
                        tests.push((0, n, d, kt, vt));
                    }
                }
            }
        }
        for (p, n, d, kt, vt) in tests {
            // one session per test, reset between repetitions (as llama-bench keeps one context)
            let mut opts = SessionOptions::default();
            opts.n_ctx = d + p + n + 1;
            opts.kv_type = kt;
            opts.kv_type_v = Some(vt);
            opts.kv_rotate = a.kv_rotate;
            let mut s = engine.session(opts);
            // warm-up run, not recorded (page in and pack the weights, size the buffers)
            run_once(&engine, &mut s, p.min(16), n.min(4), d.min(16), &mut rng)?;
            let mut samples = Vec::with_capacity(a.reps);
            for _ in 0..a.reps {
                samples.push(run_once(&engine, &mut s, p, n, d, &mut rng)?);
            }
            let r = TestResult {
                n_prompt: p,
                n_gen: n,
                n_depth: d,
                n_threads: t,
                kv: s.kv_spec(),
                kv_bytes_per_token: s.kv_bytes_per_token(),
                samples_ns: samples,
            };
            // llama-bench shows the cache types only when they are not the default
            let kv_cols = a.cache_type_k != [KvType::F16] || a.cache_type_v != [KvType::F16];
            if a.output == "md" && results.is_empty() {
                print_md_header(kv_cols);
            }
            if a.output == "md" {
                print_md_row(&engine, &r, kv_cols);
            }
            results.push((engine.clone(), r));
        }
        if let Some((mm, inputs)) = &media {
            media_results.extend(crate::bench_media::run(&engine, mm, inputs, a.reps, t)?);
        }
    }
    if a.output == "md" && !media_results.is_empty() {
        crate::bench_media::print_md(&media_results);
    }
    match a.output.as_str() {
        "json" => {
            let mut recs: Vec<_> = results.iter().map(|(e, r)| record(e, r)).collect();
            recs.extend(crate::bench_media::records(&media_results));
            println!("{}", serde_json::to_string_pretty(&recs)?);
        }
        "csv" => {
            let keys = [
                "model_filename",
                "model_type",
                "model_size",
                "model_n_params",
                "n_threads",
                "n_prompt",
                "n_gen",
                "n_depth",
                "test",
                "avg_ns",
                "stddev_ns",
                "avg_ts",
                "stddev_ts",
            ];
            println!("{}", keys.join(","));
            for (e, r) in &results {
                let rec = record(e, r);
                let row: Vec<String> = keys
                    .iter()
                    .map(|k| match &rec[*k] {
                        serde_json::Value::String(s) => format!("\"{s}\""),
                        v => v.to_string(),
                    })
                    .collect();
                println!("{}", row.join(","));
            }
        }
        _ => {}
    }
    Ok(())
}

/// `--spec`: plain against speculative generation on a real prompt (see [`crate::bench_spec`]).
fn run_spec(a: &Args, path: &std::path::Path, threads: &[usize]) -> anyhow::Result<()> {
    let prompt = match a.spec_prompt.as_deref() {
        None => crate::bench_spec::DEFAULT_PROMPT.to_owned(),
        Some(p) => match p.strip_prefix('@') {
            Some(f) => std::fs::read_to_string(f).with_context(|| format!("reading {f}"))?,
            None => p.to_owned(),
        },
    };
    let mut rows = Vec::new();
    let mut model = String::new();
    for &t in threads {
        let mut eo = EngineOptions::default();
        eo.n_threads = Some(t);
        let engine =
            Engine::load(path, eo).with_context(|| format!("loading {}", path.display()))?;
        model = model_type(&engine);
        for &n in a.n_gen.iter().filter(|&&n| n > 0) {
            let r = crate::bench_spec::run_test(&engine, &a.spec, &prompt, n, a.reps, t)?;
            if r.mismatches > 0 {
                eprintln!(
                    "cera: warning: {} speculative tokens differed from plain greedy decoding (near-ties)",
                    r.mismatches
                );
            }
            rows.push(r);
        }
    }
    match a.output.as_str() {
        "md" => crate::bench_spec::print_md(&model, &a.spec.spec, &rows),
        _ => {
            let recs: Vec<_> = rows
                .iter()
                .map(|r| crate::bench_spec::record(&model, &a.spec.spec, r))
                .collect();
            println!("{}", serde_json::to_string_pretty(&recs)?);
        }
    }
    Ok(())
}

fn model_type(e: &Engine) -> String {
    let g = e.gguf();
    let arch = g.architecture().unwrap_or("?");
    let size = g
        .get_str("general.size_label")
        .map(str::to_owned)
        .unwrap_or_else(|_| {
            human_count(g.tensors.iter().map(|t| t.n_elements()).sum()).replace(' ', "")
        });
    let ftype = g
        .get_as::<u32>(cera::keys::GENERAL_FILE_TYPE)
        .ok()
        .and_then(ftype_name)
        .map(str::to_owned)
        .unwrap_or_else(|| dominant_type(e));
    format!("{arch} {size} {ftype}")
}

/// llama.cpp's names of the `general.file_type` values (what llama-bench's description shows).
fn ftype_name(ft: u32) -> Option<&'static str> {
    Some(match ft {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        19 => "IQ2_XXS - 2.0625 bpw",
        20 => "IQ2_XS - 2.3125 bpw",
        21 => "Q2_K - Small",
        22 => "IQ3_XS - 3.3 bpw",
        23 => "IQ3_XXS - 3.0625 bpw",
        24 => "IQ1_S - 1.5625 bpw",
        25 => "IQ4_NL - 4.5 bpw",
        26 => "IQ3_S - 3.4375 bpw",
        27 => "IQ3_S mix - 3.66 bpw",
        28 => "IQ2_S - 2.5 bpw",
        29 => "IQ2_M - 2.7 bpw",
        30 => "IQ4_XS - 4.25 bpw",
        31 => "IQ1_M - 1.75 bpw",
        32 => "BF16",
        36 => "TQ1_0 - 1.69 bpw ternary",
        37 => "TQ2_0 - 2.06 bpw ternary",
        38 => "MXFP4 MoE",
        _ => return None,
    })
}

/// The most common weight type among the matrices (what llama-bench's description shows).
fn dominant_type(e: &Engine) -> String {
    let mut counts: std::collections::BTreeMap<&str, u64> = Default::default();
    for t in e.gguf().tensors.iter().filter(|t| t.shape.len() >= 2) {
        *counts.entry(t.ty.name()).or_default() += t.size;
    }
    counts
        .into_iter()
        .max_by_key(|(_, b)| *b)
        .map(|(n, _)| n.to_owned())
        .unwrap_or_default()
}

fn model_size(e: &Engine) -> u64 {
    e.gguf().tensors.iter().map(|t| t.size).sum()
}

fn n_params(e: &Engine) -> u64 {
    e.gguf().tensors.iter().map(|t| t.n_elements()).sum()
}

fn print_md_header(kv_cols: bool) {
    let (kv_h, kv_r) = if kv_cols {
        (
            " type_k | type_v | KV B/tok |",
            " -----: | -----: | -------: |",
        )
    } else {
        ("", "")
    };
    println!(
        "| model                          |       size |     params | backend    | threads |{kv_h}            test |                  t/s |"
    );
    println!(
        "| ------------------------------ | ---------: | ---------: | ---------- | ------: |{kv_r} --------------: | -------------------: |"
    );
}

fn print_md_row(e: &Engine, r: &TestResult, kv_cols: bool) {
    let (m, s) = mean_std(&r.samples_ts());
    let kv = if kv_cols {
        format!(
            " {:>6} | {:>6} | {:>8.0} |",
            r.kv.k.name(),
            r.kv.v.name(),
            r.kv_bytes_per_token
        )
    } else {
        String::new()
    };
    println!(
        "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} |{kv} {:>15} | {:>20} |",
        model_type(e),
        human_bytes(model_size(e)),
        human_count(n_params(e)),
        e.backend_name(),
        r.n_threads,
        r.name(),
        format!("{m:.2} ± {s:.2}")
    );
}

fn record(e: &Engine, r: &TestResult) -> serde_json::Value {
    let ts = r.samples_ts();
    let (avg_ts, stddev_ts) = mean_std(&ts);
    let ns: Vec<f64> = r.samples_ns.iter().map(|&x| x as f64).collect();
    let (avg_ns, stddev_ns) = mean_std(&ns);
    json!({
        "build_commit": env!("CARGO_PKG_VERSION"),
        "cpu_info": format!("{:?}", cera::kernels::KernelTable::get().tier()),
        "backends": e.backend_name(),
        "model_filename": e.path().display().to_string(),
        "model_type": model_type(e),
        "model_size": model_size(e),
        "model_n_params": n_params(e),
        "n_threads": r.n_threads,
        "n_prompt": r.n_prompt,
        "n_gen": r.n_gen,
        "n_depth": r.n_depth,
        "type_k": r.kv.k.name(),
        "type_v": r.kv.v.name(),
        "kv_rotate": r.kv.rotate,
        "kv_bytes_per_token": r.kv_bytes_per_token,
        "test": r.name(),
        "avg_ns": avg_ns as u64,
        "stddev_ns": stddev_ns as u64,
        "avg_ts": avg_ts,
        "stddev_ts": stddev_ts,
        "samples_ns": r.samples_ns,
        "samples_ts": ts,
    })
}
