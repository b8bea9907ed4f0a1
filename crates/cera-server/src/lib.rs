//! `cera serve`: an OpenAI- and Ollama-compatible HTTP server over one loaded model.
//!
//! * One scheduler thread owns the model and runs the batched forward step over `-np` slots
//!   with continuous batching ([`scheduler`]); HTTP handlers (axum on tokio) tokenize and
//!   validate requests, queue them, and stream the scheduler's events back.
//! * OpenAI: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`
//!   ([`openai`]). Ollama: `/api/chat`, `/api/generate`, `/api/tags`, `/api/show`,
//!   `/api/version` ([`ollama`]). Embeddings: `POST /v1/embeddings`, Ollama's `/api/embed` and
//!   `/api/embeddings`, and `GET /lora-adapters` ([`embeddings`]). Operations: `/health`, `/metrics`, `/tokenize`,
//!   `/detokenize` ([`ops`]).
//! * The listener is up before the model is loaded: `/health` answers 503 `{"status":
//!   "loading"}` until it is ready, then 200 `{"status":"ok"}`, so a load balancer can probe
//!   it from the start. `--api-key` guards everything but `/health`.
//! * Errors are OpenAI-shaped JSON with a 4xx for anything the client sent wrong; nothing a
//!   request carries can panic the server, and a failing request never stops the scheduler.

pub mod audio;
mod chat_stream;
pub mod completions;
pub mod embeddings;
pub mod error;
mod media;
pub mod metrics;
pub mod ollama;
pub mod openai;
pub mod ops;
pub mod scheduler;
mod toolstream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cera::chat::ChatTemplate;
use cera::engine::{Engine, EngineOptions};
use cera::tools::ToolFormat;
use tower_http::cors::{AllowOrigin, CorsLayer};

pub use error::{ApiError, ServerError};

/// How to serve.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServerConfig {
    pub model_path: PathBuf,
    /// The name clients use (`model` in requests); the file stem when empty.
    pub model_name: String,
    pub host: String,
    pub port: u16,
    /// Slots: sequences decoded together.
    pub n_parallel: usize,
    /// Context in tokens over all slots (each gets `n_ctx / n_parallel`); 0: 4096 per slot.
    pub n_ctx: usize,
    pub n_threads: Option<usize>,
    /// Where the model runs (`--device`).
    pub device: cera::engine::DeviceKind,
    /// Tokens per forward step at most.
    pub n_batch: usize,
    /// Requests waiting for a slot at most; more get 503 with `Retry-After`.
    pub max_queue: usize,
    /// Per-request time limit (queue and generation), none when `None`.
    pub timeout: Option<Duration>,
    pub api_key: Option<String>,
    /// Origins allowed by CORS (`*` for any); empty: no CORS headers.
    pub cors_origins: Vec<String>,
    /// Request bodies larger than this are refused (413).
    pub body_limit: usize,
    /// After SIGTERM/SIGINT: how long in-flight requests may take before the process exits.
    pub shutdown_timeout: Duration,
    /// Bytes of prompt state kept in memory across slots (0: off; slots still reuse their own
    /// last context).
    pub cache_ram: usize,
    /// One JSON access-log line per request on stderr.
    pub access_log: bool,
    /// Prompt-lookup speculation per slot (`--spec ngram`): drafts, n-gram lengths.
    pub spec: Option<scheduler::SpecConfig>,
    /// KV cache types of every slot (f16 by default; `-ctk/-ctv`, `--kv-rotate`).
    pub kv: cera::backend::KvSpec,
    /// LoRA adapters loaded at start with their default scales (`--lora`, `--lora-scaled`);
    /// requests pick scales by id (`"lora": [{"id": 0, "scale": 0.5}]`).
    pub lora: Vec<(PathBuf, f32)>,
    /// Pooling of `/v1/embeddings` and `/api/embed`; `None`: the model's own, else mean.
    pub pooling: Option<cera::embed::Pooling>,
    /// The model's multimodal projector (an mmproj GGUF): requests may carry images or audio.
    pub mmproj: Option<PathBuf>,
    /// A Whisper GGUF served at `/v1/audio/transcriptions` and `/v1/audio/translations` next to
    /// the language model (a Whisper `model_path` serves speech alone).
    pub whisper: Option<PathBuf>,
}

impl ServerConfig {
    pub fn new(model_path: impl Into<PathBuf>) -> ServerConfig {
        ServerConfig {
            model_path: model_path.into(),
            model_name: String::new(),
            host: "127.0.0.1".into(),
            port: 8080,
            n_parallel: 4,
            n_ctx: 0,
            n_threads: None,
            device: cera::engine::DeviceKind::Cpu,
            n_batch: 512,
            max_queue: 64,
            timeout: Some(Duration::from_secs(600)),
            api_key: None,
            cors_origins: Vec::new(),
            body_limit: 8 << 20,
            shutdown_timeout: Duration::from_secs(10),
            cache_ram: 512 << 20,
            access_log: true,
            spec: None,
            kv: cera::backend::KvSpec::default(),
            lora: Vec::new(),
            pooling: None,
            mmproj: None,
            whisper: None,
        }
    }
}

