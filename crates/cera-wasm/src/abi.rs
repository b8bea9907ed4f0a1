//! The JSON call interface: one entry point, `cera_call(handle, method, args)`, over a table of
//! objects (loaders, engines, sessions, chats, mmprojs, Whisper models), with arguments and results as JSON
//! (bytes for checkpoints; a file's bytes after the JSON for media), and an imported
//! `emit(piece)` for streaming. Two builds export it:
//! - the threads build (`wasm32-wasip1-threads`, where wasm-bindgen does not build):
//!   `js/cera-threads.js` wraps it in the same classes wasm-bindgen makes for the one-thread
//!   build, so a page picks either without other changes;
//! - the one-thread build, beside wasm-bindgen's classes, for WebGPU: a GPU step waits for
//!   the browser (a mapped buffer, the adapter), which answers only through the event loop, so
//!   `js/cera-webgpu.js` enters through `WebAssembly.promising(cera_call)` and the backend's
//!   waits suspend the call (an imported `WebAssembly.Suspending` function) until it has run.
//!
//! Results wait in one buffer (`cera_result_ptr/len`) until the next call: JavaScript calls
//! from one thread (the engine's worker), and the kernels' threads never call these.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use serde_json::{Value, json};

use crate::api;
use crate::error::{Error, Result, invalid};
use crate::options::{GenerateConfig, SessionConfig, TranscribeConfig, TurnConfig, from_json};

#[cfg(target_os = "wasi")]
#[link(wasm_import_module = "cera")]
unsafe extern "C" {
    /// Hands a piece of generated text to the caller's callback; 0 asks to stop.
    #[link_name = "emit"]
    fn emit_piece(ptr: *const u8, len: usize) -> i32;
}

#[cfg(not(target_os = "wasi"))]
#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// Hands a piece of generated text to the caller's callback (set by `cera-webgpu.js`); 0
    /// asks to stop.
    #[wasm_bindgen(js_namespace = globalThis, js_name = __ceraEmit)]
    fn emit_js(piece: &str) -> i32;
    /// Returns once the page's event loop has run: `cera-webgpu.js` instantiates the module
    /// with this import as a `WebAssembly.Suspending` function, which suspends the calling
    /// WebAssembly stack until a promise settles.
    #[wasm_bindgen(js_namespace = globalThis, js_name = __ceraHostYield)]
    fn host_yield_js() -> i32;
}

enum Obj {
    /// A model file being received: JavaScript writes its chunks straight into the reserved
    /// buffer (`ptr` from `loaderNew`), then `finish` sets the length.
    Loader(Vec<u8>),
    Engine(cera::engine::Engine),
    Session(Box<cera::session::Session>, cera::engine::Engine),
    Chat(Box<cera::chat::Chat>),
    Mmproj(std::sync::Arc<cera::models::Mmproj>),
    Whisper(Box<api::WhisperModel>),
}

