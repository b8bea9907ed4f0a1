//! Tool calling: tool definitions, rendering them through the chat template, and reading the
//! calls back out of a reply.
//!
//! * [`parse_tools`] takes OpenAI function tools, wrapped (`{"type": "function", "function":
//!   {...}}`) or bare (`{name, description, parameters}`), and [`tools_value`] gives the
//!   wrapped list every Hugging Face template expects in its `tools` variable.
//! * [`ToolFormat`] is how a model writes calls: Hermes/Qwen `<tool_call>{json}</tool_call>`,
//!   LFM2 `<|tool_call_start|>[f(a=1)]<|tool_call_end|>` (Pythonic), Llama 3.x JSON
//!   (`{"name": .., "parameters": ..}`, optionally after `<|python_tag|>`), Mistral
//!   `[TOOL_CALLS][{..}]` (or `[TOOL_CALLS]name[ARGS]{..}`). [`ToolFormat::detect`] picks it
//!   from the template text and architecture.
//! * [`parse_reply`] splits a reply into prose and calls; a malformed or truncated call is an
//!   error naming what is wrong, never a panic.
//! * [`call_grammar`] builds a lazy grammar (see [`crate::grammar::Trigger`]) that starts at
//!   the format's call marker and enforces tool names, argument names, types and required
//!   arguments.

mod constrain;
mod parse;
mod pythonic;

use serde_json::{Map, Value as Json};

mod call;
pub use call::ToolCall;
pub use constrain::call_grammar;
pub use parse::parse_reply;

use crate::error::{Error, Result};

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema; `{"type": "object"}` when absent).
    pub parameters: Json,
}

impl Tool {
    pub fn new(name: impl Into<String>, description: Option<String>, parameters: Json) -> Tool {
        Tool {
            name: name.into(),
            description,
            parameters,
        }
    }

    /// The OpenAI wrapper form, as templates expect it.
    pub fn to_json(&self) -> Json {
        let mut f = Map::new();
        f.insert("name".into(), Json::String(self.name.clone()));
        if let Some(d) = &self.description {
            f.insert("description".into(), Json::String(d.clone()));
        }
        f.insert("parameters".into(), self.parameters.clone());
        let mut t = Map::new();
        t.insert("type".into(), Json::String("function".into()));
        t.insert("function".into(), Json::Object(f));
        Json::Object(t)
    }
}

/// Reads a list of tools (or a single tool object), in either form.
pub fn parse_tools(v: &Json) -> Result<Vec<Tool>> {
    let items: Vec<&Json> = match v {
        Json::Array(a) => a.iter().collect(),
        Json::Object(_) => vec![v],
        _ => {
            return Err(Error::Tools(
                "tools must be a JSON array of function definitions".into(),
            ));
        }
    };
    let mut out: Vec<Tool> = Vec::new();
    for (i, t) in items.into_iter().enumerate() {
        let Json::Object(obj) = t else {
            return Err(Error::Tools(format!("tool {i} is not an object")));
        };
        let f = match (obj.get("type"), obj.get("function")) {
            (Some(Json::String(ty)), _) if ty != "function" => {
                return Err(Error::Tools(format!(
                    "tool {i} has type {ty:?}; only \"function\" tools are supported"
                )));
            }
            (_, Some(Json::Object(f))) => f,
            (_, Some(_)) => {
                return Err(Error::Tools(format!(
                    "tool {i}: 'function' must be an object"
                )));
            }
            (_, None) => obj,
        };
        let name = f
            .get("name")
            .and_then(Json::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::Tools(format!("tool {i} has no name")))?;
        if out.iter().any(|t| t.name == name) {
            return Err(Error::Tools(format!("tool name {name:?} appears twice")));
        }
        let parameters = match f.get("parameters") {
            None | Some(Json::Null) => serde_json::json!({"type": "object", "properties": {}}),
            Some(p @ Json::Object(_)) => p.clone(),
            Some(_) => {
                return Err(Error::Tools(format!(
                    "tool {name:?}: parameters must be an object schema"
                )));
            }
        };
        out.push(Tool {
            name: name.to_string(),
            description: f
                .get("description")
                .and_then(Json::as_str)
                .map(str::to_string),
            parameters,
        });
    }
    Ok(out)
}

