//! The OpenAI API: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`.
//!
//! Requests are parsed strictly where it matters (a known field of the wrong type, a
//! malformed body, `n` > 1, an invalid schema or tool choice: 400 naming it) and leniently
//! elsewhere (unknown fields are ignored, as OpenAI's clients send extras). Sampling follows
//! llama-server's defaults when a field is absent; `top_k`, `min_p`, `repeat_penalty` are
//! accepted as extensions.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cera::chat::{Message, RenderOptions, ToolCall};
use cera::grammar::{Grammar, GrammarConstraint, json_schema};
use cera::sample::SamplerConfig;
use cera::session::{FinishReason, GenerateOptions, TokenLogprobs};
use cera::tools::{Tool, ToolFormat};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{Value as Json, json};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::error::ApiError;
use crate::scheduler::{Done, Event, Job, Refused};
use crate::{Ready, Shared, unix_now};

/// Parses a JSON body, or says where it is wrong: the syntax error's place, or the known
/// field whose value has the wrong type.
pub(crate) fn parse_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty; send a JSON object",
        ));
    }
    let v: Json = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    let Some(obj) = v.as_object() else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    for (name, want) in FIELD_TYPES {
        let Some(x) = obj.get(*name) else { continue };
        let ok = match want {
            _ if x.is_null() => true,
            Kind::Number => x.is_number(),
            Kind::Integer => x.is_u64() || x.is_i64(),
            Kind::Bool => x.is_boolean(),
            Kind::Str => x.is_string(),
            Kind::Array => x.is_array(),
            Kind::Object => x.is_object(),
            Kind::StrOrArray => x.is_string() || x.is_array(),
            Kind::StrOrObject => x.is_string() || x.is_object(),
            Kind::BoolOrInteger => x.is_boolean() || x.is_u64(),
        };
        if !ok {
            return Err(ApiError::bad_request(format!(
                "{name} must be {}, not {}",
                want.name(),
                json_kind(x)
            ))
            .param(name));
        }
    }
    serde_json::from_value(v).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not valid for this endpoint: {e}"
        ))
    })
}

#[derive(Clone, Copy)]
enum Kind {
    Number,
    Integer,
    Bool,
    Str,
    Array,
    Object,
    StrOrArray,
    StrOrObject,
    BoolOrInteger,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Number => "a number",
            Kind::Integer => "an integer",
            Kind::Bool => "true or false",
            Kind::Str => "a string",
            Kind::Array => "an array",
            Kind::Object => "an object",
            Kind::StrOrArray => "a string or an array",
            Kind::StrOrObject => "a string or an object",
            Kind::BoolOrInteger => "a boolean (chat) or an integer (completions)",
        }
    }
}

fn json_kind(x: &Json) -> &'static str {
    match x {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// The known fields of every endpoint and their JSON types.
const FIELD_TYPES: &[(&str, Kind)] = &[
    ("model", Kind::Str),
    ("lora", Kind::Array),
    ("input", Kind::StrOrArray),
    ("encoding_format", Kind::Str),
    ("dimensions", Kind::Integer),
    ("messages", Kind::Array),
    ("stream", Kind::Bool),
    ("stream_options", Kind::Object),
    ("max_tokens", Kind::Integer),
    ("max_completion_tokens", Kind::Integer),
    ("temperature", Kind::Number),
    ("top_p", Kind::Number),
    ("top_k", Kind::Integer),
    ("min_p", Kind::Number),
    ("seed", Kind::Integer),
    ("presence_penalty", Kind::Number),
    ("frequency_penalty", Kind::Number),
    ("repeat_penalty", Kind::Number),
    ("logit_bias", Kind::Object),
    ("stop", Kind::StrOrArray),
    ("logprobs", Kind::BoolOrInteger),
    ("top_logprobs", Kind::Integer),
    ("response_format", Kind::Object),
    ("tools", Kind::Array),
    ("tool_choice", Kind::StrOrObject),
    ("n", Kind::Integer),
    ("echo", Kind::Bool),
    ("ignore_eos", Kind::Bool),
    ("options", Kind::Object),
    ("raw", Kind::Bool),
    ("system", Kind::Str),
    ("content", Kind::Str),
    ("tokens", Kind::Array),
];

/// `stop` as a string or a list of strings.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub(crate) enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// The sampling fields both endpoints share.
#[derive(Deserialize, Debug, Default, Clone)]
pub(crate) struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub seed: Option<u64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub logit_bias: Option<HashMap<String, f32>>,
}

