//! `/v1/completions`: OpenAI's text completions, with `n` choices (forked from one prefill of
//! the prompt) and `best_of` (that many generated, the `n` with the highest total logprob
//! returned, as vLLM ranks them).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cera::session::{GenerateOptions, TokenLogprobs};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use crate::error::ApiError;
use crate::openai::{
    ChoiceEnds, Collected, ResponseFormat, Sampling, Stop, StreamOptions, async_stream, choices,
    collect_n, end_sse, finish_reason, generation_error, new_id, parse_body, response_grammar, sse,
    submit, timings, total, usage,
};
use crate::scheduler::{Done, Event};
use crate::{Ready, Shared, unix_now};

#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum PromptIn {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
}

#[derive(Deserialize, Debug)]
struct CompletionRequest {
    model: Option<String>,
    prompt: PromptIn,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u64>,
    #[serde(flatten)]
    sampling: Sampling,
    stop: Option<Stop>,
    logprobs: Option<u32>,
    #[serde(default)]
    echo: bool,
    n: Option<u32>,
    best_of: Option<u32>,
    response_format: Option<ResponseFormat>,
    #[serde(default)]
    ignore_eos: bool,
    lora: Option<Vec<crate::LoraRequest>>,
}

pub async fn completions(State(st): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse_body(&body)?;
    st.check_model(req.model.as_deref())?;
    let r = st.ready()?;
    let n = choices(req.n, "n")?;
    let best_of = match req.best_of {
        None => n,
        b => choices(b, "best_of")?,
    };
    if best_of < n {
        return Err(
            ApiError::bad_request(format!("best_of ({best_of}) must be at least n ({n})"))
                .param("best_of"),
        );
    }
    if req.stream && best_of > n {
        return Err(ApiError::bad_request("best_of cannot be used with stream").param("best_of"));
    }
    let (toks, prompt_text) = match req.prompt {
        PromptIn::Text(t) => (r.engine.tokenizer().encode(&t, true, true), t),
        PromptIn::Texts(v) if v.len() == 1 => {
            (r.engine.tokenizer().encode(&v[0], true, true), v[0].clone())
        }
        PromptIn::Texts(v) => {
            return Err(ApiError::bad_request(format!(
                "prompt lists of {} strings are not supported (one per request)",
                v.len()
            ))
            .param("prompt"));
        }
        PromptIn::Tokens(t) => {
            let n_vocab = r.engine.n_vocab();
            if let Some(bad) = t.iter().find(|&&x| x as usize >= n_vocab) {
                return Err(ApiError::bad_request(format!(
                    "prompt token {bad} is past the vocabulary ({n_vocab})"
                ))
                .param("prompt"));
            }
            let text = r.engine.tokenizer().decode(&t);
            (t, text)
        }
    };
    if toks.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty").param("prompt"));
    }
    let mut opts = GenerateOptions::default();
    // OpenAI's default for completions
    opts.max_tokens = req.max_tokens.unwrap_or(16) as usize;
    opts.sampler = req.sampling.config(r.engine.n_vocab())?;
    opts.stop = req.stop.clone().map(Stop::into_vec).unwrap_or_default();
    opts.grammar = response_grammar(&req.response_format)?;
    opts.ignore_eog = req.ignore_eos;
    if req.logprobs.is_some_and(|n| n > 5) {
        return Err(ApiError::bad_request("logprobs is at most 5").param("logprobs"));
    }
    let top = req.logprobs.map(|n| n as usize);
    let lora = r.lora_set(req.lora.as_deref())?;
    // ranking best_of candidates needs each chosen token's logprob
    let want_lp = if best_of > n {
        Some(top.unwrap_or(0))
    } else {
        top
    };
    let rx = submit(&st, r, toks, opts, want_lp, lora, best_of)?;
    let id = new_id("cmpl");
    let created = unix_now();
    let model = st.model_name.clone();
    let echo = if req.echo { prompt_text } else { String::new() };
    if !req.stream {
        let mut all = collect_n(rx, best_of).await?;
        let dones: Vec<Done> = all.iter().map(|c| c.done.clone()).collect();
        if best_of > n {
            // the n likeliest, by total logprob, in that order
            all.sort_by(|a, b| score(b).total_cmp(&score(a)));
            all.truncate(n);
        }
        let out: Vec<Json> = all
            .iter()
            .enumerate()
            .map(|(i, c): (usize, &Collected)| {
                let lp = top.map(|_| completion_logprobs(r, &c.logprobs));
                json!({
                    "text": format!("{echo}{}", c.text), "index": i, "logprobs": lp,
                    "finish_reason": finish_reason(c.done.finish, false),
                })
            })
            .collect();
        let refs: Vec<&Done> = dones.iter().collect();
        let body = json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "choices": out,
            "usage": usage(&total(&refs)),
            "timings": timings(&dones[0]),
        });
        return Ok(axum::Json(body).into_response());
    }
    let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
    let st2 = Arc::clone(&st);
    let stream = async_stream(move |tx| async move {
        let chunk = |i: usize, text: &str, finish: Option<&str>, lp: Json| {
            json!({"id": id, "object": "text_completion", "created": created, "model": model,
                   "choices": [{"text": text, "index": i, "logprobs": lp, "finish_reason": finish}]})
        };
        let mut rx = rx;
        if !echo.is_empty() {
            for i in 0..n {
                let _ = tx.send(sse(chunk(i, &echo, None, Json::Null)));
            }
        }
        let mut ends = ChoiceEnds::new(n);
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Token {
                    text,
                    logprobs,
                    choice,
                    ..
                } if choice < n => {
                    let lp = match (logprobs, st2.ready()) {
                        (Some(l), Ok(r)) => completion_logprobs(r, &[l]),
                        _ => Json::Null,
                    };
                    if text.is_empty() && lp.is_null() {
                        continue;
                    }
                    if tx.send(sse(chunk(choice, &text, None, lp))).is_err() {
                        return;
                    }
                }
                Event::Done(d) if d.choice < n => {
                    let fr = finish_reason(d.finish, false);
                    let _ = tx.send(sse(chunk(d.choice, "", Some(fr), Json::Null)));
                    if let Some(t) = ends.end(d) {
                        end_sse(
                            &tx,
                            include_usage.then(|| chunk(0, "", None, Json::Null)),
                            &t,
                        );
                        return;
                    }
                }
                Event::Error(e) => {
                    let _ = tx.send(sse(generation_error(e).body()));
                    return;
                }
                _ => {}
            }
        }
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// A candidate's total logprob (what `best_of` ranks by).
fn score(c: &Collected) -> f64 {
    c.logprobs.iter().map(|l| l.logprob as f64).sum()
}

fn completion_logprobs(r: &Ready, lps: &[TokenLogprobs]) -> Json {
    let tok = r.engine.tokenizer();
    let piece = |t: u32| String::from_utf8_lossy(tok.token_bytes(t)).into_owned();
    let mut offset = 0usize;
    let mut offsets = Vec::new();
    for l in lps {
        offsets.push(offset);
        offset += tok.token_bytes(l.token).len();
    }
    json!({
        "tokens": lps.iter().map(|l| piece(l.token)).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|l| {
            l.top.iter().map(|&(t, p)| (piece(t), json!(p))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": offsets,
    })
}
