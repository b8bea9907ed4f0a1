//! `cera chat`: interactive multi-turn chat. The KV cache is kept across turns; each turn only
//! the tokens after the longest common prefix with the cache are prefilled. Works with a pipe
//! on stdin (one message per line).

use std::io::{BufRead, IsTerminal, Write};

use anyhow::Context;
use cera::chat::{ChatTemplate, Message, RenderOptions};
use cera::engine::Engine;
use cera::session::{Control, GenerateOptions};

use crate::common::resolve_model;
use crate::gen_args::{ModelArgs, SamplingArgs};
use crate::run::{cancel_on_ctrl_c, print_summary};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// System prompt.
    #[arg(long = "system", visible_alias = "sys")]
    pub system: Option<String>,
    /// Tokens to generate per reply at most (-1: until the model stops).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
}

const HELP: &str =
    "commands: /clear (forget the conversation), /system TEXT (set the system prompt), /exit";

pub fn run(a: Args) -> anyhow::Result<()> {
    let path = resolve_model(a.model.model.as_deref())?;
    let engine = Engine::load(&path, a.model.engine_options())
        .with_context(|| format!("loading {}", path.display()))?;
    let tmpl = ChatTemplate::from_gguf(engine.gguf())?;
    let mut session = engine.session(a.model.session_options());
    cancel_on_ctrl_c(session.cancel_handle());
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("cera chat: {} ({HELP})", path.display());
    }
    let mut system = a.system.clone();
    let mut history: Vec<Message> = Vec::new();
    let mut opts = GenerateOptions::default();
    opts.max_tokens = if a.n_predict < 0 {
        0
    } else {
        a.n_predict as usize
    };
    opts.sampler = a.sampling.config();

    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            eprint!("> ");
            let _ = std::io::stderr().flush();
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("reading stdin")?;
        let msg = line.trim_end_matches(['\r', '\n']);
        if msg.trim().is_empty() {
            continue;
        }
        match msg.trim() {
            "/exit" | "/quit" => break,
            "/clear" => {
                history.clear();
                session.reset();
                eprintln!("cera: conversation cleared");
                continue;
            }
            "/help" => {
                eprintln!("{HELP}");
                continue;
            }
            _ => {}
        }
        if let Some(rest) = msg.trim().strip_prefix("/system") {
            system = Some(rest.trim().to_owned()).filter(|s| !s.is_empty());
            eprintln!(
                "cera: system prompt {}",
                if system.is_some() { "set" } else { "cleared" }
            );
            continue;
        }
        history.push(Message::new("user", msg));
        let mut msgs = Vec::with_capacity(history.len() + 1);
        if let Some(s) = &system {
            msgs.push(Message::new("system", s));
        }
        msgs.extend(history.iter().cloned());
        let mut ropts = RenderOptions::default();
        ropts.add_generation_prompt = true;
        let prompt = tmpl.render(&msgs, &ropts)?;
        let toks = engine.tokenizer().encode(&prompt, true, true);
        // reuse the cached prefix; prefill only what changed
        let common = session
            .tokens()
            .iter()
            .zip(&toks)
            .take_while(|(a, b)| a == b)
            .count();
        let common = common.min(toks.len().saturating_sub(1));
        session.truncate(common);
        match session.append_tokens(&toks[common..]) {
            Err(cera::Error::Cancelled) => {
                history.pop();
                eprintln!("\ncera: cancelled");
                continue;
            }
            r => r?,
        }
        let mut out = std::io::stdout().lock();
        let summary = session.generate(&opts, &mut |_t: u32, piece: &str| {
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
            Control::Continue
        })?;
        let _ = writeln!(out);
        drop(out);
        if a.model.verbose {
            eprintln!(
                "cera: reused {common} cached tokens, prefilled {}",
                toks.len() - common
            );
            print_summary(&summary, true);
        }
        history.push(Message::new("assistant", &summary.text));
    }
    Ok(())
}