impl Sampling {
    pub fn config(&self, n_vocab: usize) -> Result<SamplerConfig, ApiError> {
        let mut c = SamplerConfig::default();
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(
                    ApiError::bad_request(format!("temperature {t} is outside 0..2"))
                        .param("temperature"),
                );
            }
            c.temperature = t;
        }
        if let Some(p) = self.top_p {
            c.top_p = p;
        }
        if let Some(k) = self.top_k {
            c.top_k = k.max(0) as usize;
        }
        if let Some(m) = self.min_p {
            c.min_p = m;
        }
        for (v, name) in [
            (self.presence_penalty, "presence_penalty"),
            (self.frequency_penalty, "frequency_penalty"),
        ] {
            if let Some(v) = v
                && !(-2.0..=2.0).contains(&v)
            {
                return Err(
                    ApiError::bad_request(format!("{name} {v} is outside -2..2")).param(name),
                );
            }
        }
        c.presence_penalty = self.presence_penalty.unwrap_or(0.0);
        c.frequency_penalty = self.frequency_penalty.unwrap_or(0.0);
        if let Some(r) = self.repeat_penalty {
            c.repeat_penalty = r;
        }
        if let Some(b) = &self.logit_bias {
            for (k, v) in b {
                let id: u32 = k.parse().map_err(|_| {
                    ApiError::bad_request(format!("logit_bias key {k:?} is not a token id"))
                        .param("logit_bias")
                })?;
                if id as usize >= n_vocab {
                    return Err(ApiError::bad_request(format!(
                        "logit_bias token {id} is past the vocabulary ({n_vocab})"
                    ))
                    .param("logit_bias"));
                }
                // OpenAI's -100 bans a token
                c.logit_bias
                    .push((id, if *v <= -100.0 { f32::NEG_INFINITY } else { *v }));
            }
        }
        c.seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
        });
        // the core's ranges (top_p, min_p within [0, 1], repeat_penalty positive, …), checked
        // where every generation checks them; OpenAI's tighter ones above
        c.check()
            .map_err(|b| ApiError::bad_request(b.to_string()).param(b.field))?;
        Ok(c)
    }
}

#[derive(Deserialize, Debug)]
pub(crate) struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Deserialize, Debug)]
pub(crate) struct ResponseFormat {
    #[serde(rename = "type")]
    kind: String,
    json_schema: Option<JsonSchemaFormat>,
}

#[derive(Deserialize, Debug)]
struct JsonSchemaFormat {
    schema: Option<Json>,
}

#[derive(Deserialize, Debug)]
struct ChatRequest {
    model: Option<String>,
    messages: Vec<Json>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    #[serde(flatten)]
    sampling: Sampling,
    stop: Option<Stop>,
    #[serde(default)]
    logprobs: bool,
    top_logprobs: Option<u32>,
    response_format: Option<ResponseFormat>,
    tools: Option<Json>,
    tool_choice: Option<Json>,
    n: Option<u32>,
    /// llama-server's extension: keep going past end-of-generation tokens.
    #[serde(default)]
    ignore_eos: bool,
    /// llama-server's extension: scales of the loaded LoRA adapters by id.
    lora: Option<Vec<crate::LoraRequest>>,
}

