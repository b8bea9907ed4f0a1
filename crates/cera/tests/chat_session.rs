//! The chat coordinator: a scripted five-turn conversation prefills only the delta each turn
//! (the counts are checked against an independent render) and each reply equals a
//! from-scratch render-and-generate of the same history (greedy), on both real models and an
//! LFM2 model of the real 350M shape; phases are enforced; the tool loop (a named, constrained
//! tool choice) returns calls with ids and continues after their results; a chat checkpoint
//! restored in a new chat continues identically.

use std::path::PathBuf;

use cera::chat::{Chat, ChatTemplate, Message, Phase, RenderOptions, ToolChoice, TurnOptions};
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::sample::SamplerConfig;
use cera::session::{Control, GenerateOptions};
use serde_json::json;

#[path = "common/arch_models.rs"]
mod arch_models;
#[path = "common/models.rs"]
mod models;
use models::{real_model, tokenizer};

fn lfm2_model() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cera-chat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lfm2_350m_q4_0.gguf");
    let v = arch_models::variant("lfm2_350m_q4_0");
    std::fs::write(&path, arch_models::build(&v, tokenizer())).unwrap();
    path
}

fn engine(path: &PathBuf) -> Engine {
    let mut o = EngineOptions::default();
    o.n_threads = Some(2);
    Engine::load(path, o).unwrap()
}

fn sopts() -> SessionOptions {
    let mut o = SessionOptions::default();
    o.n_ctx = 2048;
    o
}

fn greedy(max_tokens: usize) -> TurnOptions {
    let mut g = GenerateOptions::default();
    g.max_tokens = max_tokens;
    let mut s = SamplerConfig::default();
    s.temperature = 0.0;
    g.sampler = s;
    TurnOptions::new(g)
}

const USER_TURNS: [&str; 5] = [
    "What is the capital of France?",
    "And of Italy?",
    "Name a famous dish from each.",
    "Which one is easier to cook at home?",
    "Thanks! Summarize our conversation in one sentence.",
];

