//! `cera.Chat`: a conversation over a session with the model's own chat template (the core's
//! chat coordinator): messages in, a reply out, tool calls parsed, JSON Schema and tool
//! choice enforced by grammar. Messages and tools cross as JSON text in OpenAI's shapes, so
//! the Python layer passes what its caller passed.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value as Json;

use crate::errors::{self, to_py};
use crate::stream;

#[pyclass(frozen, module = "cera")]
pub struct Chat {
    inner: Arc<Mutex<cera::chat::Chat>>,
    cancel: cera::session::CancelHandle,
}

impl Chat {
    pub fn new(chat: cera::chat::Chat) -> Chat {
        Chat {
            cancel: chat.session().cancel_handle(),
            inner: Arc::new(Mutex::new(chat)),
        }
    }

    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, cera::chat::Chat>> {
        self.inner
            .lock()
            .map_err(|_| errors::CeraError::new_err("the chat was poisoned by a panic"))
    }
}

fn parse_json(what: &str, text: &str) -> PyResult<Json> {
    serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

/// A finished turn as a dict: `text`, `tool_calls` (`id`, `name`, `arguments` as JSON text),
/// `finish_reason` (the engine's: `eog`, `length`, `stop`, …), `prompt_tokens`,
/// `completion_tokens`, `reused_tokens` (context kept from the last turn or restored from the
/// prefix cache).
fn turn_dict<'py>(py: Python<'py>, r: &cera::chat::TurnResult) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("text", &r.text)?;
    let calls = PyList::empty(py);
    for c in &r.tool_calls {
        let cd = PyDict::new(py);
        cd.set_item("id", c.id.clone().unwrap_or_default())?;
        cd.set_item("name", &c.name)?;
        cd.set_item("arguments", c.arguments.to_string())?;
        calls.append(cd)?;
    }
    d.set_item("tool_calls", calls)?;
    d.set_item("finish_reason", r.finish.as_str())?;
    d.set_item("prompt_tokens", r.summary.prompt_tokens)?;
    d.set_item("completion_tokens", r.summary.generated_tokens)?;
    d.set_item("reused_tokens", r.prefill.kept + r.prefill.from_cache)?;
    Ok(d)
}

#[pymethods]
impl Chat {
    /// Sets the tools the model may call (OpenAI's `tools` list as JSON text; None: none).
    #[pyo3(signature = (tools_json=None))]
    fn set_tools(&self, py: Python<'_>, tools_json: Option<&str>) -> PyResult<()> {
        let tools = match tools_json {
            None => Vec::new(),
            Some(t) => cera::tools::parse_tools(&parse_json("tools", t)?).map_err(to_py)?,
        };
        py.detach(|| {
            self.lock()?.set_tools(tools);
            Ok(())
        })
    }

    /// Adds one message (OpenAI's shape as JSON text: `role`, `content`, `tool_calls`,
    /// `tool_call_id`).
    fn ingest(&self, py: Python<'_>, message_json: &str) -> PyResult<()> {
        let msg: cera::chat::Message = serde_json::from_value(parse_json("message", message_json)?)
            .map_err(|e| PyValueError::new_err(format!("message: {e}")))?;
        py.detach(|| self.lock()?.ingest(msg).map_err(to_py))
    }

    /// Adds the result of the tool call `id` (from the turn's `tool_calls`).
    fn ingest_tool_result(&self, py: Python<'_>, id: &str, content: &str) -> PyResult<()> {
        py.detach(|| self.lock()?.ingest_tool_result(id, content).map_err(to_py))
    }