/// The grammar of `response_format`.
pub(crate) fn response_grammar(
    rf: &Option<ResponseFormat>,
) -> Result<Option<GrammarConstraint>, ApiError> {
    let Some(rf) = rf else { return Ok(None) };
    match rf.kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some(GrammarConstraint::new(Arc::new(Grammar::json())))),
        "json_schema" => {
            let schema = rf
                .json_schema
                .as_ref()
                .and_then(|j| j.schema.as_ref())
                .ok_or_else(|| {
                    ApiError::bad_request("response_format json_schema needs json_schema.schema")
                        .param("response_format")
                })?;
            let c = json_schema::compile(schema).map_err(|e| {
                ApiError::bad_request(format!("response_format: invalid JSON schema: {e}"))
                    .param("response_format")
            })?;
            Ok(Some(GrammarConstraint::new(Arc::new(c.grammar))))
        }
        other => Err(ApiError::bad_request(format!(
            "response_format type {other:?} is not one of text, json_object, json_schema"
        ))
        .param("response_format")),
    }
}

/// OpenAI messages as the template wants them: text content joined (an `image_url` or
/// `input_audio` part becomes a `<__media__>` marker where it is, its media decoded into
/// `images`), `developer` as `system`, tool-call arguments parsed.
fn messages(
    r: &Ready,
    raw: &[Json],
    images: &mut Vec<cera::media::MediaInput>,
) -> Result<Vec<Message>, ApiError> {
    if raw.is_empty() {
        return Err(ApiError::bad_request("messages must not be empty").param("messages"));
    }
    raw.iter()
        .enumerate()
        .map(|(i, m)| {
            let mut m = m.clone();
            let obj = m.as_object_mut().ok_or_else(|| {
                ApiError::bad_request(format!("messages[{i}] is not an object")).param("messages")
            })?;
            match obj.get("role").and_then(Json::as_str) {
                Some("system" | "user" | "assistant" | "tool") => {}
                Some("developer") => {
                    obj.insert("role".into(), json!("system"));
                }
                Some(r) => {
                    return Err(ApiError::bad_request(format!(
                        "messages[{i}].role {r:?} is not one of system, developer, user, assistant, tool"
                    ))
                    .param("messages"));
                }
                None => {
                    return Err(ApiError::bad_request(format!("messages[{i}] has no role")).param("messages"));
                }
            }
            if let Some(Json::Array(parts)) = obj.get("content") {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (p.get("type").and_then(Json::as_str), p.get("text").and_then(Json::as_str)) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        (Some("image_url"), _) => {
                            let what = format!("messages[{i}].content[{j}]");
                            crate::media::need_mmproj(r, &what)?;
                            // {"image_url": {"url": ...}} (OpenAI) or {"image_url": "..."}
                            let url = p
                                .get("image_url")
                                .and_then(|u| u.get("url").or(Some(u)))
                                .and_then(Json::as_str)
                                .ok_or_else(|| {
                                    ApiError::bad_request(format!("{what}: image_url has no url"))
                                        .param("messages")
                                })?;
                            images.push(crate::media::data_url_image(url, &what)?);
                            text.push_str(crate::media::MEDIA_MARKER);
                        }
                        (Some("input_audio"), _) => {
                            let what = format!("messages[{i}].content[{j}]");
                            crate::media::need_mmproj(r, &what)?;
                            images.push(crate::media::input_audio(p, &what)?);
                            text.push_str(crate::media::MEDIA_MARKER);
                        }
                        (kind, _) => {
                            return Err(ApiError::bad_request(format!(
                                "messages[{i}]: content part of type {} is not supported (text, image_url, input_audio)",
                                kind.unwrap_or("?")
                            ))
                            .param("messages"));
                        }
                    }
                }
                obj.insert("content".into(), Json::String(text));
            }
            // templates that do not know tool calls concatenate `content`: give them a string
            if obj.get("content").is_none_or(Json::is_null) {
                obj.insert("content".into(), Json::String(String::new()));
            }
            serde_json::from_value::<Message>(m).map_err(|e| {
                ApiError::bad_request(format!("messages[{i}]: {e}")).param("messages")
            })
        })
        .collect()
}

/// What the tools of a request need.
pub(crate) struct ToolPlan {
    tools: Vec<Tool>,
    pub format: ToolFormat,
    /// `none`: tools are not offered.
    offered: bool,
    grammar: Option<GrammarConstraint>,
}

