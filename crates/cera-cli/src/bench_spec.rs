//! `cera bench --spec ngram|draft`: generation speed with speculative decoding against plain
//! decoding on the same prompt. Random tokens (what the plain `tg` test feeds) give a drafter
//! nothing to find, so these tests generate for real: the prompt (`--spec-prompt`, by default a
//! code edit, the case prompt lookup is for) goes through the chat template, is prefilled
//! untimed, and `-n` tokens are generated greedily (end-of-generation ignored), once plainly
//! and once speculatively per repetition, alternating.

use std::time::Instant;

use anyhow::Context;
use cera::engine::{Engine, SessionOptions};
use cera::session::{Control, GenerateOptions};
use cera::spec::SpecStats;
use serde_json::json;

use crate::spec_args::SpecArgs;

/// A code edit: the answer copies most of the prompt, which prompt lookup drafts from.
pub const DEFAULT_PROMPT: &str = "Rewrite this function so that it skips empty lines. Reply with the whole function only.\n\n```python\ndef parse_config(text):\n    \"\"\"Parses KEY=VALUE lines into a dict; later keys win.\"\"\"\n    result = {}\n    for number, line in enumerate(text.splitlines(), start=1):\n        line = line.strip()\n        if line.startswith(\"#\"):\n            continue\n        if \"=\" not in line:\n            raise ValueError(f\"line {number}: expected KEY=VALUE, got {line!r}\")\n        key, value = line.split(\"=\", 1)\n        key = key.strip().lower()\n        value = value.strip()\n        if value.startswith('\"') and value.endswith('\"'):\n            value = value[1:-1]\n        result[key] = value\n    return result\n```";

/// One test's samples: plain and speculative decode times (ns) and the speculation counts.
pub struct SpecResult {
    pub n_gen: usize,
    pub n_threads: usize,
    pub plain_ns: Vec<u64>,
    pub spec_ns: Vec<u64>,
    pub stats: SpecStats,
    /// Tokens the speculative runs produced that differ from the plain run's (0 when greedy
    /// speculation is exact, as it must be).
    pub mismatches: usize,
}

/// Runs the plain/speculative pair `reps` times on `engine`.
pub fn run_test(
    engine: &Engine,
    spec: &SpecArgs,
    prompt: &str,
    n_gen: usize,
    reps: usize,
    n_threads: usize,
) -> anyhow::Result<SpecResult> {
    let text = crate::run::chat_prompt(engine, None, prompt)?;
    let toks = engine.tokenizer().encode(&text, true, true);
    let mut so = SessionOptions::default();
    so.n_ctx = toks.len() + n_gen + 64;
    let mut gopts = GenerateOptions::default();
    gopts.max_tokens = n_gen;
    gopts.ignore_eog = true;
    let mut eo = cera::engine::EngineOptions::default();
    eo.n_threads = Some(n_threads);
    let mut r = SpecResult {
        n_gen,
        n_threads,
        plain_ns: Vec::new(),
        spec_ns: Vec::new(),
        stats: SpecStats::default(),
        mismatches: 0,
    };
    // the first round warms up (pages in and packs the weights) and is not recorded
    for rep in 0..=reps {
        let mut s = engine.session(so.clone());
        s.prefill(&toks).context("prefilling the bench prompt")?;
        let t0 = Instant::now();
        let sum = s.generate(&gopts, &mut |_: u32, _: &str| Control::Continue)?;
        let plain = t0.elapsed().as_nanos() as u64;
        let plain_tokens = sum.tokens;

        let mut d = spec
            .drafter_with(engine, eo.clone(), so.clone())?
            .context("--spec off has nothing to compare")?;
        let mut s = engine.session(so.clone());
        s.prefill(&toks).context("prefilling the bench prompt")?;
        let t0 = Instant::now();
        let (sum, st) = s.generate_speculative(
            &gopts,
            &spec.options(),
            d.as_mut(),
            &mut |_: u32, _: &str| Control::Continue,
        )?;
        let sp = t0.elapsed().as_nanos() as u64;
        if rep > 0 {
            r.plain_ns.push(plain);
            r.spec_ns.push(sp);
            r.stats.add(&st);
            r.mismatches += sum
                .tokens
                .iter()
                .zip(&plain_tokens)
                .filter(|(a, b)| a != b)
                .count();
        }
    }
    Ok(r)
}

fn median(v: &[u64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2] as f64
}

impl SpecResult {
    pub fn plain_ts(&self) -> f64 {
        self.n_gen as f64 / (median(&self.plain_ns) / 1e9)
    }
    pub fn spec_ts(&self) -> f64 {
        self.n_gen as f64 / (median(&self.spec_ns) / 1e9)
    }
}

pub fn print_md(model: &str, kind: &str, rs: &[SpecResult]) {
    println!(
        "| model                          | threads |   test | plain t/s | spec ({kind}) t/s | speedup | drafted | accepted | acceptance |"
    );
    println!(
        "| ------------------------------ | ------: | -----: | --------: | ---------: | ------: | ------: | -------: | ---------: |"
    );
    for r in rs {
        println!(
            "| {:<30} | {:>7} | {:>6} | {:>9.2} | {:>10.2} | {:>6.2}× | {:>7} | {:>8} | {:>9.1}% |",
            model,
            r.n_threads,
            format!("tg{}", r.n_gen),
            r.plain_ts(),
            r.spec_ts(),
            r.spec_ts() / r.plain_ts(),
            r.stats.drafted,
            r.stats.accepted,
            100.0 * r.stats.acceptance()
        );
    }
}

pub fn record(model: &str, kind: &str, r: &SpecResult) -> serde_json::Value {
    json!({
        "model_type": model,
        "n_threads": r.n_threads,
        "n_gen": r.n_gen,
        "test": format!("tg{}", r.n_gen),
        "spec": kind,
        "plain_samples_ns": r.plain_ns,
        "spec_samples_ns": r.spec_ns,
        "plain_ts": r.plain_ts(),
        "spec_ts": r.spec_ts(),
        "speedup": r.spec_ts() / r.plain_ts(),
        "drafted": r.stats.drafted,
        "accepted": r.stats.accepted,
        "acceptance": r.stats.acceptance(),
        "verify_steps": r.stats.verify_steps,
        "plain_steps": r.stats.plain_steps,
        "mismatched_tokens": r.mismatches,
    })
}
