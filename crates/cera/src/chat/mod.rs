//! Chat templates: turning a conversation into the prompt text a model was trained on.
//!
//! A GGUF model carries its Hugging Face chat template (Jinja source) under
//! `tokenizer.chat_template`. [`ChatTemplate`] compiles it once with minijinja, set up to behave
//! like Python jinja2 as Hugging Face transformers' `apply_chat_template` configures it:
//!
//! * `trim_blocks` and `lstrip_blocks`, `{% break %}`/`{% continue %}`, and the
//!   `{% generation %}` tag (rendered as its body);
//! * variables `messages`, `tools` (`none` when absent), `documents` (`none`),
//!   `add_generation_prompt`, `bos_token`, `eos_token`, plus any extra ones from
//!   [`RenderOptions::var`];
//! * `raise_exception(msg)` (reported as [`Error::ChatTemplateRaised`]) and
//!   `strftime_now(fmt)` (the clock, or [`RenderOptions::now`]; the time is UTC);
//! * `tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False)` writing what
//!   Python's `json.dumps` writes (`", "`/`": "` separators, key order kept, no HTML escaping);
//! * Python's printing (`None`, `True`, `{'a': 1}`), Python string and dict methods
//!   (`.strip()`, `.split()`, `.startswith()`, `.items()`, `.get()`, `.format()`, ...),
//!   Python's type tests (`is sequence` holds for strings, `is number` for booleans), jinja2's
//!   filters with their Python signatures (`default(x, true)`, `indent(first=true)`,
//!   `join`, `int`, `truncate`, ...), generators from `select`/`map` (always true, not JSON),
//!   `'%s' % x`, `Markup` concatenation (`'x'|safe + y` escapes `y`), and `TypeError` for a
//!   `for` loop over `None`.
//!
//! Templates that use something this engine lacks fail with [`Error::ChatTemplate`] whose
//! reason names it (for example `unsupported filter: ... from_json ...`). Known differences
//! from Python that do not fail: ordering values of different types (`'a' < 1` is false, not a
//! `TypeError`), slicing `None` (empty), `namespace() is mapping` (true), and macros cannot
//! collect extra arguments in `varargs`/`kwargs` (an error). `tests/chat_templates.rs` and
//! `tests/chat_semantics.rs` compare against Python jinja2 output.
//!
//! A model without a template gets ChatML ([`ChatTemplate::chatml`]).

mod coordinator;
mod functions;
mod media_state;
mod message;
mod methods;
mod pyfmt;
mod rewrite;
mod template;
mod time;

use std::time::SystemTime;

use minijinja::Environment;
use serde_json::Value as Json;

pub use crate::tools::ToolCall;
pub use coordinator::{Chat, Phase, ToolChoice, TurnOptions, TurnResult};
pub use message::Message;

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::keys;

/// The fallback for models without a template: ChatML, each message as
/// `<|im_start|>{role}\n{content}<|im_end|>\n` (a message without text content, such as a
/// tool-calling assistant message, has an empty body) and the generation prompt
/// `<|im_start|>assistant\n`.
pub const CHATML_TEMPLATE: &str = "{%- for message in messages -%}\
{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] if message['content'] is string else '') + '<|im_end|>\\n' -}}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

/// A compiled chat template with the special-token texts it is rendered with.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

/// How to render: the generation prompt, tools, the time `strftime_now` sees, extra variables.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RenderOptions {
    /// End with the header of an assistant turn, for the model to complete (transformers'
    /// default is `false`).
    pub add_generation_prompt: bool,
    /// Tool definitions (a list of OpenAI-style `{"type": "function", "function": {...}}`).
    pub tools: Option<Json>,
    /// The time `strftime_now` formats (as UTC); `None` reads the clock.
    pub now: Option<SystemTime>,
    /// Extra template variables (e.g. `enable_thinking`). The standard variables win over
    /// these.
    pub extra: serde_json::Map<String, Json>,
}

impl RenderOptions {
    pub fn new() -> RenderOptions {
        RenderOptions::default()
    }

    pub fn add_generation_prompt(mut self, yes: bool) -> RenderOptions {
        self.add_generation_prompt = yes;
        self
    }

    pub fn tools(mut self, tools: Json) -> RenderOptions {
        self.tools = Some(tools);
        self
    }

    pub fn now(mut self, now: SystemTime) -> RenderOptions {
        self.now = Some(now);
        self
    }

    /// Sets an extra template variable.
    pub fn var(mut self, name: impl Into<String>, value: Json) -> RenderOptions {
        self.extra.insert(name.into(), value);
        self
    }
}

impl ChatTemplate {
    /// Compiles `source`, to be rendered with these special-token texts.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        Ok(ChatTemplate {
            env: template::compile(source)?,
            source: source.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// The ChatML fallback ([`CHATML_TEMPLATE`]) with empty bos/eos texts.
    pub fn chatml() -> ChatTemplate {
        ChatTemplate::new(CHATML_TEMPLATE, "", "").expect("the ChatML template compiles")
    }

    /// The model's template (`tokenizer.chat_template`) with the texts of its bos/eos tokens
    /// (`tokenizer.ggml.tokens` at `tokenizer.ggml.bos_token_id`/`eos_token_id`; empty when
    /// absent). A model without a template gets ChatML with those tokens.
    pub fn from_gguf(gguf: &GgufFile) -> Result<ChatTemplate> {
        let source: Option<String> = gguf.get_opt(keys::tokenizer::CHAT_TEMPLATE)?;
        let token_text = |id_key: &str| -> Result<String> {
            let Some(id) = gguf.get_opt::<u32>(id_key)? else {
                return Ok(String::new());
            };
            if gguf.get(keys::tokenizer::TOKENS).is_none() {
                return Ok(String::new());
            }
            let tokens = gguf.get_str_array(keys::tokenizer::TOKENS)?;
            tokens
                .get(id as usize)
                .cloned()
                .ok_or_else(|| Error::ChatTemplate {
                    reason: format!(
                        "{id_key} is {id}, but {} has only {} tokens",
                        keys::tokenizer::TOKENS,
                        tokens.len()
                    ),
                })
        };
        let bos = token_text(keys::tokenizer::BOS_ID)?;
        let eos = token_text(keys::tokenizer::EOS_ID)?;
        ChatTemplate::new(source.as_deref().unwrap_or(CHATML_TEMPLATE), &bos, &eos)
    }

    /// The template source as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// Renders a conversation.
    pub fn render(&self, messages: &[Message], opts: &RenderOptions) -> Result<String> {
        let messages = serde_json::to_value(messages).map_err(|e| Error::ChatTemplate {
            reason: format!("cannot serialize messages: {e}"),
        })?;
        self.render_json(&messages, None, opts)
    }

    /// Renders messages of any shape (a JSON list of objects, passed to the template as it
    /// is). `tools`, when given, is used instead of `opts.tools`.
    pub fn render_json(
        &self,
        messages: &Json,
        tools: Option<&Json>,
        opts: &RenderOptions,
    ) -> Result<String> {
        let ctx = template::Context {
            messages,
            tools: tools.or(opts.tools.as_ref()),
            add_generation_prompt: opts.add_generation_prompt,
            bos_token: &self.bos_token,
            eos_token: &self.eos_token,
            now: opts.now.unwrap_or_else(crate::runtime::time::system_now),
            extra: &opts.extra,
        };
        template::render(&self.env, ctx.to_value())
    }
}

#[cfg(test)]
mod tests;
