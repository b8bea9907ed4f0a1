//! Python bindings (module `cera._cera`, re-exported by the `cera` package): an [`Engine`]
//! loads a model once; [`Session`]s hold a sequence's context and generate with the GIL
//! released, so several Python threads decode at once; [`Stream`] yields text as it is
//! produced. Errors are Python exceptions carrying the core error's message (see [`errors`]).
//!
//! A thin front end: every decision (tokenization, sampling, stop strings, embeddings) is the
//! core's; this file only converts arguments and results.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyStopIteration, PyValueError};
use pyo3::prelude::*;

mod batch;
mod chat;
mod errors;
mod speech;
mod stream;

use errors::to_py;

/// A loaded model.
#[pyclass(frozen, module = "cera")]
struct Engine {
    inner: cera::engine::Engine,
}

#[pymethods]
impl Engine {
    /// Loads `model`: a GGUF path, or a catalog name (fetched into the cache when missing).
    /// `device`: `cpu`; `gpu` (the GPU backend: wgpu over Vulkan, Metal or DX12; an error
    /// naming why where there is no usable adapter or the model needs what it lacks); `auto`
    /// (a hardware GPU when one is usable, else the CPU; `backend` says which).
    #[new]
    #[pyo3(signature = (model, n_threads=None, device="auto"))]
    fn new(
        py: Python<'_>,
        model: &str,
        n_threads: Option<usize>,
        device: &str,
    ) -> PyResult<Engine> {
        if n_threads == Some(0) {
            return Err(PyValueError::new_err("n_threads must be at least 1"));
        }
        let device = match device {
            "cpu" => cera::engine::DeviceKind::Cpu,
            "gpu" => cera::engine::DeviceKind::Gpu,
            "auto" => cera::engine::DeviceKind::Auto,
            other => {
                return Err(PyValueError::new_err(format!(
                    "device {other:?} is not one of cpu, gpu, auto"
                )));
            }
        };
        let model = model.to_owned();
        let inner = py
            .detach(move || {
                let path = cera::fetch::resolve_model(Some(&model), &mut |_| {})?;
                let mut o = cera::engine::EngineOptions::default();
                o.n_threads = n_threads;
                o.device = device;
                cera::engine::Engine::load(path, o)
            })
            .map_err(to_py)?;
        Ok(Engine { inner })
    }

    /// A new session (its own context). `n_ctx` 0: the model's training context, capped at
    /// 4096. `cache_type_k` / `cache_type_v`: KV cache types as llama.cpp names them (`f16`,
    /// `q8_0`, `q4_0`, …).
    #[pyo3(signature = (n_ctx=0, cache_type_k=None, cache_type_v=None))]
    fn session(
        &self,
        n_ctx: usize,
        cache_type_k: Option<&str>,
        cache_type_v: Option<&str>,
    ) -> PyResult<Session> {
        let mut o = cera::engine::SessionOptions::default();
        o.n_ctx = n_ctx;
        if let Some(k) = cache_type_k {
            o.kv_type = k.parse().map_err(PyValueError::new_err)?;
        }
        if let Some(v) = cache_type_v {
            o.kv_type_v = Some(v.parse().map_err(PyValueError::new_err)?);
        }
        let s = self.inner.session(o);
        Ok(Session {
            cancel: s.cancel_handle(),
            inner: Arc::new(Mutex::new(s)),
            last: Arc::default(),
        })
    }

