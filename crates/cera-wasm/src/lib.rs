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
//! files too large for one JavaScript buffer. This module runs on the calling thread (a page
//! runs it in a Web Worker); WebAssembly memory holds at most 4 GiB, model included.
//!
//! The threads build (`cera-threads.js`, the same API) is this crate compiled for
//! `wasm32-wasip1-threads`, whose standard library has threads over shared memory (the
//! `wasm32-unknown-unknown` one of stable Rust has none): wasm-bindgen does not build for WASI
//! targets, so there the functions of `abi.rs` are exported and `js/cera-threads.js` wraps
//! them, starting the kernels' threads as Web Workers (or Node workers).
//!
//! On WebGPU (`js/cera-webgpu.js`): this module, built with the core's GPU backend, exports
//! `abi.rs`'s functions too; the loader instantiates it with the backend's wait (an import that
//! returns after a turn of the event loop) as a `WebAssembly.Suspending` function and enters
//! through `WebAssembly.promising`, so a synchronous step can wait for the browser's GPU.

#[cfg(target_arch = "wasm32")]
mod abi;
mod api;
mod error;
mod options;

use wasm_bindgen::prelude::*;

use error::{Result, invalid};
use options::{GenerateConfig, SessionConfig, TurnConfig, from_js};

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
        let bytes = api::reserve_model(total_bytes)?;
        Ok(ModelLoader {
            bytes,
            total: total_bytes as usize,
        })
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

    /// A Whisper model on the whole file (speech to text).
    #[wasm_bindgen(js_name = finishWhisper)]
    pub fn finish_whisper(self) -> Result<Whisper> {
        if self.bytes.len() != self.total {
            return Err(invalid(format!(
                "ModelLoader: {} of {} bytes received",
                self.bytes.len(),
                self.total
            )));
        }
        Whisper::from_bytes(self.bytes)
    }
}

/// A Whisper model (speech to text): a GGUF `cera convert` writes from faster-whisper's files
/// (`cera pull whisper-tiny.en` caches one).
#[wasm_bindgen]
pub struct Whisper {
    inner: api::WhisperModel,
}

/// A file's bytes (`Uint8Array`) or 16 kHz mono samples (`Float32Array`), as owned data.
enum OwnedAudio {
    File(Vec<u8>),
    Samples(Vec<f32>),
}

impl OwnedAudio {
    fn from_js(audio: &JsValue) -> Result<OwnedAudio> {
        if let Some(f) = audio.dyn_ref::<js_sys::Float32Array>() {
            Ok(OwnedAudio::Samples(f.to_vec()))
        } else if let Some(b) = audio.dyn_ref::<js_sys::Uint8Array>() {
            Ok(OwnedAudio::File(b.to_vec()))
        } else {
            Err(invalid(
                "audio is a file's bytes (Uint8Array) or 16 kHz mono samples (Float32Array)",
            ))
        }
    }

    fn as_api(&self) -> api::Audio<'_> {
        match self {
            OwnedAudio::File(b) => api::Audio::File(b),
            OwnedAudio::Samples(x) => api::Audio::Samples(x.clone()),
        }
    }
}

#[wasm_bindgen]
impl Whisper {
    /// The model on a whole GGUF file's bytes (copied into WebAssembly memory).
    #[wasm_bindgen(js_name = fromBytes)]
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Whisper> {
        // (this build has no threads)
        Ok(Whisper {
            inner: api::load_whisper(bytes, 1)?,
        })
    }

    /// Transcribes `audio` (a file's bytes, `Uint8Array`: WAV, MP3, FLAC, Ogg Vorbis; or 16
    /// kHz mono samples, `Float32Array`). Options: `{ language, translate, timestamps,
    /// beamSize, bestOf, temperature, fallback, initialPrompt, responseFormat }`; returns
    /// OpenAI's `verbose_json` object (`{ text, language, duration, segments }`) by default,
    /// `{ text }` for `json`, a string for `text`, `srt`, `vtt`.
    pub fn transcribe(&self, audio: JsValue, opts: JsValue) -> Result<JsValue> {
        let cfg: options::TranscribeConfig = from_js("transcribe options", opts)?;
        let audio = OwnedAudio::from_js(&audio)?;
        let v = api::transcribe(&self.inner, audio.as_api(), &cfg)?;
        let ser = serde_wasm_bindgen::Serializer::json_compatible();
        serde::Serialize::serialize(&v, &ser).map_err(|e| invalid(e.to_string()))
    }

    /// The languages' probabilities over the audio's first 30 seconds, likeliest first:
    /// `[[code, p], ...]` (multilingual models).
    #[wasm_bindgen(js_name = detectLanguage)]
    pub fn detect_language(&self, audio: JsValue) -> Result<JsValue> {
        let audio = OwnedAudio::from_js(&audio)?;
        let v = api::detect_language(&self.inner, audio.as_api())?;
        serde_wasm_bindgen::to_value(&v).map_err(|e| invalid(e.to_string()))
    }

