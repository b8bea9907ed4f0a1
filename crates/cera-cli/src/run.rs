//! `cera run`: one prompt in, the model's answer streamed to stdout.

use std::io::{IsTerminal, Read, Write};

use anyhow::{Context, bail};
use cera::chat::{ChatTemplate, Message, RenderOptions};
use cera::engine::Engine;
use cera::session::{Control, GenerateOptions, Session, Summary};
use cera::state::{PrefixCache, PrefixCacheOptions};

use crate::common::resolve_model;
use crate::gen_args::{ModelArgs, SamplingArgs};
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
    /// Prompt text (`-` reads stdin; stdin is also read when no prompt is given and it is not a
    /// terminal).
    #[arg(short = 'p', long = "prompt")]
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long = "file", conflicts_with = "prompt")]
    pub file: Option<std::path::PathBuf>,
    /// Tokens to generate (-1: until the model stops or the context is full).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
    /// System prompt (chat mode).
    #[arg(long = "system", visible_alias = "sys")]
    pub system: Option<String>,
    /// Feed the prompt as-is (BOS per metadata, special tokens parsed), without the chat
    /// template, like llama-simple.
    #[arg(long)]
    pub raw: bool,
    /// Stop when this text appears (repeatable).
    #[arg(short = 'r', long = "reverse-prompt", visible_alias = "stop")]
    pub stop: Vec<String>,
    /// Do not stop at end-of-generation tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// The multimodal projector (an mmproj GGUF) the images and audio go through.
    #[arg(long)]
    pub mmproj: Option<std::path::PathBuf>,
    /// An image or an audio clip for the prompt (repeatable; `--audio` adds to the same list,
    /// in order, and each file is told by its first bytes, as llama-mtmd-cli does: JPEG, PNG,
    /// WebP, GIF; WAV, MP3, FLAC, Ogg Vorbis): each goes where the prompt says `<__media__>`,
    /// or, without markers, all before the prompt.
    #[arg(long = "image", visible_alias = "audio")]
    pub image: Vec<std::path::PathBuf>,
}

pub use cera::session::MEDIA_MARKER;

/// The media and their projector, read before the model loads (a bad file fails at once).
fn load_media(
    a: &Args,
) -> anyhow::Result<Option<(cera::models::Mmproj, Vec<cera::media::MediaInput>)>> {
    match (&a.mmproj, a.image.is_empty()) {
        (None, true) => Ok(None),
        (None, false) => {
            bail!("--image/--audio need --mmproj (the model's multimodal projector GGUF)")
        }
        (Some(p), true) => bail!(
            "--mmproj {} without --image or --audio: nothing to encode",
            p.display()
        ),
        (Some(p), false) => {
            let file = cera::gguf::GgufFile::open(p)
                .with_context(|| format!("reading {}", p.display()))?;
            let m = cera::models::Mmproj::load(std::sync::Arc::new(file))
                .with_context(|| format!("loading the mmproj {}", p.display()))?;
            let media = a
                .image
                .iter()
                .map(|f| {
                    let bytes =
                        std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
                    cera::media::MediaInput::decode(&bytes)
                        .with_context(|| format!("{}", f.display()))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(Some((m, media)))
        }
    }
}

/// Reusing prompt state across runs.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CacheArgs {
    /// Prompt cache file (llama.cpp's --prompt-cache): reuse the matching prefix of the state
    /// saved there, and write the new prompt's state back.
    #[arg(long = "prompt-cache")]
    pub prompt_cache: Option<std::path::PathBuf>,
    /// Directory of the on-disk prefix cache: any earlier prompt's longest matching prefix is
    /// restored, and this prompt's state is added.
    #[arg(long = "prompt-cache-dir", conflicts_with = "prompt_cache")]
    pub prompt_cache_dir: Option<std::path::PathBuf>,
    /// Size cap of --prompt-cache-dir in MiB.
    #[arg(
        long = "prompt-cache-size",
        default_value_t = 8192,
        requires = "prompt_cache_dir"
    )]
    pub prompt_cache_mib: u64,
}

impl CacheArgs {
    /// The prefix cache of --prompt-cache-dir.
    pub fn prefix_cache(&self) -> anyhow::Result<Option<std::sync::Arc<PrefixCache>>> {
        let Some(dir) = &self.prompt_cache_dir else {
            return Ok(None);
        };
        let o = PrefixCacheOptions::default().with_disk(dir, self.prompt_cache_mib << 20);
        let c = PrefixCache::new(o)
            .with_context(|| format!("opening the prefix cache in {}", dir.display()))?;
        print_cache_warnings(&c);
        Ok(Some(std::sync::Arc::new(c)))
    }
}

pub fn print_cache_warnings(c: &PrefixCache) {
    for w in c.take_warnings() {
        eprintln!("cera: warning: {w}");
    }
}