    /// Generates for every prompt of `prompts` at once: each in a session of its own
    /// (`n_ctx` tokens), prefilled and decoded together in batched steps (one forward pass
    /// reads the weights once for all of them), as a server runs parallel requests. Returns,
    /// per prompt in order, a dict: `text`, `finish_reason`, `prompt_tokens`,
    /// `completion_tokens`. `ignore_eos`: generate `max_tokens` whatever the model says.
    #[pyo3(signature = (prompts, max_tokens=128, temperature=0.8, top_k=40, top_p=0.95,
        min_p=0.05, repeat_penalty=1.0, seed=None, stop=None, n_ctx=0, ignore_eos=false))]
    #[allow(clippy::too_many_arguments)]
    fn generate_batch<'py>(
        &self,
        py: Python<'py>,
        prompts: Vec<String>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
        n_ctx: usize,
        ignore_eos: bool,
    ) -> PyResult<Vec<Bound<'py, pyo3::types::PyDict>>> {
        let mut opts = options(
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            stop,
        )?;
        opts.ignore_eog = ignore_eos;
        if prompts.is_empty() {
            return Ok(Vec::new());
        }
        let done = py.detach(|| batch::generate(&self.inner, &prompts, &opts, n_ctx))?;
        done.into_iter()
            .map(|c| {
                let d = pyo3::types::PyDict::new(py);
                d.set_item("text", c.text)?;
                d.set_item("finish_reason", c.finished.summary.finish.as_str())?;
                d.set_item("prompt_tokens", c.finished.summary.prompt_tokens)?;
                d.set_item("completion_tokens", c.finished.summary.generated_tokens)?;
                Ok(d)
            })
            .collect()
    }

    /// A conversation with the model's chat template, over a new session of `n_ctx` tokens.
    #[pyo3(signature = (n_ctx=0))]
    fn chat(&self, n_ctx: usize) -> PyResult<chat::Chat> {
        let mut o = cera::engine::SessionOptions::default();
        o.n_ctx = n_ctx;
        let c = self.inner.session(o).into_chat().map_err(to_py)?;
        Ok(chat::Chat::new(c))
    }

    /// Token ids of `text` (BOS/EOS as the model asks when `add_special`; special tokens
    /// written in the text parsed when `parse_special`).
    #[pyo3(signature = (text, add_special=true, parse_special=false))]
    fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        self.inner
            .tokenizer()
            .encode(text, add_special, parse_special)
    }

    /// The text of `ids`.
    fn detokenize(&self, ids: Vec<u32>) -> PyResult<String> {
        let n = self.inner.n_vocab();
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= n) {
            return Err(to_py(cera::Error::TokenOutOfRange {
                id: bad,
                n_vocab: n,
            }));
        }
        Ok(self.inner.tokenizer().decode(&ids))
    }

    /// Embeddings of `texts`, batched: one vector per text (pooled `mean`, `cls`, `last`, or
    /// `rank` for rerankers), or with `pooling="none"` one per token. `pooling` None: the
    /// model's own. `normalize` as llama.cpp's `--embd-normalize` (-1 none, 2 euclidean, …).
    #[pyo3(signature = (texts, pooling=None, normalize=2))]
    fn embed(
        &self,
        py: Python<'_>,
        texts: Vec<String>,
        pooling: Option<&str>,
        normalize: i32,
    ) -> PyResult<Vec<Vec<Vec<f32>>>> {
        let mut o = cera::embed::EmbedOptions::default();
        o.pooling = pooling
            .map(cera::embed::Pooling::from_name)
            .transpose()
            .map_err(to_py)?;
        o.normalize = cera::embed::Normalize::from_llama(normalize).map_err(to_py)?;
        let e = py
            .detach(|| {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                self.inner.embed(&refs, &o)
            })
            .map_err(to_py)?;
        Ok(e.items.into_iter().map(|i| i.vectors).collect())
    }

    /// Tokens in the vocabulary.
    #[getter]
    fn n_vocab(&self) -> usize {
        self.inner.n_vocab()
    }

    /// The context length the model was trained with.
    #[getter]
    fn n_ctx_train(&self) -> usize {
        self.inner.n_ctx_train()
    }

    /// Where the model runs, as llama-bench's backend column names it: `CPU`, `Vulkan`,
    /// `Metal`, `DX12`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.inner.backend_name()
    }

    /// The device in words (the GPU adapter's name and API, or the CPU's kernel tier).
    #[getter]
    fn device(&self) -> String {
        self.inner.device_description()
    }

    /// The model file.
    #[getter]
    fn path(&self) -> String {
        self.inner.path().display().to_string()
    }

    /// Loads a LoRA adapter for this model (a GGUF adapter or a PEFT directory).
    fn load_lora(&self, py: Python<'_>, path: &str) -> PyResult<LoraAdapter> {
        let a = py.detach(|| self.inner.load_lora(path)).map_err(to_py)?;
        Ok(LoraAdapter { inner: a })
    }

    /// Loads this model's multimodal projector (an mmproj GGUF: llama.cpp's `--mmproj` file:
    /// images, audio or both); one made for a model of another width is refused.
    fn load_mmproj(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<Mmproj> {
        let m = py.detach(|| self.inner.load_mmproj(&path)).map_err(to_py)?;
        Ok(Mmproj {
            inner: Arc::new(m),
            path: path.display().to_string(),
        })
    }

    fn __repr__(&self) -> String {
        format!("cera.Engine({:?})", self.inner.path().display().to_string())
    }
}

