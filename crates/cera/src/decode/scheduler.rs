//! The scheduler: slots, a queue of requests, and the batched step.
//!
//! Each [`Scheduler::step`] gathers one decode token (plus its draft, when the slot
//! speculates) from every generating slot, then prefill chunks of the slots still reading
//! their prompt, under a token budget (`n_batch`): a long new prompt never stalls the
//! decodes, it joins them a chunk at a time (continuous batching). One forward pass runs them
//! all; each slot then samples from its own rows. A request waiting for a slot takes the free
//! one whose context shares the longest prefix with its prompt (that prefix is kept), or else
//! restores the longest prefix from the prefix cache.

use std::borrow::BorrowMut;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::slot::{Fed, Run};
use crate::batch::StepLogits;
use crate::engine::{Engine, EngineInner};
use crate::error::{Error, Result};
use crate::lora::LoraSet;
use crate::models::Logits;
use crate::runtime::time::Instant;
use crate::session::{Control, GenerateOptions, Session, Summary, TokenLogprobs};
use crate::spec::{Drafter, NgramDrafter, SpecOptions, SpecStats};
use crate::state::PrefixCache;

/// Names a submitted request in its events.
pub type RequestId = u64;

/// What a request generates after.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Prompt {
    /// These tokens are the context: the slot keeps the longest prefix its context (or the
    /// prefix cache) shares with them and prefills the rest.
    Tokens(Vec<u32>),
    /// The slot's context as it is (it must have logits: a prefill or a generation ran last).
    Continue,
    /// A context of text and media, in order (as [`Prompt::Tokens`], media positions
    /// counted as tokens and matched by the hash of their rows).
    Chunks(Vec<Chunk>),
}

impl From<Vec<u32>> for Prompt {
    fn from(t: Vec<u32>) -> Prompt {
        Prompt::Tokens(t)
    }
}

/// A run of a prompt's positions.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Chunk {
    Tokens(Vec<u32>),
    /// Input rows (`[n, n_embd]`, in the model's input space: an image's or an audio
    /// clip's embeddings), one position each.
    Embeddings(Arc<[f32]>),
}

impl Chunk {
    /// A prompt's pieces ([`crate::engine::Engine::media_prompt`]) as chunks, each run of
    /// rows copied once.
    pub fn from_pieces(pieces: Vec<crate::session::PromptPiece<'_>>) -> Vec<Chunk> {
        use crate::session::PromptPiece;
        pieces
            .into_iter()
            .map(|p| match p {
                PromptPiece::Tokens(t) => Chunk::Tokens(t),
                PromptPiece::Rows(r) => Chunk::Embeddings(Arc::from(r)),
            })
            .collect()
    }

    /// Positions it takes in the context.
    pub fn len(&self, n_embd: usize) -> usize {
        match self {
            Chunk::Tokens(t) => t.len(),
            Chunk::Embeddings(r) => r.len() / n_embd.max(1),
        }
    }
}

/// A drafter for one request, and how to speculate with it.
pub struct Draft<'d> {
    pub options: SpecOptions,
    pub drafter: Box<dyn Drafter + 'd>,
}

/// One generation to run.
#[non_exhaustive]
pub struct Request<'d> {
    pub prompt: Prompt,
    pub opts: GenerateOptions,
    /// Logprobs of each chosen token with this many alternatives.
    pub logprobs: Option<usize>,
    /// The LoRA adapters to run with (`None`: the slot's as they are).
    pub lora: Option<LoraSet>,
    /// Speculate with this drafter (else with the scheduler's [`SpecConfig`], if any).
    pub draft: Option<Draft<'d>>,
    /// Run in this slot only (waiting until it is free).
    pub slot: Option<usize>,
    /// Choices: `n` sequences generated after one prefill of the prompt, each after the
    /// first forked from it into a free slot (its context copied, not computed again), with
    /// the seed plus its index. Their events carry the ids after the one `submit` returns.
    pub n: usize,
}

