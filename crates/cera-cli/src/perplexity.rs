//! `cera perplexity`: perplexity over a text file, chunked as llama-perplexity does: chunks of
//! `n_ctx` tokens, the first token of each replaced by BOS when the model adds one, and only the
//! second half of each chunk scored.

use anyhow::{Context, bail};
use cera::engine::Engine;

use crate::common::resolve_model;
use crate::gen_args::ModelArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Text file to score.
    #[arg(short = 'f', long = "file")]
    pub file: std::path::PathBuf,
    /// Score at most this many chunks (default: all).
    #[arg(long = "chunks")]
    pub chunks: Option<usize>,
}

/// Per-chunk perplexities and the final estimate.
pub struct Perplexity {
    pub chunk_ppl: Vec<f64>,
    pub ppl: f64,
    pub tokens_scored: usize,
}

pub fn perplexity(
    engine: &Engine,
    text: &str,
    n_ctx: usize,
    max_chunks: Option<usize>,
    mut opts: cera::engine::SessionOptions,
    mut on_chunk: impl FnMut(usize, f64),
) -> anyhow::Result<Perplexity> {
    let tok = engine.tokenizer();
    let tokens = tok.encode(text, true, false);
    if tokens.len() < 2 * n_ctx {
        bail!(
            "need at least {} tokens for a context of {n_ctx}, the file has {}",
            2 * n_ctx,
            tokens.len()
        );
    }
    let mut n_chunks = tokens.len() / n_ctx;
    if let Some(m) = max_chunks {
        n_chunks = n_chunks.min(m);
    }
    let first = n_ctx / 2;
    let n_vocab = engine.n_vocab();
    let mut nll = 0f64;
    let mut count = 0usize;
    let mut chunk_ppl = Vec::new();
    opts.n_ctx = n_ctx;
    opts.n_ubatch = n_ctx;
    let mut session = engine.session(opts);
    for c in 0..n_chunks {
        let mut batch = tokens[c * n_ctx..(c + 1) * n_ctx].to_vec();
        if tok.add_bos() {
            batch[0] = tok
                .bos()
                .context("the model adds BOS but has no BOS token")?;
        }
        session.reset();
        let logits = session.append_tokens_all_logits(&batch)?;
        for j in first..n_ctx - 1 {
            let row = &logits[j * n_vocab..(j + 1) * n_vocab];
            let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = row
                .iter()
                .map(|&l| (l as f64 - max).exp())
                .sum::<f64>()
                .ln()
                + max;
            let target = tokens[c * n_ctx + j + 1] as usize;
            nll += lse - row[target] as f64;
            count += 1;
        }
        let p = (nll / count as f64).exp();
        chunk_ppl.push(p);
        on_chunk(c, p);
    }
    Ok(Perplexity {
        ppl: (nll / count as f64).exp(),
        chunk_ppl,
        tokens_scored: count,
    })
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("reading {}", a.file.display()))?;
    let path = resolve_model(a.model.model.as_deref())?;
    let engine = Engine::load(&path, a.model.engine_options())?;
    let n_ctx = if a.model.ctx_size == 0 {
        512
    } else {
        a.model.ctx_size
    };
    let t0 = std::time::Instant::now();
    let opts = a.model.session_options();
    let r = perplexity(&engine, &text, n_ctx, a.chunks, opts, |c, p| {
        eprint!("[{}]{p:.4},", c + 1);
    })?;
    eprintln!();
    println!(
        "Final estimate: PPL = {:.4} ({} chunks of {n_ctx}, {} tokens scored, {:.1} s)",
        r.ppl,
        r.chunk_ppl.len(),
        r.tokens_scored,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
