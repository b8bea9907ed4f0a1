//! `cera serve`: the OpenAI- and Ollama-compatible server (crate `cera-server`).

use std::time::Duration;

use anyhow::Context;
use cera_server::ServerConfig;

use crate::common::resolve_model;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file or catalog name; the default model (fetched on first use) when omitted.
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// The name clients give as `model` (default: the file name without .gguf).
    #[arg(short = 'a', long = "alias")]
    pub alias: Option<String>,
    /// Address to listen on (loopback by default; 0.0.0.0 for every interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Slots: requests decoded together.
    #[arg(long = "np", visible_alias = "parallel", default_value_t = 4)]
    pub n_parallel: usize,
    /// Context size over all slots (each gets -c / -np; 0: 4096 per slot).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    pub ctx_size: usize,
    /// Compute threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Where the model runs: cpu, gpu or auto.
    #[arg(long = "device", default_value = "cpu")]
    pub device: cera::engine::DeviceKind,
    /// Tokens per forward step at most (decodes first, then prompt chunks).
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    pub batch: usize,
    /// Requests waiting for a slot at most; more get 503 with Retry-After.
    #[arg(long = "max-queue", default_value_t = 64)]
    pub max_queue: usize,
    /// Seconds a request may take, queue included (0: no limit).
    #[arg(long = "timeout", default_value_t = 600)]
    pub timeout: u64,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health (or CERA_API_KEY).
    #[arg(long = "api-key", env = "CERA_API_KEY")]
    pub api_key: Option<String>,
    /// Allow cross-origin requests from this origin (`*` for any; repeatable).
    #[arg(long = "cors")]
    pub cors: Vec<String>,
    /// Largest request body in bytes.
    #[arg(long = "body-limit", default_value_t = 8 << 20)]
    pub body_limit: usize,
    /// Seconds in-flight requests get to finish after SIGTERM/SIGINT.
    #[arg(long = "shutdown-timeout", default_value_t = 10)]
    pub shutdown_timeout: u64,
    /// MiB of prompt state shared across slots through the prefix cache (0: off).
    #[arg(long = "cache-ram", default_value_t = 512)]
    pub cache_ram: usize,
    /// No access-log line per request on stderr.
    #[arg(long = "no-access-log")]
    pub no_access_log: bool,
    #[command(flatten)]
    pub spec: crate::spec_args::SpecArgs,
    #[command(flatten)]
    pub kv: crate::gen_args::KvArgs,
    #[command(flatten)]
    pub lora: crate::gen_args::LoraArgs,
    /// Pooling of /v1/embeddings and /api/embed: mean, cls or last (default: the model's own,
    /// else mean).
    #[arg(long = "pooling")]
    pub pooling: Option<String>,
    /// The model's multimodal projector (an mmproj GGUF): requests may carry images (OpenAI
    /// `image_url` data URLs, Ollama `images`) or audio (OpenAI `input_audio`).
    #[arg(long)]
    pub mmproj: Option<std::path::PathBuf>,
    /// A Whisper GGUF (`cera convert` of a Whisper model) served at OpenAI's
    /// /v1/audio/transcriptions and /v1/audio/translations next to the model (a Whisper -m
    /// serves speech alone).
    #[arg(long = "whisper", value_name = "GGUF")]
    pub whisper: Option<String>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let path = resolve_model(a.model.as_deref())?;
    let mut cfg = ServerConfig::new(&path);
    cfg.model_name = a.alias.unwrap_or_default();
    cfg.host = a.host;
    cfg.port = a.port;
    cfg.n_parallel = a.n_parallel;
    cfg.n_ctx = a.ctx_size;
    cfg.n_threads = a.threads;
    cfg.device = a.device;
    cfg.n_batch = a.batch;
    cfg.max_queue = a.max_queue;
    cfg.timeout = (a.timeout > 0).then(|| Duration::from_secs(a.timeout));
    cfg.api_key = a.api_key.filter(|k| !k.is_empty());
    cfg.cors_origins = a.cors;
    cfg.body_limit = a.body_limit;
    cfg.shutdown_timeout = Duration::from_secs(a.shutdown_timeout);
    cfg.cache_ram = a.cache_ram << 20;
    cfg.kv = a.kv.spec();
    cfg.lora = a
        .lora
        .lora
        .iter()
        .map(|p| (p.clone(), 1.0))
        .chain(a.lora.lora_scaled.iter().cloned())
        .collect();
    cfg.pooling = match a.pooling.as_deref() {
        None => None,
        Some(p) => match cera::embed::Pooling::from_name(p)? {
            cera::embed::Pooling::None => anyhow::bail!(
                "--pooling none gives one vector per token; the embedding endpoints return one                  per input (use mean, cls or last)"
            ),
            p => Some(p),
        },
    };
    cfg.access_log = !a.no_access_log;
    cfg.mmproj = a.mmproj;
    cfg.whisper = match &a.whisper {
        Some(w) => Some(resolve_model(Some(w))?),
        None => None,
    };
    cfg.spec = match a.spec.spec.as_str() {
        "off" => None,
        "ngram" => {
            // the same checks as `cera run --spec ngram`
            a.spec.check_ngram()?;
            Some(cera_server::scheduler::SpecConfig {
                options: a.spec.options(),
                ngram_min: a.spec.ngram_min,
                ngram_max: a.spec.ngram_max,
            })
        }
        other => anyhow::bail!(
            "--spec {other} is not available in the server yet (--spec ngram is: prompt lookup per slot)"
        ),
    };
    let np = cfg.n_parallel;
    eprintln!("cera: loading {} ({np} slots)", path.display());
    cera_server::run_blocking(cfg, move |url| {
        // stdout: the URL alone, for scripts waiting on it
        println!("{url}");
        eprintln!("cera: serving at {url} (OpenAI: {url}/v1, Ollama: {url}/api)");
    })
    .context("cera serve")
}