/// A loaded multimodal projector (`Engine.load_mmproj`): images and audio go into sessions
/// through it.
#[pyclass(frozen, module = "cera")]
struct Mmproj {
    inner: Arc<cera::models::Mmproj>,
    path: String,
}

#[pymethods]
impl Mmproj {
    fn __repr__(&self) -> String {
        format!("cera.Mmproj({:?})", self.path)
    }
}

/// An image argument: the file's bytes, or a path to read.
/// A media file's bytes, from bytes or a path; `None` for anything else.
fn file_bytes(x: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if let Ok(b) = x.cast::<pyo3::types::PyBytes>() {
        Ok(Some(b.as_bytes().to_vec()))
    } else if let Ok(p) = x.extract::<std::path::PathBuf>() {
        std::fs::read(&p).map(Some).map_err(|e| {
            pyo3::exceptions::PyOSError::new_err(format!("reading {}: {e}", p.display()))
        })
    } else {
        Ok(None)
    }
}

fn image_arg(image: &Bound<'_, PyAny>) -> PyResult<cera::media::Rgb8> {
    let Some(bytes) = file_bytes(image)? else {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "an image is the file's bytes or a path",
        ));
    };
    cera::media::Rgb8::decode(&bytes).map_err(to_py)
}

/// 16 kHz mono samples from an audio file's bytes or path (WAV, MP3, FLAC, Ogg Vorbis;
/// resampled as llama.cpp does) or from a sequence of floats already at 16 kHz.
pub(crate) fn audio_arg(audio: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
    if let Some(bytes) = file_bytes(audio)? {
        return cera::media::audio::decode_audio(&bytes, 16_000).map_err(to_py);
    }
    audio.extract::<Vec<f32>>().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(
            "audio is the file's bytes, a path, or a sequence of 16 kHz mono samples (floats)",
        )
    })
}

/// A loaded LoRA adapter (attach it to sessions).
#[pyclass(frozen, module = "cera")]
struct LoraAdapter {
    inner: Arc<cera::lora::LoraAdapter>,
}

#[pymethods]
impl LoraAdapter {
    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    fn __repr__(&self) -> String {
        format!("cera.LoraAdapter({:?})", self.inner.name)
    }
}

