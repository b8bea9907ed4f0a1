//! `cera chat`: interactive multi-turn chat over the chat coordinator ([`cera::chat::Chat`]):
//! each turn prefills only what the new message adds. Works with a pipe on stdin (one message
//! per line). `--save`/`--load` (and `/save`, `/load`) keep a conversation across runs; the
//! structured-output and tool flags of `cera run` apply to every reply.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use cera::chat::{Chat, Message, Phase, TurnOptions};
use cera::engine::Engine;
use cera::session::{Control, GenerateOptions};

use crate::common::resolve_model;
use crate::gen_args::{ModelArgs, SamplingArgs};
use crate::run::{CacheArgs, cancel_on_ctrl_c, print_cache_warnings, print_summary};
use crate::spec_args::SpecArgs;
use crate::structured::StructuredArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub structured: Box<StructuredArgs>,
    /// System prompt.
    #[arg(long = "system", visible_alias = "sys")]
    pub system: Option<String>,
    /// Tokens to generate per reply at most (-1: until the model stops).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
    /// Resume the conversation saved in this file (by --save or /save).
    #[arg(long = "load")]
    pub load: Option<PathBuf>,
    /// Save the conversation to this file after every reply (atomically), to resume with
    /// --load.
    #[arg(long = "save")]
    pub save: Option<PathBuf>,
    /// Directory of the on-disk prefix cache (shared with `cera run --prompt-cache-dir`).
    #[arg(long = "prompt-cache-dir")]
    pub prompt_cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// The model's multimodal projector (an mmproj GGUF), for `/image FILE` and `/audio FILE`.
    #[arg(long)]
    pub mmproj: Option<PathBuf>,
}

const HELP: &str = "commands: /clear (forget the conversation), /system TEXT (set the system \
prompt), /image FILE, /audio FILE (media for the next message; needs --mmproj), /save FILE, \
/load FILE, /tool [ID] RESULT (answer a tool call), /exit";

pub fn run(a: Args) -> anyhow::Result<()> {
    let grammar = a.structured.grammar(a.model.verbose)?;
    let sampler = a.sampling.config()?;
    let path = resolve_model(a.model.model.as_deref())?;
    let engine = Engine::load(&path, a.model.engine_options())
        .with_context(|| format!("loading {}", path.display()))?;
    crate::common::report_device(&engine);
    {
        let so = a.model.session_options();
        engine.check_kv(so.kv_type, so.kv_type_v.unwrap_or(so.kv_type))?;
    }
    let mmproj = match &a.mmproj {
        Some(p) => Some(
            engine
                .load_mmproj(p)
                .with_context(|| format!("loading the mmproj {}", p.display()))?,
        ),
        None => None,
    };
    // media for the next message (`/image FILE`, `/audio FILE`), encoded as they are named
    let mut images = Vec::new();
    let tools = a.structured.tools(&engine, a.model.verbose)?;
    let adapters = a.model.lora.load(&engine, a.model.verbose)?;
    let mut session = engine.session(a.model.session_options());
    crate::gen_args::attach(&mut session, &adapters)?;
    cancel_on_ctrl_c(session.cancel_handle());
    let mut chat = session.into_chat()?;
    let cache = CacheArgs {
        prompt_cache_dir: a.prompt_cache_dir.clone(),
        prompt_cache_mib: 8192,
        ..Default::default()
    };
    let prefix = cache.prefix_cache()?;
    chat.set_prefix_cache(prefix.clone());
    if let Some(d) = a.spec.drafter(&engine, &a.model)? {
        chat.set_speculation(Some((a.spec.options(), d)));
    }
    let mut opts = GenerateOptions::default();
    opts.max_tokens = if a.n_predict < 0 {
        0
    } else {
        a.n_predict as usize
    };
    opts.sampler = sampler;
    let mut turn = TurnOptions::new(opts);
    match &tools {
        Some((t, g)) => {
            chat.set_tools(t.tools.clone());
            chat.set_tool_format(t.format);
            turn.constrain_tools = g.is_some();
        }
        None => turn.generate.grammar = grammar,
    }
    if let Some(file) = &a.load {
        chat.load(file)
            .with_context(|| format!("resuming the conversation in {}", file.display()))?;
        eprintln!(
            "cera: resumed {} messages ({} tokens) from {}",
            chat.messages().len(),
            chat.session().tokens().len(),
            file.display()
        );
    } else if let Some(s) = &a.system {
        chat.ingest(Message::system(s))?;
    }
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("cera chat: {} ({HELP})", path.display());
    }
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
        let cmd = msg.trim();
        if cmd.is_empty() {
            continue;
        }
        if let Some((kind, file)) = ["/image", "/audio"].iter().find_map(|k| {
            cmd.strip_prefix(k)
                .filter(|f| f.is_empty() || f.starts_with(' '))
                .map(|f| (*k, f))
        }) {
            match media(&engine, mmproj.as_ref(), kind, file.trim()) {
                Ok(enc) => {
                    eprintln!(
                        "cera: {} ({} positions) goes with the next message",
                        file.trim(),
                        enc.n_embd_rows
                    );
                    images.push(enc);
                }
                // a bad file is reported and the conversation goes on
                Err(e) => eprintln!("cera: {e:#}"),
            }
            continue;
        }
        match command(&mut chat, cmd)? {
            Outcome::Exit => break,
            Outcome::Handled => continue,
            Outcome::Reply => {}
            Outcome::Message => {
                let pending: Vec<String> = chat
                    .pending_tool_calls()
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                if !images.is_empty() {
                    chat.ingest_with_media(Message::user(msg), std::mem::take(&mut images))?;
                } else if pending.is_empty() {
                    chat.ingest(Message::user(msg))?;
                } else {
                    // a plain line answers the first pending call
                    chat.ingest_tool_result(&pending[0], msg)?;
                    if !chat.pending_tool_calls().is_empty() {
                        continue;
                    }
                }
            }
        }
        reply(&mut chat, &turn, a.model.verbose, &a.spec.spec)?;
        if let Some(p) = &prefix {
            print_cache_warnings(p);
        }
        if let Some(file) = &a.save {
            chat.save(file)
                .with_context(|| format!("saving the conversation to {}", file.display()))?;
        }
    }
    Ok(())
}

