//! Kotlin and Swift bindings through UniFFI's proc-macros: an [`Engine`] loads a model once;
//! [`Session`]s hold a sequence's context; [`chat::Chat`] is a conversation with the model's
//! template, tools and JSON Schema. Every call that generates has three forms: blocking
//! (`generate`), `suspend`/`async` (`generateAsync`), and streaming (`stream` → a
//! [`stream::TextStream`], or `generateWith` and a [`stream::TokenListener`] callback).
//! Errors are [`errors::CeraError`] (Kotlin `CeraException.*`, Swift `CeraError.*`).
//!
//! A thin front end, like `cera-py`: every decision is the core's; this crate converts
//! arguments and results. `cargo run -p cera-ffi --bin uniffi-bindgen -- generate --library
//! target/release/libcera_ffi.so --language kotlin|swift --out-dir OUT` writes the bindings.

use std::sync::{Arc, Mutex, MutexGuard};

pub mod chat;
pub mod errors;
pub mod speech;
pub mod stream;
pub mod types;

use errors::{Result, invalid, poisoned};
use stream::{End, TextStream, TokenListener};
use types::{GenerateConfig, Generation, SessionConfig};

uniffi::setup_scaffolding!();

/// A loaded model: shared by any number of sessions and chats, on any threads.
#[derive(uniffi::Object)]
pub struct Engine {
    inner: cera::engine::Engine,
}

#[uniffi::export]
impl Engine {
    /// Loads `model`: a GGUF path, or a catalog name (fetched into the cache when missing).
    /// `n_threads` null: all cores. `device`: `cpu`; `gpu` (the GPU backend: wgpu over Vulkan
    /// on Android and Linux, Metal on iOS and macOS; an error naming why where there is no
    /// usable adapter or the model needs what it lacks); `auto` (a hardware GPU when one is
    /// usable, else the CPU; [`Engine::backend`] says which).
    #[uniffi::constructor(default(n_threads = None, device = "auto"))]
    pub fn new(model: String, n_threads: Option<u32>, device: String) -> Result<Arc<Engine>> {
        if n_threads == Some(0) {
            return Err(invalid("n_threads must be at least 1"));
        }
        let device = match device.as_str() {
            "cpu" => cera::engine::DeviceKind::Cpu,
            "gpu" => cera::engine::DeviceKind::Gpu,
            "auto" => cera::engine::DeviceKind::Auto,
            other => {
                return Err(invalid(format!(
                    "device {other:?} is not one of cpu, gpu, auto"
                )));
            }
        };
        let path = cera::fetch::resolve_model(Some(&model), &mut |_| {})?;
        let mut o = cera::engine::EngineOptions::default();
        o.n_threads = n_threads.map(|n| n as usize);
        o.device = device;
        let inner = cera::engine::Engine::load(path, o)?;
        Ok(Arc::new(Engine { inner }))
    }

    /// Where the model runs, as llama-bench's backend column names it: `CPU`, `Vulkan`,
    /// `Metal`, …
    pub fn backend(&self) -> String {
        self.inner.backend_name().to_owned()
    }

    /// The device in words (the GPU adapter's name and API, or the CPU and its threads).
    pub fn device(&self) -> String {
        self.inner.device_description()
    }

    /// Why `auto` chose the CPU (no usable hardware GPU, or what the model needs that the GPU
    /// path lacks); null when it did not fall back.
    pub fn device_fallback(&self) -> Option<String> {
        self.inner.device_fallback().map(str::to_owned)
    }

    /// A new session (its own context).
    pub fn session(&self, config: SessionConfig) -> Result<Arc<Session>> {
        let s = self.inner.session(config.to_core()?);
        Ok(Arc::new(Session {
            cancel: s.cancel_handle(),
            inner: Arc::new(Mutex::new(s)),
        }))
    }

