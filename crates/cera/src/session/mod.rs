//! A session: one sequence's state (KV cache, position, tokens) over a shared engine. Prefill
//! (`append_tokens`/`append_text`), decode (`generate`), cancel, reset and truncation.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::runtime::time::Instant;

mod basic;
mod checkpoint;
mod lora;
mod media;
mod media_cache;
mod prefill;
mod rewind;
mod shift;

use crate::engine::{EngineInner, SessionOptions};
use crate::error::{Error, Result};
pub use basic::{BadOption, BasicOptions};
pub(crate) use checkpoint::map_file;
pub use media::{MEDIA_ID_BASE, MEDIA_MARKER, PromptPiece, is_media_id, media_ids};
pub use media_cache::MediaCache;
pub use prefill::PrefillReport;

use crate::backend::{Backend, KvCache, KvSpec, KvType};
use crate::lora::LoraSet;
use crate::models::ModelState;
use crate::sample::SamplerConfig;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FinishReason {
    /// An end-of-generation token.
    Eog,
    /// `max_tokens` reached.
    Length,
    /// A stop string appeared.
    Stop,
    /// The sink asked to stop, or `cancel()` was called.
    Cancelled,
    /// The context is full.
    ContextFull,
    /// The grammar allows no token here (see [`GenerateOptions::grammar`]).
    GrammarDeadEnd,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Eog => "eog",
            FinishReason::Length => "length",
            FinishReason::Stop => "stop",
            FinishReason::Cancelled => "cancelled",
            FinishReason::ContextFull => "context_full",
            FinishReason::GrammarDeadEnd => "grammar",
        }
    }
}

#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct GenerateOptions {
    /// Tokens to generate at most (0: until EOG or the context is full).
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    /// Generation stops when any of these appears; the stop string is not emitted.
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eog: bool,
    /// Constrain the output to a grammar (from its start, or lazily from a trigger).
    pub grammar: Option<crate::grammar::GrammarConstraint>,
}

/// The log-probability of a chosen token and the most likely alternatives, from the raw
/// logits (before temperature and truncation), as OpenAI's `logprobs` reports them.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub token: u32,
    pub logprob: f32,
    /// `(token, logprob)`, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// What a sink tells the generator after each piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Continue,
    Stop,
}

/// Receives generated text as it is produced.
pub trait Sink {
    /// `text` is the new, complete UTF-8 text (may be empty while a character or a possible stop
    /// string is incomplete); `token` the id just generated.
    fn on_token(&mut self, token: u32, text: &str) -> Control;

    /// How many alternatives each token's logprobs carry; `None` (the default): no logprobs
    /// are computed.
    fn logprobs(&self) -> Option<usize> {
        None
    }

    /// The logprobs of each sampled token (when [`Sink::logprobs`] asks for them), just before
    /// the `on_token` of the same token; the token that ends generation (EOG, or one completing
    /// a stop string) has none.
    fn on_logprobs(&mut self, _lp: TokenLogprobs) {}
}

impl<F: FnMut(u32, &str) -> Control> Sink for F {
    fn on_token(&mut self, token: u32, text: &str) -> Control {
        self(token, text)
    }
}

/// Counts and timings of one `generate` call (and the prefill before it).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Summary {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub prefill: Duration,
    pub decode: Duration,
    pub finish: FinishReason,
    /// The generated text (stop string excluded).
    pub text: String,
    pub tokens: Vec<u32>,
    /// Steps where the grammar rejected the sampled token and the full mask was applied.
    pub grammar_masked: usize,
    /// Time the grammar took (checks, masks, redraws, state updates), part of `decode`.
    pub grammar_time: Duration,
}

impl Summary {
    /// Nothing generated yet.
    pub(crate) fn empty() -> Summary {
        Summary {
            prompt_tokens: 0,
            generated_tokens: 0,
            prefill: Duration::ZERO,
            decode: Duration::ZERO,
            finish: FinishReason::Length,
            text: String::new(),
            tokens: Vec::new(),
            grammar_masked: 0,
            grammar_time: Duration::ZERO,
        }
    }

    pub fn prefill_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill.as_secs_f64().max(1e-9)
    }
    pub fn decode_tps(&self) -> f64 {
        self.generated_tokens as f64 / self.decode.as_secs_f64().max(1e-9)
    }
}

/// Stops a running prefill or generation from another thread.
#[derive(Clone, Debug)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }
}

