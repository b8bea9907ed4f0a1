//! One request in its slot: what it feeds each step (a prompt chunk; the token decided last
//! and a draft), and what it does with the logits it gets back (sample and stream, or verify
//! a draft and roll back what the target disagrees with), until it finishes.

use std::sync::Arc;
use std::time::Duration;

use super::generator::{Generator, Step};
use super::scheduler::{Chunk, Draft, Event, Finished, Prompt, RequestId};
use crate::engine::EngineInner;
use crate::error::{Error, Result};
use crate::lora::LoraSet;
use crate::models::Logits;
use crate::runtime::time::Instant;
use crate::session::{
    Control, FinishReason, GenerateOptions, Session, Summary, is_media_id, media_ids,
};
use crate::spec::{Adapt, SpecStats};
use crate::state::PrefixCache;

/// What a generator step leads to.
enum Flow {
    Next(u32),
    End(FinishReason),
}

/// What a slot feeds in a step.
pub(super) struct Fed {
    pub tokens: Vec<u32>,
    pub logits: Logits,
    /// `[tokens.len(), n_embd]`: the input rows of media positions (`tokens` their ids).
    pub embd: Option<Vec<f32>>,
}

enum Phase<'e> {
    /// Feeding the prompt: `prompt[session.tokens().len()..]` is left.
    Prefill,
    /// The session's logits are those to sample the first token from.
    Ready,
    /// Generating; `next` is the token to feed.
    Decode { g: Box<Generator<'e>>, next: u32 },
}

/// A slot's drafter, its draft-length policy and what it did.
struct SlotSpec<'e> {
    draft_of: Draft<'e>,
    adapt: Adapt,
    /// The draft fed this step (after the decode token).
    draft: Vec<u32>,
    ctx: Vec<u32>,
    stats: SpecStats,
}

type On<'a> = &'a mut dyn FnMut(Event) -> Control;

pub(super) struct Run<'e> {
    pub id: RequestId,
    slot: usize,
    opts: GenerateOptions,
    logprobs: Option<usize>,
    /// The context to reach while prefilling.
    prompt: Vec<u32>,
    /// Its media runs: (first position, positions, `[n, n_embd]` rows).
    media: Vec<(usize, usize, Arc<[f32]>)>,
    phase: Phase<'e>,
    spec: Option<SlotSpec<'e>>,
    summary: Summary,
    cached: usize,
    queued: Duration,
    t_decode: Instant,
    /// The top candidates of the last step when it read those alone (a one-slot step whose
    /// sampler needs no more): the session's logits stay on the backend until synced.
    top: Vec<(u32, f32)>,
    top_used: bool,
    finished: bool,
    /// Stop at `Ready` after the prompt (its other choices fork from the context first).
    pub hold: bool,
}