/// Prefills `toks` reusing what --prompt-cache / --prompt-cache-dir hold; says what it reused.
pub fn prefill_with_caches(
    session: &mut Session,
    toks: &[u32],
    cache: &CacheArgs,
    prefix: Option<&PrefixCache>,
    verbose: bool,
) -> anyhow::Result<()> {
    if let Some(file) = &cache.prompt_cache
        && file.exists()
    {
        session
            .load_checkpoint(file)
            .with_context(|| format!("loading the prompt cache {}", file.display()))?;
    }
    let rep = match prefix {
        Some(p) => session.prefill_cached(toks, p)?,
        None => session.prefill(toks)?,
    };
    if let Some(p) = prefix {
        print_cache_warnings(p);
    }
    if verbose || cache.prompt_cache.is_some() || cache.prompt_cache_dir.is_some() {
        eprintln!(
            "cera: prompt {} tokens: {} reused ({} from the prefix cache), {} prefilled in {:.1} ms",
            toks.len(),
            rep.reused(),
            rep.from_cache,
            rep.prefilled,
            rep.time.as_secs_f64() * 1e3
        );
    }
    if let Some(file) = &cache.prompt_cache {
        session
            .save_checkpoint(file)
            .with_context(|| format!("writing the prompt cache {}", file.display()))?;
    }
    Ok(())
}

pub fn read_prompt(
    prompt: &Option<String>,
    file: &Option<std::path::PathBuf>,
) -> anyhow::Result<String> {
    if let Some(f) = file {
        return std::fs::read_to_string(f)
            .with_context(|| format!("reading prompt file {}", f.display()));
    }
    match prompt.as_deref() {
        Some("-") | None => {
            if prompt.is_none() && std::io::stdin().is_terminal() {
                bail!("no prompt: pass -p TEXT, -f FILE, or pipe text to stdin");
            }
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading the prompt from stdin")?;
            Ok(s)
        }
        Some(p) => Ok(p.to_owned()),
    }
}

/// Renders a one-turn conversation through the model's template.
pub fn chat_prompt(engine: &Engine, system: Option<&str>, user: &str) -> anyhow::Result<String> {
    let tmpl = ChatTemplate::from_gguf(engine.gguf())?;
    let mut msgs = Vec::new();
    if let Some(s) = system {
        msgs.push(Message::new("system", s));
    }
    msgs.push(Message::new("user", user));
    let mut opts = RenderOptions::default();
    opts.add_generation_prompt = true;
    Ok(tmpl.render(&msgs, &opts)?)
}

/// Installs a Ctrl-C handler that cancels the session instead of killing the process.
pub fn cancel_on_ctrl_c(handle: cera::session::CancelHandle) {
    let _ = ctrlc::set_handler(move || handle.cancel());
}

