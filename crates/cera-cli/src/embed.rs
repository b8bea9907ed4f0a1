//! `cera embed`: embeddings of one or more texts, with llama-embedding's flags and output
//! formats (`--pooling`, `--embd-normalize`, `--embd-separator`, `--embd-output-format`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use cera::embed::{EmbedOptions, Normalize, Pooling};
use cera::engine::Engine;

use crate::common::resolve_model;

#[derive(clap::Args)]
pub struct Args {
    /// Model file or catalog name; the default model when omitted.
    #[arg(short = 'm', long = "model")]
    model: Option<String>,
    /// Where the model runs: cpu, gpu or auto.
    #[arg(long = "device", default_value = "cpu")]
    device: cera::engine::DeviceKind,
    /// The text to embed; several texts separated by --embd-separator.
    #[arg(short = 'p', long = "prompt", conflicts_with = "file")]
    prompt: Option<String>,
    /// Read the texts from a file (split by --embd-separator).
    #[arg(short = 'f', long = "file")]
    file: Option<PathBuf>,
    /// What separates the texts (default: a newline).
    #[arg(long = "embd-separator", default_value = "\n")]
    separator: String,
    /// none (one vector per token), mean, cls or last; default: the model's own
    /// (`{arch}.pooling_type`), else none.
    #[arg(long = "pooling")]
    pooling: Option<String>,
    /// -1 none, 0 max absolute (int16), 1 taxicab, 2 euclidean, >2 p-norm.
    #[arg(
        long = "embd-normalize",
        default_value_t = 2,
        allow_negative_numbers = true
    )]
    normalize: i32,
    /// '' (a summary per vector, as llama-embedding prints), array, json (OpenAI-style),
    /// json+ (with the cosine similarity matrix) or raw (one vector per line).
    #[arg(long = "embd-output-format", default_value = "")]
    format: String,
    /// Tokens per forward pass (texts are packed up to this).
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    batch: usize,
    /// Compute threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    #[command(flatten)]
    lora: crate::gen_args::LoraArgs,
    /// Timing and batch details on stderr.
    #[arg(short = 'v', long)]
    verbose: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !["", "array", "json", "json+", "raw"].contains(&a.format.as_str()) {
        bail!(
            "--embd-output-format '{}': expected '', array, json, json+ or raw",
            a.format
        );
    }
    let normalize = Normalize::from_llama(a.normalize)?;
    let pooling = a.pooling.as_deref().map(Pooling::from_name).transpose()?;
    let text = match (&a.prompt, &a.file) {
        (Some(p), None) => p.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        }
        _ => bail!("give the text to embed with -p TEXT or -f FILE"),
    };
    if a.separator.is_empty() {
        bail!("--embd-separator must not be empty");
    }
    let mut texts: Vec<&str> = text.split(a.separator.as_str()).collect();
    // a trailing separator (a file's last newline) does not make an empty text
    if texts.len() > 1 && texts.last() == Some(&"") {
        texts.pop();
    }
    if let Some(i) = texts.iter().position(|t| t.is_empty()) {
        bail!("text {i} is empty (two separators in a row?)");
    }
    let path = resolve_model(a.model.as_deref())?;
    let mut eo = cera::engine::EngineOptions::default();
    eo.n_threads = a.threads;
    eo.device = a.device;
    let engine = Engine::load(&path, eo).with_context(|| format!("loading {}", path.display()))?;
    crate::common::report_device(&engine);
    let mut opts = EmbedOptions::default();
    opts.pooling = pooling;
    opts.normalize = normalize;
    opts.batch_tokens = a.batch;
    for (adapter, scale) in a.lora.load(&engine, a.verbose)? {
        opts.lora.attach(adapter, scale);
    }
    let t0 = std::time::Instant::now();
    let e = engine.embed(&texts, &opts)?;
    let dt = t0.elapsed();
    if a.verbose {
        let n: usize = e.items.iter().map(|i| i.tokens).sum();
        eprintln!(
            "cera: {} texts, {n} tokens in {} forward passes, {:.1} ms ({:.1} texts/s), pooling {}",
            texts.len(),
            e.steps,
            dt.as_secs_f64() * 1e3,
            texts.len() as f64 / dt.as_secs_f64(),
            e.pooling.name()
        );
    }
    let vectors: Vec<&[f32]> = e
        .items
        .iter()
        .flat_map(|i| i.vectors.iter().map(|v| v.as_slice()))
        .collect();
    let mut out = std::io::stdout().lock();
    print(&mut out, &a.format, &vectors, &texts, e.pooling, normalize)?;
    Ok(())
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    if aa == 0.0 || bb == 0.0 {
        return if aa == bb { 1.0 } else { 0.0 };
    }
    ab / (aa.sqrt() * bb.sqrt())
}

