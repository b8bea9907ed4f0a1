//! The foreign-facing API from Rust, on SmolLM2 (fetched by scripts/test.sh before the tests;
//! fetched here when missing): the three streaming forms give the generation's text, a stopped
//! or dropped stream stops the engine within its look-ahead, an error reaches the stream's
//! consumer once, and the core's errors map to their kinds. The same API through Kotlin is
//! tests/kotlin/bindings.kts.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use cera_ffi::errors::CeraError;
use cera_ffi::stream::TokenListener;
use cera_ffi::types::{GenerateConfig, SessionConfig};
use cera_ffi::{Engine, Session};

const MODEL: &str = "smollm2-135m-instruct-q4_1";
const PROMPT: &str = "Once upon a time";

fn engine() -> Arc<Engine> {
    static E: std::sync::OnceLock<Arc<Engine>> = std::sync::OnceLock::new();
    Arc::clone(
        E.get_or_init(|| Engine::new(MODEL.into(), Some(2), "cpu".into()).expect("SmolLM2 loads")),
    )
}

fn greedy(n: u32) -> GenerateConfig {
    GenerateConfig {
        max_tokens: n,
        temperature: 0.0,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        repeat_penalty: 1.0,
        seed: None,
        stop: Vec::new(),
    }
}

fn session(n_ctx: u32) -> Arc<Session> {
    engine()
        .session(SessionConfig {
            n_ctx,
            cache_type_k: None,
            cache_type_v: None,
        })
        .unwrap()
}

/// Polls `f` to completion on this thread, parking between wake-ups (what the foreign
/// executors do through UniFFI's continuation callback).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// `device = "gpu"` runs the GPU backend (Mesa's lavapipe in CI, installed by scripts/test.sh)
/// and generates what the core's engine does on the GPU; `auto` takes no software renderer, so
/// there it says why it chose the CPU.
#[test]
fn the_gpu_device_generates_what_the_core_does_on_the_gpu() {
    let gpu = Engine::new(MODEL.into(), Some(2), "gpu".into())
        .unwrap_or_else(|e| panic!("the GPU backend did not open (is lavapipe installed?): {e}"));
    assert_eq!(gpu.backend(), "Vulkan", "{}", gpu.device());
    assert!(gpu.device().starts_with("GPU: "), "{}", gpu.device());
    assert!(gpu.device_fallback().is_none());
    let on_gpu = gpu
        .session(SessionConfig {
            n_ctx: 512,
            cache_type_k: None,
            cache_type_v: None,
        })
        .unwrap()
        .generate(PROMPT.into(), greedy(16))
        .unwrap();

    let path = cera::fetch::resolve_model(Some(MODEL), &mut |_| {}).unwrap();
    let mut o = cera::engine::EngineOptions::default();
    o.n_threads = Some(2);
    o.device = cera::engine::DeviceKind::Gpu;
    let core = cera::engine::Engine::load(path, o).unwrap();
    let mut so = cera::engine::SessionOptions::default();
    so.n_ctx = 512;
    let mut s = core.session(so);
    s.append_text(PROMPT, false).unwrap();
    let mut g = cera::session::GenerateOptions::default();
    g.max_tokens = 16;
    g.sampler.temperature = 0.0;
    let mut want = Vec::new();
    s.generate(&g, &mut |t: u32, _: &str| {
        want.push(t);
        cera::session::Control::Continue
    })
    .unwrap();
    assert_eq!(on_gpu.tokens, want, "{:?}", on_gpu.text);
    assert_eq!(engine().backend(), "CPU");

    let auto = Engine::new(MODEL.into(), Some(2), "auto".into()).unwrap();
    if auto.backend() == "CPU" {
        let why = auto.device_fallback();
        assert!(why.as_deref().is_some_and(|w| !w.is_empty()), "{why:?}");
    }
}

#[test]
fn every_form_gives_the_same_generation() {
    let g = session(512).generate(PROMPT.into(), greedy(32)).unwrap();
    assert_eq!(g.tokens.len(), 32);
    assert_eq!(g.finish_reason, "length");

    let st = session(512).stream(PROMPT.into(), greedy(32)).unwrap();
    let mut pieces = Vec::new();
    while let Some(p) = st.next_blocking().unwrap() {
        pieces.push(p);
    }
    assert!(pieces.len() > 10, "streamed in pieces: {pieces:?}");
    assert_eq!(pieces.concat(), g.text);
    assert_eq!(st.finish_reason().as_deref(), Some("length"));
    assert!(st.turn().is_none(), "a plain generation has no chat turn");

    // the async form, and the stream's async `next`, driven like a foreign executor
    let a = block_on(session(512).generate_async(PROMPT.into(), greedy(32))).unwrap();
    assert_eq!((a.text.as_str(), &a.tokens), (g.text.as_str(), &g.tokens));
    let st = session(512).stream(PROMPT.into(), greedy(32)).unwrap();
    let text = block_on(async {
        let mut t = String::new();
        while let Some(p) = st.next().await.unwrap() {
            t.push_str(&p);
        }
        t
    });
    assert_eq!(text, g.text);

    struct Collect(Mutex<String>);
    impl TokenListener for Collect {
        fn on_text(&self, text: String) -> bool {
            self.0.lock().unwrap().push_str(&text);
            true
        }
    }
    let heard = Arc::new(Collect(Mutex::new(String::new())));
    struct Fwd(Arc<Collect>);
    impl TokenListener for Fwd {
        fn on_text(&self, text: String) -> bool {
            self.0.on_text(text)
        }
    }
    let l = session(512)
        .generate_with(PROMPT.into(), greedy(32), Box::new(Fwd(Arc::clone(&heard))))
        .unwrap();
    assert_eq!(l.text, g.text);
    assert_eq!(*heard.0.lock().unwrap(), g.text);
}

