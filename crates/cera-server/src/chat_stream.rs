//! A streamed chat completion: SSE chunks per choice (content deltas, tool calls as OpenAI
//! streams them, finish reasons), then the usage and `[DONE]`.

use std::convert::Infallible;

use axum::response::sse::Event as SseEvent;
use futures_util::Stream;
use serde_json::{Value as Json, json};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::Shared;
use crate::openai::{
    ChoiceEnds, ToolPlan, async_stream, call_json, chat_logprobs, end_sse, finish_reason,
    generation_error, split_calls, sse,
};
use crate::scheduler::Event;
use crate::toolstream::ToolSplitter;

/// What a streamed chat completion's chunks carry.
pub(crate) struct ChatStream {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub include_usage: bool,
    pub logprobs: bool,
    pub n: usize,
}

pub(crate) fn chat_stream(
    st: Shared,
    mut rx: UnboundedReceiver<Event>,
    cs: ChatStream,
    tools: Option<ToolPlan>,
    required: bool,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let ChatStream {
        id,
        created,
        model,
        include_usage,
        logprobs,
        n,
    } = cs;
    let chunk = move |i: usize, delta: Json, finish: Option<&str>, lp: Option<Json>| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": format!("cera-{}", env!("CARGO_PKG_VERSION")),
            "choices": [{"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish}],
        })
    };
    async_stream(move |tx| async move {
        let r = match st.ready() {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(sse(e.body()));
                return;
            }
        };
        // per choice: its tool-call splitter, its end
        let mut splitters: Vec<ToolSplitter> = match &tools {
            Some(p) => (0..n).map(|_| ToolSplitter::new(p.format)).collect(),
            None => Vec::new(),
        };
        let mut ends = ChoiceEnds::new(n);
        for i in 0..n {
            let role = json!({"role": "assistant", "content": ""});
            let _ = tx.send(sse(chunk(i, role, None, None)));
        }
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Token {
                    text,
                    logprobs: lp,
                    choice,
                    ..
                } if choice < n => {
                    let text = match splitters.get_mut(choice) {
                        Some(s) => s.push(&text),
                        None => text,
                    };
                    let lp = if logprobs {
                        lp.map(|l| chat_logprobs(r, &[l]))
                    } else {
                        None
                    };
                    if text.is_empty() && lp.is_none() {
                        continue;
                    }
                    let c = chunk(choice, json!({"content": text}), None, lp);
                    if tx.send(sse(c)).is_err() {
                        return; // the client left: dropping `rx` cancels the job
                    }
                }
                Event::Done(done) if done.choice < n => {
                    let i = done.choice;
                    let mut calls = Vec::new();
                    if let (Some(s), Some(plan)) = (splitters.get_mut(i), &tools) {
                        let (in_call, held) = s.finish();
                        let (content, c) = if in_call {
                            match split_calls(plan, &held, required, done.finish) {
                                Ok(x) => x,
                                Err(e) => {
                                    let _ = tx.send(sse(e.body()));
                                    return;
                                }
                            }
                        } else {
                            (held, Vec::new())
                        };
                        if !content.is_empty() {
                            let c = chunk(i, json!({"content": content}), None, None);
                            let _ = tx.send(sse(c));
                        }
                        calls = c;
                    }
                    for (k, c) in calls.iter().enumerate() {
                        let full = call_json(c, k);
                        let head = json!({"tool_calls": [{
                            "index": k, "id": full["id"], "type": "function",
                            "function": {"name": c.name, "arguments": ""},
                        }]});
                        let _ = tx.send(sse(chunk(i, head, None, None)));
                        let args = json!({"tool_calls": [{
                            "index": k, "function": {"arguments": full["function"]["arguments"]},
                        }]});
                        let _ = tx.send(sse(chunk(i, args, None, None)));
                    }
                    let fr = finish_reason(done.finish, !calls.is_empty());
                    let _ = tx.send(sse(chunk(i, json!({}), Some(fr), None)));
                    if let Some(t) = ends.end(done) {
                        end_sse(
                            &tx,
                            include_usage.then(|| chunk(0, json!({}), None, None)),
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
    })
}
