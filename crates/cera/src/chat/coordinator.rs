//! The chat coordinator: a conversation over a [`Session`], in explicit phases.
//!
//! ```text
//!            ingest(user/system/tool)           complete()
//!   Idle ───────────────────────────▶ PromptReady ─────────▶ Generating ──▶ TurnComplete
//!    ▲                                   ▲   ▲                    │              │
//!    │ reset()                  ingest() │   │ ingest_tool_result │              │
//!    │                                   │   └────────────────────┼──────────────┘
//!    │                                   │                        ▼ (token limit, cancel,
//!    └───────────────────────────────────┴──────────────── Interrupted   a stop string)
//! ```
//!
//! * `complete` answers in `PromptReady`, and continues the cut-off message in `Interrupted`;
//!   anywhere else it is a [`Error::ChatPhase`] naming the phase. While the assistant has
//!   tool calls without results, only `ingest_tool_result` (or a `tool` message) is accepted.
//! * Delta-only prefill: each turn renders the whole history through the template and
//!   prefills only what extends the tokens already in the session; when the template rewrites
//!   earlier turns (e.g. drops past reasoning), the longest common prefix is kept and
//!   [`TurnResult::prefill`] says how many tokens were dropped and computed again.
//! * Tools are set on the chat; calls in a reply come back parsed, with ids, in
//!   [`TurnResult::tool_calls`]. Structured output (a grammar, a JSON Schema, a tool choice)
//!   is per turn ([`TurnOptions`]).
//! * [`Chat::checkpoint`] saves the session and the conversation together.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value as Json, json};

use super::{ChatTemplate, Message, RenderOptions, ToolCall};
use crate::error::{Error, Result};
use crate::grammar::{GrammarConstraint, json_schema};
use crate::session::{
    Control, FinishReason, GenerateOptions, PrefillReport, Session, Sink, Summary,
};
use crate::spec::{Drafter, SpecOptions, SpecStats};
use crate::state::PrefixCache;
use crate::state::checkpoint::Kind;
use crate::tools::{Tool, ToolFormat};

/// Where a chat is in its turn cycle (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Nothing to answer yet.
    Idle,
    /// Messages are waiting for an answer.
    PromptReady,
    /// A reply is being generated (seen from a streaming sink).
    Generating,
    /// The assistant ended its turn (perhaps with tool calls awaiting results).
    TurnComplete,
    /// The reply was cut off (token limit, cancel, a stop string, a full context).
    Interrupted,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::PromptReady => "prompt-ready",
            Phase::Generating => "generating",
            Phase::TurnComplete => "turn-complete",
            Phase::Interrupted => "interrupted",
        }
    }

    fn parse(s: &str) -> Option<Phase> {
        Some(match s {
            "idle" => Phase::Idle,
            "prompt-ready" => Phase::PromptReady,
            "turn-complete" => Phase::TurnComplete,
            "interrupted" => Phase::Interrupted,
            _ => return None,
        })
    }
}

/// Whether and how the model may call the chat's tools this turn (OpenAI's `tool_choice`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolChoice {
    /// It may call tools or answer in prose; calls are parsed, and constrained once started
    /// when [`TurnOptions::constrain_tools`] is set.
    #[default]
    Auto,
    /// The tools are not offered this turn.
    None,
    /// It must call at least one tool (grammar-enforced from the first token).
    Required,
    /// It must call this tool (grammar-enforced).
    Named(String),
}

impl ToolChoice {
    /// From OpenAI's string form, as the bindings take it: `auto` (or none given), `none`,
    /// `required`, or a tool's name.
    pub fn from_name(choice: Option<&str>) -> ToolChoice {
        match choice {
            None | Some("auto") => ToolChoice::Auto,
            Some("none") => ToolChoice::None,
            Some("required") => ToolChoice::Required,
            Some(name) => ToolChoice::Named(name.to_owned()),
        }
    }
}

/// How to generate one turn.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct TurnOptions {
    /// Tokens, sampling, stop strings and an optional grammar (the structured output of this
    /// turn).
    pub generate: GenerateOptions,
    pub tool_choice: ToolChoice,
    /// With [`ToolChoice::Auto`]: constrain calls to the tools' schemas once a call starts.
    pub constrain_tools: bool,
}

impl TurnOptions {
    pub fn new(generate: GenerateOptions) -> TurnOptions {
        TurnOptions {
            generate,
            ..Default::default()
        }
    }

    /// Constrains the reply to JSON matching `schema` (an invalid schema is an error).
    pub fn json_schema(mut self, schema: &Json) -> Result<TurnOptions> {
        let c = json_schema::compile(schema)?;
        self.generate.grammar = Some(GrammarConstraint::new(Arc::new(c.grammar)));
        Ok(self)
    }
}