fn tool_plan(
    r: &Ready,
    tools: &Option<Json>,
    choice: &Option<Json>,
) -> Result<Option<ToolPlan>, ApiError> {
    let Some(tv) = tools else {
        if choice.as_ref().is_some_and(|c| c != "none" && c != "auto") {
            return Err(ApiError::bad_request("tool_choice needs tools").param("tool_choice"));
        }
        return Ok(None);
    };
    let tools = cera::tools::parse_tools(tv)
        .map_err(|e| ApiError::bad_request(e.to_string()).param("tools"))?;
    if tools.is_empty() {
        return Ok(None);
    }
    let format = r.tool_format;
    let eager = |ts: &[Tool]| -> Result<GrammarConstraint, ApiError> {
        let mut g = cera::tools::call_grammar(format, ts)
            .map_err(|e| ApiError::bad_request(e.to_string()).param("tools"))?
            .0;
        g.triggers.clear();
        Ok(g)
    };
    let (offered, grammar) = match choice {
        None => (true, None),
        Some(Json::String(s)) if s == "auto" => (true, None),
        Some(Json::String(s)) if s == "none" => (false, None),
        Some(Json::String(s)) if s == "required" => (true, Some(eager(&tools)?)),
        Some(Json::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Json::as_str)
                .ok_or_else(|| {
                    ApiError::bad_request("tool_choice object needs function.name")
                        .param("tool_choice")
                })?;
            let t = tools.iter().find(|t| t.name == name).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "tool_choice names {name:?}, which is not among the tools"
                ))
                .param("tool_choice")
            })?;
            (true, Some(eager(std::slice::from_ref(t))?))
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "tool_choice {other} is not auto, none, required or a named function"
            ))
            .param("tool_choice"));
        }
    };
    Ok(Some(ToolPlan {
        tools,
        format,
        offered,
        grammar,
    }))
}

/// The most choices (`n`, `best_of`) one request may ask for.
pub(crate) const MAX_CHOICES: u32 = 16;

/// `n` (or `best_of`) as a request gives it: 1 when absent, else within 1..=MAX_CHOICES.
pub(crate) fn choices(n: Option<u32>, param: &str) -> Result<usize, ApiError> {
    match n {
        None => Ok(1),
        Some(k) if (1..=MAX_CHOICES).contains(&k) => Ok(k as usize),
        Some(k) => Err(ApiError::bad_request(format!(
            "{param} is {k}; it must be between 1 and {MAX_CHOICES}"
        ))
        .param(param)),
    }
}