/// Sampling and stopping for one `generate` call, from Python keyword arguments.
#[allow(clippy::too_many_arguments)]
pub(crate) fn options(
    max_tokens: usize,
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
    repeat_penalty: f32,
    seed: Option<u64>,
    stop: Option<Vec<String>>,
) -> PyResult<cera::session::GenerateOptions> {
    let mut b = cera::session::BasicOptions::default();
    b.max_tokens = max_tokens;
    b.temperature = temperature;
    b.top_k = top_k;
    b.top_p = top_p;
    b.min_p = min_p;
    b.repeat_penalty = repeat_penalty;
    b.seed = seed;
    b.stop = stop.unwrap_or_default();
    b.to_options()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// One sequence's context. Generation holds the session (other calls on it wait), and runs
/// with the GIL released; [`Session::cancel`] works from any thread while it runs.
#[pyclass(frozen, module = "cera")]
struct Session {
    inner: Arc<Mutex<cera::session::Session>>,
    cancel: cera::session::CancelHandle,
    last: Arc<Mutex<Option<Timings>>>,
}

impl Session {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, cera::session::Session>> {
        self.inner
            .lock()
            .map_err(|_| errors::CeraError::new_err("the session was poisoned by a panic"))
    }
}

#[pymethods]
impl Session {
    /// Continues the context with `prompt` (tokenized; BOS when the context is empty) and
    /// generates. `stream=False` returns the text; `stream=True` returns an iterator of text
    /// pieces as they are produced. Greedy when `temperature <= 0`. `logprobs` (with
    /// `stream=True`): each token's logprob and that many most likely alternatives, from
    /// `Stream.take_logprobs()`.
    #[pyo3(signature = (prompt, max_tokens=128, temperature=0.8, top_k=40, top_p=0.95,
        min_p=0.05, repeat_penalty=1.0, seed=None, stop=None, stream=false, logprobs=None))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: &str,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
        stream: bool,
        logprobs: Option<usize>,
    ) -> PyResult<Py<PyAny>> {
        let logprobs = logprob_count(logprobs, stream)?;
        let opts = options(
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            stop,
        )?;
        let prompt = prompt.to_owned();
        if stream {
            let inner = Arc::clone(&self.inner);
            let last = Arc::clone(&self.last);
            let log: Option<LogprobLog> = logprobs.map(|_| Arc::default());
            let lp = logprobs.zip(log.clone());
            let pieces = stream::Pieces::spawn("cera-generate", move |emit| {
                let mut s = inner.lock().map_err(|_| {
                    cera::Error::Model("the session was poisoned by a panic".into())
                })?;
                let sink = &mut PySink { emit, logprobs: lp };
                run(&mut s, &prompt, &opts, sink, &last)
            })?;
            let st = Stream {
                pieces,
                finish: Mutex::new(None),
                logprobs: log,
            };
            return Ok(Py::new(py, st)?.into_any());
        }
        let mut text = String::new();
        py.detach(|| {
            let mut s = self.lock()?;
            let emit = &mut |t: &str| {
                text.push_str(t);
                true
            };
            run(
                &mut s,
                &prompt,
                &opts,
                &mut PySink {
                    emit,
                    logprobs: None,
                },
                &self.last,
            )
            .map_err(to_py)
        })?;
        Ok(text.into_pyobject(py)?.into_any().unbind())
    }

    /// Appends an image (the file's bytes or its path: JPEG, PNG, WebP, GIF) as `mmproj`'s
    /// model reads it: prepared, encoded and prefilled between its marker tokens, as llama.cpp
    /// does. Returns the positions it took; a later `generate` continues after it.
    fn append_image(
        &self,
        py: Python<'_>,
        mmproj: &Mmproj,
        image: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let img = image_arg(image)?;
        let mm = Arc::clone(&mmproj.inner);
        py.detach(|| self.lock()?.append_image(&mm, &img).map_err(to_py))
    }

    /// Appends an audio clip (the file's bytes or its path: WAV, MP3, FLAC, Ogg Vorbis; or a
    /// sequence of 16 kHz mono samples) as `mmproj`'s model reads it: resampled to 16 kHz as
    /// llama.cpp does, encoded and prefilled. Returns the positions it took.
    fn append_audio(
        &self,
        py: Python<'_>,
        mmproj: &Mmproj,
        audio: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let samples = audio_arg(audio)?;
        let mm = Arc::clone(&mmproj.inner);
        py.detach(|| self.lock()?.append_audio(&mm, &samples).map_err(to_py))
    }

    /// Stops a running `generate` (from another thread): it returns within a token.
    fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The engine's own counts and times of the last finished `generate` (what `cera run`
    /// prints): `prompt_tokens`, `prompt_ms`, `generated_tokens`, `decode_ms`, `decode_tps`,
    /// `finish_reason`; None before the first.
    #[getter]
    fn timings<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        let Some(t) = *self.last.lock().unwrap_or_else(|p| p.into_inner()) else {
            return Ok(None);
        };
        let d = pyo3::types::PyDict::new(py);
        d.set_item("prompt_tokens", t.prompt_tokens)?;
        d.set_item("prompt_ms", t.prefill.as_secs_f64() * 1e3)?;
        d.set_item("generated_tokens", t.generated_tokens)?;
        d.set_item("decode_ms", t.decode.as_secs_f64() * 1e3)?;
        d.set_item(
            "decode_tps",
            t.generated_tokens as f64 / t.decode.as_secs_f64().max(1e-9),
        )?;
        d.set_item("finish_reason", t.finish.as_str())?;
        Ok(Some(d))
    }

    /// The context's token ids.
    #[getter]
    fn tokens(&self, py: Python<'_>) -> PyResult<Vec<u32>> {
        py.detach(|| Ok(self.lock()?.tokens().to_vec()))
    }

    /// Context length in tokens.
    #[getter]
    fn n_ctx(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| Ok(self.lock()?.n_ctx()))
    }

    /// Empties the context.
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            self.lock()?.reset();
            Ok(())
        })
    }

    /// Applies `adapter` at `scale` from now on (the context is cleared when the set changes).
    #[pyo3(signature = (adapter, scale=1.0))]
    fn attach_lora(&self, py: Python<'_>, adapter: &LoraAdapter, scale: f32) -> PyResult<()> {
        py.detach(|| {
            self.lock()?
                .attach_lora(&adapter.inner, scale)
                .map_err(to_py)
        })
    }

    /// Stops applying `adapter`; whether it was attached.
    fn detach_lora(&self, py: Python<'_>, adapter: &LoraAdapter) -> PyResult<bool> {
        py.detach(|| Ok(self.lock()?.detach_lora(&adapter.inner)))
    }

    /// The session's state (context tokens, KV cache, sampler) as bytes, for `restore`.
    fn checkpoint<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let b = py.detach(|| self.lock()?.checkpoint().map_err(to_py))?;
        Ok(pyo3::types::PyBytes::new(py, &b))
    }

    /// Goes back to a `checkpoint` of a session of this model.
    fn restore(&self, py: Python<'_>, state: Vec<u8>) -> PyResult<()> {
        py.detach(|| self.lock()?.restore(&state).map_err(to_py))
    }

    /// Writes a checkpoint to `path` (atomically).
    fn save_checkpoint(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        py.detach(|| self.lock()?.save_checkpoint(&path).map_err(to_py))
    }

    /// Restores a checkpoint written by `save_checkpoint`.
    fn load_checkpoint(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        py.detach(|| self.lock()?.load_checkpoint(&path).map_err(to_py))
    }
}