pub struct Session {
    pub(crate) engine: Arc<EngineInner>,
    pub(crate) state: ModelState,
    pub(crate) tokens: Vec<u32>,
    pub(crate) logits: Vec<f32>,
    /// Whether `logits` belong to the last token in `tokens`.
    pub(crate) logits_valid: bool,
    n_ctx: usize,
    n_ubatch: usize,
    /// The KV cache types asked for (layers whose heads a block type cannot hold keep f16).
    pub(crate) kv_types: KvSpec,
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) pending_prompt: usize,
    pub(crate) pending_prefill: Duration,
    /// The recurrent state is behind `tokens` (after a truncate): the tokens from here on are
    /// prefilled again before anything else is appended.
    pub(crate) replay_from: Option<usize>,
    /// Recent convolution states (recurrent models), oldest first, so a truncate restores one
    /// instead of prefilling again (see `rewind.rs`).
    pub(crate) snaps: rewind::Snapshots,
    /// `Some(n_keep)`: the context shift is on (see `shift.rs`).
    pub(crate) shift_keep: Option<usize>,
    /// Times the context was shifted; a shifted state is not what a plain prefill of `tokens`
    /// gives, so it is never shared through a prefix cache.
    pub(crate) n_shifts: usize,
    /// The LoRA adapters applied to every forward pass of this session.
    pub(crate) lora: LoraSet,
}

impl crate::engine::Engine {
    /// A new, empty session.
    pub fn session(&self, opts: SessionOptions) -> Session {
        Session::new(Arc::clone(&self.inner), opts)
    }
}