fn lcp(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn five_turns(path: &PathBuf, max_tokens: usize) {
    let eng = engine(path);
    let tmpl = ChatTemplate::from_gguf(eng.gguf()).unwrap();
    let mut chat = eng.session(sopts()).into_chat().unwrap();
    chat.ingest(Message::system("You are a concise assistant."))
        .unwrap();
    let mut prev_tokens: Vec<u32> = Vec::new();
    for (turn, user) in USER_TURNS.iter().enumerate() {
        chat.ingest(Message::user(*user)).unwrap();
        assert_eq!(chat.phase(), Phase::PromptReady);
        // what the prompt is, rendered independently
        let mut ro = RenderOptions::default();
        ro.add_generation_prompt = true;
        let prompt = tmpl.render(chat.messages(), &ro).unwrap();
        let toks = eng.tokenizer().encode(&prompt, true, true);
        let r = chat.complete(&greedy(max_tokens)).unwrap();
        let want_kept = lcp(&prev_tokens, &toks).min(toks.len() - 1);
        assert_eq!(r.prefill.kept, want_kept, "turn {turn}: {:?}", r.prefill);
        assert_eq!(r.prefill.prefilled, toks.len() - want_kept, "turn {turn}");
        if turn > 0 {
            // only the delta: the new user message and the template's glue around it
            let delta = toks.len() - want_kept;
            assert!(
                delta < 40 + user.len() / 2,
                "turn {turn}: prefilled {delta} tokens"
            );
        }
        assert!(matches!(
            chat.phase(),
            Phase::TurnComplete | Phase::Interrupted
        ));
        // the same history from scratch
        let mut s = eng.session(sopts());
        s.append_tokens(&toks).unwrap();
        let summary = s
            .generate(&greedy(max_tokens).generate, &mut |_: u32, _: &str| {
                Control::Continue
            })
            .unwrap();
        assert_eq!(
            r.text, summary.text,
            "turn {turn}: reply differs from scratch"
        );
        prev_tokens = chat.session().tokens().to_vec();
    }
    assert_eq!(chat.messages().len(), 11);
}

#[test]
fn five_turns_smollm2() {
    five_turns(&real_model("smollm2"), 32);
}

#[test]
fn five_turns_qwen() {
    five_turns(&real_model("qwen2.5-coder-0.5b"), 24);
}

#[test]
fn five_turns_lfm2() {
    five_turns(&lfm2_model(), 12);
}

#[test]
fn phases_are_enforced() {
    let eng = engine(&real_model("smollm2"));
    let mut chat = eng.session(sopts()).into_chat().unwrap();
    assert_eq!(chat.phase(), Phase::Idle);
    let e = chat.complete(&greedy(4)).unwrap_err().to_string();
    assert!(e.contains("idle") && e.contains("nothing to answer"), "{e}");
    chat.ingest(Message::user("Hi")).unwrap();
    let r = chat.complete(&greedy(3)).unwrap();
    assert_eq!(chat.phase(), Phase::Interrupted, "{:?}", r.finish);
    // an interrupted reply continues where it stopped
    let before = chat.messages().last().unwrap().content.clone().unwrap();
    chat.complete(&greedy(3)).unwrap();
    let after = chat.messages().last().unwrap().content.clone().unwrap();
    assert!(after.starts_with(&before) && after.len() > before.len());
    assert_eq!(
        chat.messages().len(),
        2,
        "the continuation grew the same message"
    );
    let e = chat
        .ingest_tool_result("call_9", "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("no pending tool call"), "{e}");
    chat.reset();
    assert_eq!(chat.phase(), Phase::Idle);
}

#[test]
fn tool_loop_with_a_named_tool() {
    let eng = engine(&real_model("qwen2.5-coder-0.5b"));
    let mut chat = eng.session(sopts()).into_chat().unwrap();
    let tools = cera::tools::parse_tools(&json!([{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}
        }
    }]))
    .unwrap();
    chat.set_tools(tools);
    chat.ingest(Message::user("What is the weather in Paris?"))
        .unwrap();
    let mut o = greedy(64);
    o.tool_choice = ToolChoice::Named("get_weather".into());
    let r = chat.complete(&o).unwrap();
    assert_eq!(r.tool_calls.len(), 1, "{r:?}");
    let call = &r.tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert!(call.arguments["city"].is_string(), "{:?}", call.arguments);
    let id = call.id.clone().unwrap();
    assert_eq!(chat.pending_tool_calls(), vec![id.as_str()]);
    let e = chat.ingest(Message::user("hello")).unwrap_err().to_string();
    assert!(e.contains("results first"), "{e}");
    let e = chat.complete(&greedy(8)).unwrap_err().to_string();
    assert!(e.contains("waiting for their results"), "{e}");
    chat.ingest_tool_result(&id, "{\"temp_c\": 18, \"sky\": \"clear\"}")
        .unwrap();
    let r = chat.complete(&greedy(24)).unwrap();
    assert!(r.tool_calls.is_empty());
    assert!(!r.text.is_empty());
    // the tool message carries the call's id and name
    let tool_msg = &chat.messages()[2];
    assert_eq!(tool_msg.role, "tool");
    assert_eq!(tool_msg.tool_call_id.as_deref(), Some(id.as_str()));
    assert_eq!(tool_msg.name.as_deref(), Some("get_weather"));
}

/// A client replaying the whole history (as OpenAI clients do): an assistant message with
/// tool calls, ingested as history, leaves its calls waiting for their results, which the
/// tool messages then answer by id.
#[test]
fn replayed_tool_calls_wait_for_results() {
    let eng = engine(&real_model("qwen2.5-coder-0.5b"));
    let mut chat = eng.session(sopts()).into_chat().unwrap();
    chat.ingest(Message::user("What is the weather in Paris and Rome?"))
        .unwrap();
    let calls = vec![
        cera::chat::ToolCall::new(Some("a1".into()), "get_weather", json!({"city": "Paris"})),
        cera::chat::ToolCall::new(None, "get_weather", json!({"city": "Rome"})),
    ];
    chat.ingest(Message::tool_calls(calls)).unwrap();
    let pending: Vec<String> = chat
        .pending_tool_calls()
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(pending.len(), 2);
    assert_eq!(pending[0], "a1");
    let e = chat.complete(&greedy(8)).unwrap_err().to_string();
    assert!(e.contains("waiting for their results"), "{e}");
    let mut m = Message::new("tool", "18 C");
    m.tool_call_id = Some("a1".into());
    chat.ingest(m).unwrap();
    chat.ingest_tool_result(&pending[1], "21 C").unwrap();
    assert_eq!(chat.phase(), Phase::PromptReady);
    let r = chat.complete(&greedy(16)).unwrap();
    assert!(!r.text.is_empty());
    assert_eq!(chat.messages()[3].name.as_deref(), Some("get_weather"));
}