#[derive(Default)]
struct Table {
    next: u32,
    objs: HashMap<u32, Obj>,
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(Mutex::default);
static RESULT: Mutex<Vec<u8>> = Mutex::new(Vec::new());

fn insert(o: Obj) -> u32 {
    let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    t.next += 1;
    let h = t.next;
    t.objs.insert(h, o);
    h
}

/// Takes object `h` out of the table for a call (a call from inside that call's own callback
/// then finds it missing and says so, instead of aliasing it).
fn take(h: u32) -> Result<Obj> {
    let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    t.objs.remove(&h).ok_or_else(|| {
        invalid(format!(
            "object {h} is freed, or in use by a call still running (called from its callback?)"
        ))
    })
}

/// The mmproj on handle `h` (shared: it stays in the table).
fn mmproj(h: u32) -> Result<std::sync::Arc<cera::models::Mmproj>> {
    let t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    match t.objs.get(&h) {
        Some(Obj::Mmproj(m)) => Ok(std::sync::Arc::clone(m)),
        _ => Err(invalid(format!("object {h} is not a loaded mmproj"))),
    }
}

/// What a page asks of an mmproj: `{ vision, audio, nEmbd }`.
#[derive(serde::Serialize)]
struct MmprojInfo {
    vision: bool,
    audio: bool,
    #[serde(rename = "nEmbd")]
    n_embd: usize,
}

fn mmproj_info(m: &cera::models::Mmproj) -> MmprojInfo {
    MmprojInfo {
        vision: m.has_vision(),
        audio: m.has_audio(),
        n_embd: m.n_embd_out(),
    }
}

fn put_back(h: u32, o: Obj) {
    let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    t.objs.insert(h, o);
}

/// What a call returns.
enum Out {
    Json(Value),
    Bytes(Vec<u8>),
}

fn arg<T: serde::de::DeserializeOwned>(args: &[Value], i: usize, what: &str) -> Result<T> {
    let v = args.get(i).cloned().unwrap_or(Value::Null);
    serde_json::from_value(v).map_err(|e| invalid(format!("{what}: {e}")))
}

/// Options object `i` (missing or null: the defaults).
fn opts<T: serde::de::DeserializeOwned + Default>(
    args: &[Value],
    i: usize,
    what: &str,
) -> Result<T> {
    from_json(what, args.get(i).cloned().unwrap_or(Value::Null))
}

fn emit(piece: &str) -> bool {
    #[cfg(target_os = "wasi")]
    // SAFETY: the import reads `len` bytes at `ptr`, valid for the call.
    return unsafe { emit_piece(piece.as_ptr(), piece.len()) != 0 };
    #[cfg(not(target_os = "wasi"))]
    return emit_js(piece) != 0;
}

fn json<T: serde::Serialize>(v: &T) -> Result<Out> {
    serde_json::to_value(v)
        .map(Out::Json)
        .map_err(|e| invalid(e.to_string()))
}

/// Calls without an object: `version`, `loaderNew [totalBytes]`.
fn call_global(method: &str, args: &[Value]) -> Result<Out> {
    match method {
        "version" => Ok(Out::Json(json!(env!("CARGO_PKG_VERSION")))),
        "loaderNew" => {
            let total: f64 = arg(args, 0, "ModelLoader size")?;
            let mut bytes = api::reserve_model(total)?;
            let ptr = bytes.as_mut_ptr() as usize;
            let h = insert(Obj::Loader(bytes));
            Ok(Out::Json(json!({ "handle": h, "ptr": ptr })))
        }
        _ => Err(invalid(format!("no function {method}"))),
    }
}

fn call_engine(e: &cera::engine::Engine, method: &str, args: &[Value], raw: &[u8]) -> Result<Out> {
    match method {
        "loadMmproj" => {
            let m = api::load_mmproj(e, raw.to_vec())?;
            let info = mmproj_info(&m);
            let h = insert(Obj::Mmproj(std::sync::Arc::new(m)));
            Ok(Out::Json(json!({ "handle": h, "info": info })))
        }
        "session" => {
            let cfg: SessionConfig = opts(args, 0, "session options")?;
            let s = api::session(e, &cfg)?;
            Ok(Out::Json(json!(insert(Obj::Session(
                Box::new(s),
                e.clone()
            )))))
        }
        "generateBatch" => {
            let prompts: Vec<String> = arg(args, 0, "prompts")?;
            let cfg: GenerateConfig = opts(args, 1, "generate options")?;
            let scfg: SessionConfig = opts(args, 2, "session options")?;
            json(&api::generate_batch(e, &prompts, &cfg, &scfg)?)
        }
        "chat" => {
            let cfg: SessionConfig = opts(args, 0, "session options")?;
            Ok(Out::Json(json!(insert(Obj::Chat(Box::new(api::chat(
                e, &cfg
            )?))))))
        }
        "tokenize" => {
            let text: String = arg(args, 0, "text")?;
            let (add, parse): (bool, bool) =
                (arg(args, 1, "addSpecial")?, arg(args, 2, "parseSpecial")?);
            Ok(Out::Json(json!(e.tokenizer().encode(&text, add, parse))))
        }
        "detokenize" => {
            let ids: Vec<u32> = arg(args, 0, "token ids")?;
            Ok(Out::Json(json!(api::detokenize(e, &ids)?)))
        }
        "embed" => {
            let texts: Vec<String> = arg(args, 0, "texts")?;
            json(&api::embed(e, &texts)?)
        }
        "info" => Ok(Out::Json(json!({
            "nVocab": e.n_vocab(),
            "nCtxTrain": e.n_ctx_train(),
            "architecture": api::architecture(e),
            "backend": e.backend_name(),
            "threads": e.n_threads(),
        }))),
        _ => Err(invalid(format!("Engine has no method {method}"))),
    }
}

fn call_session(
    s: &mut cera::session::Session,
    e: &cera::engine::Engine,
    method: &str,
    args: &[Value],
    raw: &[u8],
) -> Result<Out> {
    match method {
        "generate" => {
            let prompt: String = arg(args, 0, "prompt")?;
            let cfg: GenerateConfig = opts(args, 1, "generate options")?;
            json(&api::generate(s, &prompt, &cfg, &mut emit)?)
        }
        "appendImage" => {
            let m = mmproj(arg(args, 0, "mmproj")?)?;
            Ok(Out::Json(json!(api::append_image(s, &m, raw)?)))
        }
        "appendAudio" => {
            let m = mmproj(arg(args, 0, "mmproj")?)?;
            let audio = audio_arg(arg(args, 1, "samples")?, raw)?;
            Ok(Out::Json(json!(api::append_audio(s, &m, audio)?)))
        }
        "tokens" => Ok(Out::Json(json!(s.tokens()))),
        "nCtx" => Ok(Out::Json(json!(s.n_ctx()))),
        "reset" => {
            s.reset();
            Ok(Out::Json(Value::Null))
        }
        "checkpoint" => Ok(Out::Bytes(s.checkpoint()?)),
        "restore" => {
            s.restore(raw)?;
            Ok(Out::Json(Value::Null))
        }
        "engine" => Ok(Out::Json(json!(insert(Obj::Engine(e.clone()))))),
        _ => Err(invalid(format!("Session has no method {method}"))),
    }
}

/// Audio after the JSON: 16 kHz f32 samples (little-endian) when `samples`, else a file's
/// bytes.
fn audio_arg(samples: bool, raw: &[u8]) -> Result<api::Audio<'_>> {
    if !samples {
        return Ok(api::Audio::File(raw));
    }
    if !raw.len().is_multiple_of(4) {
        return Err(invalid(format!(
            "audio samples: {} bytes is not a whole number of f32 values",
            raw.len()
        )));
    }
    Ok(api::Audio::Samples(
        raw.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    ))
}