impl Session {
    pub(crate) fn new(engine: Arc<EngineInner>, opts: SessionOptions) -> Session {
        let n_ctx = if opts.n_ctx == 0 {
            engine.n_ctx_train.min(4096)
        } else {
            opts.n_ctx
        };
        let spec = KvSpec::new(opts.kv_type, opts.kv_type_v.unwrap_or(opts.kv_type))
            .with_rotation(opts.kv_rotate);
        // a KV type the backend cannot hold keeps f16, as layers whose heads a block type
        // cannot hold do; front ends refuse such types by name first (Engine::check_kv)
        let spec = if engine.dev.kv_supported(spec, 64, 64) {
            spec
        } else {
            KvSpec::same(KvType::F16)
        };
        let state = ModelState {
            seq: engine.model.new_seq(&engine.dev, n_ctx, spec),
            ws: Default::default(),
        };
        Session {
            engine,
            state,
            // reserved up front, so decoding never grows it
            tokens: Vec::with_capacity(n_ctx),
            logits: Vec::new(),
            logits_valid: false,
            n_ctx,
            n_ubatch: opts.n_ubatch.max(1),
            kv_types: spec,
            cancel: Arc::new(AtomicBool::new(false)),
            pending_prompt: 0,
            pending_prefill: Duration::ZERO,
            replay_from: None,
            snaps: Default::default(),
            shift_keep: opts.context_shift.then_some(opts.n_keep),
            n_shifts: 0,
            lora: LoraSet::default(),
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Tokens in the context so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Logits after the last token (empty before any token).
    pub fn logits(&self) -> &[f32] {
        if self.logits_valid { &self.logits } else { &[] }
    }

    /// The logits after the last token, for a sampler to work on in place (empty before any
    /// token).
    pub fn logits_mut(&mut self) -> &mut [f32] {
        if self.logits_valid {
            &mut self.logits
        } else {
            &mut []
        }
    }

    /// Times the context shift has made room in this session.
    pub fn n_shifts(&self) -> usize {
        self.n_shifts
    }

    /// The KV cache types and rotation asked for (a layer whose heads a type cannot hold keeps
    /// f16; see [`KvType::for_head_dim`](crate::backend::KvType::for_head_dim)).
    pub fn kv_spec(&self) -> KvSpec {
        self.kv_types
    }

    /// Bytes the KV cache holds (all layers, the whole context).
    pub fn kv_cache_bytes(&self) -> usize {
        self.state.seq.kv.iter().map(|l| l.bytes()).sum()
    }

    /// Keys and values stored per token of context (every attention layer's heads).
    pub fn kv_elements_per_token(&self) -> usize {
        self.state
            .seq
            .kv
            .iter()
            .map(|l| {
                let (h, d, dv) = l.dims();
                h * (d + dv)
            })
            .sum()
    }

    /// KV cache bytes per token of context.
    pub fn kv_bytes_per_token(&self) -> f64 {
        self.kv_cache_bytes() as f64 / self.n_ctx.max(1) as f64
    }

    pub fn cancel_handle(&self) -> CancelHandle {
        CancelHandle(Arc::clone(&self.cancel))
    }

    /// A new session with a copy of this one's context (tokens, KV cache, recurrent state and
    /// logits): several continuations of one prompt prefill it once.
    pub fn fork(&self) -> Session {
        let mut tokens = Vec::with_capacity(self.n_ctx);
        tokens.extend_from_slice(&self.tokens);
        Session {
            engine: Arc::clone(&self.engine),
            state: ModelState {
                seq: self.state.seq.clone(),
                ws: Default::default(),
            },
            tokens,
            logits: self.logits.clone(),
            logits_valid: self.logits_valid,
            n_ctx: self.n_ctx,
            n_ubatch: self.n_ubatch,
            kv_types: self.kv_types,
            cancel: Arc::new(AtomicBool::new(false)),
            pending_prompt: 0,
            pending_prefill: Duration::ZERO,
            replay_from: self.replay_from,
            snaps: self.snaps.clone(),
            shift_keep: self.shift_keep,
            n_shifts: self.n_shifts,
            lora: self.lora.clone(),
        }
    }

    /// Empties the context.
    pub fn reset(&mut self) {
        self.tokens.clear();
        self.logits_valid = false;
        // the next forward pass starts at position 0, which clears any recurrent state
        self.replay_from = None;
        self.snaps.clear();
        self.n_shifts = 0;
    }

    /// Tokenizes `text` (BOS per the model's metadata when the context is empty; special tokens
    /// parsed when `parse_special`) and prefills it.
    pub fn append_text(&mut self, text: &str, parse_special: bool) -> Result<()> {
        let add_special = self.tokens.is_empty();
        let toks = self
            .engine
            .tokenizer
            .encode(text, add_special, parse_special);
        self.append_tokens(&toks)
    }

    /// Prefills `toks` in batches of `n_ubatch`. Fails with `ContextOverflow` before computing
    /// anything if they do not fit (after shifting the context, when that is on); `Cancelled`
    /// leaves the batches done so far in place.
    pub fn append_tokens(&mut self, toks: &[u32]) -> Result<()> {
        self.append_inner(toks, false).map(|_| ())
    }

    /// Like `append_tokens`, returning the logits of every appended token (rows of `n_vocab`).
    pub fn append_tokens_all_logits(&mut self, toks: &[u32]) -> Result<Vec<f32>> {
        self.append_inner(toks, true)
    }

    fn append_inner(&mut self, toks: &[u32], all: bool) -> Result<Vec<f32>> {
        let n_vocab = self.engine.model.n_vocab();
        if let Some(&bad) = toks.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::TokenOutOfRange { id: bad, n_vocab });
        }
        self.make_room(toks.len())?;
        let needed = self.tokens.len() + toks.len();
        if needed > self.n_ctx {
            return Err(Error::ContextOverflow {
                n_ctx: self.n_ctx,
                needed,
            });
        }
        self.cancel.store(false, Ordering::Release);
        self.catch_up()?;
        let mut all_logits = Vec::new();
        let t0 = Instant::now();
        let before = self.tokens.len();
        let r = self.forward_chunks(toks, all, &mut all_logits);
        self.pending_prefill += t0.elapsed();
        self.pending_prompt += self.tokens.len().saturating_sub(before);
        r?;
        if all && !toks.is_empty() {
            // keep `logits()` as the last row
            let start = self.logits.len() - n_vocab;
            self.logits.drain(..start);
        }
        Ok(all_logits)
    }

    pub(crate) fn n_ubatch(&self) -> usize {
        self.n_ubatch
    }

    /// Prefills `toks` in chunks ([`Session::chunk_end`]), checking for a cancel between them;
    /// with `all`, every token's logits are appended to `all_logits`.
    pub(crate) fn forward_chunks(
        &mut self,
        toks: &[u32],
        all: bool,
        all_logits: &mut Vec<f32>,
    ) -> Result<()> {
        let mut at = 0;
        let base = self.tokens.len();
        while at < toks.len() {
            if self.cancel.swap(false, Ordering::AcqRel) {
                return Err(Error::Cancelled);
            }
            let end = self.chunk_end(base + at, base + toks.len()) - base;
            self.forward(&toks[at..end], all)?;
            if all {
                all_logits.extend_from_slice(&self.logits);
            }
            at = end;
        }
        Ok(())
    }

