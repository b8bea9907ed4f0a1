//! What both JavaScript faces do, once: wasm-bindgen's classes (`lib.rs`, one thread) and the
//! threads build's exported functions (`abi.rs`) are thin wrappers over these.

use serde::Serialize;

use crate::error::{Result, core, invalid};
use crate::options::{GenerateConfig, SessionConfig, TurnConfig};

/// The largest model a 32-bit WebAssembly memory can hold next to the engine's own buffers.
const MAX_MODEL_BYTES: f64 = 3.5 * (1u64 << 30) as f64;

/// An empty buffer with room for a model file of `total_bytes` (reserved up front, so a model
/// too large for WebAssembly fails at once with its size named).
pub fn reserve_model(total_bytes: f64) -> Result<Vec<u8>> {
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
    Ok(bytes)
}

/// The engine on a whole GGUF file, its kernels on `n_threads` threads, on `device` (`cpu`,
/// `gpu`: WebGPU, through `cera-webgpu.js`; `auto`).
pub fn load(bytes: Vec<u8>, n_threads: usize, device: &str) -> Result<cera::engine::Engine> {
    let mut o = cera::engine::EngineOptions::default();
    o.n_threads = Some(n_threads.max(1));
    o.device = device.parse().map_err(core)?;
    cera::engine::Engine::from_bytes(bytes, o).map_err(core)
}

pub fn session(e: &cera::engine::Engine, cfg: &SessionConfig) -> Result<cera::session::Session> {
    Ok(e.session(cfg.to_core()?))
}

pub fn chat(e: &cera::engine::Engine, cfg: &SessionConfig) -> Result<cera::chat::Chat> {
    e.session(cfg.to_core()?).into_chat().map_err(core)
}

pub fn detokenize(e: &cera::engine::Engine, ids: &[u32]) -> Result<String> {
    let n = e.n_vocab();
    if let Some(bad) = ids.iter().find(|&&t| t as usize >= n) {
        return Err(invalid(format!(
            "token id {bad} is past the vocabulary ({n} tokens)"
        )));
    }
    Ok(e.tokenizer().decode(ids))
}

/// One pooled, normalized embedding per text (the model's own pooling).
pub fn embed(e: &cera::engine::Engine, texts: &[String]) -> Result<Vec<Vec<f32>>> {
    let o = cera::embed::EmbedOptions::default();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let r = e.embed(&refs, &o).map_err(core)?;
    Ok(r.items
        .into_iter()
        .map(|i| i.vectors.into_iter().next().unwrap_or_default())
        .collect())
}

pub fn architecture(e: &cera::engine::Engine) -> String {
    e.gguf()
        .architecture()
        .map(str::to_owned)
        .unwrap_or_default()
}

/// What a finished generation returns: `{ text, tokens, finishReason, promptTokens, promptMs,
/// decodeMs }` (the prompt's prefill and the generation's times, in milliseconds).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Generation {
    text: String,
    tokens: Vec<u32>,
    finish_reason: String,
    prompt_tokens: usize,
    prompt_ms: f64,
    decode_ms: f64,
}

/// Continues `s` with `prompt` (BOS as the model asks when the context is empty; special
/// tokens stay text) and generates, calling `emit(piece)` per piece of text (`false` stops).
pub fn generate(
    s: &mut cera::session::Session,
    prompt: &str,
    cfg: &GenerateConfig,
    emit: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation> {
    let o = cfg.to_core()?;
    let before = s.tokens().len();
    s.append_text(prompt, false).map_err(core)?;
    let prompt_tokens = s.tokens().len() - before;
    let mut text = String::new();
    let mut tokens = Vec::new();
    let summary = s
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
    Ok(Generation {
        text,
        tokens,
        finish_reason: summary.finish.as_str().to_owned(),
        prompt_tokens,
        prompt_ms: summary.prefill.as_secs_f64() * 1e3,
        decode_ms: summary.decode.as_secs_f64() * 1e3,
    })
}

/// Generates after every prompt at once, each in a new session of `scfg`'s options (BOS as the
/// model asks; special tokens stay text): prefilled and decoded together in batched steps
/// through the core's scheduler, one forward pass for all of them. Results in the prompts'
/// order, as [`generate`]'s (`promptMs`/`decodeMs` each sequence's share of the shared steps).
pub fn generate_batch(
    e: &cera::engine::Engine,
    prompts: &[String],
    cfg: &GenerateConfig,
    scfg: &SessionConfig,
) -> Result<Vec<Generation>> {
    let o = cfg.to_core()?;
    let toks: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| e.tokenizer().encode(p, true, false))
        .collect();
    let done = e.generate_many(&toks, &o, scfg.to_core()?).map_err(core)?;
    Ok(done
        .into_iter()
        .zip(&toks)
        .map(|(c, p)| Generation {
            text: c.text,
            tokens: c.tokens,
            finish_reason: c.finished.summary.finish.as_str().to_owned(),
            prompt_tokens: p.len(),
            prompt_ms: c.finished.summary.prefill.as_secs_f64() * 1e3,
            decode_ms: c.finished.summary.decode.as_secs_f64() * 1e3,
        })
        .collect())
}

/// What a chat turn returns: `{ text, toolCalls: [{ id, name, arguments }], finishReason,
/// promptTokens, completionTokens, reusedTokens }`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    text: String,
    tool_calls: Vec<ToolCall>,
    finish_reason: String,
    prompt_tokens: usize,
    completion_tokens: usize,
    reused_tokens: usize,
}