impl<'d> Request<'d> {
    /// Generate after `prompt` (a whole context; see [`Prompt::Tokens`]).
    pub fn new(prompt: Vec<u32>, opts: GenerateOptions) -> Request<'d> {
        Request {
            prompt: Prompt::Tokens(prompt),
            opts,
            logprobs: None,
            lora: None,
            draft: None,
            slot: None,
            n: 1,
        }
    }

    /// Generate after what slot `slot`'s session holds.
    pub fn continuation(slot: usize, opts: GenerateOptions) -> Request<'d> {
        Request {
            prompt: Prompt::Continue,
            slot: Some(slot),
            ..Request::new(Vec::new(), opts)
        }
    }

    /// Generate after a prompt of text and media chunks (see [`Prompt::Chunks`]).
    pub fn chunks(chunks: Vec<Chunk>, opts: GenerateOptions) -> Request<'d> {
        Request {
            prompt: Prompt::Chunks(chunks),
            ..Request::new(Vec::new(), opts)
        }
    }

    pub fn with_logprobs(mut self, top: usize) -> Self {
        self.logprobs = Some(top);
        self
    }

    pub fn with_lora(mut self, lora: LoraSet) -> Self {
        self.lora = Some(lora);
        self
    }

    /// `n` choices (see [`Request::n`]).
    pub fn with_n(mut self, n: usize) -> Self {
        self.n = n.max(1);
        self
    }

    pub fn with_draft(mut self, options: SpecOptions, drafter: Box<dyn Drafter + 'd>) -> Self {
        self.draft = Some(Draft { options, drafter });
        self
    }
}

/// What a step reports, in order, for each request.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event {
    /// The request left the queue for a slot.
    Started { id: RequestId, slot: usize },
    /// A sampled token and the text it completes (may be empty while a character or a
    /// possible stop string is incomplete), with its logprobs when asked for. Answering
    /// [`Control::Stop`] ends the request (`Cancelled`).
    Token {
        id: RequestId,
        token: u32,
        text: String,
        logprobs: Option<TokenLogprobs>,
    },
    /// The last text of a finished request (what preceded a stop string, or text held back),
    /// which comes with no token to feed; `token` is the last one sampled.
    Text {
        id: RequestId,
        token: u32,
        text: String,
    },
    /// The request finished; its slot is free.
    Done {
        id: RequestId,
        finished: Box<Finished>,
    },
    /// The request failed (its slot is free, its context emptied).
    Error { id: RequestId, error: Error },
}

/// A finished request's counts and timings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Finished {
    /// The text, tokens, counts and timings (for a [`Prompt::Continue`], of the session's last
    /// prefill).
    pub summary: Summary,
    /// Prompt tokens not computed: kept from the slot's context or restored from the cache.
    pub cached_tokens: usize,
    /// What speculation did.
    pub spec: SpecStats,
    /// Time in the queue.
    pub queued: Duration,
    pub slot: usize,
}

/// Prompt-lookup speculation in every slot.
#[derive(Clone, Debug)]
pub struct SpecConfig {
    pub options: SpecOptions,
    pub ngram_min: usize,
    pub ngram_max: usize,
}

#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SchedulerOptions {
    /// Tokens per step at most (decodes first, then prefill chunks).
    pub n_batch: usize,
    /// Finished contexts are stored here, and prompts look their prefix up here.
    pub prefix_cache: Option<Arc<PrefixCache>>,
    /// Speculate in every slot by prompt lookup (a request's own drafter goes first).
    pub spec: Option<SpecConfig>,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            n_batch: 512,
            prefix_cache: None,
            spec: None,
        }
    }
}

/// Where [`Scheduler::remove`] found a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removed {
    Waiting,
    Running,
    Unknown,
}

pub(super) struct Slot<'e, S> {
    pub(super) session: S,
    pub(super) run: Option<Run<'e>>,
    /// Choices waiting for this slot's prompt to be ready, to fork from it.
    forks: Vec<Fork>,
}