    /// [`Session::forward`] of a decode step whose logits only a truncated sampler reads: the
    /// top `k` (token, logit) pairs are swapped into `top` (on a GPU the step reads back those
    /// alone); the whole row stays with the backend until [`Session::sync_logits`], and
    /// `logits()` is empty until then.
    pub(crate) fn forward_top(
        &mut self,
        chunk: &[u32],
        k: usize,
        top: &mut Vec<(u32, f32)>,
    ) -> Result<()> {
        self.state.ws.top_k = Some(k);
        let r = self.forward(chunk, false);
        self.state.ws.top_k = None;
        r?;
        std::mem::swap(top, &mut self.state.ws.top);
        self.logits_valid = false;
        Ok(())
    }

    /// The whole logits of the last token after [`Session::forward_top`] (read from the
    /// backend, where the step left them).
    pub(crate) fn sync_logits(&mut self) {
        let e = &self.engine;
        self.state.ws.read_logits(&e.dev, &mut self.logits);
        self.logits_valid = true;
    }

    /// Runs `chunk` after the context (whose state must be up to date) and appends it.
    pub(crate) fn forward(&mut self, chunk: &[u32], all: bool) -> Result<()> {
        self.forward_input(chunk, None, all)
    }

    /// [`Session::forward`] of positions whose input rows may be given (`embd`,
    /// `[chunk.len(), n_embd]`), `chunk` then holding their ids.
    pub(crate) fn forward_input(
        &mut self,
        chunk: &[u32],
        embd: Option<&[f32]>,
        all: bool,
    ) -> Result<()> {
        let pos0 = self.tokens.len();
        let e = &self.engine;
        e.model.forward_input(
            &e.dev,
            &mut self.state,
            chunk,
            embd,
            pos0,
            all,
            &self.lora,
            &mut self.logits,
        )?;
        self.joined(chunk, true);
        Ok(())
    }
}

impl Session {
    /// What every generation starts with: logits to sample from, the summary with the
    /// prompt's counts of the last prefill, and the cancel flag cleared.
    pub(crate) fn start_generation(&mut self) -> Result<Summary> {
        if !self.logits_valid {
            return Err(Error::Model(
                "generate needs at least one token in the context first".into(),
            ));
        }
        let mut summary = Summary::empty();
        summary.prompt_tokens = std::mem::take(&mut self.pending_prompt);
        summary.prefill = std::mem::take(&mut self.pending_prefill);
        self.cancel.store(false, Ordering::Release);
        Ok(summary)
    }

    /// Checks, before anything runs, that `tokens` can follow the context: shifting it first
    /// when that is on, they must fit and be in the vocabulary; a recurrent state behind the
    /// tokens (after a truncate) is brought up to date.
    pub(crate) fn prepare_feed(&mut self, tokens: &[u32], embd: Option<&[f32]>) -> Result<()> {
        self.make_room(tokens.len())?;
        let needed = self.tokens.len() + tokens.len();
        if needed > self.n_ctx {
            return Err(Error::ContextOverflow {
                n_ctx: self.n_ctx,
                needed,
            });
        }
        let n_vocab = self.engine.model.n_vocab();
        if embd.is_none()
            && let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_vocab)
        {
            return Err(Error::TokenOutOfRange { id: bad, n_vocab });
        }
        self.catch_up()
    }

    /// Whether [`CancelHandle::cancel`] was called (clearing it).
    pub(crate) fn take_cancel(&self) -> bool {
        self.cancel.swap(false, Ordering::AcqRel)
    }

    /// What every forward pass ends with: `chunk` joins the context, `last` (the last token's
    /// logits, when the step computed them) becomes [`Session::logits`], and a recurrent
    /// model's state snapshot is kept.
    pub(crate) fn absorb(&mut self, chunk: &[u32], last: Option<&[f32]>) {
        if let Some(l) = last {
            self.logits.clear();
            self.logits.extend_from_slice(l);
        }
        self.joined(chunk, last.is_some());
    }

    /// `chunk` was computed: it joins the context (`logits` holds its logits when
    /// `has_logits`), and a recurrent model keeps a state snapshot.
    fn joined(&mut self, chunk: &[u32], has_logits: bool) {
        self.tokens.extend_from_slice(chunk);
        self.logits_valid = has_logits;
        self.after_forward();
    }

    /// Keeps the first `n` tokens after a pass with logits at every row, whose row `row` of
    /// `rows` becomes the logits (those of the last kept token).
    pub(crate) fn keep_rows(&mut self, n: usize, rows: &[f32], row: usize) {
        let n_vocab = self.engine.model.n_vocab();
        self.truncate(n);
        self.logits.clear();
        self.logits
            .extend_from_slice(&rows[row * n_vocab..(row + 1) * n_vocab]);
        self.logits_valid = true;
    }
}