    /// Whether the model reads many languages (and translates).
    #[wasm_bindgen(getter)]
    pub fn multilingual(&self) -> bool {
        self.inner.multilingual()
    }
}

/// A loaded model.
#[wasm_bindgen]
pub struct Engine {
    inner: cera::engine::Engine,
}

impl Engine {
    fn load(bytes: Vec<u8>) -> Result<Engine> {
        // (this build has no threads)
        let inner = api::load(bytes, 1, "cpu")?;
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
        Ok(Session {
            inner: api::session(&self.inner, &cfg)?,
            engine: self.inner.clone(),
        })
    }

    /// Generates for every prompt at once, each in a session of its own (`sessionOpts`, as
    /// `session`'s), prefilled and decoded together in batched steps: several sequences for
    /// about the time of one. `opts` as `Session.generate`'s; returns one result per prompt,
    /// in order, each as `Session.generate` returns.
    #[wasm_bindgen(js_name = generateBatch)]
    pub fn generate_batch(
        &self,
        prompts: Vec<String>,
        opts: JsValue,
        session_opts: JsValue,
    ) -> std::result::Result<JsValue, JsValue> {
        let cfg: GenerateConfig = from_js("generate options", opts)?;
        let scfg: SessionConfig = from_js("session options", session_opts)?;
        let g = api::generate_batch(&self.inner, &prompts, &cfg, &scfg)?;
        Ok(serde_wasm_bindgen::to_value(&g).map_err(|e| invalid(e.to_string()))?)
    }

    /// A conversation with the model's chat template over a new session (same options).
    pub fn chat(&self, opts: JsValue) -> Result<Chat> {
        let cfg: SessionConfig = from_js("session options", opts)?;
        Ok(Chat {
            inner: api::chat(&self.inner, &cfg)?,
        })
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
        api::detokenize(&self.inner, &ids)
    }

    /// One pooled, normalized embedding per text (the model's own pooling), as `Float32Array`s.
    pub fn embed(&self, texts: Vec<String>) -> Result<Vec<js_sys::Float32Array>> {
        Ok(api::embed(&self.inner, &texts)?
            .iter()
            .map(|v| js_sys::Float32Array::from(&v[..]))
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
        api::architecture(&self.inner)
    }

    /// Loads this model's multimodal projector (an mmproj GGUF's bytes: llama.cpp's `--mmproj`
    /// file), for `Session.appendImage` and `appendAudio`.
    #[wasm_bindgen(js_name = loadMmproj)]
    pub fn load_mmproj(&self, bytes: Vec<u8>) -> Result<Mmproj> {
        Ok(Mmproj {
            inner: std::sync::Arc::new(api::load_mmproj(&self.inner, bytes)?),
        })
    }

    /// Where the model runs (`CPU` here).
    #[wasm_bindgen(getter)]
    pub fn backend(&self) -> String {
        self.inner.backend_name().to_owned()
    }

    /// Threads the kernels run on (1 in this build).
    #[wasm_bindgen(getter)]
    pub fn threads(&self) -> u32 {
        1
    }
}

/// A loaded multimodal projector (`Engine.loadMmproj`): images and audio go into sessions
/// through it.
#[wasm_bindgen]
pub struct Mmproj {
    inner: std::sync::Arc<cera::models::Mmproj>,
}

#[wasm_bindgen]
impl Mmproj {
    /// Whether it reads images.
    #[wasm_bindgen(getter)]
    pub fn vision(&self) -> bool {
        self.inner.has_vision()
    }

    /// Whether it reads audio.
    #[wasm_bindgen(getter)]
    pub fn audio(&self) -> bool {
        self.inner.has_audio()
    }

    /// The width of the embeddings it hands the model.
    #[wasm_bindgen(getter, js_name = nEmbd)]
    pub fn n_embd(&self) -> u32 {
        self.inner.n_embd_out() as u32
    }
}

/// Calls `f(piece)` for each piece of generated text; `false` from it stops generation, and so
/// does an exception, kept in `thrown` to be rethrown once generation has stopped.
fn emit_to<'a>(
    f: &'a Option<js_sys::Function>,
    thrown: &'a std::cell::RefCell<Option<JsValue>>,
) -> impl FnMut(&str) -> bool + 'a {
    move |piece: &str| match f {
        None => true,
        Some(f) => match f.call1(&JsValue::NULL, &JsValue::from_str(piece)) {
            Ok(v) => v.as_bool() != Some(false),
            Err(e) => {
                *thrown.borrow_mut() = Some(e);
                false
            }
        },
    }
}