/// One completed (or interrupted) turn.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TurnResult {
    /// What the assistant said, tool calls taken out.
    pub text: String,
    /// The calls it made, with ids (`call_1`, ... when the model gave none).
    pub tool_calls: Vec<ToolCall>,
    pub finish: FinishReason,
    /// What the prefill of this turn reused and computed.
    pub prefill: PrefillReport,
    /// Counts and timings of the generation.
    pub summary: Summary,
    /// What speculation did, when the chat speculates ([`Chat::set_speculation`]).
    pub spec: Option<SpecStats>,
}

/// A conversation over a session (see the module docs).
pub struct Chat {
    session: Session,
    template: ChatTemplate,
    messages: Vec<Message>,
    tools: Vec<Tool>,
    tool_format: ToolFormat,
    render: RenderOptions,
    phase: Phase,
    /// Ids (and names) of calls of the last reply that have no result yet.
    pending: Vec<(String, String)>,
    n_calls: u64,
    cache: Option<Arc<PrefixCache>>,
    last_prefill: PrefillReport,
    /// Speculative decoding for every turn (the drafter follows the whole conversation).
    spec: Option<(SpecOptions, Box<dyn Drafter + Send>)>,
    /// The media of the messages, in the order of their markers in the conversation.
    media: Vec<crate::models::vision::EncodedMedia>,
}

impl Session {
    /// A chat over this session with the model's own template.
    pub fn into_chat(self) -> Result<Chat> {
        let template = ChatTemplate::from_gguf(&self.engine.file)?;
        Ok(Chat::new(self, template))
    }
}

impl Chat {
    pub fn new(session: Session, template: ChatTemplate) -> Chat {
        let arch = session.engine.file.architecture().unwrap_or("").to_owned();
        let tool_format = ToolFormat::detect(template.source(), &arch);
        let mut session = session;
        session.reset();
        Chat {
            session,
            template,
            messages: Vec::new(),
            tools: Vec::new(),
            tool_format,
            render: RenderOptions::default(),
            phase: Phase::Idle,
            pending: Vec::new(),
            n_calls: 0,
            cache: None,
            last_prefill: PrefillReport::default(),
            spec: None,
            media: Vec::new(),
        }
    }

