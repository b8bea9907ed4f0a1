//! Embeddings over HTTP: OpenAI's `POST /v1/embeddings` (also at `/embeddings`, as
//! llama-server has it), Ollama's `POST /api/embed` and its older `POST /api/embeddings`, and
//! `POST /v1/rerank` for rerankers, and `GET /lora-adapters` (llama-server's listing of the
//! loaded adapters).
//!
//! Texts of one request run together in batched forward passes (`Engine::embed`), on a
//! blocking thread beside the generation scheduler. One vector per input: the server's
//! `--pooling`, else the model's own pooling, else the mean over tokens; L2-normalized as
//! OpenAI and Ollama's `/api/embed` return them (the older `/api/embeddings` returns the raw
//! pooled vector, as Ollama does).

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value as Json, json};

use crate::error::ApiError;
use crate::openai::parse_body;
use crate::{LoraRequest, Ready, Shared};
use cera::embed::{EmbedOptions, Normalize, Pooling};

#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Input {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Deserialize, Debug)]
struct OpenAiRequest {
    model: Option<String>,
    input: Input,
    encoding_format: Option<String>,
    dimensions: Option<u64>,
    lora: Option<Vec<LoraRequest>>,
}

/// At most this many inputs per request (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

/// Tokenizes and checks the inputs: none empty, every id in the vocabulary, every input within
/// the training context (or cut to it when `truncate`).
fn tokens(r: &Ready, input: Input, param: &str, truncate: bool) -> Result<Vec<Vec<u32>>, ApiError> {
    let tok = r.engine.tokenizer();
    let mut v: Vec<Vec<u32>> = match input {
        Input::Text(t) => vec![tok.encode(&t, true, true)],
        Input::Texts(ts) => ts.iter().map(|t| tok.encode(t, true, true)).collect(),
        Input::Tokens(t) => vec![t],
        Input::TokenLists(l) => l,
    };
    if v.is_empty() {
        return Err(ApiError::bad_request(format!("{param} is an empty list")).param(param));
    }
    if v.len() > MAX_INPUTS {
        return Err(ApiError::bad_request(format!(
            "{param} has {} entries; at most {MAX_INPUTS} per request",
            v.len()
        ))
        .param(param));
    }
    let n_vocab = r.engine.n_vocab();
    let n_ctx = r.engine.n_ctx_train();
    for (i, t) in v.iter_mut().enumerate() {
        if t.is_empty() {
            return Err(ApiError::bad_request(format!("{param}[{i}] is empty")).param(param));
        }
        if let Some(bad) = t.iter().find(|&&x| x as usize >= n_vocab) {
            return Err(ApiError::bad_request(format!(
                "{param}[{i}]: token {bad} is past the vocabulary ({n_vocab})"
            ))
            .param(param));
        }
        if t.len() > n_ctx {
            if truncate {
                t.truncate(n_ctx);
            } else {
                return Err(ApiError::bad_request(format!(
                    "{param}[{i}] is {} tokens, more than the model's context of {n_ctx}",
                    t.len()
                ))
                .param(param)
                .code("context_length_exceeded"));
            }
        }
    }
    Ok(v)
}

/// The pooling requests get: one vector per input.
fn pooling(st: &crate::AppState, r: &Ready) -> Pooling {
    st.cfg.pooling.unwrap_or(match r.engine.default_pooling() {
        Pooling::None => Pooling::Mean,
        p => p,
    })
}

/// Runs the embedding off the async threads.
async fn run(
    r: &Ready,
    inputs: Vec<Vec<u32>>,
    opts: EmbedOptions,
) -> Result<cera::embed::Embeddings, ApiError> {
    let engine = r.engine.clone();
    tokio::task::spawn_blocking(move || engine.embed_tokens(&inputs, &opts))
        .await
        .map_err(|e| ApiError::internal(format!("the embedding task failed: {e}")))?
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Little-endian f32 bytes in base64 (OpenAI's `encoding_format: "base64"`).
fn base64_f32(v: &[f32]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for k in 0..4 {
            if k <= c.len() {
                out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub async fn openai(State(st): State<Shared>, body: Bytes) -> Result<axum::Json<Json>, ApiError> {
    let req: OpenAiRequest = parse_body(&body)?;
    st.check_model(req.model.as_deref())?;
    let r = st.ready()?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "encoding_format '{other}' is not float or base64"
            ))
            .param("encoding_format"));
        }
    };
    let n_embd = r.engine.gguf().architecture().ok().and_then(|a| {
        r.engine
            .gguf()
            .get_opt::<u64>(&cera::keys::arch_key(a, cera::keys::arch::EMBEDDING_LENGTH))
            .ok()
            .flatten()
    });
    if let Some(d) = req.dimensions
        && Some(d) != n_embd
    {
        return Err(ApiError::bad_request(format!(
            "dimensions {d}: this model's embeddings have {} dimensions and are not shortened",
            n_embd.unwrap_or(0)
        ))
        .param("dimensions"));
    }
    let inputs = tokens(r, req.input, "input", false)?;
    let mut opts = EmbedOptions::default();
    opts.pooling = Some(pooling(&st, r));
    opts.normalize = Normalize::Euclidean;
    opts.lora = r.lora_set(req.lora.as_deref())?;
    let e = run(r, inputs, opts).await?;
    let n_tokens: usize = e.items.iter().map(|i| i.tokens).sum();
    let data: Vec<Json> = e
        .items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let v = &it.vectors[0];
            let emb = if base64 {
                json!(base64_f32(v))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": emb})
        })
        .collect();
    Ok(axum::Json(json!({
        "object": "list",
        "data": data,
        "model": st.model_name,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    })))
}

