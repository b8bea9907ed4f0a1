//! The plain JavaScript objects the API takes (`{ maxTokens: 16, temperature: 0 }`), with
//! llama.cpp's defaults for what is left out, and their conversion to the core's options. An
//! unknown key is an error naming it (a misspelt option must not be ignored silently).

use serde::Deserialize;
use wasm_bindgen::prelude::*;

use crate::error::{Result, invalid};

/// Options of a new session or chat.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SessionConfig {
    /// 0: the model's training context, capped at 4096.
    pub n_ctx: u32,
    /// KV cache types as llama.cpp names them (`f16`, `q8_0`, …).
    pub cache_type_k: Option<String>,
    pub cache_type_v: Option<String>,
}

/// Sampling and stopping for one generation (greedy when `temperature` ≤ 0).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GenerateConfig {
    /// 0 (chat only): until the model ends its turn or the context is full.
    pub max_tokens: u32,
    pub temperature: f32,
    pub top_k: u32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
    /// A GBNF grammar the output follows.
    pub grammar: Option<String>,
    /// A JSON Schema (an object) the output is JSON of.
    pub json_schema: Option<serde_json::Value>,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            max_tokens: 128,
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            seed: None,
            stop: Vec::new(),
            ignore_eos: false,
            grammar: None,
            json_schema: None,
        }
    }
}

/// A chat turn: the sampling options plus what constrains the reply (`jsonSchema` among them,
/// `jsonObject`, `toolChoice`: `auto`, `none`, `required` or a tool's name), in one object.
#[derive(Debug, Default)]
pub struct TurnConfig {
    pub generate: GenerateConfig,
    pub json_object: bool,
    pub tool_choice: Option<String>,
}

impl TurnConfig {
    pub fn from_js(value: JsValue) -> Result<TurnConfig> {
        TurnConfig::from_map(from_js("turn options", value)?)
    }

    /// From the options object's fields.
    pub fn from_map(mut map: serde_json::Map<String, serde_json::Value>) -> Result<TurnConfig> {
        let json_object = match map.remove("jsonObject") {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(b)) => b,
            Some(v) => return Err(invalid(format!("jsonObject: expected a boolean, got {v}"))),
        };
        let tool_choice = match map.remove("toolChoice") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s),
            Some(v) => return Err(invalid(format!("toolChoice: expected a string, got {v}"))),
        };
        let generate = serde_json::from_value(serde_json::Value::Object(map))
            .map_err(|e| invalid(format!("turn options: {e}")))?;
        Ok(TurnConfig {
            generate,
            json_object,
            tool_choice,
        })
    }
}

/// `value` (undefined or null: the defaults) as `T`.
pub fn from_js<T: for<'de> Deserialize<'de> + Default>(what: &str, value: JsValue) -> Result<T> {
    if value.is_undefined() || value.is_null() {
        return Ok(T::default());
    }
    // through JSON values: serde-wasm-bindgen reads a struct's own fields off an object and
    // would never see a misspelt key, which serde_json's `deny_unknown_fields` then names
    let v: serde_json::Value =
        serde_wasm_bindgen::from_value(value).map_err(|e| invalid(format!("{what}: {e}")))?;
    from_json(what, v)
}

/// `value` (null: the defaults) as `T`, naming `what` in the error.
pub fn from_json<T: for<'de> Deserialize<'de> + Default>(
    what: &str,
    value: serde_json::Value,
) -> Result<T> {
    if value.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(value).map_err(|e| invalid(format!("{what}: {e}")))
}

impl SessionConfig {
    pub fn to_core(&self) -> Result<cera::engine::SessionOptions> {
        let mut o = cera::engine::SessionOptions::default();
        o.n_ctx = self.n_ctx as usize;
        if let Some(k) = &self.cache_type_k {
            o.kv_type = k.parse().map_err(|e| invalid(format!("cacheTypeK: {e}")))?;
        }
        if let Some(v) = &self.cache_type_v {
            o.kv_type_v = Some(v.parse().map_err(|e| invalid(format!("cacheTypeV: {e}")))?);
        }
        Ok(o)
    }
}

