//! The minijinja environment a chat template is compiled into, and rendering.

use std::time::SystemTime;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Value;
use minijinja::{Environment, ErrorKind, UndefinedBehavior};
use serde_json::Value as Json;

use super::functions::{self, Raised};
use super::rewrite;
use super::time;
use crate::error::{Error, Result};

/// The name the template is stored under (it appears in error messages).
pub(crate) const TEMPLATE_NAME: &str = "chat_template";

/// An environment set up like transformers' (`trim_blocks`, `lstrip_blocks`, loop controls,
/// its `tojson`, `raise_exception`) holding the compiled template.
pub(crate) fn compile(source: &str) -> Result<Environment<'static>> {
    let mut env = Environment::new();
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(|e| template_error(&e))?;
    env.set_syntax(syntax);
    // Python jinja2's default `Undefined`: prints as nothing, iterates as empty, fails on
    // attribute access and arithmetic.
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    functions::install(&mut env);
    env.add_template_owned(TEMPLATE_NAME, rewrite::rewrite(source))
        .map_err(|e| template_error(&e))?;
    Ok(env)
}

/// Renders the compiled template with the given context.
pub(crate) fn render(env: &Environment<'static>, ctx: Value) -> Result<String> {
    let tmpl = env
        .get_template(TEMPLATE_NAME)
        .map_err(|e| template_error(&e))?;
    tmpl.render(ctx).map_err(|e| template_error(&e))
}

/// The render context: `extra` first, then the variables transformers passes, which win.
pub(crate) struct Context<'a> {
    pub messages: &'a Json,
    pub tools: Option<&'a Json>,
    pub add_generation_prompt: bool,
    pub bos_token: &'a str,
    pub eos_token: &'a str,
    pub now: SystemTime,
    pub extra: &'a serde_json::Map<String, Json>,
}

impl Context<'_> {
    pub fn to_value(&self) -> Value {
        let mut pairs: Vec<(Value, Value)> = self
            .extra
            .iter()
            .map(|(k, v)| (Value::from(k.as_str()), json_to_value(v)))
            .collect();
        let core = [
            ("messages", json_to_value(self.messages)),
            (
                "tools",
                self.tools.map(json_to_value).unwrap_or(Value::from(())),
            ),
            ("documents", Value::from(())),
            (
                "add_generation_prompt",
                Value::from(self.add_generation_prompt),
            ),
            ("bos_token", Value::from(self.bos_token)),
            ("eos_token", Value::from(self.eos_token)),
            ("strftime_now", time::strftime_now(self.now)),
        ];
        for (k, v) in core {
            pairs.retain(|(key, _)| key.as_str() != Some(k));
            pairs.push((Value::from(k), v));
        }
        Value::from_pairs(pairs)
    }
}

/// A JSON value as a template value: objects keep their key order, integers stay integers.
pub(crate) fn json_to_value(v: &Json) -> Value {
    match v {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(a) => Value::from(a.iter().map(json_to_value).collect::<Vec<_>>()),
        Json::Object(o) => Value::from_pairs(
            o.iter()
                .map(|(k, v)| (Value::from(k.as_str()), json_to_value(v))),
        ),
    }
}

/// Converts a minijinja error: `raise_exception` becomes [`Error::ChatTemplateRaised`];
/// constructs the engine lacks (unknown filters, tests, functions, methods, tags) say so.
pub(crate) fn template_error(e: &minijinja::Error) -> Error {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(r) = s.downcast_ref::<Raised>() {
            return Error::ChatTemplateRaised {
                message: r.0.clone(),
            };
        }
        src = s.source();
    }
    let mut reason = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        reason.push_str(": ");
        reason.push_str(&s.to_string());
        src = s.source();
    }
    let unsupported = match e.kind() {
        ErrorKind::UnknownFilter => Some("filter"),
        ErrorKind::UnknownTest => Some("test"),
        ErrorKind::UnknownFunction => Some("function"),
        ErrorKind::UnknownMethod => Some("method"),
        ErrorKind::UnknownBlock => Some("block"),
        ErrorKind::SyntaxError if reason.contains("unknown statement") => Some("statement"),
        ErrorKind::InvalidOperation if reason.contains("plain object") && reason.contains('+') => {
            reason = format!(
                "`+` with a `|safe` (Markup) operand, which Python jinja2 answers by \
                 HTML-escaping the other operand: {reason}"
            );
            Some("operation")
        }
        _ => None,
    };
    match unsupported {
        Some(what) => Error::ChatTemplate {
            reason: format!("unsupported {what}: {reason}"),
        },
        None => Error::ChatTemplate { reason },
    }
}