    /// Decodes every later turn speculatively with `drafter` (`None`: plain decoding). The
    /// replies are the same (see [`crate::spec`]); only the speed changes.
    pub fn set_speculation(&mut self, spec: Option<(SpecOptions, Box<dyn Drafter + Send>)>) {
        self.spec = spec;
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    pub fn into_session(self) -> Session {
        self.session
    }

    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Template variables for every render (e.g. `enable_thinking`), and the clock.
    pub fn set_render_options(&mut self, opts: RenderOptions) {
        self.render = opts;
    }

    /// Tools the model may call from now on.
    pub fn set_tools(&mut self, tools: Vec<Tool>) {
        self.tools = tools;
    }

    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// How the model writes calls (detected from the template; override for odd models).
    pub fn set_tool_format(&mut self, f: ToolFormat) {
        self.tool_format = f;
    }

    pub fn tool_format(&self) -> ToolFormat {
        self.tool_format
    }

    /// Shares prefixes with other sessions through `cache` (each turn's prompt is looked up
    /// and stored).
    pub fn set_prefix_cache(&mut self, cache: Option<Arc<PrefixCache>>) {
        self.cache = cache;
    }

    /// The prefill of the last turn.
    pub fn last_prefill(&self) -> PrefillReport {
        self.last_prefill
    }

    /// Ids of the last reply's tool calls that still need a result.
    pub fn pending_tool_calls(&self) -> Vec<&str> {
        self.pending.iter().map(|(id, _)| id.as_str()).collect()
    }

    /// Forgets the conversation (tools and options stay).
    pub fn reset(&mut self) {
        self.messages.clear();
        self.media.clear();
        self.pending.clear();
        self.session.reset();
        self.phase = Phase::Idle;
    }

    fn phase_error(&self, what: &str, why: &str) -> Error {
        Error::ChatPhase {
            phase: self.phase.as_str(),
            reason: format!("{what}: {why}"),
        }
    }

    /// Adds a message. `tool` messages answer a pending call (by `tool_call_id`, or the only
    /// pending one); an `assistant` message is history the model did not write (its tool
    /// calls, if any, then wait for their results).
    pub fn ingest(&mut self, msg: Message) -> Result<()> {
        if self.phase == Phase::Generating {
            return Err(self.phase_error("ingest", "a reply is being generated"));
        }
        if msg.role == "tool" {
            let id = match &msg.tool_call_id {
                Some(id) => id.clone(),
                None if self.pending.len() == 1 => self.pending[0].0.clone(),
                None => {
                    return Err(self.phase_error(
                        "ingest",
                        "a tool message needs tool_call_id when several calls are pending",
                    ));
                }
            };
            let Some(at) = self.pending.iter().position(|(p, _)| *p == id) else {
                return Err(self.phase_error(
                    "ingest",
                    &format!(
                        "no pending tool call has id {id:?} (pending: {:?})",
                        self.pending_tool_calls()
                    ),
                ));
            };
            let (id, name) = self.pending.remove(at);
            let mut msg = msg;
            msg.tool_call_id = Some(id);
            msg.name.get_or_insert(name);
            self.messages.push(msg);
            self.phase = Phase::PromptReady;
            return Ok(());
        }
        if !self.pending.is_empty() {
            return Err(self.phase_error(
                "ingest",
                &format!(
                    "the assistant called tools {:?}: give their results first \
                     (ingest_tool_result)",
                    self.pending_tool_calls()
                ),
            ));
        }
        let mut msg = msg;
        self.phase = if msg.role == "assistant" {
            // a replayed reply that called tools (a client sending the whole history back):
            // its calls wait for their results, as if the model had just made them
            for c in &mut msg.tool_calls {
                let id = c.id.get_or_insert_with(|| {
                    self.n_calls += 1;
                    format!("call_{}", self.n_calls)
                });
                self.pending.push((id.clone(), c.name.clone()));
            }
            Phase::TurnComplete
        } else {
            Phase::PromptReady
        };
        self.messages.push(msg);
        Ok(())
    }

    /// Adds a message that carries media (images encoded by [`Engine::encode_image`]), placed
    /// at its content's `<__media__>` markers in order, or all before its text when it has
    /// none (as llama-mtmd-cli does). The markers must be as many as the media.
    ///
    /// [`Engine::encode_image`]: crate::engine::Engine::encode_image
    pub fn ingest_with_media(
        &mut self,
        msg: Message,
        media: Vec<crate::models::vision::EncodedMedia>,
    ) -> Result<()> {
        use crate::session::MEDIA_MARKER;
        let mut msg = msg;
        let text = msg.content.take().unwrap_or_default();
        let have = text.matches(MEDIA_MARKER).count();
        msg.content = Some(if have == 0 {
            MEDIA_MARKER.repeat(media.len()) + &text
        } else {
            text
        });
        if have != 0 && have != media.len() {
            return Err(self.phase_error(
                "ingest",
                &format!("{have} {MEDIA_MARKER} markers for {} media", media.len()),
            ));
        }
        self.ingest(msg)?;
        self.media.extend(media);
        Ok(())
    }

    /// The result of the pending call `id`.
    pub fn ingest_tool_result(&mut self, id: &str, content: impl Into<String>) -> Result<()> {
        let mut m = Message::new("tool", content);
        m.tool_call_id = Some(id.to_owned());
        self.ingest(m)
    }

    /// Renders the history and prefills what is new; returns the tokens of the prompt.
    fn prepare(&mut self, choice: &ToolChoice) -> Result<()> {
        let mut ropts = self.render.clone();
        ropts.add_generation_prompt = true;
        if !self.tools.is_empty() && *choice != ToolChoice::None {
            ropts.tools = Some(crate::tools::tools_value(&self.tools));
        }
        let prompt = self.template.render(&self.messages, &ropts)?;
        if !self.media.is_empty() {
            let engine = self.session.engine();
            let pieces = engine.media_prompt(&prompt, &self.media, true)?;
            self.last_prefill = self
                .session
                .prefill_pieces(&pieces, self.cache.as_deref())?;
            return Ok(());
        }
        let toks = self.session.engine.tokenizer.encode(&prompt, true, true);
        self.last_prefill = match &self.cache {
            Some(c) => self.session.prefill_cached(&toks, c)?,
            None => self.session.prefill(&toks)?,
        };
        Ok(())
    }

    fn tool_grammar(
        &self,
        choice: &ToolChoice,
        constrain: bool,
    ) -> Result<Option<GrammarConstraint>> {
        let pick = |tools: &[Tool]| crate::tools::call_grammar(self.tool_format, tools);
        Ok(match choice {
            ToolChoice::None => None,
            _ if self.tools.is_empty() => {
                if *choice != ToolChoice::Auto {
                    return Err(Error::Tools(
                        "tool_choice needs tools: set them with set_tools".into(),
                    ));
                }
                None
            }
            ToolChoice::Auto => constrain
                .then(|| pick(&self.tools))
                .transpose()?
                .map(|g| g.0),
            ToolChoice::Required => {
                let mut g = pick(&self.tools)?.0;
                g.triggers.clear();
                Some(g)
            }
            ToolChoice::Named(name) => {
                let Some(t) = self.tools.iter().find(|t| t.name == *name) else {
                    return Err(Error::Tools(format!(
                        "tool_choice names {name:?}, which is not among the tools ({})",
                        self.tools
                            .iter()
                            .map(|t| t.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                };
                let mut g = pick(std::slice::from_ref(t))?.0;
                g.triggers.clear();
                Some(g)
            }
        })
    }

    /// Generates the assistant's reply (see [`Chat::complete_streaming`]).
    pub fn complete(&mut self, opts: &TurnOptions) -> Result<TurnResult> {
        self.complete_streaming(opts, &mut |_: &str| Control::Continue)
    }

    /// Generates the assistant's reply, streaming its raw text (tool-call markup included) to
    /// `sink`. In `Interrupted`, continues the cut-off message instead.
    pub fn complete_streaming(
        &mut self,
        opts: &TurnOptions,
        sink: &mut dyn FnMut(&str) -> Control,
    ) -> Result<TurnResult> {
        self.complete_with(opts, &mut |_t: u32, piece: &str| sink(piece))
    }

    /// As [`Chat::complete_streaming`], to a full [`Sink`]: token ids, and each token's
    /// logprobs when the sink asks for them (not under speculative decoding, whose verified
    /// tokens carry none).
    pub fn complete_with(&mut self, opts: &TurnOptions, sink: &mut dyn Sink) -> Result<TurnResult> {
        let continuing = match self.phase {
            Phase::PromptReady => false,
            Phase::Interrupted => true,
            _ => {
                return Err(self.phase_error(
                    "complete",
                    if self.pending.is_empty() {
                        "nothing to answer: ingest a message first"
                    } else {
                        "tool calls are waiting for their results"
                    },
                ));
            }
        };
        if !self.pending.is_empty() {
            return Err(self.phase_error(
                "complete",
                &format!(
                    "tool calls {:?} are waiting for their results",
                    self.pending_tool_calls()
                ),
            ));
        }
        let mut gopts = opts.generate.clone();
        if gopts.grammar.is_none() {
            gopts.grammar = self.tool_grammar(&opts.tool_choice, opts.constrain_tools)?;
        } else if !matches!(opts.tool_choice, ToolChoice::Auto | ToolChoice::None) {
            return Err(Error::Tools(
                "a grammar and a required tool choice cannot apply to one turn".into(),
            ));
        }
        if continuing {
            self.last_prefill = PrefillReport::default();
        } else {
            self.prepare(&opts.tool_choice)?;
        }
        self.phase = Phase::Generating;
        let r = match &mut self.spec {
            None => self.session.generate(&gopts, sink).map(|s| (s, None)),
            Some((so, d)) => self
                .session
                .generate_speculative(&gopts, so, d.as_mut(), sink)
                .map(|(s, st)| (s, Some(st))),
        };
        let (summary, spec) = match r {
            Ok(s) => s,
            Err(e) => {
                self.phase = if continuing {
                    Phase::Interrupted
                } else {
                    Phase::PromptReady
                };
                return Err(e);
            }
        };
        let mut raw = summary.text.clone();
        if continuing && let Some(last) = self.messages.pop() {
            // the cut-off message grows
            let mut prev = last.content.unwrap_or_default();
            prev.push_str(&raw);
            raw = prev;
        }
        let offered = !self.tools.is_empty() && opts.tool_choice != ToolChoice::None;
        let complete = summary.finish == FinishReason::Eog;
        let (text, mut calls) = if offered && complete {
            match crate::tools::parse_reply(self.tool_format, &raw) {
                Ok(p) => (p.content, p.calls),
                // a malformed call in free text stays text; a required call must parse
                Err(e) if matches!(opts.tool_choice, ToolChoice::Auto) => {
                    let _ = e;
                    (raw.clone(), Vec::new())
                }
                Err(e) => return Err(e),
            }
        } else {
            (raw.clone(), Vec::new())
        };
        for c in &mut calls {
            if c.id.is_none() {
                self.n_calls += 1;
                c.id = Some(format!("call_{}", self.n_calls));
            }
        }
        let msg = if calls.is_empty() {
            Message::assistant(text.clone())
        } else {
            let mut m = Message::tool_calls(calls.clone());
            if !text.is_empty() {
                m.content = Some(text.clone());
            }
            m
        };
        self.messages.push(msg);
        self.pending = calls
            .iter()
            .map(|c| (c.id.clone().unwrap_or_default(), c.name.clone()))
            .collect();
        self.phase = if complete {
            Phase::TurnComplete
        } else {
            Phase::Interrupted
        };
        Ok(TurnResult {
            text,
            tool_calls: calls,
            finish: summary.finish,
            prefill: self.last_prefill,
            summary,
            spec,
        })
    }

    fn app_state(&self) -> Json {
        json!({
            "messages": self.messages,
            "tools": crate::tools::tools_value(&self.tools),
            "tool_format": self.tool_format.as_str(),
            "phase": self.phase.as_str(),
            "pending": self.pending,
            "n_calls": self.n_calls,
        })
    }

    /// The session and the conversation as one checkpoint.
    pub fn checkpoint(&mut self) -> Result<Vec<u8>> {
        if self.phase == Phase::Generating {
            return Err(self.phase_error("checkpoint", "a reply is being generated"));
        }
        let mut app = serde_json::to_vec(&self.app_state()).map_err(|e| Error::State {
            what: "chat checkpoint".into(),
            reason: e.to_string(),
        })?;
        if !self.media.is_empty() {
            // the images and clips (their embeddings) after the JSON
            let mut w = crate::state::codec::Writer { buf: app };
            w.u8(super::media_state::SEPARATOR);
            super::media_state::write(&self.media, &mut w);
            app = w.buf;
        }
        self.session.checkpoint_with(Kind::Chat, &app)
    }

    /// [`Chat::checkpoint`] to a file, atomically.
    pub fn save(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let bytes = self.checkpoint()?;
        crate::state::atomic_write(path.as_ref(), &bytes)
    }

    /// Replaces the conversation and the session with a chat checkpoint's. On an error the
    /// chat is left empty.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.restore_from(bytes, "chat checkpoint")
    }

    /// [`Chat::restore`] from a file.
    pub fn load(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = crate::session::map_file(path)?;
        self.restore_from(&bytes, &format!("chat checkpoint {}", path.display()))
    }

    fn restore_from(&mut self, bytes: &[u8], what: &str) -> Result<()> {
        self.reset();
        let r = self.restore_inner(bytes, what);
        if r.is_err() {
            self.reset();
        }
        r
    }

    fn restore_inner(&mut self, bytes: &[u8], what: &str) -> Result<()> {
        let (h, app) = self.session.restore_with(bytes, what)?;
        let bad = |reason: String| Error::State {
            what: what.to_owned(),
            reason,
        };
        if h.kind != Kind::Chat {
            return Err(bad(format!(
                "a {} checkpoint, not a chat's (restore it into a session)",
                h.kind.as_str()
            )));
        }
        let (json_part, media) = match app.iter().position(|&b| b == super::media_state::SEPARATOR)
        {
            None => (&app[..], Vec::new()),
            Some(i) => {
                let mut r = crate::state::codec::Reader::new(&app[i + 1..], what);
                let m = super::media_state::read(&mut r, self.session.engine().n_embd())?;
                r.finish()?;
                (&app[..i], m)
            }
        };
        let v: Json = serde_json::from_slice(json_part)
            .map_err(|e| bad(format!("the conversation is not valid JSON: {e}")))?;
        let messages: Vec<Message> = serde_json::from_value(v["messages"].clone())
            .map_err(|e| bad(format!("messages: {e}")))?;
        let markers: usize = messages
            .iter()
            .filter_map(|m| m.content.as_deref())
            .map(|c| c.matches(crate::session::MEDIA_MARKER).count())
            .sum();
        if markers != media.len() {
            return Err(bad(format!(
                "{markers} media markers in the messages, but {} media saved",
                media.len()
            )));
        }
        let tools = crate::tools::parse_tools(&v["tools"]).map_err(|e| bad(e.to_string()))?;
        let tool_format: ToolFormat = v["tool_format"]
            .as_str()
            .unwrap_or("")
            .parse()
            .map_err(|e: Error| bad(e.to_string()))?;
        let phase = v["phase"]
            .as_str()
            .and_then(Phase::parse)
            .ok_or_else(|| bad(format!("unknown phase {}", v["phase"])))?;
        let pending: Vec<(String, String)> = serde_json::from_value(v["pending"].clone())
            .map_err(|e| bad(format!("pending calls: {e}")))?;
        self.messages = messages;
        self.tools = tools;
        self.tool_format = tool_format;
        self.phase = phase;
        self.pending = pending;
        self.n_calls = v["n_calls"].as_u64().unwrap_or(0);
        self.media = media;
        Ok(())
    }
}
