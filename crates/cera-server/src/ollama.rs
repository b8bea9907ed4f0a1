//! The Ollama API, so Ollama clients work unchanged: `POST /api/chat`, `POST /api/generate`
//! (NDJSON streaming by default, `options`, `format` "json" or a JSON Schema, the final
//! chunk's counts and durations in nanoseconds), `GET /api/tags`, `POST /api/show`,
//! `GET /api/version`. A model name may carry a tag (`name:latest`).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use cera::chat::{Message, RenderOptions};
use cera::grammar::{Grammar, GrammarConstraint, json_schema};
use cera::session::GenerateOptions;
use serde::Deserialize;
use serde_json::{Value as Json, json};

use crate::error::ApiError;
use crate::openai::{Collected, Sampling, Stop, async_stream, collect, parse_body, submit};
use crate::scheduler::{Done, Event};
use crate::{Ready, Shared, unix_now};

#[derive(Deserialize, Debug, Default)]
struct Options {
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    min_p: Option<f32>,
    seed: Option<u64>,
    num_predict: Option<i64>,
    stop: Option<Stop>,
    repeat_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
}

impl Options {
    fn generate(
        &self,
        r: &crate::Ready,
        format: &Option<Json>,
    ) -> Result<GenerateOptions, ApiError> {
        let s = Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            seed: self.seed,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repeat_penalty: self.repeat_penalty,
            logit_bias: None,
        };
        let mut o = GenerateOptions::default();
        o.sampler = s.config(r.engine.n_vocab())?;
        // Ollama: -1 (or absent) is unlimited
        o.max_tokens = self.num_predict.filter(|&n| n > 0).unwrap_or(0) as usize;
        o.stop = self.stop.clone().map(Stop::into_vec).unwrap_or_default();
        o.grammar = match format {
            None | Some(Json::Null) => None,
            Some(Json::String(s)) if s.is_empty() => None,
            Some(Json::String(s)) if s == "json" => {
                Some(GrammarConstraint::new(Arc::new(Grammar::json())))
            }
            Some(schema @ Json::Object(_)) => {
                let c = json_schema::compile(schema).map_err(|e| {
                    ApiError::bad_request(format!("format: invalid JSON schema: {e}"))
                        .param("format")
                })?;
                Some(GrammarConstraint::new(Arc::new(c.grammar)))
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "format must be \"json\" or a JSON schema object, not {other}"
                ))
                .param("format"));
            }
        };
        Ok(o)
    }
}

fn check_model(st: &crate::AppState, model: &str) -> Result<(), ApiError> {
    let base = model.strip_suffix(":latest").unwrap_or(model);
    st.check_model(Some(base))
}

/// RFC 3339 UTC time, as Ollama's `created_at`.
fn rfc3339_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil date from days since 1970-01-01 (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + (month <= 2) as i64;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_nanos()
    )
}

fn ns(t: std::time::Duration) -> u64 {
    t.as_nanos() as u64
}

fn final_fields(d: &Done, v: &mut Json) {
    v["done"] = json!(true);
    v["done_reason"] = json!(crate::openai::finish_reason(d.finish, false));
    v["total_duration"] = json!(ns(d.queued + d.prefill + d.decode));
    v["load_duration"] = json!(0);
    v["prompt_eval_count"] = json!(d.prompt_tokens);
    v["prompt_eval_duration"] = json!(ns(d.prefill));
    v["eval_count"] = json!(d.completion_tokens);
    v["eval_duration"] = json!(ns(d.decode));
}

fn ndjson(
    stream: impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response()
}

fn line(v: &Json) -> Result<Bytes, Infallible> {
    let mut s = v.to_string();
    s.push('\n');
    Ok(Bytes::from(s))
}

/// Ollama's `images` (base64 strings), decoded; `null` or absent is none.
fn take_images(
    r: &Ready,
    v: Option<Json>,
    what: &str,
) -> Result<Vec<cera::media::MediaInput>, ApiError> {
    match v {
        None | Some(Json::Null) => Ok(Vec::new()),
        Some(Json::Array(a)) if a.is_empty() => Ok(Vec::new()),
        Some(Json::Array(a)) => {
            crate::media::need_mmproj(r, what)?;
            a.iter()
                .enumerate()
                .map(|(j, b)| match b.as_str() {
                    Some(s) => crate::media::base64_image(s, &format!("{what}[{j}]")),
                    None => Err(ApiError::bad_request(format!(
                        "{what}[{j}] is not a base64 string"
                    ))),
                })
                .collect()
        }
        Some(_) => Err(ApiError::bad_request(format!(
            "{what} is not an array of base64 strings"
        ))),
    }
}