    /// Generates for every prompt at once, each in a session of its own (`session`'s
    /// options): prefilled and decoded together in batched steps, as a server runs parallel
    /// requests. Results in the prompts' order (blocking).
    pub fn generate_batch(
        &self,
        prompts: Vec<String>,
        config: GenerateConfig,
        session: SessionConfig,
    ) -> Result<Vec<Generation>> {
        let opts = config.to_core()?;
        let tok = self.inner.tokenizer();
        let toks: Vec<Vec<u32>> = prompts.iter().map(|p| tok.encode(p, true, false)).collect();
        let done = self.inner.generate_many(&toks, &opts, session.to_core()?)?;
        Ok(done
            .into_iter()
            .map(|c| Generation {
                text: c.text,
                tokens: c.tokens,
                finish_reason: c.finished.summary.finish.as_str().to_owned(),
            })
            .collect())
    }

    /// A conversation with the model's chat template, over a new session.
    pub fn chat(&self, config: SessionConfig) -> Result<Arc<chat::Chat>> {
        let c = self.inner.session(config.to_core()?).into_chat()?;
        Ok(Arc::new(chat::Chat::new(c)))
    }

    /// Token ids of `text` (BOS/EOS as the model asks when `add_special`; special tokens
    /// written in the text parsed when `parse_special`).
    #[uniffi::method(default(add_special = true, parse_special = false))]
    pub fn tokenize(&self, text: String, add_special: bool, parse_special: bool) -> Vec<u32> {
        self.inner
            .tokenizer()
            .encode(&text, add_special, parse_special)
    }

    /// The text of `ids`.
    pub fn detokenize(&self, ids: Vec<u32>) -> Result<String> {
        let n = self.inner.n_vocab();
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= n) {
            return Err(cera::Error::TokenOutOfRange {
                id: bad,
                n_vocab: n,
            }
            .into());
        }
        Ok(self.inner.tokenizer().decode(&ids))
    }

    /// One pooled embedding per text (`pooling` null: the model's own; `mean`, `cls`, `last`,
    /// `rank` for rerankers); `normalize` as llama.cpp's `--embd-normalize` (-1 none, 2
    /// euclidean, …).
    #[uniffi::method(default(pooling = None, normalize = 2))]
    pub fn embed(
        &self,
        texts: Vec<String>,
        pooling: Option<String>,
        normalize: i32,
    ) -> Result<Vec<Vec<f32>>> {
        let mut o = cera::embed::EmbedOptions::default();
        o.pooling = match pooling.as_deref() {
            Some("none") => {
                return Err(invalid(
                    "pooling `none` gives a vector per token: use mean, cls, last or rank here",
                ));
            }
            p => p.map(cera::embed::Pooling::from_name).transpose()?,
        };
        o.normalize = cera::embed::Normalize::from_llama(normalize)?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let e = self.inner.embed(&refs, &o)?;
        Ok(e.items
            .into_iter()
            .map(|i| i.vectors.into_iter().next().unwrap_or_default())
            .collect())
    }

    /// Loads a LoRA adapter for this model (a GGUF adapter or a PEFT directory).
    pub fn load_lora(&self, path: String) -> Result<Arc<LoraAdapter>> {
        Ok(Arc::new(LoraAdapter {
            inner: self.inner.load_lora(path)?,
        }))
    }

    /// Loads this model's vision projector (an mmproj GGUF: llama.cpp's `--mmproj` file); one
    /// made for a model of another width is refused.
    pub fn load_mmproj(&self, path: String) -> Result<Arc<Mmproj>> {
        Ok(Arc::new(Mmproj {
            inner: Arc::new(self.inner.load_mmproj(path)?),
        }))
    }

    /// Tokens in the vocabulary.
    pub fn n_vocab(&self) -> u32 {
        self.inner.n_vocab() as u32
    }

    /// The context length the model was trained with.
    pub fn n_ctx_train(&self) -> u32 {
        self.inner.n_ctx_train() as u32
    }

    /// The model file.
    pub fn path(&self) -> String {
        self.inner.path().display().to_string()
    }
}

/// A loaded LoRA adapter (attach it to sessions).
#[derive(uniffi::Object)]
pub struct LoraAdapter {
    inner: Arc<cera::lora::LoraAdapter>,
}