/// A choice of a request with `n` > 1, forked from the first once its prompt is prefilled.
struct Fork {
    id: RequestId,
    opts: GenerateOptions,
    logprobs: Option<usize>,
    lora: Option<LoraSet>,
    since: Instant,
}

struct Waiting<'e> {
    id: RequestId,
    req: Request<'e>,
    since: Instant,
}

/// Runs requests in slots through batched steps (see the module docs). `S` is how a slot
/// holds its session: owned, or borrowed (`&mut Session`) for a one-slot run over a
/// caller's session.
pub struct Scheduler<'e, S = Session> {
    engine: &'e Arc<EngineInner>,
    opts: SchedulerOptions,
    slots: Vec<Slot<'e, S>>,
    waiting: VecDeque<Waiting<'e>>,
    next_id: RequestId,
    out: StepLogits,
    /// A one-entry step's rows when it asked for all of them.
    rows: Vec<f32>,
}

impl<'e, S: BorrowMut<Session>> Scheduler<'e, S> {
    /// A scheduler with no slots yet (see [`Scheduler::add_slot`]).
    pub fn new(engine: &'e Engine, opts: SchedulerOptions) -> Scheduler<'e, S> {
        Scheduler::over(&engine.inner, opts)
    }

    pub(crate) fn over(engine: &'e Arc<EngineInner>, opts: SchedulerOptions) -> Self {
        Scheduler {
            engine,
            opts,
            slots: Vec::new(),
            waiting: VecDeque::new(),
            next_id: 0,
            out: StepLogits::default(),
            rows: Vec::new(),
        }
    }

    /// Adds a slot running in `session` (of this engine); returns its index.
    pub fn add_slot(&mut self, session: S) -> usize {
        self.slots.push(Slot {
            session,
            run: None,
            forks: Vec::new(),
        });
        self.slots.len() - 1
    }

    pub fn n_slots(&self) -> usize {
        self.slots.len()
    }

    /// Slot `i`'s session.
    pub fn session(&self, i: usize) -> &Session {
        self.slots[i].session.borrow()
    }

    /// Slot `i`'s session, to prefill or inspect between requests.
    pub fn session_mut(&mut self, i: usize) -> &mut Session {
        self.slots[i].session.borrow_mut()
    }

    /// Queues a request; its events name it by the id returned.
    pub fn submit(&mut self, req: Request<'e>) -> RequestId {
        let id = self.next_id;
        self.next_id += req.n.max(1) as RequestId;
        self.waiting.push_back(Waiting {
            id,
            req,
            since: Instant::now(),
        });
        id
    }

    /// Requests queued and not yet in a slot.
    pub fn n_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Slots running a request.
    pub fn n_running(&self) -> usize {
        self.slots.iter().filter(|s| s.run.is_some()).count()
    }

    /// Nothing queued and nothing running.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty()
            && self
                .slots
                .iter()
                .all(|s| s.run.is_none() && s.forks.is_empty())
    }