#[test]
fn a_listener_returning_false_stops_at_once() {
    struct StopAfter(Mutex<usize>);
    impl TokenListener for StopAfter {
        fn on_text(&self, _: String) -> bool {
            let mut n = self.0.lock().unwrap();
            *n += 1;
            *n < 3
        }
    }
    let g = session(512)
        .generate_with(
            PROMPT.into(),
            greedy(200),
            Box::new(StopAfter(Mutex::new(0))),
        )
        .unwrap();
    assert_eq!(g.finish_reason, "cancelled");
    assert!(
        g.tokens.len() <= 4,
        "{} tokens after asking to stop",
        g.tokens.len()
    );
}

#[test]
fn stopping_or_dropping_a_stream_stops_the_engine() {
    let s = session(2048);
    let st = s.stream(PROMPT.into(), greedy(1500)).unwrap();
    for _ in 0..3 {
        st.next_blocking().unwrap().expect("a piece");
    }
    st.stop();
    let mut rest = 0;
    while st.next_blocking().unwrap().is_some() {
        rest += 1;
    }
    // the generating thread waits for the consumer after each piece: at most the piece
    // handed over when stop came
    assert!(rest <= 1, "{rest} pieces after stop");
    assert_eq!(st.finish_reason().as_deref(), Some("cancelled"));
    let n = s.tokens().unwrap().len();
    assert!(n <= 4 + 5, "the engine went on to {n} tokens");

    // dropped unread: the generating thread stops and releases the session
    let st = s.stream(" and".into(), greedy(1500)).unwrap();
    st.next_blocking().unwrap();
    drop(st);
    let t0 = Instant::now();
    let len = s.tokens().unwrap().len(); // waits for the session's lock
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(
        len < n + 60,
        "the engine went on to {len} tokens after the drop"
    );
}

#[test]
fn errors_reach_the_consumer_once_and_by_kind() {
    let st = session(16).stream("word ".repeat(40), greedy(4)).unwrap();
    match st.next_blocking() {
        Err(CeraError::ContextOverflow(m)) => assert!(m.contains("context"), "{m}"),
        other => panic!("expected a context overflow, got {other:?}"),
    }
    assert!(
        matches!(st.next_blocking(), Ok(None)),
        "then the stream ends"
    );

    match Engine::new("/nonexistent/missing.gguf".into(), None, "cpu".into()) {
        Err(CeraError::ModelLoad(m)) => assert!(m.contains("missing.gguf"), "{m}"),
        other => panic!("expected ModelLoad, got {:?}", other.err()),
    }
    match Engine::new(MODEL.into(), None, "tpu".into()) {
        Err(CeraError::InvalidArgument(m)) => assert!(m.contains("cpu, gpu, auto"), "{m}"),
        other => panic!("expected InvalidArgument, got {:?}", other.err()),
    }
    let mut bad = greedy(4);
    bad.top_p = 2.0;
    assert!(matches!(
        session(64).generate("x".into(), bad),
        Err(CeraError::InvalidArgument(m)) if m.contains("top_p")
    ));
    assert!(matches!(
        engine().detokenize(vec![u32::MAX]),
        Err(CeraError::Engine(m)) if m.contains("out of range")
    ));
    assert!(matches!(
        engine().session(SessionConfig {
            n_ctx: 64,
            cache_type_k: Some("q9_9".into()),
            cache_type_v: None
        }),
        Err(CeraError::InvalidArgument(_))
    ));
}

#[test]
fn schema_and_tool_helpers() {
    let schema = r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#;
    assert!(cera_ffi::schema_accepts(schema.into(), r#"{"n": 3}"#.into()).unwrap());
    assert!(!cera_ffi::schema_accepts(schema.into(), r#"{"n": "3"}"#.into()).unwrap());
    assert!(matches!(
        cera_ffi::schema_accepts("{not json".into(), "{}".into()),
        Err(CeraError::InvalidArgument(_))
    ));
    let tools = cera_ffi::tools_json(vec![cera_ffi::types::ToolSpec {
        name: "get_weather".into(),
        description: Some("Weather for a city".into()),
        parameters_json: Some(
            r#"{"type":"object","properties":{"city":{"type":"string"}}}"#.into(),
        ),
    }])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&tools).unwrap();
    assert_eq!(v[0]["type"], "function");
    assert_eq!(v[0]["function"]["name"], "get_weather");
    assert_eq!(
        v[0]["function"]["parameters"]["properties"]["city"]["type"],
        "string"
    );
}

#[test]
fn a_batch_generates_what_each_prompt_does_alone() {
    let prompts = vec![PROMPT.to_owned(), "The capital of France is".to_owned()];
    let cfg = SessionConfig {
        n_ctx: 512,
        cache_type_k: None,
        cache_type_v: None,
    };
    let got = engine()
        .generate_batch(prompts.clone(), greedy(24), cfg)
        .unwrap();
    assert_eq!(got.len(), 2);
    for (p, g) in prompts.iter().zip(&got) {
        let alone = session(512).generate(p.clone(), greedy(24)).unwrap();
        assert_eq!((&g.text, &g.tokens), (&alone.text, &alone.tokens), "{p}");
        assert_eq!(g.finish_reason, alone.finish_reason);
    }
    // a bad option is refused by name before anything runs
    let mut bad = greedy(4);
    bad.top_p = 2.0;
    let cfg = SessionConfig {
        n_ctx: 512,
        cache_type_k: None,
        cache_type_v: None,
    };
    let e = engine().generate_batch(prompts, bad, cfg).unwrap_err();
    assert!(e.to_string().contains("top_p"), "{e}");
}