/// `/image FILE`, `/audio FILE`: the file decoded (its kind from its first bytes) and encoded
/// by the mmproj.
fn media(
    engine: &Engine,
    mmproj: Option<&cera::models::Mmproj>,
    cmd: &str,
    file: &str,
) -> anyhow::Result<cera::models::vision::EncodedMedia> {
    let Some(mm) = mmproj else {
        anyhow::bail!("{cmd} needs --mmproj (the model's multimodal projector GGUF)");
    };
    if file.is_empty() {
        anyhow::bail!("{cmd} needs a file: {cmd} FILE");
    }
    let bytes = std::fs::read(file).with_context(|| format!("reading {file}"))?;
    let input = cera::media::MediaInput::decode(&bytes).with_context(|| file.to_owned())?;
    Ok(engine.encode_media(mm, &input)?)
}

/// What a line of input asks for.
enum Outcome {
    Exit,
    /// A command that needs no reply.
    Handled,
    /// Generate a reply now (the last tool result came in).
    Reply,
    /// A message for the model.
    Message,
}

/// Runs a `/command`.
fn command(chat: &mut Chat, cmd: &str) -> anyhow::Result<Outcome> {
    let (name, rest) = cmd.split_once(' ').unwrap_or((cmd, ""));
    let rest = rest.trim();
    match name {
        "/exit" | "/quit" => return Ok(Outcome::Exit),
        "/clear" => {
            chat.reset();
            eprintln!("cera: conversation cleared");
        }
        "/help" => eprintln!("{HELP}"),
        "/system" => {
            if chat.phase() != Phase::Idle {
                eprintln!("cera: /system sets the first message; /clear first");
            } else if !rest.is_empty() {
                chat.ingest(Message::system(rest))?;
                eprintln!("cera: system prompt set");
            }
        }
        "/save" => {
            if rest.is_empty() {
                eprintln!("cera: /save FILE");
            } else {
                match chat.save(rest) {
                    Ok(()) => eprintln!(
                        "cera: saved {} messages ({} tokens) to {rest}",
                        chat.messages().len(),
                        chat.session().tokens().len()
                    ),
                    Err(e) => eprintln!("cera: could not save: {e}"),
                }
            }
        }
        "/load" => {
            if rest.is_empty() {
                eprintln!("cera: /load FILE");
            } else {
                match chat.load(rest) {
                    Ok(()) => eprintln!(
                        "cera: loaded {} messages ({} tokens) from {rest}",
                        chat.messages().len(),
                        chat.session().tokens().len()
                    ),
                    Err(e) => eprintln!("cera: could not load: {e}"),
                }
            }
        }
        "/tool" => {
            let pending: Vec<String> = chat
                .pending_tool_calls()
                .iter()
                .map(|s| s.to_string())
                .collect();
            let (id, result) = match rest.split_once(' ') {
                Some((id, r)) if pending.iter().any(|p| p == id) => (id.to_owned(), r),
                _ if pending.len() == 1 => (pending[0].clone(), rest),
                _ => {
                    eprintln!("cera: /tool ID RESULT (pending: {pending:?})");
                    return Ok(Outcome::Handled);
                }
            };
            if let Err(e) = chat.ingest_tool_result(&id, result) {
                eprintln!("cera: {e}");
            } else if chat.pending_tool_calls().is_empty() {
                return Ok(Outcome::Reply);
            }
        }
        _ if name.starts_with('/')
            && name.len() > 1
            && name[1..].chars().all(char::is_alphabetic) =>
        {
            eprintln!("cera: unknown command {name} ({HELP})");
        }
        _ => return Ok(Outcome::Message),
    }
    Ok(Outcome::Handled)
}

/// Generates and prints one reply.
fn reply(chat: &mut Chat, turn: &TurnOptions, verbose: bool, spec: &str) -> anyhow::Result<()> {
    let tools = !chat.tools().is_empty();
    let mut out = std::io::stdout().lock();
    let r = chat.complete_streaming(turn, &mut |piece: &str| {
        // with tools, the reply is printed once parsed
        if !tools {
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        }
        Control::Continue
    });
    let r = match r {
        Err(cera::Error::Cancelled) => {
            eprintln!("\ncera: cancelled");
            return Ok(());
        }
        r => r?,
    };
    if tools {
        if !r.text.is_empty() {
            let _ = write!(out, "{}", r.text);
        }
        if !r.tool_calls.is_empty() {
            let calls: Vec<_> = r
                .tool_calls
                .iter()
                .map(|c| serde_json::json!({"id": c.id, "name": c.name, "arguments": c.arguments}))
                .collect();
            let _ = write!(out, "{}", serde_json::json!({ "tool_calls": calls }));
            eprintln!("\ncera: answer with the tool's result (/tool [ID] RESULT, or a line)");
        }
    }
    let _ = writeln!(out);
    drop(out);
    if verbose {
        let p = r.prefill;
        eprintln!(
            "cera: reused {} cached tokens ({} from the prefix cache), prefilled {}, dropped {}",
            p.reused(),
            p.from_cache,
            p.prefilled,
            p.discarded
        );
        print_summary(&r.summary, true);
    }
    if let Some(st) = &r.spec
        && verbose
    {
        crate::spec_args::print_stats(spec, st);
    }
    Ok(())
}