#[derive(Deserialize, Debug)]
struct ChatRequest {
    model: String,
    messages: Vec<Json>,
    stream: Option<bool>,
    format: Option<Json>,
    #[serde(default)]
    options: Options,
    tools: Option<Json>,
}

pub async fn chat(State(st): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let req: ChatRequest = parse_body(&body)?;
    check_model(&st, &req.model)?;
    let r = st.ready()?;
    let mut msgs = Vec::with_capacity(req.messages.len());
    let mut images = Vec::new();
    for (i, m) in req.messages.iter().enumerate() {
        let mut m = m.clone();
        // a message's images go before its text, one marker each (as llama-mtmd-cli does)
        let imgs = take_images(
            r,
            m.as_object_mut().and_then(|o| o.remove("images")),
            &format!("messages[{i}].images"),
        )?;
        if !imgs.is_empty() {
            let text = m
                .get("content")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_owned();
            m["content"] = Json::String(crate::media::MEDIA_MARKER.repeat(imgs.len()) + &text);
            images.extend(imgs);
        }
        let msg: Message = serde_json::from_value(m)
            .map_err(|e| ApiError::bad_request(format!("messages[{i}]: {e}")).param("messages"))?;
        msgs.push(msg);
    }
    if msgs.is_empty() {
        return Err(ApiError::bad_request("messages must not be empty").param("messages"));
    }
    let tools = match &req.tools {
        Some(t) => cera::tools::parse_tools(t).map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => Vec::new(),
    };
    let mut ro = RenderOptions::new().add_generation_prompt(true);
    if !tools.is_empty() {
        ro = ro.tools(cera::tools::tools_value(&tools));
    }
    let prompt = r.template.render(&msgs, &ro)?;
    let toks = crate::media::prompt(r, prompt, images).await?;
    let opts = req.options.generate(r, &req.format)?;
    let rx = submit(&st, r, toks, opts, None, r.lora_set(None)?, 1)?;
    let model = req.model.clone();
    let format = r.tool_format;
    let with_tools = !tools.is_empty();
    let parse = move |text: &str| -> (String, Json) {
        if tools.is_empty() {
            return (text.to_owned(), Json::Null);
        }
        match cera::tools::parse_reply(format, text) {
            Ok(p) if !p.calls.is_empty() => (
                p.content,
                Json::Array(
                    p.calls
                        .iter()
                        .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}}))
                        .collect(),
                ),
            ),
            _ => (text.to_owned(), Json::Null),
        }
    };
    if !req.stream.unwrap_or(true) {
        let c: Collected = collect(rx).await?;
        let (content, calls) = parse(&c.text);
        let mut message = json!({"role": "assistant", "content": content});
        if !calls.is_null() {
            message["tool_calls"] = calls;
        }
        let mut v = json!({"model": model, "created_at": rfc3339_now(), "message": message});
        final_fields(&c.done, &mut v);
        return Ok(axum::Json(v).into_response());
    }
    let stream = async_stream(move |tx| async move {
        let mut rx = rx;
        let mut held = String::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Token { text, .. } => {
                    if with_tools {
                        // calls are only known whole: hold the text, send it at the end
                        held.push_str(&text);
                        continue;
                    }
                    if text.is_empty() {
                        continue;
                    }
                    let v = json!({"model": model, "created_at": rfc3339_now(),
                                   "message": {"role": "assistant", "content": text}, "done": false});
                    if tx.send(line(&v)).is_err() {
                        return;
                    }
                }
                Event::Done(d) => {
                    let (content, calls) = parse(&held);
                    if !content.is_empty() || !calls.is_null() {
                        let mut message = json!({"role": "assistant", "content": content});
                        if !calls.is_null() {
                            message["tool_calls"] = calls;
                        }
                        let v = json!({"model": model, "created_at": rfc3339_now(), "message": message, "done": false});
                        let _ = tx.send(line(&v));
                    }
                    let mut v = json!({"model": model, "created_at": rfc3339_now(),
                                       "message": {"role": "assistant", "content": ""}});
                    final_fields(&d, &mut v);
                    let _ = tx.send(line(&v));
                    return;
                }
                Event::Error(e) => {
                    let _ = tx.send(line(&json!({"error": e})));
                    return;
                }
            }
        }
    });
    Ok(ndjson(stream))
}

#[derive(Deserialize, Debug)]
struct GenerateRequest {
    model: String,
    #[serde(default)]
    prompt: String,
    system: Option<String>,
    #[serde(default)]
    raw: bool,
    stream: Option<bool>,
    format: Option<Json>,
    #[serde(default)]
    options: Options,
    images: Option<Json>,
}