#[uniffi::export]
impl LoraAdapter {
    pub fn name(&self) -> String {
        self.inner.name.clone()
    }
}

/// A loaded multimodal projector (`Engine.loadMmproj`): images and audio go into sessions
/// through it.
#[derive(uniffi::Object)]
pub struct Mmproj {
    inner: Arc<cera::models::Mmproj>,
}

#[uniffi::export]
impl Mmproj {
    /// The width of the embeddings it gives the model.
    pub fn n_embd(&self) -> u32 {
        self.inner.n_embd_out() as u32
    }
}

/// One sequence's context. A generation holds the session (other calls on it wait);
/// `cancel` works from any thread while it runs.
#[derive(uniffi::Object)]
pub struct Session {
    inner: Arc<Mutex<cera::session::Session>>,
    cancel: cera::session::CancelHandle,
}

fn lock(s: &Mutex<cera::session::Session>) -> Result<MutexGuard<'_, cera::session::Session>> {
    s.lock().map_err(|_| poisoned("session"))
}

/// Continues the context with `prompt` (BOS when the context is empty) and generates, calling
/// `emit` with each non-empty piece (false from `emit`: stop).
fn run(
    s: &mut cera::session::Session,
    prompt: &str,
    opts: &cera::session::GenerateOptions,
    emit: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation> {
    s.append_text(prompt, false)?;
    let mut text = String::new();
    let mut tokens = Vec::new();
    let summary = s.generate(opts, &mut |t: u32, piece: &str| {
        tokens.push(t);
        text.push_str(piece);
        if piece.is_empty() || emit(piece) {
            cera::session::Control::Continue
        } else {
            cera::session::Control::Stop
        }
    })?;
    Ok(Generation {
        text,
        tokens,
        finish_reason: summary.finish.as_str().to_owned(),
    })
}

#[uniffi::export]
impl Session {
    /// Appends an image (a JPEG, PNG, WebP or GIF file's bytes) as `mmproj`'s model reads
    /// it: prepared, encoded and prefilled between its marker tokens, as llama.cpp does.
    /// Returns the positions it took; a later `generate` continues after it. A bad image is
    /// an `InvalidArgument` naming what is wrong.
    pub fn append_image(&self, mmproj: Arc<Mmproj>, image: Vec<u8>) -> Result<u32> {
        let img = cera::media::Rgb8::decode(&image).map_err(|e| invalid(e.to_string()))?;
        let n = lock(&self.inner)?.append_image(&mmproj.inner, &img)?;
        Ok(n as u32)
    }

    /// Appends an audio clip (a WAV, MP3, FLAC or Ogg Vorbis file's bytes) as `mmproj`'s model
    /// reads it: decoded, resampled to 16 kHz as llama.cpp does, encoded and prefilled.
    /// Returns the positions it took. A bad file, or an mmproj without an audio encoder, is an
    /// `InvalidArgument` naming what is wrong.
    pub fn append_audio(&self, mmproj: Arc<Mmproj>, audio: Vec<u8>) -> Result<u32> {
        let samples =
            cera::media::audio::decode_audio(&audio, 16_000).map_err(|e| invalid(e.to_string()))?;
        let n = lock(&self.inner)?
            .append_audio(&mmproj.inner, &samples)
            .map_err(|e| match e {
                cera::Error::Media { .. } => invalid(e.to_string()),
                e => e.into(),
            })?;
        Ok(n as u32)
    }

    /// Continues the context with `prompt` and generates (blocking).
    pub fn generate(&self, prompt: String, config: GenerateConfig) -> Result<Generation> {
        let opts = config.to_core()?;
        run(&mut *lock(&self.inner)?, &prompt, &opts, &mut |_| true)
    }

    /// As `generate`, suspending (Kotlin) / awaiting (Swift) instead of blocking: the engine
    /// works on its own thread.
    pub async fn generate_async(
        &self,
        prompt: String,
        config: GenerateConfig,
    ) -> Result<Generation> {
        let opts = config.to_core()?;
        let inner = Arc::clone(&self.inner);
        stream::spawn("cera-generate", move || {
            run(&mut *lock(&inner)?, &prompt, &opts, &mut |_| true)
        })
        .await
    }

    /// As `generate`, calling `listener` with each piece on this thread (false: stop).
    pub fn generate_with(
        &self,
        prompt: String,
        config: GenerateConfig,
        listener: Box<dyn TokenListener>,
    ) -> Result<Generation> {
        let opts = config.to_core()?;
        run(&mut *lock(&self.inner)?, &prompt, &opts, &mut |t| {
            listener.on_text(t.to_owned())
        })
    }

    /// The pieces of a generation as a stream (Kotlin: `.asFlow()`).
    pub fn stream(&self, prompt: String, config: GenerateConfig) -> Result<Arc<TextStream>> {
        let opts = config.to_core()?;
        let inner = Arc::clone(&self.inner);
        stream::start("cera-generate", move |emit| {
            let g = run(&mut *lock(&inner)?, &prompt, &opts, emit)?;
            Ok(End::Finish(g.finish_reason))
        })
    }

    /// Stops a running generation (from another thread): it returns within a token.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The context's token ids (prompt and replies).
    pub fn tokens(&self) -> Result<Vec<u32>> {
        Ok(lock(&self.inner)?.tokens().to_vec())
    }

    /// Context length in tokens.
    pub fn n_ctx(&self) -> Result<u32> {
        Ok(lock(&self.inner)?.n_ctx() as u32)
    }

    /// Empties the context.
    pub fn reset(&self) -> Result<()> {
        lock(&self.inner)?.reset();
        Ok(())
    }

    /// The session's state (context tokens, KV cache, sampler) as bytes, for `restore`.
    pub fn checkpoint(&self) -> Result<Vec<u8>> {
        Ok(lock(&self.inner)?.checkpoint()?)
    }

    /// Goes back to a `checkpoint` of a session of this model.
    pub fn restore(&self, bytes: Vec<u8>) -> Result<()> {
        Ok(lock(&self.inner)?.restore(&bytes)?)
    }

    /// Writes a checkpoint to `path`.
    pub fn save_checkpoint(&self, path: String) -> Result<()> {
        Ok(lock(&self.inner)?.save_checkpoint(path)?)
    }

    /// Restores a checkpoint written by `save_checkpoint`.
    pub fn load_checkpoint(&self, path: String) -> Result<()> {
        Ok(lock(&self.inner)?.load_checkpoint(path)?)
    }

    /// Applies `adapter` at `scale` from now on (the context is cleared when the set changes).
    #[uniffi::method(default(scale = 1.0))]
    pub fn attach_lora(&self, adapter: Arc<LoraAdapter>, scale: f32) -> Result<()> {
        Ok(lock(&self.inner)?.attach_lora(&adapter.inner, scale)?)
    }

    /// Stops applying `adapter`; whether it was attached.
    pub fn detach_lora(&self, adapter: Arc<LoraAdapter>) -> Result<bool> {
        Ok(lock(&self.inner)?.detach_lora(&adapter.inner))
    }
}

/// Whether `text` is valid under the JSON Schema `schema_json` (as the engine's grammar for it
/// reads it: what a `json_schema`-constrained reply is guaranteed to satisfy).
#[uniffi::export]
pub fn schema_accepts(schema_json: String, text: String) -> Result<bool> {
    let schema = types::parse_json("json_schema", &schema_json)?;
    Ok(cera::grammar::Grammar::from_json_schema(&schema)?.accepts(&text))
}

/// The OpenAI `tools` list (JSON text) for `tools`, as the server and Python take it.
#[uniffi::export]
pub fn tools_json(tools: Vec<types::ToolSpec>) -> Result<String> {
    let t = tools
        .iter()
        .map(types::ToolSpec::to_core)
        .collect::<Result<Vec<_>>>()?;
    Ok(cera::tools::tools_value(&t).to_string())
}

/// The engine's version.
#[uniffi::export]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