    /// Tokens held by the slots running a request.
    pub fn kv_tokens(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.run.is_some())
            .map(|s| s.session.borrow().tokens().len())
            .sum()
    }

    /// Drops a request without an event (its client went away): a queued one leaves the
    /// queue, a running one frees its slot (the context stays for a prompt that shares it).
    pub fn remove(&mut self, id: RequestId) -> Removed {
        if let Some(i) = self.waiting.iter().position(|w| w.id == id) {
            self.waiting.remove(i);
            return Removed::Waiting;
        }
        for s in &mut self.slots {
            if let Some(k) = s.forks.iter().position(|f| f.id == id) {
                s.forks.remove(k);
                return Removed::Waiting;
            }
            if s.run.as_ref().is_some_and(|r| r.id == id) {
                s.run = None;
                return Removed::Running;
            }
        }
        Removed::Unknown
    }

    /// Admits what can start, runs one batched step and samples every slot it gave logits
    /// to, reporting through `on`. Returns whether anything is left to do (a request waiting
    /// or running). A failed forward pass fails the requests in it, never the scheduler.
    pub fn step(&mut self, on: &mut dyn FnMut(Event) -> Control) -> bool {
        // a cancel from a session's handle
        for s in self.slots.iter_mut() {
            if let Some(run) = &mut s.run
                && s.session.borrow().take_cancel()
            {
                run.cancel(s.session.borrow_mut(), on);
                s.run = None;
            }
        }
        self.admit(on);
        if let Err(e) = self.forward_step(on) {
            self.fail_all(e, on);
        }
        !self.is_idle()
    }

    /// Runs steps until every request has finished.
    pub fn run_all(&mut self, on: &mut dyn FnMut(Event) -> Control) {
        while self.step(on) {}
    }

    fn fail_all(&mut self, e: Error, on: &mut dyn FnMut(Event) -> Control) {
        let msg = e.to_string();
        let mut first = Some(e);
        for s in &mut self.slots {
            let Some(run) = s.run.take() else { continue };
            let error = first
                .take()
                .unwrap_or_else(|| Error::Model(format!("the forward step failed: {msg}")));
            s.session.borrow_mut().reset();
            on(Event::Error { id: run.id, error });
        }
    }

    /// Puts waiting requests into free slots: a pinned one into its slot, the others into the
    /// free slot sharing the longest prefix with their prompt.
    fn admit(&mut self, on: &mut dyn FnMut(Event) -> Control) {
        while let Some(w) = self.waiting.front() {
            let pick = match w.req.slot {
                Some(i) if i >= self.slots.len() => {
                    let w = self.waiting.pop_front().expect("front exists");
                    let n = self.slots.len();
                    on(Event::Error {
                        id: w.id,
                        error: Error::Model(format!("no slot {i} (there are {n})")),
                    });
                    continue;
                }
                Some(i) => self.slots[i].run.is_none().then_some(i),
                None => self.best_slot(&w.req),
            };
            let Some(i) = pick else { break };
            let w = self.waiting.pop_front().expect("front exists");
            self.start(i, w, on);
        }
    }

    fn best_slot(&self, req: &Request<'_>) -> Option<usize> {
        let prompt: &[u32] = match &req.prompt {
            Prompt::Tokens(p) => p,
            Prompt::Continue | Prompt::Chunks(_) => &[],
        };
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.run.is_none())
            .max_by_key(|(_, s)| {
                let session = s.session.borrow();
                // a slot's context only helps under the same adapters (others clear it)
                if req
                    .lora
                    .as_ref()
                    .is_some_and(|l| !session.loras().same_as(l))
                {
                    return (false, 0);
                }
                let shared = session
                    .tokens()
                    .iter()
                    .zip(prompt)
                    .take_while(|(a, b)| a == b)
                    .count();
                (true, shared)
            })
            .map(|(i, _)| i)
    }

    fn start(&mut self, i: usize, w: Waiting<'e>, on: &mut dyn FnMut(Event) -> Control) {
        let Waiting { id, req, since } = w;
        on(Event::Started { id, slot: i });
        let spec = req.draft.or_else(|| {
            self.opts.spec.as_ref().map(|c| Draft {
                options: c.options.clone(),
                drafter: Box::new(NgramDrafter::new(c.ngram_min, c.ngram_max)),
            })
        });
        let forks: Vec<Fork> = (1..req.n.max(1))
            .map(|k| {
                let mut opts = req.opts.clone();
                opts.sampler.seed = opts.sampler.seed.wrapping_add(k as u64);
                Fork {
                    id: id + k as RequestId,
                    opts,
                    logprobs: req.logprobs,
                    lora: req.lora.clone(),
                    since,
                }
            })
            .collect();
        let slot = &mut self.slots[i];
        let session = slot.session.borrow_mut();
        let cache = self.opts.prefix_cache.as_deref();
        let r = Run::start(
            session,
            id,
            i,
            req.prompt,
            req.opts,
            req.logprobs,
            req.lora,
            spec,
            since,
            cache,
        );
        match r {
            Ok(mut run) => {
                run.hold = !forks.is_empty();
                slot.forks = forks;
                if run.ready() && !run.hold {
                    run.begin(self.engine, session, cache, on);
                }
                slot.run = (!run.is_finished()).then_some(run);
                self.release_forks(on);
            }
            Err(error) => {
                session.reset();
                on(Event::Error { id, error });
                for f in forks {
                    on(Event::Error {
                        id: f.id,
                        error: Error::Model("the request's first choice failed".into()),
                    });
                }
            }
        }
    }

    /// Slots whose prompt is ready and whose request has more choices: each choice gets a
    /// free slot with a copy of the context (or, with none free, waits first in the queue
    /// for one, reusing what it can of the prompt then); then they all start sampling.
    fn release_forks(&mut self, on: &mut dyn FnMut(Event) -> Control) {
        let cache = self.opts.prefix_cache.clone();
        let cache = cache.as_deref();
        for i in 0..self.slots.len() {
            if self.slots[i].forks.is_empty() {
                continue;
            }
            let forks = match &self.slots[i].run {
                Some(run) if !run.ready() => continue,
                Some(_) => std::mem::take(&mut self.slots[i].forks),
                None => {
                    // the first choice failed: so do the others
                    for f in std::mem::take(&mut self.slots[i].forks) {
                        on(Event::Error {
                            id: f.id,
                            error: Error::Model("the request's first choice failed".into()),
                        });
                    }
                    continue;
                }
            };
            let state = self.slots[i].session.borrow_mut().checkpoint();
            let tokens = self.slots[i].session.borrow().tokens().to_vec();
            for f in forks {
                let free = (0..self.slots.len()).find(|&j| {
                    j != i && self.slots[j].run.is_none() && self.slots[j].forks.is_empty()
                });
                let (Some(j), Ok(bytes)) = (free, &state) else {
                    let mut req = Request::new(tokens.clone(), f.opts);
                    req.logprobs = f.logprobs;
                    req.lora = f.lora;
                    self.waiting.push_front(Waiting {
                        id: f.id,
                        req,
                        since: f.since,
                    });
                    continue;
                };
                on(Event::Started { id: f.id, slot: j });
                let spec = self.opts.spec.as_ref().map(|c| Draft {
                    options: c.options.clone(),
                    drafter: Box::new(NgramDrafter::new(c.ngram_min, c.ngram_max)),
                });
                let s = self.slots[j].session.borrow_mut();
                let forked = match &f.lora {
                    Some(l) => s.set_loras(l.clone()),
                    None => Ok(()),
                }
                .and_then(|()| s.restore(bytes))
                .and_then(|()| {
                    Run::start(
                        s,
                        f.id,
                        j,
                        Prompt::Tokens(tokens.clone()),
                        f.opts,
                        f.logprobs,
                        None,
                        spec,
                        f.since,
                        cache,
                    )
                });
                match forked {
                    Ok(mut run) => {
                        run.begin(self.engine, s, cache, on);
                        self.slots[j].run = (!run.is_finished()).then_some(run);
                    }
                    Err(error) => {
                        s.reset();
                        on(Event::Error { id: f.id, error });
                    }
                }
            }
            let slot = &mut self.slots[i];
            if let Some(run) = &mut slot.run {
                run.hold = false;
                run.begin(self.engine, slot.session.borrow_mut(), cache, on);
                if run.is_finished() {
                    slot.run = None;
                }
            }
        }
    }

    /// Assembles what every running slot feeds, runs it in one forward pass and samples.
    fn forward_step(&mut self, on: &mut dyn FnMut(Event) -> Control) -> Result<()> {
        let cache = self.opts.prefix_cache.clone();
        let cache = cache.as_deref();
        let mut budget = self.opts.n_batch.max(1);
        // (slot, what it feeds)
        let mut feeds: Vec<(usize, Fed)> = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            let Some(run) = &mut s.run else { continue };
            if !run.decoding() {
                continue;
            }
            match run.decode_feed(s.session.borrow_mut(), budget, cache, on)? {
                Some(f) => {
                    budget = budget.saturating_sub(f.tokens.len());
                    feeds.push((i, f));
                }
                None => {
                    if run.is_finished() {
                        s.run = None;
                    }
                }
            }
        }
        for (i, s) in self.slots.iter_mut().enumerate() {
            let Some(run) = &mut s.run else { continue };
            if run.decoding() || run.ready() || budget == 0 {
                continue;
            }
            let f = run.prefill_feed(s.session.borrow(), budget);
            budget -= f.tokens.len();
            feeds.push((i, f));
        }
        if feeds.is_empty() {
            return Ok(());
        }
        feeds.sort_by_key(|f| f.0);
        let t0 = Instant::now();
        let single = feeds.len() == 1;
        if single {
            let (i, f) = &mut feeds[0];
            let s = &mut self.slots[*i];
            let run = s.run.as_mut().expect("a fed slot runs");
            let session = s.session.borrow_mut();
            if let Err(e) = run.forward_alone(session, f, &mut self.rows) {
                let run = s.run.take().expect("a fed slot runs");
                session.reset();
                on(Event::Error {
                    id: run.id,
                    error: e,
                });
                return Ok(());
            }
        } else {
            let mut batch = crate::batch::Batch::new(Arc::clone(self.engine));
            let mut rest: &mut [Slot<'e, S>] = &mut self.slots;
            let mut base = 0;
            let mut refused = None;
            for (i, f) in &feeds {
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(*i - base);
                let (one, tail) = tail.split_first_mut().expect("slot exists");
                base = i + 1;
                rest = tail;
                if let Some(run) = &mut one.run {
                    run.joins_batch();
                }
                let session = one.session.borrow_mut();
                let added = match &f.embd {
                    None => batch.add(session, &f.tokens, f.logits),
                    Some(rows) => batch.add_embeddings(session, &f.tokens, rows, f.logits),
                };
                if let Err(e) = added {
                    // this slot cannot go on; the others run without it next step
                    refused = Some((*i, e));
                    break;
                }
            }
            if let Some((i, e)) = refused {
                drop(batch);
                let s = &mut self.slots[i];
                let run = s.run.take().expect("a fed slot runs");
                s.session.borrow_mut().reset();
                on(Event::Error {
                    id: run.id,
                    error: e,
                });
                return Ok(());
            }
            batch.run_into(&mut self.out)?;
        }
        let dt = t0.elapsed();
        for (entry, (i, f)) in feeds.into_iter().enumerate() {
            let s = &mut self.slots[i];
            let Some(run) = &mut s.run else { continue };
            let session = s.session.borrow_mut();
            let rows: &mut [f32] = if single {
                &mut self.rows
            } else {
                // (a copy only where a slot verifies a draft)
                if f.logits == Logits::All {
                    self.rows.clear();
                    self.rows.extend_from_slice(self.out.get(entry));
                }
                &mut self.rows
            };
            run.after_forward(self.engine, session, &f, rows, dt, cache, on);
            if run.is_finished() {
                s.run = None;
            }
        }
        self.release_forks(on);
        Ok(())
    }
}

impl Engine {
    /// A [`Scheduler`] with `n_slots` sessions of `session`'s options.
    pub fn scheduler(
        &self,
        n_slots: usize,
        session: crate::engine::SessionOptions,
        opts: SchedulerOptions,
    ) -> Scheduler<'_, Session> {
        let mut s = Scheduler::new(self, opts);
        for _ in 0..n_slots.max(1) {
            s.add_slot(self.session(session.clone()));
        }
        s
    }
}
