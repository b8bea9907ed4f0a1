//! Speech to text for Kotlin and Swift: a [`Whisper`] loads a Whisper GGUF (a path or a catalog
//! name) and transcribes a file's bytes (WAV, MP3, FLAC, Ogg) or 16 kHz mono samples, as
//! `cera transcribe` does; the result is a [`Transcript`] with its segments, or a subtitle
//! format's text.

use std::sync::Arc;

use crate::errors::{Result, invalid};
use cera::transcribe::format::{Format, render};
use cera::transcribe::{TranscribeOptions, transcribe};

/// How to transcribe; the defaults are whisper-cli's (beam search of 5, temperature fallback,
/// timestamps). `language` null: detected (multilingual models).
#[derive(Clone, Debug, uniffi::Record)]
pub struct TranscribeConfig {
    #[uniffi(default)]
    pub language: Option<String>,
    #[uniffi(default = false)]
    pub translate: bool,
    #[uniffi(default = true)]
    pub timestamps: bool,
    #[uniffi(default = 5)]
    pub beam_size: u32,
    #[uniffi(default = 5)]
    pub best_of: u32,
    #[uniffi(default = 0.0)]
    pub temperature: f32,
    #[uniffi(default = true)]
    pub fallback: bool,
    #[uniffi(default)]
    pub initial_prompt: Option<String>,
}

impl TranscribeConfig {
    fn to_core(&self) -> TranscribeOptions {
        TranscribeOptions::default()
            .with_task(self.language.clone(), self.translate, self.timestamps)
            .with_search(self.beam_size as usize, self.best_of as usize)
            .with_temperature(self.temperature, self.fallback)
            .with_prompt(self.initial_prompt.clone())
    }
}

/// A stretch of the audio (seconds) and its text.
#[derive(Clone, Debug, uniffi::Record)]
pub struct TranscriptSegment {
    pub start: f32,
    pub end: f32,
    pub text: String,
    pub tokens: Vec<u32>,
}

#[derive(Clone, Debug, uniffi::Record)]
pub struct Transcript {
    pub text: String,
    pub language: String,
    pub duration: f32,
    pub segments: Vec<TranscriptSegment>,
}

/// A loaded Whisper model (any threads).
#[derive(uniffi::Object)]
pub struct Whisper {
    model: cera::models::whisper::Whisper,
    cpu: cera::backend::Cpu,
}

fn samples_of(audio: &[u8]) -> Result<Vec<f32>> {
    cera::media::audio::decode_audio(audio, 16_000).map_err(|e| invalid(e.to_string()))
}

#[uniffi::export]
impl Whisper {
    /// Loads `model`: a Whisper GGUF path or a catalog name (`whisper-tiny.en`, `whisper-base`;
    /// fetched when missing). `n_threads` null: all cores.
    #[uniffi::constructor(default(n_threads = None))]
    pub fn new(model: String, n_threads: Option<u32>) -> Result<Arc<Whisper>> {
        if n_threads == Some(0) {
            return Err(invalid("n_threads must be at least 1"));
        }
        let path = cera::fetch::resolve_model(Some(&model), &mut |_| {})?;
        let file = cera::gguf::GgufFile::open(&path)?;
        let model = cera::models::whisper::Whisper::load(Arc::new(file))?;
        let threads = n_threads.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |n| n as usize,
        );
        Ok(Arc::new(Whisper {
            model,
            cpu: cera::backend::Cpu::new(threads),
        }))
    }

    /// Transcribes an audio file's bytes (blocking).
    pub fn transcribe(&self, audio: Vec<u8>, config: TranscribeConfig) -> Result<Transcript> {
        self.transcribe_pcm(samples_of(&audio)?, config)
    }

    /// Transcribes 16 kHz mono samples (blocking).
    pub fn transcribe_pcm(
        &self,
        samples: Vec<f32>,
        config: TranscribeConfig,
    ) -> Result<Transcript> {
        let t = transcribe(&self.model, &self.cpu, &samples, &config.to_core())?;
        Ok(Transcript {
            text: t.text.trim().to_owned(),
            language: t.language,
            duration: t.duration,
            segments: t
                .segments
                .into_iter()
                .map(|s| TranscriptSegment {
                    start: s.start,
                    end: s.end,
                    text: s.text,
                    tokens: s.tokens,
                })
                .collect(),
        })
    }

    /// An audio file's transcript as `format`: `text`, `srt`, `vtt`, `json` or `verbose_json`
    /// (the bytes `cera transcribe` and the server write).
    pub fn transcribe_as(
        &self,
        audio: Vec<u8>,
        config: TranscribeConfig,
        format: String,
    ) -> Result<String> {
        let f = Format::parse(&format).map_err(|e| invalid(e.to_string()))?;
        let t = transcribe(
            &self.model,
            &self.cpu,
            &samples_of(&audio)?,
            &config.to_core(),
        )?;
        Ok(render(&t, f))
    }

    /// Whether the model reads many languages (and translates).
    pub fn multilingual(&self) -> bool {
        self.model.special.multilingual()
    }
}
