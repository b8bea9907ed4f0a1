//! The chat API in one page: a conversation over a session, streamed; each turn prefills only
//! what it adds; the conversation saved to a checkpoint and resumed in a new chat; a second
//! conversation that shares the system prompt through the prefix cache.
//!
//!   cargo run --release --example chat [MODEL.gguf]
//!
//! Without an argument it uses the default model (fetched on first use).

use std::io::Write;
use std::sync::Arc;

use cera::chat::{Message, TurnOptions};
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::session::{Control, GenerateOptions};
use cera::state::PrefixCache;

fn main() -> cera::Result<()> {
    let path = match std::env::args().nth(1) {
        Some(p) => p.into(),
        None => cera::fetch::ensure(cera::fetch::lookup("smollm2")?, &mut |_| {})?,
    };
    let engine = Engine::load(&path, EngineOptions::default())?;
    let mut sopts = SessionOptions::default();
    sopts.n_ctx = 4096;

    // greedy, at most 64 tokens a reply
    let mut gopts = GenerateOptions::default();
    gopts.max_tokens = 64;
    gopts.sampler.temperature = 0.0;
    let turn = TurnOptions::new(gopts);

    let cache = Arc::new(PrefixCache::in_memory(512 << 20));
    let mut chat = engine.session(sopts.clone()).into_chat()?;
    chat.set_prefix_cache(Some(Arc::clone(&cache)));
    chat.ingest(Message::system(
        "You are a helpful assistant. Answer briefly.",
    ))?;
    for question in [
        "What is the capital of France?",
        "And how many people live there?",
    ] {
        println!("> {question}");
        chat.ingest(Message::user(question))?;
        let r = chat.complete_streaming(&turn, &mut |piece: &str| {
            print!("{piece}");
            let _ = std::io::stdout().flush();
            Control::Continue
        })?;
        println!(
            "\n  [{:?}; reused {} tokens, prefilled {}; {} tokens at {:.0} t/s]",
            r.finish,
            r.prefill.reused(),
            r.prefill.prefilled,
            r.summary.generated_tokens,
            r.summary.decode_tps()
        );
    }

    // save, then resume in a brand-new chat
    let file = std::env::temp_dir().join("cera-example-chat.ckpt");
    chat.save(&file)?;
    let mut resumed = engine.session(sopts.clone()).into_chat()?;
    resumed.load(&file)?;
    println!(
        "saved and resumed {} messages ({} tokens, {} KiB)",
        resumed.messages().len(),
        resumed.session().tokens().len(),
        std::fs::metadata(&file)
            .map(|m| m.len() / 1024)
            .unwrap_or(0)
    );
    resumed.ingest(Message::user("Thanks. One more fact about it?"))?;
    let r = resumed.complete(&turn)?;
    println!("> Thanks. One more fact about it?\n{}", r.text);
    println!("  [prefilled only {} new tokens]", r.prefill.prefilled);

    // another conversation with the same system prompt starts from the cache
    let mut other = engine.session(sopts).into_chat()?;
    other.set_prefix_cache(Some(Arc::clone(&cache)));
    other.ingest(Message::system(
        "You are a helpful assistant. Answer briefly.",
    ))?;
    other.ingest(Message::user("Name a color."))?;
    let r = other.complete(&turn)?;
    println!("> Name a color.\n{}", r.text);
    println!(
        "  [{} tokens from the prefix cache; cache: {:?}]",
        r.prefill.from_cache,
        cache.stats()
    );
    let _ = std::fs::remove_file(&file);
    Ok(())
}
