//! A session: one sequence's state (KV cache, position, tokens) over a shared engine. Prefill
//! (`append_tokens`/`append_text`), decode (`generate`), cancel, reset and truncation.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::engine::{EngineInner, SessionOptions};
use crate::error::{Error, Result};
use crate::models::ModelState;
use crate::sample::{Sampler, SamplerConfig};

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
    cancel: Arc<AtomicBool>,
    pending_prompt: usize,
    pending_prefill: Duration,
    /// The recurrent state is ahead of `tokens` (after a truncate): the kept tokens are
    /// prefilled again, from position 0, before anything else is appended.
    replay: bool,
}

impl Session {
    pub(crate) fn new(engine: Arc<EngineInner>, opts: SessionOptions) -> Session {
        let n_ctx = if opts.n_ctx == 0 {
            engine.n_ctx_train.min(4096)
        } else {
            opts.n_ctx
        };
        let v_type = opts.kv_type_v.unwrap_or(opts.kv_type);
        let state = engine.model.new_state(n_ctx, opts.kv_type, v_type);
        Session {
            engine,
            state,
            // reserved up front, so decoding never grows it
            tokens: Vec::with_capacity(n_ctx),
            logits: Vec::new(),
            logits_valid: false,
            n_ctx,
            n_ubatch: opts.n_ubatch.max(1),
            cancel: Arc::new(AtomicBool::new(false)),
            pending_prompt: 0,
            pending_prefill: Duration::ZERO,
            replay: false,
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
            cancel: Arc::new(AtomicBool::new(false)),
            pending_prompt: 0,
            pending_prefill: Duration::ZERO,
            replay: self.replay,
        }
    }

    /// Empties the context.
    pub fn reset(&mut self) {
        self.tokens.clear();
        self.logits_valid = false;
        // the next forward pass starts at position 0, which clears any recurrent state
        self.replay = false;
    }