fn call_whisper(w: &api::WhisperModel, method: &str, args: &[Value], raw: &[u8]) -> Result<Out> {
    match method {
        "transcribe" => {
            let audio = audio_arg(arg(args, 0, "samples")?, raw)?;
            let cfg: TranscribeConfig = opts(args, 1, "transcribe options")?;
            Ok(Out::Json(api::transcribe(w, audio, &cfg)?))
        }
        "detectLanguage" => {
            let audio = audio_arg(arg(args, 0, "samples")?, raw)?;
            Ok(Out::Json(json!(api::detect_language(w, audio)?)))
        }
        "info" => Ok(Out::Json(json!({ "multilingual": w.multilingual() }))),
        _ => Err(invalid(format!("Whisper has no method {method}"))),
    }
}

fn call_chat(c: &mut cera::chat::Chat, method: &str, args: &[Value], raw: &[u8]) -> Result<Out> {
    match method {
        "ingest" => {
            let (role, content): (String, String) =
                (arg(args, 0, "role")?, arg(args, 1, "content")?);
            api::ingest(c, &role, &content)?;
            Ok(Out::Json(Value::Null))
        }
        "ingestToolResult" => {
            let (id, content): (String, String) = (arg(args, 0, "id")?, arg(args, 1, "content")?);
            c.ingest_tool_result(&id, content)?;
            Ok(Out::Json(Value::Null))
        }
        "setTools" => {
            api::set_tools(c, args.first().unwrap_or(&Value::Null))?;
            Ok(Out::Json(Value::Null))
        }
        "complete" => {
            let map = match args.first() {
                None | Some(Value::Null) => serde_json::Map::new(),
                Some(Value::Object(m)) => m.clone(),
                Some(v) => {
                    return Err(invalid(format!(
                        "turn options: expected an object, got {v}"
                    )));
                }
            };
            let cfg = TurnConfig::from_map(map)?;
            json(&api::complete(c, &cfg, &mut emit)?)
        }
        "reset" => {
            c.reset();
            Ok(Out::Json(Value::Null))
        }
        "checkpoint" => Ok(Out::Bytes(c.checkpoint()?)),
        "restore" => {
            c.restore(raw)?;
            Ok(Out::Json(Value::Null))
        }
        _ => Err(invalid(format!("Chat has no method {method}"))),
    }
}