/// `r`, unless the token callback threw: then what it threw.
fn rethrow<T>(
    r: Result<T>,
    thrown: std::cell::RefCell<Option<JsValue>>,
) -> std::result::Result<T, JsValue> {
    match thrown.into_inner() {
        Some(e) => Err(e),
        None => r.map_err(JsValue::from),
    }
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
    /// piece of text (`false` from it stops; what it throws stops and is rethrown). Options:
    /// `{ maxTokens, temperature, topK, topP,
    /// minP, repeatPenalty, seed, stop, ignoreEos, grammar, jsonSchema }`. Returns `{ text,
    /// tokens, finishReason, promptTokens, promptMs, decodeMs }`.
    pub fn generate(
        &mut self,
        prompt: &str,
        opts: JsValue,
        on_token: Option<js_sys::Function>,
    ) -> std::result::Result<JsValue, JsValue> {
        let cfg: GenerateConfig = from_js("generate options", opts)?;
        let thrown = Default::default();
        let g = api::generate(
            &mut self.inner,
            prompt,
            &cfg,
            &mut emit_to(&on_token, &thrown),
        );
        let g = rethrow(g, thrown)?;
        Ok(serde_wasm_bindgen::to_value(&g).map_err(|e| invalid(e.to_string()))?)
    }

    /// Appends an image (the file's bytes: JPEG, PNG, WebP, GIF) as `mmproj`'s model reads
    /// it: prepared, encoded and prefilled between its marker tokens, as llama.cpp does.
    /// Returns the positions it took; a later `generate` continues after it.
    #[wasm_bindgen(js_name = appendImage)]
    pub fn append_image(&mut self, mmproj: &Mmproj, image: &[u8]) -> Result<u32> {
        Ok(api::append_image(&mut self.inner, &mmproj.inner, image)? as u32)
    }

    /// Appends an audio clip: a file's bytes (`Uint8Array`: WAV, MP3, FLAC, Ogg Vorbis,
    /// resampled to 16 kHz as llama.cpp does) or 16 kHz mono samples (`Float32Array`).
    /// Returns the positions it took.
    #[wasm_bindgen(js_name = appendAudio)]
    pub fn append_audio(&mut self, mmproj: &Mmproj, audio: JsValue) -> Result<u32> {
        let audio = if let Some(f) = audio.dyn_ref::<js_sys::Float32Array>() {
            api::Audio::Samples(f.to_vec())
        } else if let Some(b) = audio.dyn_ref::<js_sys::Uint8Array>() {
            let bytes = b.to_vec();
            return Ok(
                api::append_audio(&mut self.inner, &mmproj.inner, api::Audio::File(&bytes))? as u32,
            );
        } else {
            return Err(invalid(
                "audio is a file's bytes (Uint8Array) or 16 kHz mono samples (Float32Array)",
            ));
        };
        Ok(api::append_audio(&mut self.inner, &mmproj.inner, audio)? as u32)
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
        Ok(self.inner.checkpoint()?)
    }

    /// Back to a state from `checkpoint` (of this model).
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        Ok(self.inner.restore(bytes)?)
    }

    /// The model this session runs.
    #[wasm_bindgen(getter)]
    pub fn engine(&self) -> Engine {
        Engine {
            inner: self.engine.clone(),
        }
    }
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
        api::ingest(&mut self.inner, role, content)
    }

    /// The result of tool call `id`.
    #[wasm_bindgen(js_name = ingestToolResult)]
    pub fn ingest_tool_result(&mut self, id: &str, content: &str) -> Result<()> {
        Ok(self.inner.ingest_tool_result(id, content.to_owned())?)
    }

    /// The tools the model may call, as OpenAI's `tools` array (`[{ type: "function",
    /// function: { name, description, parameters } }]`).
    #[wasm_bindgen(js_name = setTools)]
    pub fn set_tools(&mut self, tools: JsValue) -> Result<()> {
        let v: serde_json::Value = from_js("tools", tools)?;
        api::set_tools(&mut self.inner, &v)
    }

    /// The assistant's reply to the messages so far (added to the conversation), streamed to
    /// `onToken(piece)` (`false` from it stops). Options: those of `Session.generate` (but
    /// `grammar`), `jsonObject`, `toolChoice`. Returns `{ text, toolCalls: [{ id, name,
    /// arguments }], finishReason, promptTokens, completionTokens, reusedTokens }`.
    pub fn complete(
        &mut self,
        opts: JsValue,
        on_token: Option<js_sys::Function>,
    ) -> std::result::Result<JsValue, JsValue> {
        let cfg = TurnConfig::from_js(opts)?;
        let thrown = Default::default();
        let turn = api::complete(&mut self.inner, &cfg, &mut emit_to(&on_token, &thrown));
        let turn = rethrow(turn, thrown)?;
        Ok(turn
            .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
            .map_err(|e| invalid(e.to_string()))?)
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) {
        self.inner.reset();
    }

    /// The whole conversation's state as bytes.
    pub fn checkpoint(&mut self) -> Result<Vec<u8>> {
        Ok(self.inner.checkpoint()?)
    }

    /// Back to a conversation from `checkpoint`.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        Ok(self.inner.restore(bytes)?)
    }
}

use serde::Serialize;

/// The library's version.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
