//! OpenAI's speech-to-text endpoints over a Whisper model: `POST /v1/audio/transcriptions`
//! and `/v1/audio/translations`, multipart forms (`file`, `model`, `language`, `prompt`,
//! `response_format`, `temperature`, `timestamp_granularities[]`), answered in `json`,
//! `text`, `srt`, `vtt` or `verbose_json`. The audio is decoded (WAV, MP3, FLAC, Ogg) and
//! transcribed by the core's `transcribe` off the async runtime, one request at a time (a
//! transcription takes every compute thread).

use std::sync::{Arc, Mutex};

use axum::extract::{Multipart, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use cera::models::whisper::Whisper;
use cera::transcribe::format::{Format, render, verbose};
use cera::transcribe::{TranscribeOptions, transcribe};

use crate::Shared;
use crate::error::ApiError;

/// A Whisper model served next to (or instead of) the language model.
pub struct WhisperServe {
    pub model: Whisper,
    pub cpu: cera::backend::Cpu,
    /// The names a request's `model` may give: the file's stem (and `whisper-1`, what
    /// OpenAI's examples send).
    pub name: String,
    lock: Mutex<()>,
}

impl WhisperServe {
    pub fn new(model: Whisper, threads: usize, name: String) -> WhisperServe {
        WhisperServe {
            model,
            cpu: cera::backend::Cpu::new(threads),
            name,
            lock: Mutex::new(()),
        }
    }
}

/// The form's fields.
#[derive(Default)]
struct Form {
    file: Option<(String, Vec<u8>)>,
    model: Option<String>,
    language: Option<String>,
    prompt: Option<String>,
    format: Option<String>,
    temperature: Option<String>,
    granularities: Vec<String>,
}

async fn read_form(mut mp: Multipart) -> Result<Form, ApiError> {
    let mut f = Form::default();
    loop {
        let field = mp
            .next_field()
            .await
            .map_err(|e| ApiError::bad_request(format!("the multipart form: {e}")))?;
        let Some(field) = field else { break };
        let name = field.name().unwrap_or("").to_owned();
        if name == "file" {
            let fname = field.file_name().unwrap_or("audio").to_owned();
            let bytes = field.bytes().await.map_err(|e| {
                ApiError::bad_request(format!("the form's file: {e}")).param("file")
            })?;
            f.file = Some((fname, bytes.to_vec()));
            continue;
        }
        let text = field.text().await.map_err(|e| {
            ApiError::bad_request(format!("the form's field '{name}': {e}")).param(&name)
        })?;
        match name.as_str() {
            "model" => f.model = Some(text),
            "language" => f.language = Some(text),
            "prompt" => f.prompt = Some(text),
            "response_format" => f.format = Some(text),
            "temperature" => f.temperature = Some(text),
            "timestamp_granularities[]" | "timestamp_granularities" => f.granularities.push(text),
            // OpenAI's other fields (stream, include[], chunking_strategy) are checked below
            // or have no effect on a local model
            "stream" if text != "false" => {
                return Err(ApiError::bad_request(
                    "stream: streamed transcription is not supported",
                )
                .param("stream"));
            }
            _ => {}
        }
    }
    Ok(f)
}

pub async fn transcriptions(State(st): State<Shared>, mp: Multipart) -> Response {
    run(st, mp, false)
        .await
        .unwrap_or_else(|e| e.into_response())
}

pub async fn translations(State(st): State<Shared>, mp: Multipart) -> Response {
    run(st, mp, true)
        .await
        .unwrap_or_else(|e| e.into_response())
}

async fn run(st: Shared, mp: Multipart, translate: bool) -> Result<Response, ApiError> {
    let w = st.whisper.get().cloned().ok_or_else(|| {
        ApiError::bad_request(
            "this server has no speech model (start it with --whisper, a Whisper GGUF that \
             `cera convert` makes)",
        )
        .param("model")
    })?;
    let form = read_form(mp).await?;
    match form.model.as_deref() {
        None | Some("") | Some("whisper-1") => {}
        Some(m) if m == w.name => {}
        Some(m) => {
            return Err(ApiError::not_found(format!(
                "the model '{m}' is not served here (this server's speech model is '{}')",
                w.name
            ))
            .code("model_not_found")
            .param("model"));
        }
    }
    let (fname, bytes) = form
        .file
        .ok_or_else(|| ApiError::bad_request("the form has no 'file'").param("file"))?;
    let format = Format::parse(form.format.as_deref().unwrap_or("json"))
        .map_err(|e| ApiError::bad_request(e.to_string()).param("response_format"))?;
    for g in &form.granularities {
        if g != "segment" {
            return Err(ApiError::bad_request(format!(
                "timestamp_granularities '{g}': only segment timestamps are given"
            ))
            .param("timestamp_granularities[]"));
        }
    }
    let mut temperature = 0.0;
    if let Some(t) = &form.temperature {
        let v: f32 = t.trim().parse().map_err(|_| {
            ApiError::bad_request(format!("temperature '{t}' is not a number")).param("temperature")
        })?;
        if !(0.0..=1.0).contains(&v) {
            return Err(
                ApiError::bad_request(format!("temperature {v} is not between 0 and 1"))
                    .param("temperature"),
            );
        }
        temperature = v;
    }
    // (segments always: verbose_json, srt and vtt give them; OpenAI's API falls back to hotter
    // temperatures from the one asked for)
    let language = form.language.filter(|l| !l.is_empty());
    let opts = TranscribeOptions::default()
        .with_task(language, translate, true)
        .with_temperature(temperature, true)
        .with_prompt(form.prompt.filter(|p| !p.is_empty()));
    if translate && !w.model.special.multilingual() {
        return Err(ApiError::bad_request(
            "translation needs a multilingual Whisper model (this one is English-only)",
        )
        .param("model"));
    }
    let job = tokio::task::spawn_blocking(move || {
        let samples = cera::media::audio::decode_audio(&bytes, 16_000)
            .map_err(|e| ApiError::bad_request(format!("the file '{fname}': {e}")).param("file"))?;
        let _one = w.lock.lock().unwrap_or_else(|p| p.into_inner());
        transcribe(&w.model, &w.cpu, &samples, &opts)
            .map_err(|e| ApiError::bad_request(format!("transcribing '{fname}': {e}")))
    });
    let t = job
        .await
        .map_err(|e| ApiError::internal(format!("the transcription failed: {e}")))??;
    let body = if format == Format::VerboseJson && translate {
        let mut v = verbose(&t);
        v["task"] = "translate".into();
        v.to_string()
    } else {
        render(&t, format)
    };
    Ok(([(header::CONTENT_TYPE, format.content_type())], body).into_response())
}

/// Loads `path` for serving (`threads`: the compute threads).
pub fn load(path: &std::path::Path, threads: usize) -> Result<Arc<WhisperServe>, cera::Error> {
    let file = cera::gguf::GgufFile::open(path)?;
    let model = Whisper::load(Arc::new(file))?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "whisper".into());
    Ok(Arc::new(WhisperServe::new(model, threads, name)))
}
