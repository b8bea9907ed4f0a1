//! The Rust leg of the bindings' parity check (`scripts/parity.sh`): the greedy continuation of
//! a prompt through the core API, printed as the other legs print it: the generated token ids
//! on the first line, the text after it.
//!
//!   cargo run --release --example parity -- MODEL PROMPT N

use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::session::{Control, GenerateOptions};

fn main() -> cera::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, prompt, n] = args.as_slice() else {
        eprintln!("usage: parity MODEL PROMPT N");
        std::process::exit(2);
    };
    let Ok(n) = n.parse::<usize>() else {
        eprintln!("error: N must be a token count, got {n:?}");
        std::process::exit(2);
    };
    let path = cera::fetch::resolve_model(Some(model), &mut |_| {})?;
    let mut eo = EngineOptions::default();
    eo.n_threads = Some(2);
    let engine = Engine::load(path, eo)?;
    let mut so = SessionOptions::default();
    so.n_ctx = 512;
    let mut s = engine.session(so);
    s.append_text(prompt, false)?;
    let mut g = GenerateOptions::default();
    g.max_tokens = n;
    g.sampler.temperature = 0.0;
    let (mut tokens, mut text) = (Vec::new(), String::new());
    s.generate(&g, &mut |t: u32, piece: &str| {
        tokens.push(t.to_string());
        text.push_str(piece);
        Control::Continue
    })?;
    println!("{}\n{text}", tokens.join(" "));
    Ok(())
}