impl<'e> Run<'e> {
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        session: &mut Session,
        id: RequestId,
        slot: usize,
        prompt: Prompt,
        opts: GenerateOptions,
        logprobs: Option<usize>,
        lora: Option<LoraSet>,
        spec: Option<Draft<'e>>,
        since: Instant,
        cache: Option<&PrefixCache>,
    ) -> Result<Run<'e>> {
        opts.sampler.check()?;
        if let Some(l) = lora {
            session.set_loras(l)?;
        }
        let mut media = Vec::new();
        let prompt = match prompt {
            Prompt::Chunks(chunks) => {
                let n_embd = session.engine.model.n_embd();
                let mut ids = Vec::new();
                for c in chunks {
                    match c {
                        Chunk::Tokens(t) => ids.extend_from_slice(&t),
                        Chunk::Embeddings(rows) => {
                            if rows.is_empty() || !rows.len().is_multiple_of(n_embd) {
                                return Err(Error::Model(format!(
                                    "{} embedding values are not a whole number of rows of \
                                     {n_embd}",
                                    rows.len()
                                )));
                            }
                            let n = rows.len() / n_embd;
                            media.push((ids.len(), n, rows.clone()));
                            ids.extend(media_ids(&rows, n));
                        }
                    }
                }
                Prompt::Tokens(ids)
            }
            p => p,
        };
        let (summary, prompt, cached, phase) = match prompt {
            Prompt::Continue | Prompt::Chunks(_) => {
                (session.start_generation()?, Vec::new(), 0, Phase::Ready)
            }
            Prompt::Tokens(p) => {
                session.take_cancel();
                let rep = session.reuse_prefix(&p, cache)?;
                let mut summary = Summary::empty();
                summary.prompt_tokens = p.len();
                let done = session.tokens().len() == p.len() && !session.logits().is_empty();
                let phase = if done { Phase::Ready } else { Phase::Prefill };
                (summary, p, rep.reused(), phase)
            }
        };
        Ok(Run {
            id,
            slot,
            opts,
            logprobs,
            prompt,
            media,
            phase,
            spec: spec.map(|d| SlotSpec {
                adapt: Adapt::new(&d.options),
                draft_of: d,
                draft: Vec::new(),
                ctx: Vec::new(),
                stats: SpecStats::default(),
            }),
            summary,
            cached,
            queued: since.elapsed(),
            t_decode: Instant::now(),
            top: Vec::new(),
            top_used: false,
            finished: false,
            hold: false,
        })
    }

    pub fn ready(&self) -> bool {
        matches!(self.phase, Phase::Ready)
    }

    pub fn decoding(&self) -> bool {
        matches!(self.phase, Phase::Decode { .. })
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The session's logits follow the prompt: start generating, sampling the first token.
    pub fn begin(
        &mut self,
        engine: &'e EngineInner,
        session: &mut Session,
        cache: Option<&PrefixCache>,
        on: On<'_>,
    ) {
        let mut g = Generator::new(engine, &self.opts, session.tokens());
        if let Some(n) = self.logprobs {
            g = g.with_logprobs(n);
        }
        self.t_decode = Instant::now();
        self.phase = Phase::Decode {
            g: Box::new(g),
            next: 0,
        };
        self.sample(session, None, cache, on);
    }

    /// The next prompt chunk, at most `budget` positions: text tokens, or rows of one media
    /// run (a step's entry is one or the other).
    pub fn prefill_feed(&self, session: &Session, budget: usize) -> Fed {
        let done = session.tokens().len();
        let most = done + (self.prompt.len() - done).min(budget);
        let (end, embd) = match self.media.iter().find(|m| done >= m.0 && done < m.0 + m.1) {
            Some((start, n, rows)) => {
                let end = most.min(start + n);
                let w = rows.len() / n;
                (
                    end,
                    Some(rows[(done - start) * w..(end - start) * w].to_vec()),
                )
            }
            None => {
                let next = self.media.iter().map(|m| m.0).filter(|&s| s > done).min();
                (most.min(next.unwrap_or(usize::MAX)), None)
            }
        };
        let last = end == self.prompt.len();
        Fed {
            tokens: self.prompt[done..end].to_vec(),
            logits: if last { Logits::Last } else { Logits::None },
            embd,
        }
    }

    /// The decode token and, when speculating, a draft of what follows it (within the
    /// context, the token limit and the step's `budget`); `None` when the context is full
    /// (the request finished).
    pub fn decode_feed(
        &mut self,
        session: &mut Session,
        budget: usize,
        cache: Option<&PrefixCache>,
        on: On<'_>,
    ) -> Result<Option<Fed>> {
        // with the context shift on, make room as llama.cpp does (keeping one cell free)
        session.make_room(1)?;
        if session.tokens().len() + 1 > session.n_ctx() {
            self.end(session, FinishReason::ContextFull, cache, on);
            return Ok(None);
        }
        let Phase::Decode { g, next } = &mut self.phase else {
            unreachable!("decode_feed on a decoding slot")
        };
        let mut tokens = vec![*next];
        if let Some(sp) = &mut self.spec {
            sp.draft.clear();
            let shift = usize::from(session.shift_keep.is_some());
            let mut room = session.n_ctx() - session.tokens().len() - 1;
            room = room.saturating_sub(shift).min(budget.saturating_sub(1));
            if g.max_tokens() > 0 {
                room = room.min(g.max_tokens().saturating_sub(g.n_generated()));
            }
            let k = sp.adapt.allowed();
            let min = sp.draft_of.options.draft_min;
            if k > 0 && room >= min && room > 0 {
                sp.ctx.clear();
                sp.ctx.extend_from_slice(session.tokens());
                sp.ctx.push(*next);
                let k = k.min(room);
                sp.draft_of.drafter.propose(&sp.ctx, k, &mut sp.draft)?;
                // (a lookup over a context with media may propose their ids: not tokens)
                let media = sp.draft.iter().position(|&t| is_media_id(t));
                sp.draft.truncate(k.min(media.unwrap_or(k)));
                // the grammar's state after `next` is the generator's (it accepted `next`)
                let allowed = g.grammar_allowed_prefix(&sp.draft);
                sp.stats.grammar_cut += sp.draft.len() - allowed;
                sp.draft.truncate(allowed);
                if sp.draft.len() < min {
                    sp.draft.clear();
                }
            }
            if sp.draft.is_empty() {
                sp.stats.plain_steps += 1;
            } else {
                sp.stats.verify_steps += 1;
                sp.stats.drafted += sp.draft.len();
            }
            tokens.extend_from_slice(&sp.draft);
        }
        let logits = if tokens.len() > 1 {
            Logits::All
        } else {
            Logits::Last
        };
        Ok(Some(Fed {
            tokens,
            logits,
            embd: None,
        }))
    }

    /// The slot joins a batched step: its logits come whole into the session (the top
    /// candidates of an earlier step alone are stale).
    pub fn joins_batch(&mut self) {
        self.top_used = false;
    }

    /// Runs `f` for this slot alone, in its session's own workspace: a decode step whose
    /// sampler reads only the top candidates asks the backend for those; all rows go to
    /// `rows` when asked for.
    pub fn forward_alone(
        &mut self,
        session: &mut Session,
        f: &Fed,
        rows: &mut Vec<f32>,
    ) -> Result<()> {
        session.prepare_feed(&f.tokens, f.embd.as_deref())?;
        self.top_used = false;
        if let Phase::Decode { g, .. } = &self.phase
            && f.logits == Logits::Last
            && let Some(k) = g.top_k_only()
        {
            session.forward_top(&f.tokens, k, &mut self.top)?;
            self.top_used = true;
            return Ok(());
        }
        let all = f.logits == Logits::All;
        session.forward_input(&f.tokens, f.embd.as_deref(), all)?;
        if all {
            std::mem::swap(rows, &mut session.logits);
            let n_vocab = rows.len() / f.tokens.len();
            session
                .logits
                .extend_from_slice(&rows[rows.len() - n_vocab..]);
        }
        Ok(())
    }

    /// After the step that fed `f`: sample (or verify a draft from `rows`, every fed token's
    /// logits) and stream.
    #[allow(clippy::too_many_arguments)]
    pub fn after_forward(
        &mut self,
        engine: &'e EngineInner,
        session: &mut Session,
        f: &Fed,
        rows: &mut [f32],
        dt: Duration,
        cache: Option<&PrefixCache>,
        on: On<'_>,
    ) {
        match &self.phase {
            Phase::Prefill | Phase::Ready => {
                self.summary.prefill += dt;
                if f.logits != Logits::None {
                    if self.hold {
                        self.phase = Phase::Ready;
                    } else {
                        self.begin(engine, session, cache, on);
                    }
                }
            }
            Phase::Decode { .. } if f.logits == Logits::All => {
                self.verify(session, rows, cache, on)
            }
            Phase::Decode { .. } => {
                let top = self.top_used;
                self.sample(session, top.then_some(()), cache, on);
            }
        }
    }

    /// Samples from the session's logits (or, with `top`, the last step's top candidates),
    /// streams the token and makes it the next to feed, or finishes.
    fn sample(
        &mut self,
        session: &mut Session,
        top: Option<()>,
        cache: Option<&PrefixCache>,
        on: On<'_>,
    ) {
        let Phase::Decode { g, .. } = &mut self.phase else {
            return;
        };
        let step = match top {
            Some(()) => g.step_top(&self.top),
            None => g.step(session.logits_mut()),
        };
        match self.emit(step, on) {
            Flow::Next(id) => self.set_next(session, id, cache, on),
            Flow::End(reason) => self.finish(session, reason, cache, on),
        }
    }

    /// Streams what a generator step decided: the token to feed next, or why the request
    /// ends here (EOG, a stop, the length, a cancel).
    fn emit(&mut self, step: Step, on: On<'_>) -> Flow {
        let Phase::Decode { g, .. } = &mut self.phase else {
            return Flow::End(FinishReason::Cancelled);
        };
        match step {
            Step::Token { id, text } => {
                let logprobs = g.take_logprobs();
                let ev = Event::Token {
                    id: self.id,
                    token: id,
                    text,
                    logprobs,
                };
                if on(ev) == Control::Stop {
                    g.stop(FinishReason::Cancelled);
                    return Flow::End(FinishReason::Cancelled);
                }
                Flow::Next(id)
            }
            Step::Done { reason, text } => {
                if !text.is_empty() {
                    let token = *g.tokens.last().unwrap_or(&0);
                    on(Event::Text {
                        id: self.id,
                        token,
                        text,
                    });
                }
                Flow::End(reason)
            }
        }
    }

    /// `id` is the next token to feed, unless the context is full (the request ends).
    fn set_next(
        &mut self,
        session: &mut Session,
        id: u32,
        cache: Option<&PrefixCache>,
        on: On<'_>,
    ) {
        if session.shift_keep.is_none() && session.tokens().len() >= session.n_ctx() {
            self.end(session, FinishReason::ContextFull, cache, on);
            return;
        }
        if let Phase::Decode { next, .. } = &mut self.phase {
            *next = id;
        }
    }

    /// Ends generation from outside (a full context), streaming what text was held back.
    fn end(
        &mut self,
        session: &mut Session,
        reason: FinishReason,
        cache: Option<&PrefixCache>,
        on: On<'_>,
    ) {
        if let Phase::Decode { g, .. } = &mut self.phase
            && let Step::Done { text, .. } = g.stop(reason)
            && !text.is_empty()
        {
            let token = *g.tokens.last().unwrap_or(&0);
            on(Event::Text {
                id: self.id,
                token,
                text,
            });
        }
        self.finish(session, reason, cache, on);
    }

    /// The slot fed its decode token and a draft, with logits for every row: samples row by
    /// row while the draft agrees, streams what was kept and rolls the rest back.
    fn verify(
        &mut self,
        session: &mut Session,
        rows: &mut [f32],
        cache: Option<&PrefixCache>,
        on: On<'_>,
    ) {
        let Some(sp) = &mut self.spec else { return };
        let draft = std::mem::take(&mut sp.draft);
        let n_vocab = rows.len() / (draft.len() + 1);
        // the context before this step's decode token
        let base = session.tokens().len() - draft.len() - 1;
        let mut kept = 0;
        let (mut pending, mut ended) = (None, None);
        for i in 0..=draft.len() {
            let Phase::Decode { g, .. } = &mut self.phase else {
                return;
            };
            let step = g.step(&mut rows[i * n_vocab..(i + 1) * n_vocab]);
            match self.emit(step, on) {
                Flow::Next(id) if i < draft.len() && id == draft[i] => kept += 1,
                Flow::Next(id) => {
                    pending = Some(id);
                    break;
                }
                Flow::End(reason) => {
                    // finished at row i: keep what led to it, with its logits
                    session.keep_rows(base + 1 + i, rows, i);
                    ended = Some(reason);
                    break;
                }
            }
        }
        let Some(sp) = &mut self.spec else { return };
        sp.stats.accepted += kept;
        sp.adapt.record(kept, draft.len());
        sp.draft = draft;
        if let Some(reason) = ended {
            self.finish(session, reason, cache, on);
            return;
        }
        if kept < sp.draft.len() {
            session.keep_rows(base + 1 + kept, rows, kept);
        }
        if let Some(id) = pending {
            self.set_next(session, id, cache, on);
        }
    }

    /// A cancel from the session's handle: the request ends (`Cancelled`).
    pub fn cancel(&mut self, session: &mut Session, on: On<'_>) {
        if let Phase::Decode { g, .. } = &mut self.phase {
            g.stop(FinishReason::Cancelled);
        }
        self.finish(session, FinishReason::Cancelled, None, on);
    }

    fn finish(
        &mut self,
        session: &mut Session,
        reason: FinishReason,
        cache: Option<&PrefixCache>,
        on: On<'_>,
    ) {
        if self.top_used {
            // the logits of the last fed token, for whatever runs next in this session
            session.sync_logits();
            self.top_used = false;
        }
        let decode = self.t_decode.elapsed();
        match &mut self.phase {
            Phase::Decode { g, .. } => g.fill_summary(&mut self.summary, reason, decode),
            _ => self.summary.finish = reason,
        }
        let finished = Finished {
            summary: std::mem::replace(&mut self.summary, Summary::empty()),
            cached_tokens: self.cached,
            spec: self.spec.as_ref().map(|s| s.stats).unwrap_or_default(),
            queued: self.queued,
            slot: self.slot,
        };
        self.finished = true;
        on(Event::Done {
            id: self.id,
            finished: Box::new(finished),
        });
        // the context stays in the slot for the next prompt that shares it; long ones also go
        // to the prefix cache for the other slots
        if let Some(c) = cache {
            let _ = session.store_prefix(c);
        }
    }
}
