//! Media in requests: OpenAI's `image_url` (data URLs) and `input_audio` (base64) content parts
//! and Ollama's `images` (base64), decoded here, encoded by the mmproj on the engine's backend
//! off the async runtime, and placed at `<__media__>` markers in the rendered prompt (the
//! core's `Engine::media_prompt`, as llama.cpp's mtmd tokenizes it).

use std::sync::Arc;

use base64::Engine as _;
use cera::decode::{Chunk, Prompt};
use cera::media::{MediaInput, Rgb8};
pub use cera::session::MEDIA_MARKER;

use crate::Ready;
use crate::error::ApiError;

/// Fails unless the server runs a multimodal projector.
pub(crate) fn need_mmproj(r: &Ready, what: &str) -> Result<(), ApiError> {
    if r.mmproj.is_none() {
        return Err(ApiError::bad_request(format!(
            "{what}: this server takes no images or audio (start it with --mmproj, the model's \
             multimodal projector GGUF)"
        ))
        .param("messages"));
    }
    Ok(())
}

fn base64_bytes(b64: &str, what: &str) -> Result<Vec<u8>, ApiError> {
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim().as_bytes())
        .map_err(|e| ApiError::bad_request(format!("{what}: not base64 ({e})")))
}

/// An image from base64 text (Ollama's `images`), `what` naming it in errors.
pub(crate) fn base64_image(b64: &str, what: &str) -> Result<MediaInput, ApiError> {
    let bytes = base64_bytes(b64, what)?;
    Rgb8::decode(&bytes)
        .map(MediaInput::Image)
        .map_err(|e| ApiError::bad_request(format!("{what}: {e}")))
}

/// An OpenAI `input_audio` part (`{"data": base64, "format": "wav" | "mp3" | ...}`), decoded
/// to 16 kHz mono; the format is told from the bytes, a format this server cannot read is
/// named.
pub(crate) fn input_audio(part: &serde_json::Value, what: &str) -> Result<MediaInput, ApiError> {
    let a = part.get("input_audio").ok_or_else(|| {
        ApiError::bad_request(format!("{what}: an input_audio part without input_audio"))
            .param("messages")
    })?;
    if let Some(f) = a.get("format").and_then(serde_json::Value::as_str)
        && !matches!(f, "wav" | "mp3" | "flac" | "ogg")
    {
        return Err(ApiError::bad_request(format!(
            "{what}: input_audio format {f:?} is not one of wav, mp3, flac, ogg"
        ))
        .param("messages"));
    }
    let data = a
        .get("data")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| {
            ApiError::bad_request(format!("{what}: input_audio has no data (base64)"))
                .param("messages")
        })?;
    let bytes = base64_bytes(data, what)?;
    cera::media::audio::decode_audio(&bytes, 16_000)
        .map(MediaInput::Audio)
        .map_err(|e| ApiError::bad_request(format!("{what}: {e}")).param("messages"))
}

/// An image from an OpenAI `image_url` (a `data:` URL with base64 data).
pub(crate) fn data_url_image(url: &str, what: &str) -> Result<MediaInput, ApiError> {
    let Some(rest) = url.strip_prefix("data:") else {
        let scheme = url.split(':').next().unwrap_or("");
        return Err(ApiError::bad_request(format!(
            "{what}: only data: URLs are read (data:image/png;base64,...), not {scheme}: \
             this server fetches nothing"
        ))
        .param("messages"));
    };
    let Some((head, data)) = rest.split_once(',') else {
        return Err(ApiError::bad_request(format!(
            "{what}: a data: URL without a comma"
        )));
    };
    if !head.ends_with(";base64") {
        return Err(ApiError::bad_request(format!(
            "{what}: the data: URL is not base64 ({head})"
        )));
    }
    base64_image(data, what)
}

/// The prompt as the scheduler takes it: tokens, or with media at its markers, each
/// encoded (off the async runtime) and laid out as mtmd does.
pub(crate) async fn prompt(
    r: &Ready,
    text: String,
    media: Vec<MediaInput>,
) -> Result<Prompt, ApiError> {
    if media.is_empty() {
        return Ok(Prompt::Tokens(
            r.engine.tokenizer().encode(&text, true, true),
        ));
    }
    let Some(mm) = r.mmproj.clone() else {
        return Err(ApiError::bad_request(
            "this server takes no images or audio (start it with --mmproj)",
        ));
    };
    let engine = r.engine.clone();
    let cache = Arc::clone(&r.media_cache);
    tokio::task::spawn_blocking(move || {
        // a repeated image or clip comes from the cache, encoded once
        let enc = media
            .iter()
            .map(|m| cache.encode(&engine, &mm, m).map(|e| (*e).clone()))
            .collect::<cera::Result<Vec<_>>>()?;
        let pieces = engine.media_prompt(&text, &enc, true)?;
        Ok(Prompt::Chunks(Chunk::from_pieces(pieces)))
    })
    .await
    .map_err(|e| ApiError::internal(format!("the media encoder stopped: {e}")))?
    .map_err(|e: cera::Error| ApiError::bad_request(e.to_string()))
}

/// Positions a prompt takes.
pub(crate) fn prompt_len(r: &Ready, p: &Prompt) -> usize {
    match p {
        Prompt::Tokens(t) => t.len(),
        Prompt::Chunks(c) => c.iter().map(|c| c.len(r.engine.n_embd())).sum(),
        _ => 0,
    }
}