fn print(
    out: &mut impl Write,
    format: &str,
    vectors: &[&[f32]],
    texts: &[&str],
    pooling: Pooling,
    norm: Normalize,
) -> std::io::Result<()> {
    let int = norm == Normalize::MaxAbs;
    let num = |v: f32| {
        if int {
            format!("{v:.0}")
        } else {
            format!("{v:.7}")
        }
    };
    match format {
        "" => {
            let cell = |v: f32| {
                if int {
                    format!("{v:6.0} ")
                } else {
                    format!("{v:9.6} ")
                }
            };
            for (j, v) in vectors.iter().enumerate() {
                write!(out, "embedding {j}: ")?;
                if pooling == Pooling::None {
                    let n = v.len();
                    for &x in &v[..n.min(3)] {
                        write!(out, "{}", cell(x))?;
                    }
                    write!(out, " ... ")?;
                    for &x in &v[n.saturating_sub(3)..] {
                        write!(out, "{}", cell(x))?;
                    }
                } else {
                    let k = if vectors.len() > 1 {
                        16.min(v.len())
                    } else {
                        v.len()
                    };
                    for &x in &v[..k] {
                        write!(out, "{}", cell(x))?;
                    }
                }
                writeln!(out)?;
            }
            if pooling != Pooling::None && vectors.len() > 1 {
                writeln!(out, "\ncosine similarity matrix:\n")?;
                for t in texts {
                    write!(out, "{:>6.6} ", t)?;
                }
                writeln!(out)?;
                for (i, a) in vectors.iter().enumerate() {
                    for b in vectors {
                        write!(out, "{:6.2} ", cosine(a, b))?;
                    }
                    writeln!(out, "{:.10}", texts[i])?;
                }
            }
        }
        "raw" => {
            for v in vectors {
                let line: Vec<String> = v.iter().map(|&x| num(x)).collect();
                writeln!(out, "{}", line.join(" "))?;
            }
        }
        "array" => {
            let rows: Vec<String> = vectors
                .iter()
                .map(|v| {
                    format!(
                        "[{}]",
                        v.iter().map(|&x| num(x)).collect::<Vec<_>>().join(",")
                    )
                })
                .collect();
            writeln!(out, "[{}]", rows.join(","))?;
        }
        _ => {
            // json / json+: the OpenAI list shape llama-embedding prints
            writeln!(out, "{{\n  \"object\": \"list\",\n  \"data\": [")?;
            for (j, v) in vectors.iter().enumerate() {
                let vals: Vec<String> = v.iter().map(|&x| num(x)).collect();
                write!(
                    out,
                    "    {{\n      \"object\": \"embedding\",\n      \"index\": {j},\n      \"embedding\": [{}]\n    }}",
                    vals.join(",")
                )?;
                writeln!(out, "{}", if j + 1 < vectors.len() { "," } else { "" })?;
            }
            write!(out, "  ]")?;
            if format == "json+" && vectors.len() > 1 {
                writeln!(out, ",\n  \"cosineSimilarity\": [")?;
                for (i, a) in vectors.iter().enumerate() {
                    let row: Vec<String> = vectors
                        .iter()
                        .map(|b| format!("{:6.2}", cosine(a, b)))
                        .collect();
                    write!(out, "    [{} ]", row.join(", "))?;
                    writeln!(out, "{}", if i + 1 < vectors.len() { "," } else { "" })?;
                }
                write!(out, "  ]")?;
            }
            writeln!(out, "\n}}")?;
        }
    }
    Ok(())
}