/// What the handlers need once the model is loaded.
pub struct Ready {
    pub engine: Engine,
    pub template: ChatTemplate,
    pub tool_format: ToolFormat,
    pub scheduler: Arc<scheduler::Handle>,
    pub n_parallel: usize,
    /// Loaded LoRA adapters (by id: their index) and default scales.
    pub adapters: Vec<(Arc<cera::lora::LoraAdapter>, f32)>,
    /// The multimodal projector, when the server was started with one.
    pub mmproj: Option<Arc<cera::models::Mmproj>>,
    /// Encoded images and clips by their pixels or samples: a repeated one (the same picture
    /// in every turn of a conversation) is encoded once.
    pub media_cache: Arc<cera::session::MediaCache>,
}

/// A request's `lora` entry (llama-server's shape).
#[derive(Clone, Debug, serde::Deserialize)]
pub struct LoraRequest {
    pub id: usize,
    pub scale: f32,
}

impl Ready {
    /// The adapters a request runs with: every loaded one at its default scale, with the
    /// scales the request names by id (an unknown id is a 400).
    pub fn lora_set(&self, req: Option<&[LoraRequest]>) -> Result<cera::lora::LoraSet, ApiError> {
        let mut scales: Vec<f32> = self.adapters.iter().map(|(_, s)| *s).collect();
        for r in req.unwrap_or(&[]) {
            let n = scales.len();
            let s = scales.get_mut(r.id).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "lora id {} is not loaded ({n} adapters: ids 0..{n})",
                    r.id
                ))
                .param("lora")
            })?;
            if !r.scale.is_finite() {
                return Err(
                    ApiError::bad_request("lora scale must be a finite number").param("lora")
                );
            }
            *s = r.scale;
        }
        let mut set = cera::lora::LoraSet::default();
        for ((a, _), s) in self.adapters.iter().zip(scales) {
            set.attach(Arc::clone(a), s);
        }
        Ok(set)
    }
}

/// Shared by every handler.
pub struct AppState {
    pub cfg: ServerConfig,
    pub model_name: String,
    pub ready: OnceLock<Ready>,
    pub metrics: Arc<metrics::Metrics>,
    pub started: std::time::SystemTime,
    /// Set when the model failed to load: /health reports it.
    pub load_error: OnceLock<String>,
    /// The speech model, when one is served.
    pub whisper: OnceLock<Arc<audio::WhisperServe>>,
    /// Set when the served model is a Whisper model alone (no language model).
    pub speech_only: OnceLock<()>,
}

impl AppState {
    /// The loaded model, or 503 while loading.
    pub fn ready(&self) -> Result<&Ready, ApiError> {
        if self.speech_only.get().is_some() {
            return Err(ApiError::bad_request(format!(
                "this server serves the Whisper model '{}' alone: POST /v1/audio/transcriptions \
                 or /v1/audio/translations",
                self.model_name
            ))
            .code("model_not_supported"));
        }
        match self.ready.get() {
            Some(r) => Ok(r),
            None => Err(ApiError::unavailable("the model is loading", 5).code("loading")),
        }
    }

    /// Checks a request's `model` against the served name (absent or empty: the served one).
    pub fn check_model(&self, model: Option<&str>) -> Result<(), ApiError> {
        match model {
            None | Some("") => Ok(()),
            Some(m) if m == self.model_name || m == self.file_stem() => Ok(()),
            Some(m) => Err(ApiError::not_found(format!(
                "the model '{m}' is not served here (this server serves '{}')",
                self.model_name
            ))
            .code("model_not_found")
            .param("model")),
        }
    }

