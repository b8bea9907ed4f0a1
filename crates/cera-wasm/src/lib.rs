//! Cera in the browser and in Node: the core compiled to WebAssembly, with a JavaScript API
//! made by wasm-bindgen (`scripts/build-wasm.sh` builds the npm package into `pkg/`).
//!
//! ```js
//! import init, { Engine } from "cera-wasm";
//! await init();
//! const engine = Engine.fromBytes(new Uint8Array(await (await fetch(url)).arrayBuffer()));
//! const s = engine.session({ nCtx: 2048 });
//! const r = s.generate("The sky is", { maxTokens: 32, temperature: 0 }, (piece) => {
//!   console.log(piece); // return false to stop
//! });
//! ```
//!
//! Models arrive as bytes (no file system): whole, or in chunks through [`ModelLoader`] for
//! files too large for one JavaScript buffer. Everything runs on the calling thread (a page
//! runs it in a Web Worker); WebAssembly memory holds at most 4 GiB, model included.

mod error;
mod options;

use wasm_bindgen::prelude::*;

use error::{Result, core, invalid};
use options::{GenerateConfig, SessionConfig, TurnConfig, from_js};

/// The largest model a 32-bit WebAssembly memory can hold next to the engine's own buffers.
const MAX_MODEL_BYTES: f64 = 3.5 * (1u64 << 30) as f64;

/// A GGUF file received in chunks (`push` each, then `finish`): the memory is reserved once,
/// up front, so a model too large for WebAssembly fails at once with its size named.
#[wasm_bindgen]
pub struct ModelLoader {
    bytes: Vec<u8>,
    total: usize,
}

#[wasm_bindgen]
impl ModelLoader {
    /// A loader for a file of `total_bytes`.
    #[wasm_bindgen(constructor)]
    pub fn new(total_bytes: f64) -> Result<ModelLoader> {
        if !(total_bytes.is_finite() && total_bytes >= 0.0 && total_bytes.fract() == 0.0) {
            return Err(invalid(format!(
                "ModelLoader: the size must be a whole number of bytes (got {total_bytes})"
            )));
        }
        if total_bytes > MAX_MODEL_BYTES {
            return Err(invalid(format!(
                "the model is {:.2} GiB: WebAssembly's 4 GiB memory holds models up to {:.1} GiB \
                 (pick a smaller quantization)",
                total_bytes / (1u64 << 30) as f64,
                MAX_MODEL_BYTES / (1u64 << 30) as f64
            )));
        }
        let total = total_bytes as usize;
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(total).map_err(|_| {
            invalid(format!(
                "cannot reserve {total} bytes for the model: the WebAssembly memory is full"
            ))
        })?;
        Ok(ModelLoader { bytes, total })
    }

    /// Appends the next chunk of the file.
    pub fn push(&mut self, chunk: &[u8]) -> Result<()> {
        if self.bytes.len() + chunk.len() > self.total {
            return Err(invalid(format!(
                "ModelLoader: {} bytes pushed, more than the {} announced",
                self.bytes.len() + chunk.len(),
                self.total
            )));
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// Bytes received so far.
    #[wasm_bindgen(getter)]
    pub fn received(&self) -> f64 {
        self.bytes.len() as f64
    }

    /// The engine on the whole file.
    pub fn finish(self) -> Result<Engine> {
        if self.bytes.len() != self.total {
            return Err(invalid(format!(
                "ModelLoader: {} of {} bytes received",
                self.bytes.len(),
                self.total
            )));
        }
        Engine::load(self.bytes)
    }
}

/// A loaded model.
#[wasm_bindgen]
pub struct Engine {
    inner: cera::engine::Engine,
}

impl Engine {
    fn load(bytes: Vec<u8>) -> Result<Engine> {
        let mut o = cera::engine::EngineOptions::default();
        o.n_threads = Some(1);
        let inner = cera::engine::Engine::from_bytes(bytes, o).map_err(core)?;
        Ok(Engine { inner })
    }
}

#[wasm_bindgen]
impl Engine {
    /// The engine on a whole GGUF file's bytes (copied into WebAssembly memory).
    #[wasm_bindgen(js_name = fromBytes)]
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Engine> {
        Engine::load(bytes)
    }

    /// A new session (its own context): `{ nCtx, cacheTypeK, cacheTypeV }`.
    pub fn session(&self, opts: JsValue) -> Result<Session> {
        let cfg: SessionConfig = from_js("session options", opts)?;
        let s = self.inner.session(cfg.to_core()?);
        Ok(Session {
            inner: s,
            engine: self.inner.clone(),
        })
    }

    /// A conversation with the model's chat template over a new session (same options).
    pub fn chat(&self, opts: JsValue) -> Result<Chat> {
        let cfg: SessionConfig = from_js("session options", opts)?;
        let c = self
            .inner
            .session(cfg.to_core()?)
            .into_chat()
            .map_err(core)?;
        Ok(Chat { inner: c })
    }

    /// Token ids of `text` (BOS/EOS as the model asks when `addSpecial`; special tokens written
    /// in the text parsed when `parseSpecial`).
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        self.inner
            .tokenizer()
            .encode(text, add_special, parse_special)
    }

    /// The text of token ids.
    pub fn detokenize(&self, ids: Vec<u32>) -> Result<String> {
        let n = self.inner.n_vocab();
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= n) {
            return Err(invalid(format!(
                "token id {bad} is past the vocabulary ({n} tokens)"
            )));
        }
        Ok(self.inner.tokenizer().decode(&ids))
    }

