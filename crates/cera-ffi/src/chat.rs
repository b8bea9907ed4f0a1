//! `Chat`: a conversation over a session with the model's own chat template (the core's chat
//! coordinator): messages in, a reply out, tool calls parsed, JSON Schema and tool choice
//! enforced by grammar, the whole conversation checkpointed.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::errors::{Result, invalid, poisoned};
use crate::stream::{self, End, TextStream, TokenListener};
use crate::types::{GenerateConfig, ToolSpec, Turn, TurnConfig, parse_json};

#[derive(uniffi::Object)]
pub struct Chat {
    inner: Arc<Mutex<cera::chat::Chat>>,
    cancel: cera::session::CancelHandle,
}

impl Chat {
    pub(crate) fn new(chat: cera::chat::Chat) -> Chat {
        Chat {
            cancel: chat.session().cancel_handle(),
            inner: Arc::new(Mutex::new(chat)),
        }
    }
}

fn lock(c: &Mutex<cera::chat::Chat>) -> Result<MutexGuard<'_, cera::chat::Chat>> {
    c.lock().map_err(|_| poisoned("chat"))
}

fn complete(
    c: &Mutex<cera::chat::Chat>,
    opts: &cera::chat::TurnOptions,
    emit: &mut dyn FnMut(&str) -> bool,
) -> Result<Turn> {
    let r = lock(c)?.complete_streaming(opts, &mut |t: &str| {
        if t.is_empty() || emit(t) {
            cera::session::Control::Continue
        } else {
            cera::session::Control::Stop
        }
    })?;
    Ok(Turn::from_core(&r))
}

#[uniffi::export]
impl Chat {
    /// Adds a message with `role` (`system`, `user`, `assistant`) and `content`.
    pub fn ingest(&self, role: String, content: String) -> Result<()> {
        if role == "tool" {
            return Err(invalid(
                "a tool result needs its call's id: use ingestToolResult(id, content)",
            ));
        }
        Ok(lock(&self.inner)?.ingest(cera::chat::Message::new(role, content))?)
    }

    /// Adds one message in OpenAI's shape as JSON text (`role`, `content`, `tool_calls`,
    /// `tool_call_id`), e.g. an assistant message with tool calls replayed from history.
    pub fn ingest_json(&self, message_json: String) -> Result<()> {
        let msg: cera::chat::Message =
            serde_json::from_value(parse_json("message", &message_json)?)
                .map_err(|e| invalid(format!("message: {e}")))?;
        Ok(lock(&self.inner)?.ingest(msg)?)
    }

    /// Adds the result of the tool call `id` (from `Turn.toolCalls`).
    pub fn ingest_tool_result(&self, id: String, content: String) -> Result<()> {
        Ok(lock(&self.inner)?.ingest_tool_result(&id, content)?)
    }

    /// Sets the tools the model may call (empty: none).
    pub fn set_tools(&self, tools: Vec<ToolSpec>) -> Result<()> {
        let t = tools
            .iter()
            .map(ToolSpec::to_core)
            .collect::<Result<Vec<_>>>()?;
        lock(&self.inner)?.set_tools(t);
        Ok(())
    }

    /// Sets the tools from OpenAI's `tools` list as JSON text.
    pub fn set_tools_json(&self, tools_json: String) -> Result<()> {
        let t = cera::tools::parse_tools(&parse_json("tools", &tools_json)?)?;
        lock(&self.inner)?.set_tools(t);
        Ok(())
    }

    /// Generates the assistant's reply (blocking).
    pub fn complete(&self, config: TurnConfig) -> Result<Turn> {
        complete(&self.inner, &config.to_core()?, &mut |_| true)
    }

    /// As `complete`, suspending (Kotlin) / awaiting (Swift) instead of blocking.
    pub async fn complete_async(&self, config: TurnConfig) -> Result<Turn> {
        let opts = config.to_core()?;
        let inner = Arc::clone(&self.inner);
        stream::spawn("cera-chat", move || complete(&inner, &opts, &mut |_| true)).await
    }

    /// As `complete`, calling `listener` with each raw piece (tool-call markup included) on
    /// this thread (false: stop).
    pub fn complete_with(
        &self,
        config: TurnConfig,
        listener: Box<dyn TokenListener>,
    ) -> Result<Turn> {
        complete(&self.inner, &config.to_core()?, &mut |t| {
            listener.on_text(t.to_owned())
        })
    }

    /// The reply's raw pieces as a stream; `TextStream.turn()` is the finished turn.
    pub fn stream(&self, config: TurnConfig) -> Result<Arc<TextStream>> {
        let opts = config.to_core()?;
        let inner = Arc::clone(&self.inner);
        stream::start("cera-chat", move |emit| {
            Ok(End::Turn(Box::new(complete(&inner, &opts, emit)?)))
        })
    }

    /// A reply constrained to the JSON Schema `schema_json`, as a stream (the whole text parses
    /// and validates once it ends).
    pub fn stream_json(
        &self,
        schema_json: String,
        config: GenerateConfig,
    ) -> Result<Arc<TextStream>> {
        self.stream(TurnConfig {
            generate: config,
            json_schema: Some(schema_json),
            json_object: false,
            tool_choice: Some("none".into()),
        })
    }

    /// Stops a running turn from another thread.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Forgets the conversation (tools stay).
    pub fn reset(&self) -> Result<()> {
        lock(&self.inner)?.reset();
        Ok(())
    }

    /// Messages so far, as OpenAI-shaped JSON text.
    pub fn messages_json(&self) -> Result<String> {
        let c = lock(&self.inner)?;
        serde_json::to_string(c.messages()).map_err(|e| invalid(format!("messages: {e}")))
    }

    /// The conversation (messages, tools, context) as bytes, for `restore`.
    pub fn checkpoint(&self) -> Result<Vec<u8>> {
        Ok(lock(&self.inner)?.checkpoint()?)
    }

    /// Goes back to a `checkpoint` of a chat on this model.
    pub fn restore(&self, bytes: Vec<u8>) -> Result<()> {
        Ok(lock(&self.inner)?.restore(&bytes)?)
    }

    /// Writes a checkpoint to `path`.
    pub fn save(&self, path: String) -> Result<()> {
        Ok(lock(&self.inner)?.save(path)?)
    }

    /// Restores a checkpoint written by `save`.
    pub fn load(&self, path: String) -> Result<()> {
        Ok(lock(&self.inner)?.load(path)?)
    }
}