    fn file_stem(&self) -> String {
        self.cfg
            .model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

pub type Shared = Arc<AppState>;

/// The router over `state` (for tests that serve on their own listener).
pub fn router(state: Shared) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/models", get(openai::models))
        .route("/v1/models/{id}", get(openai::model))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/version", get(ollama::version))
        .route("/v1/embeddings", post(embeddings::openai))
        .route("/embeddings", post(embeddings::openai))
        .route("/api/embed", post(embeddings::ollama_embed))
        .route("/api/embeddings", post(embeddings::ollama_embeddings))
        .route("/lora-adapters", get(embeddings::lora_adapters))
        .route("/v1/rerank", post(embeddings::rerank))
        .route("/rerank", post(embeddings::rerank))
        .route("/metrics", get(ops::metrics))
        .route("/tokenize", post(ops::tokenize))
        .route("/detokenize", post(ops::detokenize))
        .merge(
            // audio files are larger than JSON bodies: OpenAI's limit (25 MiB) at least
            Router::new()
                .route("/v1/audio/transcriptions", post(audio::transcriptions))
                .route("/v1/audio/translations", post(audio::translations))
                .layer(axum::extract::DefaultBodyLimit::max(
                    state.cfg.body_limit.max(25 << 20),
                )),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            require_key,
        ));
    let mut app = Router::new()
        .route("/health", get(ops::health))
        .merge(api)
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(state.cfg.body_limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            access_log,
        ));
    if !state.cfg.cors_origins.is_empty() {
        let origins = if state.cfg.cors_origins.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(
                state
                    .cfg
                    .cors_origins
                    .iter()
                    .filter_map(|o| HeaderValue::from_str(o).ok()),
            )
        };
        app = app.layer(
            CorsLayer::new()
                .allow_origin(origins)
                .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
                .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION]),
        );
    }
    app.with_state(state)
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route for {} {}",
        req.method(),
        req.uri().path()
    ))
}