    /// One pooled, normalized embedding per text (the model's own pooling), as `Float32Array`s.
    pub fn embed(&self, texts: Vec<String>) -> Result<Vec<js_sys::Float32Array>> {
        let o = cera::embed::EmbedOptions::default();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let e = self.inner.embed(&refs, &o).map_err(core)?;
        Ok(e.items
            .into_iter()
            .map(|i| {
                let v = i.vectors.into_iter().next().unwrap_or_default();
                js_sys::Float32Array::from(&v[..])
            })
            .collect())
    }

    #[wasm_bindgen(getter, js_name = nVocab)]
    pub fn n_vocab(&self) -> u32 {
        self.inner.n_vocab() as u32
    }

    #[wasm_bindgen(getter, js_name = nCtxTrain)]
    pub fn n_ctx_train(&self) -> u32 {
        self.inner.n_ctx_train() as u32
    }

    /// The model's architecture (`llama`, `qwen2`, `lfm2`, …).
    #[wasm_bindgen(getter)]
    pub fn architecture(&self) -> String {
        self.inner
            .gguf()
            .architecture()
            .map(str::to_owned)
            .unwrap_or_default()
    }

    /// Where the model runs (`CPU` here).
    #[wasm_bindgen(getter)]
    pub fn backend(&self) -> String {
        self.inner.backend_name().to_owned()
    }
}

/// Calls `f(piece)` for each piece of generated text; `false` from it stops generation.
fn emit_to(f: &Option<js_sys::Function>) -> impl FnMut(&str) -> bool + '_ {
    move |piece: &str| match f {
        None => true,
        Some(f) => !matches!(
            f.call1(&JsValue::NULL, &JsValue::from_str(piece)),
            Ok(v) if v.as_bool() == Some(false)
        ),
    }
}

/// What a finished generation returns: `{ text, tokens, finishReason, promptTokens, promptMs,
/// decodeMs }` (the prompt's prefill and the generation's times, in milliseconds).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Generation {
    text: String,
    tokens: Vec<u32>,
    finish_reason: String,
    prompt_tokens: usize,
    prompt_ms: f64,
    decode_ms: f64,
}

/// A sequence's context: append text, generate.
#[wasm_bindgen]
pub struct Session {
    inner: cera::session::Session,
    engine: cera::engine::Engine,
}

#[wasm_bindgen]
impl Session {
    /// Continues the context with `prompt` (with BOS when the context is empty, as the model
    /// asks; no chat template: see `Chat`) and generates, calling `onToken(piece)` with each
    /// piece of text (`false` from it stops). Options: `{ maxTokens, temperature, topK, topP,
    /// minP, repeatPenalty, seed, stop, ignoreEos, grammar, jsonSchema }`.
    pub fn generate(
        &mut self,
        prompt: &str,
        opts: JsValue,
        on_token: Option<js_sys::Function>,
    ) -> Result<JsValue> {
        let cfg: GenerateConfig = from_js("generate options", opts)?;
        let o = cfg.to_core()?;
        let before = self.inner.tokens().len();
        // (BOS as the model asks when the context is empty; special tokens stay text)
        self.inner.append_text(prompt, false).map_err(core)?;
        let prompt_tokens = self.inner.tokens().len() - before;
        let mut emit = emit_to(&on_token);
        let mut text = String::new();
        let mut tokens = Vec::new();
        let summary = self
            .inner
            .generate(&o, &mut |t: u32, piece: &str| {
                tokens.push(t);
                text.push_str(piece);
                if piece.is_empty() || emit(piece) {
                    cera::session::Control::Continue
                } else {
                    cera::session::Control::Stop
                }
            })
            .map_err(core)?;
        let g = Generation {
            text,
            tokens,
            finish_reason: summary.finish.as_str().to_owned(),
            prompt_tokens,
            prompt_ms: summary.prefill.as_secs_f64() * 1e3,
            decode_ms: summary.decode.as_secs_f64() * 1e3,
        };
        serde_wasm_bindgen::to_value(&g).map_err(|e| invalid(e.to_string()))
    }