    /// The conversation (messages, tools, context) as bytes, for `restore`.
    fn checkpoint<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let b = py.detach(|| self.lock()?.checkpoint().map_err(to_py))?;
        Ok(pyo3::types::PyBytes::new(py, &b))
    }

    /// Goes back to a `checkpoint` of a chat on this model.
    fn restore(&self, py: Python<'_>, state: Vec<u8>) -> PyResult<()> {
        py.detach(|| self.lock()?.restore(&state).map_err(to_py))
    }

    /// Writes a checkpoint to `path` (atomically).
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        py.detach(|| self.lock()?.save(&path).map_err(to_py))
    }

    /// Restores a checkpoint written by `save`.
    fn load(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        py.detach(|| self.lock()?.load(&path).map_err(to_py))
    }

    /// The messages so far, OpenAI-shaped, as JSON text.
    fn messages_json(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| {
            serde_json::to_string(self.lock()?.messages())
                .map_err(|e| errors::CeraError::new_err(format!("messages: {e}")))
        })
    }

    /// `complete(..., stream=True)`: the reply's raw pieces as a `ChatStream`.
    #[pyo3(signature = (max_tokens=0, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
        repeat_penalty=1.0, seed=None, stop=None, json_schema=None, json_object=false,
        tool_choice=None, logprobs=None))]
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &self,
        py: Python<'_>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
        json_schema: Option<&str>,
        json_object: bool,
        tool_choice: Option<&str>,
        logprobs: Option<usize>,
    ) -> PyResult<Py<PyAny>> {
        self.complete(
            py,
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            stop,
            json_schema,
            json_object,
            tool_choice,
            true,
            logprobs,
        )
    }

    /// A reply constrained to the JSON Schema `schema` (a dict, or JSON text), streamed: the
    /// pieces joined parse as JSON and validate against it (tools are not called).
    #[pyo3(signature = (schema, max_tokens=0, temperature=0.8, top_k=40, top_p=0.95,
        min_p=0.05, repeat_penalty=1.0, seed=None, stop=None))]
    #[allow(clippy::too_many_arguments)]
    fn stream_json(
        &self,
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
    ) -> PyResult<Py<PyAny>> {
        let text: String = match schema.extract::<String>() {
            Ok(t) => t,
            Err(_) => py
                .import("json")?
                .call_method1("dumps", (schema,))?
                .extract()?,
        };
        self.complete(
            py,
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            stop,
            Some(&text),
            false,
            Some("none"),
            true,
            None,
        )
    }

    /// Forgets the conversation (tools stay).
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            self.lock()?.reset();
            Ok(())
        })
    }

    /// Stops a running `complete` from another thread.
    fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Generates the assistant's reply. `json_schema` (JSON text) or `json_object` constrain it
    /// to JSON; `tool_choice` is `"auto"`, `"none"`, `"required"` or a tool's name. Without
    /// `stream`, returns the turn's dict; with it, a `ChatStream` of raw text pieces whose
    /// `result` is that dict once exhausted.
    #[pyo3(signature = (max_tokens=0, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
        repeat_penalty=1.0, seed=None, stop=None, json_schema=None, json_object=false,
        tool_choice=None, stream=false, logprobs=None))]
    #[allow(clippy::too_many_arguments)]
    fn complete(
        &self,
        py: Python<'_>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
        json_schema: Option<&str>,
        json_object: bool,
        tool_choice: Option<&str>,
        stream: bool,
        logprobs: Option<usize>,
    ) -> PyResult<Py<PyAny>> {
        let logprobs = crate::logprob_count(logprobs, stream)?;
        let g = crate::options(
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            stop,
        )?;
        let mut opts = cera::chat::TurnOptions::new(g);
        if let Some(s) = json_schema {
            opts = opts
                .json_schema(&parse_json("json_schema", s)?)
                .map_err(to_py)?;
        } else if json_object {
            opts.generate.grammar = Some(cera::grammar::GrammarConstraint::new(Arc::new(
                cera::grammar::Grammar::json(),
            )));
        }
        opts.tool_choice = cera::chat::ToolChoice::from_name(tool_choice);
        if stream {
            let inner = Arc::clone(&self.inner);
            let log: Option<crate::LogprobLog> = logprobs.map(|_| Arc::default());
            let lp = logprobs.zip(log.clone());
            let pieces = stream::Pieces::spawn("cera-chat", move |emit| {
                let mut chat = inner
                    .lock()
                    .map_err(|_| cera::Error::Model("the chat was poisoned by a panic".into()))?;
                let mut sink = crate::PySink { emit, logprobs: lp };
                Ok(Box::new(chat.complete_with(&opts, &mut sink)?))
            })?;
            let st = ChatStream {
                pieces,
                result: Mutex::new(None),
                logprobs: log,
            };
            return Ok(Py::new(py, st)?.into_any());
        }
        let r = py.detach(|| self.lock()?.complete(&opts).map_err(to_py))?;
        Ok(turn_dict(py, &r)?.into_any().unbind())
    }
}

/// The raw text pieces of a streaming `Chat.complete` (tool-call markup included); `result`
/// is the turn's dict once exhausted.
#[pyclass(module = "cera")]
pub struct ChatStream {
    pieces: stream::Pieces<Box<cera::chat::TurnResult>>,
    result: Mutex<Option<Py<PyDict>>>,
    logprobs: Option<crate::LogprobLog>,
}

#[pymethods]
impl ChatStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<String> {
        match self.pieces.next(py)? {
            stream::Next::Text(t) => Ok(t),
            stream::Next::End(r) => {
                *self.result.lock().expect("stream lock") = Some(turn_dict(py, &r)?.unbind());
                Err(PyStopIteration::new_err(()))
            }
        }
    }

    /// The logprobs of the tokens behind the pieces returned since the last call (see
    /// `Stream.take_logprobs`).
    fn take_logprobs(&self) -> Vec<crate::LogprobTuple> {
        crate::take_logprobs(&self.logprobs)
    }

    /// The finished turn (see `Chat.complete`), once the stream is exhausted.
    #[getter]
    fn result(&self, py: Python<'_>) -> Option<Py<PyDict>> {
        self.result
            .lock()
            .expect("stream lock")
            .as_ref()
            .map(|d| d.clone_ref(py))
    }
}