/// `--api-key`: a `Bearer` token (or `x-api-key`) must match.
async fn require_key(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.cfg.api_key {
        let h = req.headers();
        let bearer = h
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let x = h.get("x-api-key").and_then(|v| v.to_str().ok());
        if bearer != Some(key.as_str()) && x != Some(key.as_str()) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// Counts every request by endpoint and status, and writes one JSON line per request.
async fn access_log(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let t0 = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let r = next.run(req).await;
    let status = r.status().as_u16();
    // unknown paths share one label, so a scan cannot grow the registry
    let endpoint = if r.status() == StatusCode::NOT_FOUND && !known(&path) {
        "other".to_owned()
    } else {
        path.clone()
    };
    st.metrics.request(&endpoint, status);
    if st.cfg.access_log {
        eprintln!(
            "{}",
            serde_json::json!({
                "ts": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0),
                "method": method.as_str(), "path": path, "status": status,
                "ms": (t0.elapsed().as_secs_f64() * 1e4).round() / 10.0,
            })
        );
    }
    r
}

fn known(path: &str) -> bool {
    const KNOWN: [&str; 21] = [
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/health",
        "/metrics",
        "/tokenize",
        "/detokenize",
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
        "/api/chat",
        "/api/generate",
        "/api/tags",
        "/api/show",
        "/api/version",
        "/v1/embeddings",
        "/embeddings",
        "/api/embed",
        "/api/embeddings",
        "/lora-adapters",
        "/v1/rerank",
        "/rerank",
    ];
    KNOWN.contains(&path) || path.starts_with("/v1/models/")
}

/// Loads the model into `st` (the listener is already answering).
fn load(st: &AppState) -> Result<(), ServerError> {
    let cfg = &st.cfg;
    let threads = cfg
        .n_threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let load_whisper = |path: &std::path::Path| {
        audio::load(path, threads).map_err(|source| ServerError::Load {
            path: path.display().to_string(),
            source,
        })
    };
    if let Some(path) = &cfg.whisper {
        let _ = st.whisper.set(load_whisper(path)?);
    }
    let arch = cera::gguf::GgufFile::open(&cfg.model_path)
        .ok()
        .and_then(|f| f.architecture().ok().map(str::to_owned));
    if arch.as_deref() == Some("whisper") {
        if cfg.whisper.is_some() {
            return Err(ServerError::Config(
                "-m is a Whisper model and --whisper another: give one".into(),
            ));
        }
        let _ = st.whisper.set(load_whisper(&cfg.model_path)?);
        let _ = st.speech_only.set(());
        return Ok(());
    }
    let mut eo = EngineOptions::default();
    // the slots' sessions step together: on a GPU their caches share buffers per layer
    eo.n_seq_max = cfg.n_parallel;
    eo.n_threads = cfg.n_threads;
    eo.device = cfg.device;
    let engine = Engine::load(&cfg.model_path, eo).map_err(|source| ServerError::Load {
        path: cfg.model_path.display().to_string(),
        source,
    })?;
    if let Some(why) = engine.device_fallback() {
        eprintln!("device: CPU (no usable GPU: {why})");
    } else if engine.backend_name() != "CPU" {
        eprintln!("device: {}", engine.device_description());
    }
    engine
        .check_kv(cfg.kv.k, cfg.kv.v)
        .map_err(|source| ServerError::Load {
            path: cfg.model_path.display().to_string(),
            source,
        })?;
    let template = ChatTemplate::from_gguf(engine.gguf()).map_err(|source| ServerError::Load {
        path: cfg.model_path.display().to_string(),
        source,
    })?;
    let arch = engine.gguf().architecture().unwrap_or("").to_owned();
    let tool_format = ToolFormat::detect(template.source(), &arch);
    let n_parallel = cfg.n_parallel.max(1);
    let n_ctx_slot = if cfg.n_ctx == 0 {
        4096.min(engine.n_ctx_train())
    } else {
        (cfg.n_ctx / n_parallel).max(1)
    };
    let mut adapters = Vec::new();
    for (path, scale) in &cfg.lora {
        let a = engine.load_lora(path).map_err(|source| ServerError::Load {
            path: path.display().to_string(),
            source,
        })?;
        adapters.push((a, *scale));
    }
    let mmproj = match &cfg.mmproj {
        None => None,
        Some(path) => Some(Arc::new(engine.load_mmproj(path).map_err(|source| {
            ServerError::Load {
                path: path.display().to_string(),
                source,
            }
        })?)),
    };
    let prefix_cache =
        (cfg.cache_ram > 0).then(|| Arc::new(cera::state::PrefixCache::in_memory(cfg.cache_ram)));
    let handle = scheduler::start(
        engine.clone(),
        scheduler::SchedulerConfig {
            n_parallel,
            n_ctx_slot,
            n_batch: cfg.n_batch.max(1),
            max_queue: cfg.max_queue,
            prefix_cache,
            spec: cfg.spec.clone(),
            kv: cfg.kv,
        },
        Arc::clone(&st.metrics),
    );
    let _ = st.ready.set(Ready {
        engine,
        template,
        tool_format,
        scheduler: handle,
        n_parallel,
        adapters,
        mmproj,
        // 256 MiB of embeddings: some hundreds of images or minutes of audio
        media_cache: Arc::new(cera::session::MediaCache::new(256 << 20)),
    });
    Ok(())
}

/// Serves until SIGTERM or SIGINT; `on_ready` is called with the URL once the model is loaded.
pub async fn serve(
    cfg: ServerConfig,
    on_ready: impl FnOnce(&str) + Send + 'static,
) -> Result<(), ServerError> {
    if cfg.n_parallel == 0 {
        return Err(ServerError::Config("-np must be at least 1".into()));
    }
    let addr = format!("{}:{}", cfg.host, cfg.port);
    let sock: SocketAddr = tokio::net::lookup_host(&addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.clone(),
            source,
        })?
        .next()
        .ok_or_else(|| ServerError::Config(format!("{addr} resolves to nothing")))?;
    let listener = tokio::net::TcpListener::bind(sock)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let local = listener.local_addr()?;
    let model_name = if cfg.model_name.is_empty() {
        cfg.model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    } else {
        cfg.model_name.clone()
    };
    let shutdown_timeout = cfg.shutdown_timeout;
    let state = Arc::new(AppState {
        cfg,
        model_name,
        ready: OnceLock::new(),
        metrics: Arc::default(),
        started: std::time::SystemTime::now(),
        load_error: OnceLock::new(),
        whisper: OnceLock::new(),
        speech_only: OnceLock::new(),
    });
    let url = format!("http://{local}");
    let st = Arc::clone(&state);
    let loader = tokio::task::spawn_blocking(move || {
        let r = load(&st);
        match &r {
            Ok(()) => on_ready(&url),
            Err(e) => {
                let _ = st.load_error.set(e.to_string());
            }
        }
        r
    });
    let app = router(Arc::clone(&state));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, app).with_graceful_shutdown({
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    });
    let st = Arc::clone(&state);
    tokio::spawn(async move {
        shutdown_signal().await;
        eprintln!("cera: shutting down: finishing in-flight requests (up to {shutdown_timeout:?})");
        if let Some(r) = st.ready.get() {
            r.scheduler
                .shutdown
                .store(true, std::sync::atomic::Ordering::Release);
        }
        let _ = stop_tx.send(true);
        tokio::time::sleep(shutdown_timeout).await;
        eprintln!("cera: shutdown timeout reached; cancelling what is left");
        std::process::exit(0);
    });
    // a model that fails to load ends the server with that error
    let load_failed = async {
        match loader.await {
            Ok(Err(e)) => Err(e),
            _ => std::future::pending().await,
        }
    };
    tokio::select! {
        r = server => r.map_err(ServerError::Io),
        e = load_failed => e,
    }
}

/// [`serve`] on a runtime of its own (for the `cera serve` command).
pub fn run_blocking(
    cfg: ServerConfig,
    on_ready: impl FnOnce(&str) + Send + 'static,
) -> Result<(), ServerError> {
    tokio::runtime::Builder::new_multi_thread()
        // HTTP work is light; the model has its own threads
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(serve(cfg, on_ready))
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Seconds since the epoch, for `created` fields.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