/// Queues a job of `n` choices (forked from one prefill of the prompt); returns its event
/// stream.
pub(crate) fn submit(
    st: &crate::AppState,
    r: &Ready,
    prompt: impl Into<cera::decode::Prompt>,
    opts: GenerateOptions,
    logprobs: Option<usize>,
    lora: cera::lora::LoraSet,
    n: usize,
) -> Result<UnboundedReceiver<Event>, ApiError> {
    let prompt = prompt.into();
    let n_ctx = r.scheduler.n_ctx_slot;
    let len = crate::media::prompt_len(r, &prompt);
    if len >= n_ctx {
        return Err(ApiError::bad_request(format!(
            "the prompt is {len} tokens, but the context holds {n_ctx} per slot (it must leave \
             room for at least one generated token)"
        ))
        .code("context_length_exceeded"));
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let now = Instant::now();
    let job = Job {
        prompt,
        opts,
        logprobs,
        events: tx,
        deadline: st.cfg.timeout.map(|t| now + t),
        enqueued: now,
        lora,
        n,
    };
    match r.scheduler.submit(job) {
        Ok(()) => Ok(rx),
        Err(Refused::QueueFull) => Err(ApiError::unavailable(
            format!(
                "the queue is full ({} requests waiting); retry later",
                r.scheduler.max_queue
            ),
            1,
        )),
        Err(Refused::ShuttingDown) => Err(ApiError::unavailable("the server is shutting down", 5)),
    }
}

/// Everything a finished job produced.
pub(crate) struct Collected {
    pub text: String,
    pub logprobs: Vec<TokenLogprobs>,
    pub done: Done,
}

pub(crate) async fn collect(rx: UnboundedReceiver<Event>) -> Result<Collected, ApiError> {
    let mut all = collect_n(rx, 1).await?;
    Ok(all.remove(0))
}

/// Every choice of a job with `n` of them, in order.
pub(crate) async fn collect_n(
    mut rx: UnboundedReceiver<Event>,
    n: usize,
) -> Result<Vec<Collected>, ApiError> {
    let mut texts = vec![String::new(); n];
    let mut lps: Vec<Vec<TokenLogprobs>> = vec![Vec::new(); n];
    let mut dones: Vec<Option<Done>> = vec![None; n];
    let mut left = n;
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token {
                text,
                logprobs,
                choice,
                ..
            } if choice < n => {
                texts[choice].push_str(&text);
                lps[choice].extend(logprobs);
            }
            Event::Done(d) if d.choice < n => {
                let c = d.choice;
                if dones[c].replace(d).is_none() {
                    left -= 1;
                }
                if left == 0 {
                    break;
                }
            }
            Event::Error(e) => return Err(generation_error(e)),
            _ => {}
        }
    }
    if left > 0 {
        return Err(ApiError::internal("the generation ended without a result"));
    }
    Ok(texts
        .into_iter()
        .zip(lps)
        .zip(dones)
        .map(|((text, logprobs), done)| Collected {
            text,
            logprobs,
            done: done.expect("every choice is done"),
        })
        .collect())
}

/// A streamed job's choices as they end: when the last has, their usage.
pub(crate) struct ChoiceEnds(Vec<Option<Done>>);

impl ChoiceEnds {
    pub fn new(n: usize) -> ChoiceEnds {
        ChoiceEnds(vec![None; n])
    }

    /// Records a choice's end; `Some(total)` once every choice has ended.
    pub fn end(&mut self, d: Done) -> Option<Done> {
        let i = d.choice;
        self.0[i] = Some(d);
        let all: Option<Vec<&Done>> = self.0.iter().map(Option::as_ref).collect();
        all.map(|a| total(&a))
    }
}

/// The usage of a job's choices: the prompt once, the completions summed.
pub(crate) fn total(dones: &[&Done]) -> Done {
    let mut d = dones[0].clone();
    d.completion_tokens = dones.iter().map(|x| x.completion_tokens).sum();
    d
}

pub(crate) fn generation_error(e: String) -> ApiError {
    if e.contains("timed out") {
        ApiError::timeout(e)
    } else if e.contains("context overflow") || e.contains("context") {
        ApiError::bad_request(e)
    } else {
        ApiError::internal(e)
    }
}

pub(crate) fn finish_reason(f: FinishReason, tool_calls: bool) -> &'static str {
    if tool_calls {
        return "tool_calls";
    }
    match f {
        FinishReason::Length | FinishReason::ContextFull => "length",
        _ => "stop",
    }
}

pub(crate) fn usage(d: &Done) -> Json {
    json!({
        "prompt_tokens": d.prompt_tokens,
        "completion_tokens": d.completion_tokens,
        "total_tokens": d.prompt_tokens + d.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": d.cached_tokens},
    })
}

fn token_entry(r: &Ready, id: u32, lp: f32) -> Json {
    let bytes = r.engine.tokenizer().token_bytes(id).to_vec();
    json!({
        "token": String::from_utf8_lossy(&bytes),
        "logprob": lp,
        "bytes": bytes,
    })
}

pub(crate) fn chat_logprobs(r: &Ready, lps: &[TokenLogprobs]) -> Json {
    let content: Vec<Json> = lps
        .iter()
        .map(|l| {
            let mut e = token_entry(r, l.token, l.logprob);
            e["top_logprobs"] =
                Json::Array(l.top.iter().map(|&(t, p)| token_entry(r, t, p)).collect());
            e
        })
        .collect();
    json!({ "content": content })
}