/// Logprobs of the tokens generated so far that the consumer has not taken yet: the
/// generating thread adds a token's before sending its piece, and waits for the consumer
/// after each piece (see [`stream`]), so a piece's tokens are all there when it arrives.
pub(crate) type LogprobLog = Arc<Mutex<Vec<cera::session::TokenLogprobs>>>;

/// The sink of a Python generation: text pieces to `emit` (false: the consumer is gone,
/// stop), logprobs (when asked for, with `.0` alternatives each) into the log.
pub(crate) struct PySink<'a> {
    pub emit: &'a mut dyn FnMut(&str) -> bool,
    pub logprobs: Option<(usize, LogprobLog)>,
}

impl cera::session::Sink for PySink<'_> {
    fn on_token(&mut self, _token: u32, text: &str) -> cera::session::Control {
        if text.is_empty() || (self.emit)(text) {
            cera::session::Control::Continue
        } else {
            cera::session::Control::Stop
        }
    }

    fn logprobs(&self) -> Option<usize> {
        self.logprobs.as_ref().map(|l| l.0)
    }

    fn on_logprobs(&mut self, lp: cera::session::TokenLogprobs) {
        if let Some((_, log)) = &self.logprobs {
            log.lock().expect("logprob log").push(lp);
        }
    }
}

