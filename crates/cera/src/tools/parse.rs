//! Reading tool calls out of a reply, per format.

use serde_json::Value as Json;

use super::{ParsedReply, ToolCall, ToolFormat, pythonic};
use crate::error::{Error, Result};

/// Splits `text` into prose and calls. A reply without a call marker is prose with no calls;
/// a marker followed by a malformed or truncated call is an error.
pub fn parse_reply(format: ToolFormat, text: &str) -> Result<ParsedReply> {
    match format {
        ToolFormat::Hermes => {
            if !text.contains("<tool_call>")
                && let Some(call) = bare_json_call(text)
            {
                return Ok(ParsedReply {
                    content: String::new(),
                    calls: vec![call],
                });
            }
            tagged(text, "<tool_call>", "</tool_call>", |body| {
                json_call(body, &["arguments", "parameters"]).map(|c| vec![c])
            })
        }
        ToolFormat::Lfm2 => tagged(
            text,
            "<|tool_call_start|>",
            "<|tool_call_end|>",
            pythonic::parse_calls,
        ),
        ToolFormat::Llama3 => llama3(text),
        ToolFormat::Mistral => mistral(text),
    }
}

/// One JSON value at the start of `s` and the rest after it.
fn json_prefix(s: &str) -> Result<(Json, &str)> {
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<Json>();
    match it.next() {
        Some(Ok(v)) => Ok((v, &s[it.byte_offset()..])),
        Some(Err(e)) if e.is_eof() => Err(Error::Tools(format!(
            "truncated tool call: the JSON ends early ({e})"
        ))),
        Some(Err(e)) => Err(Error::Tools(format!("malformed tool call JSON: {e}"))),
        None => Err(Error::Tools("empty tool call".into())),
    }
}

/// `{"name": .., "<args key>": {..}}` → a call (arguments given as a JSON string are parsed).
fn call_from_json(v: &Json, arg_keys: &[&str]) -> Result<ToolCall> {
    let Json::Object(m) = v else {
        return Err(Error::Tools(format!(
            "a tool call must be a JSON object, got {v}"
        )));
    };
    let m = match m.get("function") {
        Some(Json::Object(f)) => f,
        _ => m,
    };
    let name = m
        .get("name")
        .and_then(Json::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::Tools(format!("tool call without a \"name\": {v}")))?;
    let args = arg_keys.iter().find_map(|k| m.get(*k));
    let arguments = match args {
        None | Some(Json::Null) => Json::Object(Default::default()),
        Some(Json::String(s)) => match serde_json::from_str::<Json>(s) {
            Ok(o @ Json::Object(_)) => o,
            _ => {
                return Err(Error::Tools(format!(
                    "tool call {name:?}: arguments string is not a JSON object: {s:?}"
                )));
            }
        },
        Some(o @ Json::Object(_)) => o.clone(),
        Some(other) => {
            return Err(Error::Tools(format!(
                "tool call {name:?}: arguments must be an object, got {other}"
            )));
        }
    };
    Ok(ToolCall::new(None, name, arguments))
}

/// A whole body holding one JSON call.
fn json_call(body: &str, arg_keys: &[&str]) -> Result<ToolCall> {
    let (v, rest) = json_prefix(body.trim())?;
    if !rest.trim().is_empty() {
        return Err(Error::Tools(format!(
            "unexpected text after the tool call JSON: {:?}",
            rest.trim()
        )));
    }
    call_from_json(&v, arg_keys)
}

/// A reply that is nothing but `{"name": .., "arguments": {..}}`, perhaps inside a Markdown
/// code fence (closed or not): a call. Anything else is not.
fn bare_json_call(text: &str) -> Option<ToolCall> {
    let mut t = text.trim();
    if let Some(rest) = t.strip_prefix("```") {
        t = rest
            .trim_start_matches(|c: char| c.is_ascii_alphanumeric())
            .trim();
        t = t.strip_suffix("```").unwrap_or(t).trim();
    }
    if !t.starts_with('{') {
        return None;
    }
    let v: Json = serde_json::from_str(t).ok()?;
    let m = v.as_object()?;
    if !m.get("name").is_some_and(Json::is_string)
        || !["arguments", "parameters"]
            .iter()
            .any(|k| m.get(*k).is_some_and(|a| a.is_object() || a.is_string()))
    {
        return None;
    }
    call_from_json(&v, &["arguments", "parameters"]).ok()
}