#[test]
fn json_schema_turn() {
    let eng = engine(&real_model("qwen2.5-coder-0.5b"));
    let mut chat = eng.session(sopts()).into_chat().unwrap();
    chat.ingest(Message::user("Give me a person with a name and an age."))
        .unwrap();
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
        "required": ["name", "age"]});
    let r = chat
        .complete(&greedy(80).json_schema(&schema).unwrap())
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.text).unwrap();
    assert!(v["name"].is_string() && v["age"].is_i64(), "{v}");
    assert!(greedy(8).json_schema(&json!({"type": 5})).is_err());
}

#[test]
fn chat_checkpoint_continues_identically() {
    let eng = engine(&real_model("smollm2"));
    let mut a = eng.session(sopts()).into_chat().unwrap();
    a.ingest(Message::user(USER_TURNS[0])).unwrap();
    a.complete(&greedy(16)).unwrap();
    let dir = std::env::temp_dir().join(format!("cera-chat-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("chat.ckpt");
    a.save(&file).unwrap();
    let mut b: Chat = eng.session(sopts()).into_chat().unwrap();
    b.load(&file).unwrap();
    assert_eq!(b.messages(), a.messages());
    assert_eq!(b.phase(), a.phase());
    assert_eq!(b.session().tokens(), a.session().tokens());
    for c in [&mut a, &mut b] {
        c.ingest(Message::user(USER_TURNS[1])).unwrap();
    }
    let ra = a.complete(&greedy(16)).unwrap();
    let rb = b.complete(&greedy(16)).unwrap();
    assert_eq!(ra.text, rb.text);
    assert_eq!(ra.prefill.kept, rb.prefill.kept);
    // a plain session checkpoint is not a chat's
    let mut s = eng.session(sopts());
    s.append_tokens(&[1, 2, 3]).unwrap();
    let bytes = s.checkpoint().unwrap();
    let e = b.restore(&bytes).unwrap_err().to_string();
    assert!(e.contains("not a chat"), "{e}");
    assert_eq!(b.phase(), Phase::Idle);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A chat that speculates (prompt lookup over the whole conversation) replies as one that
/// does not, turn for turn, and reports what it drafted.
#[test]
fn speculative_chat_replies_the_same() {
    let eng = engine(&real_model("smollm2"));
    let mut plain = eng.session(sopts()).into_chat().unwrap();
    let mut spec = eng.session(sopts()).into_chat().unwrap();
    spec.set_speculation(Some((
        cera::spec::SpecOptions::default(),
        Box::new(cera::spec::NgramDrafter::new(2, 6)),
    )));
    let turns = [
        "Repeat this sentence twice: the quick brown fox jumps over the lazy dog.",
        "Now repeat it three times.",
        "Repeat your first answer.",
    ];
    let mut drafted = 0;
    for (i, u) in turns.iter().enumerate() {
        plain.ingest(Message::user(*u)).unwrap();
        spec.ingest(Message::user(*u)).unwrap();
        let a = plain.complete(&greedy(48)).unwrap();
        let b = spec.complete(&greedy(48)).unwrap();
        assert_eq!(a.text, b.text, "turn {i}");
        assert_eq!(a.summary.tokens, b.summary.tokens, "turn {i}");
        assert!(a.spec.is_none());
        drafted += b
            .spec
            .expect("a speculating chat reports its counts")
            .drafted;
    }
    assert!(
        drafted > 0,
        "prompt lookup found nothing to draft in repeats"
    );
}