#[derive(Serialize)]
struct ToolCall {
    id: String,
    name: String,
    /// The arguments object.
    arguments: serde_json::Value,
}

/// Adds a message (`system`, `user`, `assistant`; a tool result goes through
/// `ingest_tool_result`, which needs its call's id).
pub fn ingest(c: &mut cera::chat::Chat, role: &str, content: &str) -> Result<()> {
    if role == "tool" {
        return Err(invalid(
            "a tool result needs its call's id: use ingestToolResult(id, content)",
        ));
    }
    c.ingest(cera::chat::Message::new(
        role.to_owned(),
        content.to_owned(),
    ))
    .map_err(core)
}

/// The tools the model may call, as OpenAI's `tools` array.
pub fn set_tools(c: &mut cera::chat::Chat, tools: &serde_json::Value) -> Result<()> {
    let t = cera::tools::parse_tools(tools).map_err(core)?;
    c.set_tools(t);
    Ok(())
}

/// The assistant's reply to the messages so far (added to the conversation), streamed to
/// `emit(piece)` (`false` stops).
pub fn complete(
    c: &mut cera::chat::Chat,
    cfg: &TurnConfig,
    emit: &mut dyn FnMut(&str) -> bool,
) -> Result<Turn> {
    let o = cfg.to_core()?;
    let r = c
        .complete_streaming(&o, &mut |t: &str| {
            if t.is_empty() || emit(t) {
                cera::session::Control::Continue
            } else {
                cera::session::Control::Stop
            }
        })
        .map_err(core)?;
    Ok(Turn {
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
    })
}

/// An mmproj file's projector for this model (the pair's widths checked).
pub fn load_mmproj(e: &cera::engine::Engine, bytes: Vec<u8>) -> Result<cera::models::Mmproj> {
    e.load_mmproj_bytes(bytes).map_err(core)
}

/// Appends an image file's bytes (JPEG, PNG, WebP, GIF) as the mmproj's model reads it;
/// returns the positions it took.
pub fn append_image(
    s: &mut cera::session::Session,
    m: &cera::models::Mmproj,
    bytes: &[u8],
) -> Result<usize> {
    let img = cera::media::Rgb8::decode(bytes).map_err(core)?;
    s.append_image(m, &img).map_err(core)
}

/// Appends an audio clip: a file's bytes (WAV, MP3, FLAC, Ogg Vorbis; resampled to 16 kHz as
/// llama.cpp does) or 16 kHz mono samples.
pub fn append_audio(
    s: &mut cera::session::Session,
    m: &cera::models::Mmproj,
    audio: Audio<'_>,
) -> Result<usize> {
    let samples = match audio {
        Audio::File(bytes) => cera::media::audio::decode_audio(bytes, 16_000).map_err(core)?,
        Audio::Samples(x) => x,
    };
    s.append_audio(m, &samples).map_err(core)
}

/// An audio argument.
pub enum Audio<'a> {
    /// A file's bytes.
    File(&'a [u8]),
    /// 16 kHz mono samples.
    Samples(Vec<f32>),
}

/// A loaded Whisper model and the CPU backend it runs on.
pub struct WhisperModel {
    model: cera::models::whisper::Whisper,
    cpu: cera::backend::Cpu,
}

impl WhisperModel {
    pub fn multilingual(&self) -> bool {
        self.model.special.multilingual()
    }
}

/// A Whisper GGUF's model (`cera convert` of a faster-whisper folder) on `n_threads`.
pub fn load_whisper(bytes: Vec<u8>, n_threads: usize) -> Result<WhisperModel> {
    let file = cera::gguf::GgufFile::from_bytes(bytes).map_err(core)?;
    let model = cera::models::whisper::Whisper::load(std::sync::Arc::new(file)).map_err(core)?;
    Ok(WhisperModel {
        model,
        cpu: cera::backend::Cpu::new(n_threads.max(1)),
    })
}

fn samples(audio: Audio<'_>) -> Result<Vec<f32>> {
    Ok(match audio {
        Audio::File(bytes) => cera::media::audio::decode_audio(bytes, 16_000).map_err(core)?,
        Audio::Samples(x) => x,
    })
}

/// The transcript of `audio` in `cfg.response_format`: OpenAI's `verbose_json` or `json` as an
/// object, `text`, `srt` or `vtt` as a string.
pub fn transcribe(
    w: &WhisperModel,
    audio: Audio<'_>,
    cfg: &crate::options::TranscribeConfig,
) -> Result<serde_json::Value> {
    use cera::transcribe::format::{Format, render, verbose};
    let f = Format::parse(&cfg.response_format).map_err(core)?;
    if !cfg.timestamps && matches!(f, Format::Srt | Format::Vtt) {
        return Err(crate::error::invalid(format!(
            "responseFormat {} needs timestamps",
            cfg.response_format
        )));
    }
    let t = cera::transcribe::transcribe(&w.model, &w.cpu, &samples(audio)?, &cfg.to_core())
        .map_err(core)?;
    Ok(match f {
        Format::VerboseJson => verbose(&t),
        Format::Json => serde_json::json!({ "text": t.text.trim() }),
        _ => serde_json::Value::String(render(&t, f)),
    })
}

/// The languages' probabilities over the audio's first 30 seconds, likeliest first.
pub fn detect_language(w: &WhisperModel, audio: Audio<'_>) -> Result<Vec<(String, f32)>> {
    cera::transcribe::detect_language(&w.model, &w.cpu, &samples(audio)?).map_err(core)
}