#[derive(Deserialize, Debug)]
struct EmbedRequest {
    model: Option<String>,
    input: Input,
    truncate: Option<bool>,
    dimensions: Option<u64>,
}

pub async fn ollama_embed(
    State(st): State<Shared>,
    body: Bytes,
) -> Result<axum::Json<Json>, ApiError> {
    let t0 = Instant::now();
    let req: EmbedRequest = parse_body(&body)?;
    st.check_model(req.model.as_deref())?;
    let r = st.ready()?;
    if req.dimensions.is_some() {
        return Err(ApiError::bad_request("dimensions is not supported").param("dimensions"));
    }
    let inputs = tokens(r, req.input, "input", req.truncate.unwrap_or(true))?;
    let mut opts = EmbedOptions::default();
    opts.pooling = Some(pooling(&st, r));
    opts.lora = r.lora_set(None)?;
    let e = run(r, inputs, opts).await?;
    let n_tokens: usize = e.items.iter().map(|i| i.tokens).sum();
    let embeddings: Vec<&Vec<f32>> = e.items.iter().map(|i| &i.vectors[0]).collect();
    Ok(axum::Json(json!({
        "model": st.model_name,
        "embeddings": embeddings,
        "total_duration": t0.elapsed().as_nanos() as u64,
        "load_duration": 0,
        "prompt_eval_count": n_tokens,
    })))
}

#[derive(Deserialize, Debug)]
struct EmbeddingsRequest {
    model: Option<String>,
    prompt: String,
}

pub async fn ollama_embeddings(
    State(st): State<Shared>,
    body: Bytes,
) -> Result<axum::Json<Json>, ApiError> {
    let req: EmbeddingsRequest = parse_body(&body)?;
    st.check_model(req.model.as_deref())?;
    let r = st.ready()?;
    let inputs = tokens(r, Input::Text(req.prompt), "prompt", true)?;
    let mut opts = EmbedOptions::default();
    opts.pooling = Some(pooling(&st, r));
    opts.normalize = Normalize::None;
    opts.lora = r.lora_set(None)?;
    let e = run(r, inputs, opts).await?;
    Ok(axum::Json(json!({"embedding": e.items[0].vectors[0]})))
}

#[derive(Deserialize, Debug)]
struct RerankRequest {
    model: Option<String>,
    query: String,
    documents: Vec<String>,
    top_n: Option<usize>,
    #[serde(default)]
    return_documents: bool,
}

/// `POST /v1/rerank` (and `/rerank`), llama-server's and Jina/Cohere's shape: the documents
/// scored against the query by a reranker, best first.
pub async fn rerank(State(st): State<Shared>, body: Bytes) -> Result<axum::Json<Json>, ApiError> {
    let req: RerankRequest = parse_body(&body)?;
    st.check_model(req.model.as_deref())?;
    let r = st.ready()?;
    if !r.engine.has_rank_head() {
        return Err(ApiError::bad_request(
            "this model is not a reranker (it has no classifier head)",
        ));
    }
    if req.documents.is_empty() {
        return Err(ApiError::bad_request("documents is an empty list").param("documents"));
    }
    if let Some(i) = req.documents.iter().position(|d| d.is_empty()) {
        return Err(ApiError::bad_request(format!("documents[{i}] is empty")).param("documents"));
    }
    let engine = r.engine.clone();
    let (q, docs) = (req.query.clone(), req.documents.clone());
    let scores = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = docs.iter().map(|d| d.as_str()).collect();
        engine.rerank(&q, &refs, &EmbedOptions::default())
    })
    .await
    .map_err(|e| ApiError::internal(format!("the rerank task failed: {e}")))?
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]));
    order.truncate(req.top_n.unwrap_or(order.len()));
    let results: Vec<Json> = order
        .iter()
        .map(|&i| {
            let mut e = json!({"index": i, "relevance_score": scores[i]});
            if req.return_documents {
                e["document"] = json!({"text": req.documents[i]});
            }
            e
        })
        .collect();
    Ok(axum::Json(json!({
        "model": st.model_name,
        "object": "list",
        "results": results,
    })))
}

pub async fn lora_adapters(State(st): State<Shared>) -> Result<axum::Json<Json>, ApiError> {
    let r = st.ready()?;
    let list: Vec<Json> = r
        .adapters
        .iter()
        .enumerate()
        .map(|(i, (a, s))| json!({"id": i, "path": a.name, "scale": s}))
        .collect();
    Ok(axum::Json(json!(list)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_of_floats() {
        // 1.0f32 = 00 00 80 3f
        assert_eq!(super::base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(super::base64_f32(&[1.0, 2.0]), "AACAPwAAAEA=");
        assert_eq!(super::base64_f32(&[]), "");
    }
}