    /// Keeps the first `n` tokens. Their cached keys and values stay valid; a model with
    /// recurrent state (LFM2's convolutions) cannot rewind it, so the kept tokens are prefilled
    /// again from position 0 when the next tokens are appended.
    pub fn truncate(&mut self, n: usize) {
        if n < self.tokens.len() {
            self.tokens.truncate(n);
            self.logits_valid = false;
            self.replay = self.state.is_recurrent() && n > 0;
        }
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
    /// anything if they do not fit; `Cancelled` leaves the batches done so far in place.
    pub fn append_tokens(&mut self, toks: &[u32]) -> Result<()> {
        self.append_inner(toks, false).map(|_| ())
    }

    /// Like `append_tokens`, returning the logits of every appended token (rows of `n_vocab`).
    pub fn append_tokens_all_logits(&mut self, toks: &[u32]) -> Result<Vec<f32>> {
        self.append_inner(toks, true)
    }

    fn append_inner(&mut self, toks: &[u32], all: bool) -> Result<Vec<f32>> {
        let needed = self.tokens.len() + toks.len();
        if needed > self.n_ctx {
            return Err(Error::ContextOverflow {
                n_ctx: self.n_ctx,
                needed,
            });
        }
        let n_vocab = self.engine.model.n_vocab();
        if let Some(&bad) = toks.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::TokenOutOfRange { id: bad, n_vocab });
        }
        self.cancel.store(false, Ordering::Release);
        self.catch_up()?;
        let mut all_logits = Vec::new();
        let t0 = Instant::now();
        for chunk in toks.chunks(self.n_ubatch) {
            if self.cancel.swap(false, Ordering::AcqRel) {
                self.pending_prefill += t0.elapsed();
                return Err(Error::Cancelled);
            }
            let pos0 = self.tokens.len();
            let e = &self.engine;
            e.model
                .forward(&e.cpu, &mut self.state, chunk, pos0, all, &mut self.logits)?;
            self.tokens.extend_from_slice(chunk);
            self.logits_valid = true;
            self.pending_prompt += chunk.len();
            if all {
                all_logits.extend_from_slice(&self.logits);
            }
        }
        self.pending_prefill += t0.elapsed();
        if all && !toks.is_empty() {
            // keep `logits()` as the last row
            let start = self.logits.len() - n_vocab;
            self.logits.drain(..start);
        }
        Ok(all_logits)
    }

    /// After a truncate on a model with recurrent state: prefills the kept tokens again, so the
    /// state matches `tokens` before anything new is appended.
    pub(crate) fn catch_up(&mut self) -> Result<()> {
        if self.replay {
            let e = &self.engine;
            for (i, chunk) in self.tokens.chunks(self.n_ubatch).enumerate() {
                e.model.forward(
                    &e.cpu,
                    &mut self.state,
                    chunk,
                    i * self.n_ubatch,
                    false,
                    &mut self.logits,
                )?;
            }
            self.replay = false;
            self.logits_valid = true;
        }
        Ok(())
    }

    /// Samples and feeds tokens until a stop condition, streaming text to `sink`.
    pub fn generate(&mut self, opts: &GenerateOptions, sink: &mut dyn Sink) -> Result<Summary> {
        if !self.logits_valid {
            return Err(Error::Model(
                "generate needs at least one token in the context first".into(),
            ));
        }
        let mut sampler = Sampler::new(opts.sampler.clone());
        for &t in &self.tokens {
            sampler.accept(t);
        }
        let engine = Arc::clone(&self.engine);
        let tok = &engine.tokenizer;
        let mut decoder = tok.stream_decoder();
        let mut stops = StopMatcher::new(&opts.stop);
        let mut constraint = opts
            .grammar
            .as_ref()
            .map(|g| crate::grammar::Constraint::new(g, engine.token_trie(), tok));
        let mut summary = Summary {
            prompt_tokens: std::mem::take(&mut self.pending_prompt),
            generated_tokens: 0,
            prefill: std::mem::take(&mut self.pending_prefill),
            decode: Duration::ZERO,
            finish: FinishReason::Length,
            text: String::new(),
            tokens: Vec::new(),
            grammar_masked: 0,
            grammar_time: Duration::ZERO,
        };
        self.cancel.store(false, Ordering::Release);
        let t0 = Instant::now();
        loop {
            if opts.max_tokens > 0 && summary.generated_tokens >= opts.max_tokens {
                summary.finish = FinishReason::Length;
                break;
            }
            if self.cancel.swap(false, Ordering::AcqRel) {
                summary.finish = FinishReason::Cancelled;
                break;
            }
            let next = match &mut constraint {
                None => sampler.sample(&mut self.logits),
                Some(c) => match c.sample(&mut sampler, &mut self.logits) {
                    Some(t) => t,
                    None => {
                        summary.finish = FinishReason::GrammarDeadEnd;
                        break;
                    }
                },
            };
            if let Some(c) = &mut constraint
                && !c.accept(next)
            {
                summary.finish = FinishReason::GrammarDeadEnd;
                break;
            }
            sampler.accept(next);
            summary.generated_tokens += 1;
            summary.tokens.push(next);
            // with a finished grammar only EOG can follow: stop even when ignoring EOG
            if tok.is_eog(next)
                && (!opts.ignore_eog || constraint.as_ref().is_some_and(|c| c.is_finished()))
            {
                summary.finish = FinishReason::Eog;
                break;
            }
            let piece = decoder.push(next);
            let (emit, stopped) = stops.push(&piece);
            summary.text.push_str(&emit);
            if sink.on_token(next, &emit) == Control::Stop {
                summary.finish = FinishReason::Cancelled;
                break;
            }
            if stopped {
                summary.finish = FinishReason::Stop;
                break;
            }
            if self.tokens.len() >= self.n_ctx {
                summary.finish = FinishReason::ContextFull;
                break;
            }
            let pos = self.tokens.len();
            engine.model.forward(
                &engine.cpu,
                &mut self.state,
                &[next],
                pos,
                false,
                &mut self.logits,
            )?;
            self.tokens.push(next);
        }
        // flush text held back for a possible stop string or an incomplete character
        if summary.finish != FinishReason::Stop {
            let mut rest = decoder.finish();
            rest = stops.flush(&rest);
            if !rest.is_empty() {
                summary.text.push_str(&rest);
                sink.on_token(*summary.tokens.last().unwrap_or(&0), &rest);
            }
        }
        // an EOG token or the token that completed a stop string was sampled but not fed; keep
        // the context consistent: the logits still belong to the last fed token
        summary.decode = t0.elapsed();
        if let Some(c) = constraint {
            summary.grammar_masked = c.n_masked;
            summary.grammar_time = c.time;
        }
        Ok(summary)
    }
}

/// Holds back text that could still become a stop string.
struct StopMatcher<'a> {
    stops: &'a [String],
    held: String,
}

impl<'a> StopMatcher<'a> {
    fn new(stops: &'a [String]) -> Self {
        StopMatcher {
            stops,
            held: String::new(),
        }
    }

    /// Adds `piece`; returns the text safe to emit and whether a stop string was found.
    fn push(&mut self, piece: &str) -> (String, bool) {
        if self.stops.is_empty() {
            return (piece.to_owned(), false);
        }
        self.held.push_str(piece);
        if let Some(at) = self
            .stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let out = self.held[..at].to_owned();
            self.held.clear();
            return (out, true);
        }
        // keep the longest suffix that is a prefix of some stop string
        let keep = self
            .stops
            .iter()
            .map(|s| {
                (1..s.len().min(self.held.len() + 1))
                    .rev()
                    .find(|&k| {
                        self.held.is_char_boundary(self.held.len() - k)
                            && s.starts_with(&self.held[self.held.len() - k..])
                    })
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_owned();
        self.held.drain(..cut);
        (out, false)
    }

    fn flush(&mut self, tail: &str) -> String {
        let mut s = std::mem::take(&mut self.held);
        s.push_str(tail);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    #[test]
    fn stop_strings_are_held_back_and_cut() {
        let stops = vec!["</end>".to_string(), "\n\n".to_string()];
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for piece in ["Hel", "lo </", "en", "d> world"] {
            let (e, stop) = m.push(piece);
            out.push_str(&e);
            if stop {
                break;
            }
        }
        assert_eq!(out, "Hello ");
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("a\n"), ("a".to_string(), false));
        assert_eq!(m.push("b"), ("\nb".to_string(), false));
        assert_eq!(m.push("\n\nc"), (String::new(), true));
    }
}
