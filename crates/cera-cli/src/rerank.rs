//! `cera rerank`: relevance scores of documents for a query with a reranker (a BERT-style
//! cross-encoder with a classifier head: rank pooling, as `llama-embedding --pooling rank`).

use std::path::PathBuf;

use anyhow::{Context, bail};
use cera::embed::EmbedOptions;
use cera::engine::Engine;

use crate::common::resolve_model;

#[derive(clap::Args)]
pub struct Args {
    /// The reranker model (a GGUF with `cls` / `cls.output` tensors).
    #[arg(short = 'm', long = "model")]
    model: Option<String>,
    /// Where the model runs: cpu, gpu or auto.
    #[arg(long = "device", default_value = "cpu")]
    device: cera::engine::DeviceKind,
    /// The query.
    #[arg(short = 'q', long = "query")]
    query: String,
    /// The documents, one per line.
    #[arg(short = 'd', long = "documents")]
    documents: PathBuf,
    /// Print only the best N.
    #[arg(long = "top-n")]
    top_n: Option<usize>,
    /// Print `{"results": [{"index", "relevance_score", "document"}]}` (llama-server's /rerank
    /// shape) instead of lines.
    #[arg(long)]
    json: bool,
    /// Compute threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&a.documents)
        .with_context(|| format!("reading {}", a.documents.display()))?;
    let docs: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if docs.is_empty() {
        bail!("{} has no documents (one per line)", a.documents.display());
    }
    let path = resolve_model(a.model.as_deref())?;
    let mut eo = cera::engine::EngineOptions::default();
    eo.n_threads = a.threads;
    eo.device = a.device;
    let engine = Engine::load(&path, eo).with_context(|| format!("loading {}", path.display()))?;
    crate::common::report_device(&engine);
    let scores = engine.rerank(&a.query, &docs, &EmbedOptions::default())?;
    let mut order: Vec<usize> = (0..docs.len()).collect();
    order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]));
    order.truncate(a.top_n.unwrap_or(docs.len()));
    if a.json {
        let results: Vec<serde_json::Value> = order
            .iter()
            .map(|&i| serde_json::json!({"index": i, "relevance_score": scores[i], "document": docs[i]}))
            .collect();
        println!("{}", serde_json::json!({ "results": results }));
    } else {
        for &i in &order {
            println!("{:>9.4}\t{i}\t{}", scores[i], docs[i]);
        }
    }
    Ok(())
}
