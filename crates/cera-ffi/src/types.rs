//! The records that cross the boundary (Kotlin data classes, Swift structs), with llama.cpp's
//! defaults, and their conversion to the core's options.

use std::sync::Arc;

use crate::errors::{Result, invalid};

/// Options of a new session. `n_ctx` 0: the model's training context, capped at 4096.
/// `cache_type_k` / `cache_type_v`: KV cache types as llama.cpp names them (`f16`, `q8_0`, …).
#[derive(Clone, Debug, uniffi::Record)]
pub struct SessionConfig {
    #[uniffi(default = 0)]
    pub n_ctx: u32,
    #[uniffi(default)]
    pub cache_type_k: Option<String>,
    #[uniffi(default)]
    pub cache_type_v: Option<String>,
}

/// Sampling and stopping for one generation. Greedy when `temperature <= 0`; `max_tokens` 0
/// (chat only): until the model ends its turn or the context is full.
#[derive(Clone, Debug, uniffi::Record)]
pub struct GenerateConfig {
    #[uniffi(default = 128)]
    pub max_tokens: u32,
    #[uniffi(default = 0.8)]
    pub temperature: f32,
    #[uniffi(default = 40)]
    pub top_k: u32,
    #[uniffi(default = 0.95)]
    pub top_p: f32,
    #[uniffi(default = 0.05)]
    pub min_p: f32,
    #[uniffi(default = 1.0)]
    pub repeat_penalty: f32,
    #[uniffi(default)]
    pub seed: Option<u64>,
    #[uniffi(default)]
    pub stop: Vec<String>,
}

/// A chat turn's options: sampling, and what constrains the reply. `json_schema` (JSON text)
/// or `json_object` make the reply JSON; `tool_choice`: `auto` (null), `none`, `required` or a
/// tool's name.
#[derive(Clone, Debug, uniffi::Record)]
pub struct TurnConfig {
    pub generate: GenerateConfig,
    #[uniffi(default)]
    pub json_schema: Option<String>,
    #[uniffi(default = false)]
    pub json_object: bool,
    #[uniffi(default)]
    pub tool_choice: Option<String>,
}

/// A tool the model may call: its parameters as a JSON Schema (JSON text; null: no
/// parameters).
#[derive(Clone, Debug, uniffi::Record)]
pub struct ToolSpec {
    pub name: String,
    #[uniffi(default)]
    pub description: Option<String>,
    #[uniffi(default)]
    pub parameters_json: Option<String>,
}

/// A tool call the model made: `arguments_json` is the arguments object as JSON text.
#[derive(Clone, Debug, PartialEq, uniffi::Record)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments_json: String,
}

/// A finished chat turn. `finish_reason`: the engine's (`eog`, `length`, `stop`, `tool_calls`,
/// …); `reused_tokens`: context kept from the last turn or restored from the prefix cache.
#[derive(Clone, Debug, uniffi::Record)]
pub struct Turn {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: String,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub reused_tokens: u32,
}

/// A finished plain generation: the text, the token ids generated (prompt not included) and
/// why it ended.
#[derive(Clone, Debug, uniffi::Record)]
pub struct Generation {
    pub text: String,
    pub tokens: Vec<u32>,
    pub finish_reason: String,
}

impl GenerateConfig {
    pub(crate) fn to_core(&self) -> Result<cera::session::GenerateOptions> {
        let mut b = cera::session::BasicOptions::default();
        b.max_tokens = self.max_tokens as usize;
        b.temperature = self.temperature;
        b.top_k = self.top_k as usize;
        b.top_p = self.top_p;
        b.min_p = self.min_p;
        b.repeat_penalty = self.repeat_penalty;
        b.seed = self.seed;
        b.stop = self.stop.clone();
        b.to_options().map_err(|e| invalid(e.to_string()))
    }
}

impl SessionConfig {
    pub(crate) fn to_core(&self) -> Result<cera::engine::SessionOptions> {
        let mut o = cera::engine::SessionOptions::default();
        o.n_ctx = self.n_ctx as usize;
        if let Some(k) = &self.cache_type_k {
            o.kv_type = k.parse().map_err(invalid)?;
        }
        if let Some(v) = &self.cache_type_v {
            o.kv_type_v = Some(v.parse().map_err(invalid)?);
        }
        Ok(o)
    }
}

pub(crate) fn parse_json(what: &str, text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| invalid(format!("{what}: {e}")))
}

impl TurnConfig {
    pub(crate) fn to_core(&self) -> Result<cera::chat::TurnOptions> {
        let mut opts = cera::chat::TurnOptions::new(self.generate.to_core()?);
        if let Some(s) = &self.json_schema {
            opts = opts.json_schema(&parse_json("json_schema", s)?)?;
        } else if self.json_object {
            opts.generate.grammar = Some(cera::grammar::GrammarConstraint::new(Arc::new(
                cera::grammar::Grammar::json(),
            )));
        }
        opts.tool_choice = cera::chat::ToolChoice::from_name(self.tool_choice.as_deref());
        Ok(opts)
    }
}

impl Turn {
    pub(crate) fn from_core(r: &cera::chat::TurnResult) -> Turn {
        Turn {
            text: r.text.clone(),
            tool_calls: r
                .tool_calls
                .iter()
                .map(|c| ToolCall {
                    id: c.id.clone().unwrap_or_default(),
                    name: c.name.clone(),
                    arguments_json: c.arguments.to_string(),
                })
                .collect(),
            finish_reason: r.finish.as_str().to_owned(),
            prompt_tokens: r.summary.prompt_tokens as u32,
            completion_tokens: r.summary.generated_tokens as u32,
            reused_tokens: (r.prefill.kept + r.prefill.from_cache) as u32,
        }
    }
}

impl ToolSpec {
    pub(crate) fn to_core(&self) -> Result<cera::tools::Tool> {
        let params = match &self.parameters_json {
            Some(p) => parse_json(&format!("parameters of tool {}", self.name), p)?,
            None => serde_json::json!({"type": "object", "properties": {}}),
        };
        if self.name.is_empty() {
            return Err(invalid("a tool needs a name"));
        }
        Ok(cera::tools::Tool::new(
            self.name.clone(),
            self.description.clone(),
            params,
        ))
    }
}
