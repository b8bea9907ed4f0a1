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
    /// Also run every chunk with a baseline KV cache of this type (keys and values, e.g. f16)
    /// and report the mean KL divergence of the tested cache's token distributions from the
    /// baseline's and how often both rank the same token first (llama-perplexity's
    /// --kl-divergence statistics, without the logits file).
    #[arg(long = "kl-base-cache")]
    pub kl_base: Option<cera::backend::KvType>,
}

/// Per-chunk perplexities and the final estimate.
pub struct Perplexity {
    pub chunk_ppl: Vec<f64>,
    pub ppl: f64,
    pub tokens_scored: usize,
    /// Against the baseline cache, when one was asked for.
    pub kl: Option<KlStats>,
}

/// How far the tested run's next-token distributions are from the baseline's.
pub struct KlStats {
    pub base_ppl: f64,
    /// Mean of `Σ p_base · (log p_base − log p_test)` over the scored positions (nats).
    pub mean_kl: f64,
    /// Fraction of scored positions whose most likely token is the same in both.
    pub same_top: f64,
}

/// Log-softmax of one logits row, in f64.
fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = row
        .iter()
        .map(|&l| (l as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    row.iter().map(|&l| l as f64 - lse).collect()
}

fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

#[allow(clippy::too_many_arguments)]
pub fn perplexity(
    engine: &Engine,
    text: &str,
    n_ctx: usize,
    max_chunks: Option<usize>,
    mut opts: cera::engine::SessionOptions,
    kl_base: Option<cera::backend::KvType>,
    adapters: &crate::gen_args::Adapters,
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
    let mut base = match kl_base {
        Some(t) => {
            let mut o = opts.clone();
            o.kv_type = t;
            o.kv_type_v = Some(t);
            let mut s = engine.session(o);
            crate::gen_args::attach(&mut s, adapters)?;
            Some(s)
        }
        None => None,
    };
    let (mut base_nll, mut kl, mut same) = (0f64, 0f64, 0usize);
    let mut session = engine.session(opts);
    crate::gen_args::attach(&mut session, adapters)?;
    for c in 0..n_chunks {
        let mut batch = tokens[c * n_ctx..(c + 1) * n_ctx].to_vec();
        if tok.add_bos() {
            batch[0] = tok
                .bos()
                .context("the model adds BOS but has no BOS token")?;
        }
        session.reset();
        let logits = session.append_tokens_all_logits(&batch)?;
        let base_logits = match base.as_mut() {
            Some(b) => {
                b.reset();
                Some(b.append_tokens_all_logits(&batch)?)
            }
            None => None,
        };
        for j in first..n_ctx - 1 {
            let row = &logits[j * n_vocab..(j + 1) * n_vocab];
            let lp = log_softmax(row);
            let target = tokens[c * n_ctx + j + 1] as usize;
            nll -= lp[target];
            count += 1;
            if let Some(bl) = &base_logits {
                let brow = &bl[j * n_vocab..(j + 1) * n_vocab];
                let blp = log_softmax(brow);
                base_nll -= blp[target];
                kl += blp
                    .iter()
                    .zip(&lp)
                    .map(|(&b, &t)| b.exp() * (b - t))
                    .sum::<f64>();
                same += (argmax(brow) == argmax(row)) as usize;
            }
        }
        let p = (nll / count as f64).exp();
        chunk_ppl.push(p);
        on_chunk(c, p);
    }
    let kl = base.is_some().then(|| KlStats {
        base_ppl: (base_nll / count as f64).exp(),
        mean_kl: kl / count as f64,
        same_top: same as f64 / count as f64,
    });
    Ok(Perplexity {
        ppl: (nll / count as f64).exp(),
        chunk_ppl,
        tokens_scored: count,
        kl,
    })
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("reading {}", a.file.display()))?;
    let path = resolve_model(a.model.model.as_deref())?;
    let engine = Engine::load(&path, a.model.engine_options())?;
    crate::common::report_device(&engine);
    {
        let so = a.model.session_options();
        engine.check_kv(so.kv_type, so.kv_type_v.unwrap_or(so.kv_type))?;
    }
    let n_ctx = if a.model.ctx_size == 0 {
        512
    } else {
        a.model.ctx_size
    };
    let t0 = std::time::Instant::now();
    let mut opts = a.model.session_options();
    opts.n_ctx = n_ctx;
    {
        let s = engine.session(opts.clone());
        eprintln!(
            "cera: KV cache {}: {:.0} bytes per token, {:.3} bits per element",
            s.kv_spec(),
            s.kv_bytes_per_token(),
            s.kv_bytes_per_token() * 8.0 / s.kv_elements_per_token().max(1) as f64
        );
    }
    let adapters = a.model.lora.load(&engine, a.model.verbose)?;
    let r = perplexity(
        &engine,
        &text,
        n_ctx,
        a.chunks,
        opts,
        a.kl_base,
        &adapters,
        |c, p| {
            eprint!("[{}]{p:.4},", c + 1);
        },
    )?;
    eprintln!();
    println!(
        "Final estimate: PPL = {:.4} ({} chunks of {n_ctx}, {} tokens scored, {:.1} s)",
        r.ppl,
        r.chunk_ppl.len(),
        r.tokens_scored,
        t0.elapsed().as_secs_f64()
    );
    if let (Some(k), Some(t)) = (&r.kl, a.kl_base) {
        println!(
            "KL divergence from a {t} cache: mean {:.6}, same top token {:.2}%, baseline PPL = \
             {:.4}",
            k.mean_kl,
            100.0 * k.same_top,
            k.base_ppl
        );
    }
    Ok(())
}