/// A loader's methods, `finish [receivedBytes, threads, device]`: the engine on its bytes
/// (the loader is used up, whatever the outcome); `device` `cpu` (or absent), `gpu`, `auto`;
/// `finishWhisper [receivedBytes, threads]`: a Whisper model on them.
fn finish_loader(mut bytes: Vec<u8>, args: &[Value], whisper: bool) -> Result<Out> {
    let received: usize = arg(args, 0, "received bytes")?;
    let threads: usize = arg(args, 1, "threads")?;
    let device: Option<String> = if whisper {
        None
    } else {
        arg(args, 2, "device")?
    };
    if received != bytes.capacity() {
        return Err(invalid(format!(
            "ModelLoader: {received} of {} bytes received",
            bytes.capacity()
        )));
    }
    // SAFETY: JavaScript wrote all `received` bytes of the reserved buffer (at the pointer
    // `loaderNew` returned; the Vec was never grown, so it did not move).
    unsafe { bytes.set_len(received) };
    if whisper {
        let w = api::load_whisper(bytes, threads)?;
        let info = json!({ "multilingual": w.multilingual() });
        return Ok(Out::Json(
            json!({ "handle": insert(Obj::Whisper(Box::new(w))), "info": info }),
        ));
    }
    let e = api::load(bytes, threads, device.as_deref().unwrap_or("cpu"))?;
    Ok(Out::Json(json!(insert(Obj::Engine(e)))))
}

fn dispatch(h: u32, method: &str, args_bytes: &[u8]) -> Result<Out> {
    if method == "free" {
        take(h)?;
        return Ok(Out::Json(Value::Null));
    }
    // `restore` takes the checkpoint's bytes as they are; every other call a JSON array,
    // then, after a NUL byte (which JSON text never holds), the raw bytes a call may take (a
    // file's: `loadMmproj`, `appendImage`, `appendAudio`)
    let (json_bytes, raw) = if method == "restore" {
        (&[][..], args_bytes)
    } else {
        match args_bytes.iter().position(|&b| b == 0) {
            Some(i) => (&args_bytes[..i], &args_bytes[i + 1..]),
            None => (args_bytes, &[][..]),
        }
    };
    let args: Vec<Value> = if json_bytes.is_empty() {
        Vec::new()
    } else {
        serde_json::from_slice(json_bytes)
            .map_err(|e| invalid(format!("{method}: arguments: {e}")))?
    };
    if h == 0 {
        return call_global(method, &args);
    }
    match take(h)? {
        Obj::Engine(e) => {
            let r = call_engine(&e, method, &args, raw);
            put_back(h, Obj::Engine(e));
            r
        }
        Obj::Session(mut s, e) => {
            let r = call_session(&mut s, &e, method, &args, raw);
            put_back(h, Obj::Session(s, e));
            r
        }
        Obj::Chat(mut c) => {
            let r = call_chat(&mut c, method, &args, raw);
            put_back(h, Obj::Chat(c));
            r
        }
        Obj::Mmproj(m) => {
            let r = match method {
                "info" => json(&mmproj_info(&m)),
                _ => Err(invalid(format!("Mmproj has no method {method}"))),
            };
            put_back(h, Obj::Mmproj(m));
            r
        }
        Obj::Whisper(w) => {
            let r = call_whisper(&w, method, &args, raw);
            put_back(h, Obj::Whisper(w));
            r
        }
        Obj::Loader(bytes) if method == "finish" => finish_loader(bytes, &args, false),
        Obj::Loader(bytes) if method == "finishWhisper" => finish_loader(bytes, &args, true),
        Obj::Loader(bytes) => {
            let cap = bytes.capacity();
            put_back(h, Obj::Loader(bytes));
            Err(invalid(format!(
                "ModelLoader ({cap} bytes) has no method {method}"
            )))
        }
    }
}