pub async fn generate(State(st): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let req: GenerateRequest = parse_body(&body)?;
    check_model(&st, &req.model)?;
    let r = st.ready()?;
    if req.prompt.is_empty() {
        // Ollama's "load the model" call
        return Ok(
            axum::Json(json!({"model": req.model, "created_at": rfc3339_now(),
            "response": "", "done": true, "done_reason": "load"}))
            .into_response(),
        );
    }
    let images = take_images(r, req.images.clone(), "images")?;
    // the images go before the prompt, one marker each, unless it places them
    let user = if images.is_empty() || req.prompt.contains(crate::media::MEDIA_MARKER) {
        req.prompt.clone()
    } else {
        crate::media::MEDIA_MARKER.repeat(images.len()) + &req.prompt
    };
    let prompt = if req.raw {
        user
    } else {
        let mut msgs = Vec::new();
        if let Some(s) = &req.system {
            msgs.push(Message::system(s.clone()));
        }
        msgs.push(Message::user(user));
        r.template
            .render(&msgs, &RenderOptions::new().add_generation_prompt(true))?
    };
    let toks = crate::media::prompt(r, prompt, images).await?;
    let opts = req.options.generate(r, &req.format)?;
    let rx = submit(&st, r, toks, opts, None, r.lora_set(None)?, 1)?;
    let model = req.model.clone();
    if !req.stream.unwrap_or(true) {
        let c = collect(rx).await?;
        let mut v = json!({"model": model, "created_at": rfc3339_now(), "response": c.text});
        final_fields(&c.done, &mut v);
        return Ok(axum::Json(v).into_response());
    }
    let stream = async_stream(move |tx| async move {
        let mut rx = rx;
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Token { text, .. } => {
                    if text.is_empty() {
                        continue;
                    }
                    let v = json!({"model": model, "created_at": rfc3339_now(), "response": text, "done": false});
                    if tx.send(line(&v)).is_err() {
                        return;
                    }
                }
                Event::Done(d) => {
                    let mut v =
                        json!({"model": model, "created_at": rfc3339_now(), "response": ""});
                    final_fields(&d, &mut v);
                    let _ = tx.send(line(&v));
                    return;
                }
                Event::Error(e) => {
                    let _ = tx.send(line(&json!({"error": e})));
                    return;
                }
            }
        }
    });
    Ok(ndjson(stream))
}

fn details(r: &crate::Ready) -> Json {
    let g = r.engine.gguf();
    let arch = g.architecture().unwrap_or("").to_owned();
    let n_params: u64 = g.tensors.iter().map(|t| t.n_elements()).sum();
    let quant = g
        .get_opt::<u32>("general.file_type")
        .ok()
        .flatten()
        .map(|t| format!("file type {t}"))
        .unwrap_or_default();
    json!({
        "parent_model": "", "format": "gguf", "family": arch, "families": [arch],
        "parameter_size": format!("{:.0}M", n_params as f64 / 1e6),
        "quantization_level": quant,
    })
}

pub async fn tags(State(st): State<Shared>) -> Result<axum::Json<Json>, ApiError> {
    let r = st.ready()?;
    let size = r.engine.gguf().file_size();
    Ok(axum::Json(json!({"models": [{
        "name": format!("{}:latest", st.model_name),
        "model": format!("{}:latest", st.model_name),
        "modified_at": rfc3339_now(),
        "size": size,
        "digest": r.engine.fingerprint().to_string(),
        "details": details(r),
    }]})))
}

#[derive(Deserialize)]
struct ShowRequest {
    #[serde(alias = "name")]
    model: String,
}

pub async fn show(State(st): State<Shared>, body: Bytes) -> Result<axum::Json<Json>, ApiError> {
    let req: ShowRequest = parse_body(&body)?;
    check_model(&st, &req.model)?;
    let r = st.ready()?;
    let g = r.engine.gguf();
    let mut info = serde_json::Map::new();
    for (k, v) in &g.metadata {
        if k.starts_with("tokenizer.ggml.") {
            continue; // the vocabulary would dwarf everything else
        }
        let val = match v.as_str() {
            Some(s) => json!(s),
            None => match (v.as_int(), v.as_f64()) {
                (Some(i), _) => json!(i as i64),
                (None, Some(f)) => json!(f),
                _ => json!(v.type_desc()),
            },
        };
        info.insert(k.clone(), val);
    }
    let mut caps = vec!["completion"];
    if r.template.source().contains("tools") {
        caps.push("tools");
    }
    Ok(axum::Json(json!({
        "modelfile": format!("FROM {}\n", st.cfg.model_path.display()),
        "parameters": "",
        "template": r.template.source(),
        "details": details(r),
        "model_info": info,
        "capabilities": caps,
        "modified_at": rfc3339_now(),
        "created": unix_now(),
    })))
}

pub async fn version() -> axum::Json<Json> {
    axum::Json(json!({"version": env!("CARGO_PKG_VERSION")}))
}