impl GenerateConfig {
    pub fn to_core(&self) -> Result<cera::session::GenerateOptions> {
        let mut b = cera::session::BasicOptions::default();
        b.max_tokens = self.max_tokens as usize;
        b.temperature = self.temperature;
        b.top_k = self.top_k as usize;
        b.top_p = self.top_p;
        b.min_p = self.min_p;
        b.repeat_penalty = self.repeat_penalty;
        b.seed = self.seed;
        b.stop = self.stop.clone();
        b.ignore_eos = self.ignore_eos;
        let mut o = b.to_options().map_err(|e| invalid(e.camel_case()))?;
        o.grammar = match (&self.grammar, &self.json_schema) {
            (Some(_), Some(_)) => {
                return Err(invalid("give a grammar or a jsonSchema, not both"));
            }
            (Some(g), None) => Some(cera::grammar::GrammarConstraint::new(std::sync::Arc::new(
                cera::grammar::Grammar::parse(g).map_err(|e| invalid(format!("grammar: {e}")))?,
            ))),
            (None, Some(s)) => Some(cera::grammar::GrammarConstraint::new(std::sync::Arc::new(
                cera::grammar::Grammar::from_json_schema(s)
                    .map_err(|e| invalid(format!("jsonSchema: {e}")))?,
            ))),
            (None, None) => None,
        };
        Ok(o)
    }
}

impl TurnConfig {
    pub fn to_core(&self) -> Result<cera::chat::TurnOptions> {
        if self.generate.grammar.is_some() {
            return Err(invalid(
                "a chat turn takes jsonSchema, jsonObject or tools, not a grammar",
            ));
        }
        let mut g = GenerateConfig {
            json_schema: None,
            stop: self.generate.stop.clone(),
            grammar: None,
            ..self.generate
        };
        g.seed = self.generate.seed;
        let mut opts = cera::chat::TurnOptions::new(g.to_core()?);
        if let Some(s) = &self.generate.json_schema {
            opts = opts.json_schema(s)?;
        } else if self.json_object {
            opts.generate.grammar = Some(cera::grammar::GrammarConstraint::new(
                std::sync::Arc::new(cera::grammar::Grammar::json()),
            ));
        }
        opts.tool_choice = cera::chat::ToolChoice::from_name(self.tool_choice.as_deref());
        Ok(opts)
    }
}

/// How to transcribe (`Whisper.transcribe`): whisper-cli's defaults for what is left out (beam
/// search of 5, temperature fallback, timestamps); `responseFormat` `verbose_json` (default:
/// an object with `text`, `language`, `duration`, `segments`), `json` (`{ text }`), `text`,
/// `srt` or `vtt` (strings).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TranscribeConfig {
    pub language: Option<String>,
    pub translate: bool,
    pub timestamps: bool,
    pub beam_size: u32,
    pub best_of: u32,
    pub temperature: f32,
    pub fallback: bool,
    pub initial_prompt: Option<String>,
    pub response_format: String,
}

impl Default for TranscribeConfig {
    fn default() -> Self {
        TranscribeConfig {
            language: None,
            translate: false,
            timestamps: true,
            beam_size: 5,
            best_of: 5,
            temperature: 0.0,
            fallback: true,
            initial_prompt: None,
            response_format: "verbose_json".into(),
        }
    }
}

impl TranscribeConfig {
    pub fn to_core(&self) -> cera::transcribe::TranscribeOptions {
        cera::transcribe::TranscribeOptions::default()
            .with_task(self.language.clone(), self.translate, self.timestamps)
            .with_search(self.beam_size as usize, self.best_of as usize)
            .with_temperature(self.temperature, self.fallback)
            .with_prompt(self.initial_prompt.clone())
    }
}