#[cfg(target_os = "wasi")]
unsafe extern "C" {
    /// wasi-libc's set-up of the calling thread's `pthread` record (its thread list, its id);
    /// a command module's `_start` or a reactor's `_initialize` calls it, and a Rust cdylib
    /// has neither. Without it the first `pthread_create` links the new thread into a list
    /// that was never made, and the engine hangs.
    fn __wasi_init_tp();
    /// The module's static constructors (wasm-ld's).
    fn __wasm_call_ctors();
}

/// Sets up the library on the engine's thread: called once by the JavaScript wrapper, right
/// after instantiating, before any other call.
#[unsafe(no_mangle)]
pub extern "C" fn cera_init() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !DONE.swap(true, std::sync::atomic::Ordering::SeqCst) {
        #[cfg(target_os = "wasi")]
        // SAFETY: once, on the main instance's thread, before any thread exists.
        unsafe {
            __wasi_init_tp();
            __wasm_call_ctors();
        }
        #[cfg(not(target_os = "wasi"))]
        cera::backend::gpu::set_host_yield(|| {
            host_yield_js();
        });
    }
}

/// `len` bytes for JavaScript to write a call's method name or arguments into.
#[unsafe(no_mangle)]
pub extern "C" fn cera_alloc(len: usize) -> *mut u8 {
    let mut v = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(len.max(1)));
    v.as_mut_ptr()
}

/// Frees what `cera_alloc(len)` returned.
///
/// # Safety
/// `ptr` must come from `cera_alloc(len)` with the same `len`, and be freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cera_dealloc(ptr: *mut u8, len: usize) {
    // SAFETY: as the caller promises, this is the Vec `cera_alloc` leaked.
    drop(unsafe { Vec::from_raw_parts(ptr, 0, len.max(1)) });
}

/// The last call's result (JSON, bytes, or the error's message).
#[unsafe(no_mangle)]
pub extern "C" fn cera_result_ptr() -> *const u8 {
    RESULT.lock().unwrap_or_else(|e| e.into_inner()).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn cera_result_len() -> usize {
    RESULT.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// Calls `method` (UTF-8 at `m`, `m_len` bytes) of object `h` (0: no object) with `args` (a
/// JSON array; a checkpoint's bytes for `restore`). Returns 0 with the result as JSON, 2 with
/// it as bytes, 1 with an error's message, in the result buffer.
///
/// # Safety
/// `m` and `a` must point at `m_len` and `a_len` readable bytes (null with length 0 allowed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cera_call(
    h: u32,
    m: *const u8,
    m_len: usize,
    a: *const u8,
    a_len: usize,
) -> i32 {
    let slice = |p: *const u8, n: usize| -> &[u8] {
        if n == 0 {
            &[]
        } else {
            // SAFETY: as the caller promises.
            unsafe { std::slice::from_raw_parts(p, n) }
        }
    };
    let (method, args) = (slice(m, m_len), slice(a, a_len));
    let r = match std::str::from_utf8(method) {
        Ok(method) => dispatch(h, method, args),
        Err(_) => Err(invalid("the method name is not UTF-8")),
    };
    let (code, bytes) = match r {
        Ok(Out::Json(v)) => (0, serde_json::to_vec(&v).unwrap_or_default()),
        Ok(Out::Bytes(b)) => (2, b),
        Err(Error(msg)) => (1, msg.into_bytes()),
    };
    *RESULT.lock().unwrap_or_else(|e| e.into_inner()) = bytes;
    code
}