    /// Token ids in the context.
    pub fn tokens(&self) -> Vec<u32> {
        self.inner.tokens().to_vec()
    }

    #[wasm_bindgen(getter, js_name = nCtx)]
    pub fn n_ctx(&self) -> u32 {
        self.inner.n_ctx() as u32
    }

    /// Empties the context.
    pub fn reset(&mut self) {
        self.inner.reset();
    }

    /// The session's state as bytes (tokens, KV cache, recurrent state).
    pub fn checkpoint(&mut self) -> Result<Vec<u8>> {
        self.inner.checkpoint().map_err(core)
    }

    /// Back to a state from `checkpoint` (of this model).
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.restore(bytes).map_err(core)
    }

    /// The model this session runs.
    #[wasm_bindgen(getter)]
    pub fn engine(&self) -> Engine {
        Engine {
            inner: self.engine.clone(),
        }
    }
}

/// What a chat turn returns: `{ text, toolCalls: [{ id, name, arguments }], finishReason,
/// promptTokens, completionTokens, reusedTokens }`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Turn {
    text: String,
    tool_calls: Vec<ToolCall>,
    finish_reason: String,
    prompt_tokens: usize,
    completion_tokens: usize,
    reused_tokens: usize,
}

#[derive(serde::Serialize)]
struct ToolCall {
    id: String,
    name: String,
    /// The arguments object.
    arguments: serde_json::Value,
}

/// A conversation with the model's chat template: messages in, a reply out, tool calls
/// parsed, JSON Schema and tool choice enforced by grammar.
#[wasm_bindgen]
pub struct Chat {
    inner: cera::chat::Chat,
}

#[wasm_bindgen]
impl Chat {
    /// Adds a message (`system`, `user`, `assistant`).
    pub fn ingest(&mut self, role: &str, content: &str) -> Result<()> {
        if role == "tool" {
            return Err(invalid(
                "a tool result needs its call's id: use ingestToolResult(id, content)",
            ));
        }
        self.inner
            .ingest(cera::chat::Message::new(
                role.to_owned(),
                content.to_owned(),
            ))
            .map_err(core)
    }

    /// The result of tool call `id`.
    #[wasm_bindgen(js_name = ingestToolResult)]
    pub fn ingest_tool_result(&mut self, id: &str, content: &str) -> Result<()> {
        self.inner
            .ingest_tool_result(id, content.to_owned())
            .map_err(core)
    }

    /// The tools the model may call, as OpenAI's `tools` array (`[{ type: "function",
    /// function: { name, description, parameters } }]`).
    #[wasm_bindgen(js_name = setTools)]
    pub fn set_tools(&mut self, tools: JsValue) -> Result<()> {
        let v: serde_json::Value = from_js("tools", tools)?;
        let t = cera::tools::parse_tools(&v).map_err(core)?;
        self.inner.set_tools(t);
        Ok(())
    }

    /// The assistant's reply to the messages so far (added to the conversation), streamed to
    /// `onToken(piece)` (`false` from it stops). Options: those of `Session.generate` (but
    /// `grammar`), `jsonObject`, `toolChoice`.
    pub fn complete(
        &mut self,
        opts: JsValue,
        on_token: Option<js_sys::Function>,
    ) -> Result<JsValue> {
        let cfg = TurnConfig::from_js(opts)?;
        let o = cfg.to_core()?;
        let mut emit = emit_to(&on_token);
        let r = self
            .inner
            .complete_streaming(&o, &mut |t: &str| {
                if t.is_empty() || emit(t) {
                    cera::session::Control::Continue
                } else {
                    cera::session::Control::Stop
                }
            })
            .map_err(core)?;
        let turn = Turn {
            text: r.text.clone(),
            tool_calls: r
                .tool_calls
                .iter()
                .map(|c| ToolCall {
                    id: c.id.clone().unwrap_or_default(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
            finish_reason: r.finish.as_str().to_owned(),
            prompt_tokens: r.summary.prompt_tokens,
            completion_tokens: r.summary.generated_tokens,
            reused_tokens: r.prefill.kept + r.prefill.from_cache,
        };
        turn.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
            .map_err(|e| invalid(e.to_string()))
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) {
        self.inner.reset();
    }

    /// The whole conversation's state as bytes.
    pub fn checkpoint(&mut self) -> Result<Vec<u8>> {
        self.inner.checkpoint().map_err(core)
    }

    /// Back to a conversation from `checkpoint`.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.restore(bytes).map_err(core)
    }
}

use serde::Serialize;

/// The library's version.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