pub(crate) fn call_json(c: &ToolCall, i: usize) -> Json {
    json!({
        "id": c.id.clone().unwrap_or_else(|| format!("call_{i}")),
        "type": "function",
        "function": {
            "name": c.name,
            "arguments": serde_json::to_string(&c.arguments).unwrap_or_default(),
        }
    })
}

pub(crate) fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:x}{n:04x}", unix_now())
}

/// Splits a reply into content and calls; calls get ids.
/// A reply the token limit (or the context) cut short is not an error: what was generated is
/// the content, unparsed, and `finish_reason` says `length`.
pub(crate) fn split_calls(
    plan: &ToolPlan,
    text: &str,
    required: bool,
    finish: FinishReason,
) -> Result<(String, Vec<ToolCall>), ApiError> {
    let cut = matches!(finish, FinishReason::Length | FinishReason::ContextFull);
    match cera::tools::parse_reply(plan.format, text) {
        Ok(p) => {
            let calls = p
                .calls
                .into_iter()
                .enumerate()
                .map(|(i, mut c)| {
                    if c.id.is_none() {
                        c.id = Some(format!("call_{}_{i}", new_id("t")));
                    }
                    c
                })
                .collect();
            Ok((p.content, calls))
        }
        Err(e) if required && !cut => Err(ApiError::internal(format!(
            "the model's tool call did not parse: {e}"
        ))),
        Err(_) => Ok((text.to_owned(), Vec::new())),
    }
}