/// A token's logprobs as Python sees them: `(token, logprob, [(token, logprob), ...])`.
pub(crate) type LogprobTuple = (u32, f32, Vec<(u32, f32)>);

/// The log's entries so far as Python tuples `(token, logprob, [(token, logprob), ...])`,
/// emptying it.
pub(crate) fn take_logprobs(log: &Option<LogprobLog>) -> Vec<LogprobTuple> {
    let Some(log) = log else { return Vec::new() };
    std::mem::take(&mut *log.lock().expect("logprob log"))
        .into_iter()
        .map(|l| (l.token, l.logprob, l.top))
        .collect()
}

/// Checks a `logprobs` argument (alternatives per token, as OpenAI bounds it).
pub(crate) fn logprob_count(logprobs: Option<usize>, stream: bool) -> PyResult<Option<usize>> {
    match logprobs {
        Some(n) if n > 20 => Err(PyValueError::new_err(
            "logprobs is at most 20 alternatives per token",
        )),
        Some(_) if !stream => Err(PyValueError::new_err(
            "logprobs need stream=True: read them with Stream.take_logprobs() after each piece",
        )),
        l => Ok(l),
    }
}

/// The engine's own counts and times of a session's last generation (`Session.timings`):
/// what `cera run` reports, so the bindings' overhead can be told from the engine's speed.
#[derive(Clone, Copy)]
struct Timings {
    finish: cera::session::FinishReason,
    prompt_tokens: usize,
    prefill: std::time::Duration,
    generated_tokens: usize,
    decode: std::time::Duration,
}

/// Prefills `prompt` and generates into `sink`; the timings also go to `last`.
fn run(
    s: &mut cera::session::Session,
    prompt: &str,
    opts: &cera::session::GenerateOptions,
    sink: &mut PySink<'_>,
    last: &Mutex<Option<Timings>>,
) -> cera::Result<Timings> {
    s.append_text(prompt, false)?;
    let summary = s.generate(opts, sink)?;
    let t = Timings {
        finish: summary.finish,
        prompt_tokens: summary.prompt_tokens,
        prefill: summary.prefill,
        generated_tokens: summary.generated_tokens,
        decode: summary.decode,
    };
    *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
    Ok(t)
}

/// The text pieces of a streaming `generate`, in order; `finish_reason` is set at the end
/// (`"stop"`, `"length"`, …).
#[pyclass(module = "cera")]
struct Stream {
    pieces: stream::Pieces<Timings>,
    finish: Mutex<Option<String>>,
    logprobs: Option<LogprobLog>,
}

#[pymethods]
impl Stream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<String> {
        match self.pieces.next(py)? {
            stream::Next::Text(t) => Ok(t),
            stream::Next::End(t) => {
                *self.finish.lock().expect("stream lock") = Some(t.finish.as_str().to_owned());
                Err(PyStopIteration::new_err(()))
            }
        }
    }

    /// Why generation ended, once the stream is exhausted (None before).
    #[getter]
    fn finish_reason(&self) -> Option<String> {
        self.finish.lock().expect("stream lock").clone()
    }

    /// The logprobs of the tokens behind the pieces returned since the last call, as
    /// `(token, logprob, [(token, logprob), ...])` (alternatives most likely first); empty
    /// without `logprobs=`.
    fn take_logprobs(&self) -> Vec<LogprobTuple> {
        take_logprobs(&self.logprobs)
    }
}

#[pymodule]
fn _cera(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    m.add_class::<Session>()?;
    m.add_class::<Stream>()?;
    m.add_class::<LoraAdapter>()?;
    m.add_class::<Mmproj>()?;
    m.add_class::<chat::Chat>()?;
    m.add_class::<chat::ChatStream>()?;
    m.add_class::<speech::Whisper>()?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
