//! Operations: `/health` (open even with an API key), `/metrics` (Prometheus text),
//! `/tokenize`, `/detokenize` (llama-server's shapes).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::Shared;
use crate::error::ApiError;
use crate::openai::parse_body;

pub async fn health(State(st): State<Shared>) -> Response {
    if let Some(e) = st.load_error.get() {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"status": "error", "error": e})),
        )
            .into_response();
    }
    if st.speech_only.get().is_some() {
        return axum::Json(json!({"status": "ok"})).into_response();
    }
    match st.ready.get() {
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "loading"})),
        )
            .into_response(),
        Some(r) => {
            let busy = r.scheduler.busy.load(std::sync::atomic::Ordering::Relaxed);
            axum::Json(json!({
                "status": "ok",
                "slots_idle": r.n_parallel.saturating_sub(busy),
                "slots_busy": busy,
            }))
            .into_response()
        }
    }
}

pub async fn metrics(State(st): State<Shared>) -> Response {
    let (busy, slots, queued, cap) = match st.ready.get() {
        Some(r) => {
            let s = &r.scheduler;
            let ld =
                |a: &std::sync::atomic::AtomicUsize| a.load(std::sync::atomic::Ordering::Relaxed);
            (
                ld(&s.busy),
                r.n_parallel,
                ld(&s.queued),
                r.n_parallel * s.n_ctx_slot,
            )
        }
        None => (0, 0, 0, 0),
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        st.metrics.render(busy, slots, queued, cap),
    )
        .into_response()
}

#[derive(Deserialize)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default = "yes")]
    parse_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

fn yes() -> bool {
    true
}

pub async fn tokenize(
    State(st): State<Shared>,
    body: Bytes,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let req: TokenizeRequest = parse_body(&body)?;
    let r = st.ready()?;
    let tok = r.engine.tokenizer();
    let ids = tok.encode(&req.content, req.add_special, req.parse_special);
    if req.with_pieces {
        let tokens: Vec<_> = ids
            .iter()
            .map(|&id| {
                let b = tok.token_bytes(id);
                match std::str::from_utf8(b) {
                    Ok(s) => json!({"id": id, "piece": s}),
                    Err(_) => json!({"id": id, "piece": b}),
                }
            })
            .collect();
        return Ok(axum::Json(json!({ "tokens": tokens })));
    }
    Ok(axum::Json(json!({ "tokens": ids })))
}

#[derive(Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
}

pub async fn detokenize(
    State(st): State<Shared>,
    body: Bytes,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let req: DetokenizeRequest = parse_body(&body)?;
    let r = st.ready()?;
    let n = r.engine.n_vocab();
    if let Some(bad) = req.tokens.iter().find(|&&t| t as usize >= n) {
        return Err(
            ApiError::bad_request(format!("token {bad} is past the vocabulary ({n})"))
                .param("tokens"),
        );
    }
    Ok(axum::Json(
        json!({ "content": r.engine.tokenizer().decode(&req.tokens) }),
    ))
}
