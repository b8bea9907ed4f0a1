//! Speech to text from Python: [`Whisper`] loads a Whisper GGUF (a path, or a catalog name such
//! as `whisper-tiny.en`) and transcribes audio (a file's bytes, its path, or 16 kHz mono
//! samples) with the GIL released, as `cera transcribe` does; the result is OpenAI's
//! `verbose_json` as a dict, or a subtitle format's text.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::audio_arg;
use crate::errors::to_py;
use cera::transcribe::format::{Format, render, verbose};
use cera::transcribe::{TranscribeOptions, detect_language, transcribe};

/// A loaded Whisper model.
#[pyclass(frozen, module = "cera")]
pub(crate) struct Whisper {
    model: Arc<cera::models::whisper::Whisper>,
    cpu: Arc<cera::backend::Cpu>,
}

fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    let json = py.import("json")?;
    json.call_method1("loads", (v.to_string(),))
}

#[pymethods]
impl Whisper {
    /// Loads `model`: a Whisper GGUF path or a catalog name (fetched when missing).
    #[new]
    #[pyo3(signature = (model, n_threads=None))]
    fn new(py: Python<'_>, model: &str, n_threads: Option<usize>) -> PyResult<Whisper> {
        if n_threads == Some(0) {
            return Err(PyValueError::new_err("n_threads must be at least 1"));
        }
        let model = model.to_owned();
        let w = py
            .detach(move || {
                let path = cera::fetch::resolve_model(Some(&model), &mut |_| {})?;
                let file = cera::gguf::GgufFile::open(&path)?;
                cera::models::whisper::Whisper::load(Arc::new(file))
            })
            .map_err(to_py)?;
        let threads = n_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Ok(Whisper {
            model: Arc::new(w),
            cpu: Arc::new(cera::backend::Cpu::new(threads)),
        })
    }

    /// Whether the model reads many languages (and translates).
    #[getter]
    fn multilingual(&self) -> bool {
        self.model.special.multilingual()
    }

    /// Transcribes `audio` (bytes or path of a WAV, MP3, FLAC or Ogg file, or 16 kHz mono
    /// samples). `response_format`: `verbose_json` (default: a dict with `text`, `language`,
    /// `duration`, `segments`), `json` (`{"text": ...}`), `text`, `srt` or `vtt` (strings).
    /// The decoding is whisper.cpp's: beam search of `beam_size` (1: greedy), the temperature
    /// raised by 0.2 on a failed window unless `fallback` is off.
    #[pyo3(signature = (audio, language=None, translate=false, timestamps=true, beam_size=5,
        best_of=5, temperature=0.0, fallback=true, condition_on_previous_text=true,
        initial_prompt=None, response_format="verbose_json"))]
    #[allow(clippy::too_many_arguments)]
    fn transcribe<'py>(
        &self,
        py: Python<'py>,
        audio: &Bound<'py, PyAny>,
        language: Option<String>,
        translate: bool,
        timestamps: bool,
        beam_size: usize,
        best_of: usize,
        temperature: f32,
        fallback: bool,
        condition_on_previous_text: bool,
        initial_prompt: Option<String>,
        response_format: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let format = Format::parse(response_format).map_err(to_py)?;
        if !timestamps && matches!(format, Format::Srt | Format::Vtt) {
            return Err(PyValueError::new_err(format!(
                "response_format {response_format:?} needs timestamps=True"
            )));
        }
        let samples = audio_arg(audio)?;
        let mut o = TranscribeOptions::default()
            .with_task(language, translate, timestamps)
            .with_search(beam_size, best_of)
            .with_temperature(temperature, fallback)
            .with_prompt(initial_prompt);
        o.condition_on_previous_text = condition_on_previous_text;
        let (m, cpu) = (Arc::clone(&self.model), Arc::clone(&self.cpu));
        let t = py
            .detach(move || transcribe(&m, &*cpu, &samples, &o))
            .map_err(to_py)?;
        match format {
            Format::VerboseJson => json_to_py(py, &verbose(&t)),
            Format::Json => json_to_py(py, &serde_json::json!({ "text": t.text.trim() })),
            _ => Ok(render(&t, format).into_pyobject(py)?.into_any()),
        }
    }

    /// The languages' probabilities for the audio's first 30 seconds, likeliest first:
    /// `[(code, p), ...]` (multilingual models).
    fn detect_language(
        &self,
        py: Python<'_>,
        audio: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(String, f32)>> {
        let samples = audio_arg(audio)?;
        let (m, cpu) = (Arc::clone(&self.model), Arc::clone(&self.cpu));
        py.detach(move || detect_language(&m, &*cpu, &samples))
            .map_err(to_py)
    }

    fn __repr__(&self) -> String {
        format!(
            "cera.Whisper({} layers, {}, {} mel bands)",
            self.model.hp.encoder.n_layer,
            if self.model.special.multilingual() {
                "multilingual"
            } else {
                "English-only"
            },
            self.model.hp.n_mels
        )
    }
}