/// Calls between `open` and `close` markers, prose around them.
fn tagged(
    text: &str,
    open: &str,
    close: &str,
    body: impl Fn(&str) -> Result<Vec<ToolCall>>,
) -> Result<ParsedReply> {
    let mut out = ParsedReply::default();
    let mut prose = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(open) {
        prose.push_str(&rest[..at]);
        let after = &rest[at + open.len()..];
        let Some(end) = after.find(close) else {
            // truncated: the body must at least be complete on its own
            let calls = body(after)
                .map_err(|e| Error::Tools(format!("unterminated {open} (no {close}): {e}")))?;
            out.calls.extend(calls);
            rest = "";
            break;
        };
        out.calls.extend(body(&after[..end])?);
        rest = &after[end + close.len()..];
    }
    prose.push_str(rest);
    out.content = prose.trim().to_string();
    Ok(out)
}

/// Llama 3.x: the reply (after an optional `<|python_tag|>`) is one or more JSON calls
/// separated by `;` or newlines; `name.call(k=v)` after the tag is a built-in tool call;
/// other text after the tag is code for the `python` tool.
fn llama3(text: &str) -> Result<ParsedReply> {
    let t = text.trim();
    let (tagged, body) = match t.find("<|python_tag|>") {
        Some(at) => (true, &t[at + "<|python_tag|>".len()..]),
        None => (false, t),
    };
    let prose = if tagged {
        t[..t.find("<|python_tag|>").unwrap_or(0)]
            .trim()
            .to_string()
    } else {
        String::new()
    };
    let body = body.trim().trim_end_matches("<|eom_id|>").trim();
    if !body.starts_with('{') {
        if !tagged {
            return Ok(ParsedReply {
                content: t.to_string(),
                calls: Vec::new(),
            });
        }
        if let Some((name, args)) = body.split_once(".call(")
            && !name.contains(char::is_whitespace)
        {
            let calls = pythonic::parse_calls(&format!("{name}({args}"))?;
            return Ok(ParsedReply {
                content: prose,
                calls,
            });
        }
        return Ok(ParsedReply {
            content: prose,
            calls: vec![ToolCall::new(
                None,
                "python",
                serde_json::json!({ "code": body }),
            )],
        });
    }
    let mut calls = Vec::new();
    let mut rest = body;
    loop {
        let (v, r) = json_prefix(rest)?;
        calls.push(call_from_json(&v, &["parameters", "arguments"])?);
        rest = r.trim_start().trim_start_matches(';').trim_start();
        if rest.is_empty() {
            break;
        }
        if !rest.starts_with('{') {
            return Err(Error::Tools(format!(
                "unexpected text after a tool call: {:?}",
                rest.chars().take(40).collect::<String>()
            )));
        }
    }
    Ok(ParsedReply {
        content: prose,
        calls,
    })
}

/// Mistral: `[TOOL_CALLS]` then a JSON array of calls, or (newer templates) one or more
/// `name[ARGS]{json}`.
fn mistral(text: &str) -> Result<ParsedReply> {
    const TAG: &str = "[TOOL_CALLS]";
    let Some(at) = text.find(TAG) else {
        return Ok(ParsedReply {
            content: text.trim().to_string(),
            calls: Vec::new(),
        });
    };
    let content = text[..at].trim().to_string();
    let mut calls = Vec::new();
    for part in text[at..].split(TAG).skip(1) {
        let p = part.trim().trim_end_matches("</s>").trim();
        if p.starts_with('[') {
            let (v, rest) = json_prefix(p)?;
            if !rest.trim().is_empty() {
                return Err(Error::Tools(format!(
                    "unexpected text after [TOOL_CALLS] array: {:?}",
                    rest.trim()
                )));
            }
            let Json::Array(items) = v else {
                return Err(Error::Tools(
                    "[TOOL_CALLS] must be followed by a JSON array".into(),
                ));
            };
            for it in &items {
                calls.push(call_from_json(it, &["arguments", "parameters"])?);
            }
        } else if let Some((name, args)) = p.split_once("[ARGS]") {
            let name = name.trim();
            if name.is_empty() {
                return Err(Error::Tools("[TOOL_CALLS] without a function name".into()));
            }
            let (v, rest) = json_prefix(args.trim())?;
            if !rest.trim().is_empty() {
                return Err(Error::Tools(format!(
                    "unexpected text after the arguments of {name:?}: {:?}",
                    rest.trim()
                )));
            }
            if !v.is_object() {
                return Err(Error::Tools(format!(
                    "arguments of {name:?} must be an object"
                )));
            }
            calls.push(ToolCall::new(None, name, v));
        } else {
            return Err(Error::Tools(format!(
                "[TOOL_CALLS] must be followed by a JSON array or name[ARGS]{{..}}, got {:?}",
                p.chars().take(40).collect::<String>()
            )));
        }
    }
    Ok(ParsedReply { content, calls })
}