pub async fn chat_completions(State(st): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let req: ChatRequest = parse_body(&body)?;
    st.check_model(req.model.as_deref())?;
    let r = st.ready()?;
    let n = choices(req.n, "n")?;
    let mut images = Vec::new();
    let msgs = messages(r, &req.messages, &mut images)?;
    let plan = tool_plan(r, &req.tools, &req.tool_choice)?;
    let mut ropts = RenderOptions::new().add_generation_prompt(true);
    if let Some(p) = plan.as_ref().filter(|p| p.offered) {
        ropts = ropts.tools(cera::tools::tools_value(&p.tools));
    }
    let prompt = r.template.render(&msgs, &ropts)?;
    let toks = crate::media::prompt(r, prompt, images).await?;
    let mut opts = GenerateOptions::default();
    opts.max_tokens = req.max_completion_tokens.or(req.max_tokens).unwrap_or(0) as usize;
    opts.sampler = req.sampling.config(r.engine.n_vocab())?;
    opts.stop = req.stop.clone().map(Stop::into_vec).unwrap_or_default();
    opts.ignore_eog = req.ignore_eos;
    let fmt_grammar = response_grammar(&req.response_format)?;
    let tool_grammar = plan.as_ref().and_then(|p| p.grammar.clone());
    if fmt_grammar.is_some() && tool_grammar.is_some() {
        return Err(ApiError::bad_request(
            "response_format and a required tool_choice cannot be combined",
        ));
    }
    opts.grammar = fmt_grammar.or(tool_grammar);
    let top = req
        .logprobs
        .then(|| req.top_logprobs.unwrap_or(0).min(20) as usize);
    if req.top_logprobs.is_some_and(|n| n > 20) {
        return Err(ApiError::bad_request("top_logprobs is at most 20").param("top_logprobs"));
    }
    let required = plan.as_ref().is_some_and(|p| p.grammar.is_some());
    let lora = r.lora_set(req.lora.as_deref())?;
    let rx = submit(&st, r, toks, opts, top, lora, n)?;
    let id = new_id("chatcmpl");
    let created = unix_now();
    let model = st.model_name.clone();
    if !req.stream {
        let all = collect_n(rx, n).await?;
        let mut out = Vec::with_capacity(n);
        for (i, c) in all.iter().enumerate() {
            out.push(chat_choice(r, plan.as_ref(), required, req.logprobs, i, c)?);
        }
        let dones: Vec<&Done> = all.iter().map(|c| &c.done).collect();
        let body = json!({
            "id": id, "object": "chat.completion", "created": created, "model": model,
            "system_fingerprint": format!("cera-{}", env!("CARGO_PKG_VERSION")),
            "choices": out,
            "usage": usage(&total(&dones)),
            "timings": timings(&all[0].done),
        });
        return Ok(axum::Json(body).into_response());
    }
    let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
    let tools = plan.filter(|p| p.offered);
    let stream = crate::chat_stream::chat_stream(
        Arc::clone(&st),
        rx,
        crate::chat_stream::ChatStream {
            id,
            created,
            model,
            include_usage,
            logprobs: req.logprobs,
            n,
        },
        tools,
        required,
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// Choice `i` of a chat completion: its message (content, tool calls) and finish reason.
fn chat_choice(
    r: &Ready,
    plan: Option<&ToolPlan>,
    required: bool,
    logprobs: bool,
    i: usize,
    c: &Collected,
) -> Result<Json, ApiError> {
    {
        let (content, calls) = match plan.filter(|p| p.offered) {
            Some(p) => split_calls(p, &c.text, required, c.done.finish)?,
            None => (c.text.clone(), Vec::new()),
        };
        let mut message = json!({"role": "assistant", "content": content});
        if !calls.is_empty() {
            message["tool_calls"] = Json::Array(
                calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| call_json(c, i))
                    .collect(),
            );
            if content.is_empty() {
                message["content"] = Json::Null;
            }
        }
        Ok(json!({
            "index": i,
            "message": message,
            "logprobs": if logprobs { chat_logprobs(r, &c.logprobs) } else { Json::Null },
            "finish_reason": finish_reason(c.done.finish, !calls.is_empty()),
        }))
    }
}

pub(crate) fn timings(d: &Done) -> Json {
    let ms = |t: Duration| t.as_secs_f64() * 1e3;
    json!({
        "prompt_n": d.prompt_tokens - d.cached_tokens.min(d.prompt_tokens),
        "prompt_ms": ms(d.prefill),
        "predicted_n": d.completion_tokens,
        "predicted_ms": ms(d.decode),
        "cached_n": d.cached_tokens,
        "queued_ms": ms(d.queued),
    })
}

/// The end of an SSE stream: the usage chunk when asked for (`empty`, a chunk of this stream
/// with nothing in it, becomes it), then `[DONE]`.
pub(crate) fn end_sse(
    tx: &tokio::sync::mpsc::UnboundedSender<Result<SseEvent, Infallible>>,
    empty: Option<Json>,
    done: &Done,
) {
    if let Some(mut u) = empty {
        u["choices"] = json!([]);
        u["usage"] = usage(done);
        let _ = tx.send(sse(u));
    }
    let _ = tx.send(Ok(SseEvent::default().data("[DONE]")));
}

pub(crate) fn sse(v: Json) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default().data(v.to_string()))
}

/// A stream fed by a task through a channel; when the client goes away the stream is dropped,
/// the task's sends fail and it ends, dropping the job's receiver (which cancels the job).
pub(crate) fn async_stream<T, F, Fut>(f: F) -> impl Stream<Item = T>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::UnboundedSender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(f(tx));
    tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
}

pub async fn models(State(st): State<Shared>) -> axum::Json<Json> {
    axum::Json(json!({"object": "list", "data": [model_entry(&st)]}))
}

fn model_entry(st: &crate::AppState) -> Json {
    let created = st
        .started
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut m =
        json!({"id": st.model_name, "object": "model", "created": created, "owned_by": "cera"});
    if let Some(r) = st.ready.get() {
        m["meta"] = json!({
            "n_vocab": r.engine.n_vocab(),
            "n_ctx_train": r.engine.n_ctx_train(),
            "n_ctx_slot": r.scheduler.n_ctx_slot,
            "n_parallel": r.n_parallel,
            "architecture": r.engine.gguf().architecture().unwrap_or(""),
        });
    }
    m
}

pub async fn model(
    State(st): State<Shared>,
    Path(id): Path<String>,
) -> Result<axum::Json<Json>, ApiError> {
    st.check_model(Some(&id))?;
    Ok(axum::Json(model_entry(&st)))
}