/// The `tools` template variable: every tool in the wrapper form.
pub fn tools_value(tools: &[Tool]) -> Json {
    Json::Array(tools.iter().map(Tool::to_json).collect())
}

/// How a model writes its tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolFormat {
    /// Hermes / Qwen: `<tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>`; a reply
    /// that is only such a JSON object (perhaps in a Markdown code fence), as small models
    /// write it, counts as a call too.
    Hermes,
    /// LFM2: `<|tool_call_start|>[f(a=1, b="x")]<|tool_call_end|>`.
    Lfm2,
    /// Llama 3.x: `{"name": .., "parameters": {..}}`, optionally after `<|python_tag|>`.
    Llama3,
    /// Mistral: `[TOOL_CALLS][{"name": .., "arguments": {..}}]` or `[TOOL_CALLS]f[ARGS]{..}`.
    Mistral,
}

impl ToolFormat {
    pub const ALL: [ToolFormat; 4] = [
        ToolFormat::Hermes,
        ToolFormat::Lfm2,
        ToolFormat::Llama3,
        ToolFormat::Mistral,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::Lfm2 => "lfm2",
            ToolFormat::Llama3 => "llama3",
            ToolFormat::Mistral => "mistral",
        }
    }

    /// The format a model's template writes (its examples and markers), else by architecture;
    /// Hermes when nothing says otherwise (the most common format, and what ChatML models
    /// are tuned on).
    pub fn detect(template: &str, arch: &str) -> ToolFormat {
        if template.contains("<|tool_call_start|>") || arch.starts_with("lfm2") {
            ToolFormat::Lfm2
        } else if template.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if template.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if template.contains("<|python_tag|>")
            || (template.contains("<|start_header_id|>") && template.contains("parameters"))
        {
            ToolFormat::Llama3
        } else {
            ToolFormat::Hermes
        }
    }

    /// Where a call starts (the lazy grammar's triggers). A bare JSON call is recognised by
    /// `{"name"` written compactly or with the usual indentations.
    pub fn markers(self) -> &'static [&'static str] {
        const BARE: [&str; 6] = [
            "{\"name\"",
            "{ \"name\"",
            "{\n\"name\"",
            "{\n  \"name\"",
            "{\n    \"name\"",
            "{\n\t\"name\"",
        ];
        match self {
            ToolFormat::Hermes => &[
                "<tool_call>",
                BARE[0],
                BARE[1],
                BARE[2],
                BARE[3],
                BARE[4],
                BARE[5],
            ],
            ToolFormat::Lfm2 => &["<|tool_call_start|>"],
            ToolFormat::Llama3 => &[
                "<|python_tag|>",
                BARE[0],
                BARE[1],
                BARE[2],
                BARE[3],
                BARE[4],
                BARE[5],
            ],
            ToolFormat::Mistral => &["[TOOL_CALLS]"],
        }
    }
}

impl std::str::FromStr for ToolFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<ToolFormat> {
        let s = s.to_ascii_lowercase();
        Ok(match s.as_str() {
            "hermes" | "qwen" | "hermes2" => ToolFormat::Hermes,
            "lfm2" | "pythonic" => ToolFormat::Lfm2,
            "llama3" | "llama" | "llama3.1" | "llama3.2" => ToolFormat::Llama3,
            "mistral" => ToolFormat::Mistral,
            _ => {
                return Err(Error::Tools(format!(
                    "unknown tool format {s:?} (known: hermes, lfm2, llama3, mistral)"
                )));
            }
        })
    }
}

/// A reply split into what the model said and the calls it made.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ParsedReply {
    /// The prose outside the calls, trimmed.
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl ParsedReply {
    /// The calls as a JSON array of `{"name", "arguments"}`.
    pub fn calls_json(&self) -> Json {
        Json::Array(
            self.calls
                .iter()
                .map(|c| serde_json::json!({"name": c.name, "arguments": c.arguments}))
                .collect(),
        )
    }
}