pub fn print_summary(s: &Summary, verbose: bool) {
    eprintln!();
    eprintln!(
        "cera: prompt {} tokens in {:.1} ms ({:.1} t/s); generated {} tokens in {:.1} ms ({:.1} t/s); finish: {}",
        s.prompt_tokens,
        s.prefill.as_secs_f64() * 1e3,
        s.prefill_tps(),
        s.generated_tokens,
        s.decode.as_secs_f64() * 1e3,
        s.decode_tps(),
        s.finish.as_str()
    );
    if !s.grammar_time.is_zero() {
        eprintln!(
            "cera: grammar {:.1} ms ({} masked steps)",
            s.grammar_time.as_secs_f64() * 1e3,
            s.grammar_masked
        );
    }
    if verbose {
        eprintln!("cera: generated token ids {:?}", s.tokens);
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let mut text = read_prompt(&a.prompt, &a.file)?;
    let media = load_media(&a)?;
    if let Some((_, imgs)) = &media
        && !text.contains(MEDIA_MARKER)
    {
        text = MEDIA_MARKER.repeat(imgs.len()) + &text;
    }
    let grammar = a.structured.grammar(a.model.verbose)?;
    let sampler = a.sampling.config()?;
    let path = resolve_model(a.model.model.as_deref())?;
    let t0 = std::time::Instant::now();
    let engine = Engine::load(&path, a.model.engine_options())
        .with_context(|| format!("loading {}", path.display()))?;
    crate::common::report_device(&engine);
    {
        let so = a.model.session_options();
        engine.check_kv(so.kv_type, so.kv_type_v.unwrap_or(so.kv_type))?;
    }
    if a.model.verbose {
        eprintln!(
            "cera: loaded {} in {:.0} ms ({} threads, kernels: {:?})",
            path.display(),
            t0.elapsed().as_secs_f64() * 1e3,
            engine.n_threads(),
            cera::kernels::KernelTable::get().tier()
        );
    }
    let tools = a.structured.tools(&engine, a.model.verbose)?;
    let prompt = match (&tools, a.raw) {
        (_, true) => text,
        (Some((t, _)), false) => crate::structured::chat_prompt_with_tools(
            &engine,
            a.system.as_deref(),
            &text,
            &t.tools,
        )?,
        (None, false) => chat_prompt(&engine, a.system.as_deref(), &text)?,
    };
    let adapters = a.model.lora.load(&engine, a.model.verbose)?;
    let mut session = engine.session(a.model.session_options());
    crate::gen_args::attach(&mut session, &adapters)?;
    cancel_on_ctrl_c(session.cancel_handle());
    if a.model.verbose {
        crate::common::print_kv_cache(&session);
    }
    let toks = engine.tokenizer().encode(&prompt, true, true);
    if a.model.verbose {
        eprintln!("cera: prompt is {} tokens: {:?}", toks.len(), toks);
    }
    let n_ctx = session.n_ctx();
    if a.n_predict > 0 && !a.model.context_shift && toks.len() + a.n_predict as usize > n_ctx {
        bail!(
            "context overflow: the prompt's {} tokens and -n {} need {}, but the context holds \
             {n_ctx} (pass a bigger -c, a smaller -n, or --context-shift)",
            toks.len(),
            a.n_predict,
            toks.len() + a.n_predict as usize
        );
    }
    if a.model.context_shift {
        // as llama.cpp: --keep past the prompt keeps the whole prompt (BOS included)
        let bos = engine.tokenizer().add_bos() as usize;
        session.set_context_shift(Some(a.model.keep.min(toks.len().saturating_sub(bos))));
    }
    let prefix = a.cache.prefix_cache()?;
    let prefilled = match &media {
        Some((m, inputs)) => inputs
            .iter()
            .map(|x| engine.encode_media(m, x))
            .collect::<cera::Result<Vec<_>>>()
            .and_then(|enc| session.append_with_media(&prompt, &enc))
            .map_err(anyhow::Error::from),
        None => prefill_with_caches(
            &mut session,
            &toks,
            &a.cache,
            prefix.as_deref(),
            a.model.verbose,
        ),
    };
    match prefilled {
        Err(e) if matches!(e.downcast_ref(), Some(cera::Error::Cancelled)) => return Ok(()),
        r => r?,
    }
    if a.model.verbose && media.is_some() {
        eprintln!(
            "cera: the prompt is {} positions; media rows (position+rows): {}",
            session.tokens().len(),
            media_runs(session.tokens())
        );
    }
    let mut opts = GenerateOptions::default();
    opts.max_tokens = if a.n_predict < 0 {
        0
    } else {
        a.n_predict as usize
    };
    opts.sampler = sampler;
    opts.stop = a.stop.clone();
    opts.ignore_eog = a.ignore_eos;
    opts.grammar = match &tools {
        Some((_, g)) => g.clone(),
        None => grammar,
    };
    if a.n_predict == 0 {
        return Ok(());
    }
    if let Some((t, _)) = &tools {
        // stdout is only the JSON array of calls; the prose goes to stderr
        let summary = session.generate(&opts, &mut |_tok: u32, _piece: &str| Control::Continue)?;
        let reply = cera::tools::parse_reply(t.format, &summary.text)
            .with_context(|| format!("reading the tool calls in the reply {:?}", summary.text))?;
        if !reply.content.is_empty() {
            eprintln!("{}", reply.content);
        }
        println!("{}", reply.calls_json());
        print_summary(&summary, a.model.verbose);
        return Ok(());
    }
    let mut drafter = a.spec.drafter(&engine, &a.model)?;
    let mut out = std::io::stdout().lock();
    let mut sink = |_tok: u32, piece: &str| {
        if out
            .write_all(piece.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            return Control::Stop; // stdout closed (e.g. piped into head)
        }
        Control::Continue
    };
    let (summary, spec_stats) = match drafter.as_deref_mut() {
        Some(d) => {
            let (s, st) = session.generate_speculative(&opts, &a.spec.options(), d, &mut sink)?;
            (s, Some(st))
        }
        None => (session.generate(&opts, &mut sink)?, None),
    };
    if std::io::stdout().is_terminal() {
        let _ = writeln!(out);
    }
    print_summary(&summary, a.model.verbose);
    if let Some(st) = spec_stats {
        crate::spec_args::print_stats(&a.spec.spec, &st);
    }
    if summary.finish == cera::session::FinishReason::ContextFull {
        eprintln!(
            "cera: the context is full ({n_ctx} tokens); pass a bigger -c or --context-shift to go on"
        );
    }
    if session.n_shifts() > 0 && a.model.verbose {
        eprintln!("cera: the context was shifted {} times", session.n_shifts());
    }
    // The process ends here: the system takes the model's memory back at once, where dropping
    // the engine frees the tokenizer's and the weights' allocations one by one (5% of a cold
    // `cera run -n 1` on SmolLM2). Nothing of theirs needs flushing (caches are written above).
    drop(out);
    std::mem::forget(drafter);
    std::mem::forget(session);
    std::mem::forget(engine);
    Ok(())
}

/// The runs of media rows among a context's positions, as `position+rows` (a tiled image has
/// one run per tile).
fn media_runs(tokens: &[u32]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, &t) in tokens.iter().enumerate() {
        if !cera::session::is_media_id(t) {
            continue;
        }
        match runs.last_mut() {
            Some((start, n)) if *start + *n == i => *n += 1,
            _ => runs.push((i, 1)),
        }
    }
    runs.iter()
        .map(|(p, n)| format!("{p}+{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}
