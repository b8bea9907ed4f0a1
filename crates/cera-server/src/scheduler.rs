//! The scheduler: one thread owns the model and runs the batched step.
//!
//! `-np N` slots each hold a session (their context is `-c / N`, as llama-server divides it).
//! Each step gathers one decode token from every generating slot and prefill chunks of the
//! slots still reading their prompt, under a token budget (`n_batch`), so a long new prompt
//! never stalls the decodes: it joins them a chunk at a time (continuous batching). A new
//! request takes the free slot whose last context shares the longest prefix with its prompt
//! (that prefix is kept), or else restores the longest prefix from the prefix cache.
//!
//! With `--spec ngram` each generating slot drafts its next tokens by prompt lookup over its
//! own context and feeds them with its decode token; the step returns logits for every row
//! of that slot, the slot's sampler keeps the drafted tokens it agrees with (exactly as in
//! [`Session::generate_speculative`]) and the rest are rolled back. The other slots in the
//! step are unaffected.
//!
//! Requests wait in a bounded queue; a full one is refused at the door (503). A request whose
//! client went away (its event channel closed), or whose deadline passed, is cancelled within
//! one step and its slot freed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use cera::engine::Engine;
use cera::models::Logits;
use cera::session::{FinishReason, GenerateOptions, Generator, Session, Step, TokenLogprobs};
use cera::spec::{Adapt, Drafter, NgramDrafter, SpecOptions};
use cera::state::PrefixCache;
use tokio::sync::mpsc::UnboundedSender;

use crate::metrics::Metrics;

/// One generation job, tokenized and validated by the HTTP side.
pub struct Job {
    pub prompt: Vec<u32>,
    pub opts: GenerateOptions,
    /// Logprobs of each chosen token with this many alternatives.
    pub logprobs: Option<usize>,
    pub events: UnboundedSender<Event>,
    pub deadline: Option<Instant>,
    pub enqueued: Instant,
    /// The LoRA adapters the job runs with.
    pub lora: cera::lora::LoraSet,
}

/// What a job's stream carries.
#[derive(Debug)]
pub enum Event {
    Token {
        id: u32,
        text: String,
        logprobs: Option<TokenLogprobs>,
    },
    Done(Done),
    Error(String),
}

#[derive(Clone, Debug)]
pub struct Done {
    pub finish: FinishReason,
    pub text: String,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    pub queued: Duration,
    pub prefill: Duration,
    pub decode: Duration,
}

pub struct SchedulerConfig {
    pub n_parallel: usize,
    /// Context of each slot.
    pub n_ctx_slot: usize,
    /// Tokens per step at most (decodes first, then prefill chunks).
    pub n_batch: usize,
    pub max_queue: usize,
    pub prefix_cache: Option<Arc<PrefixCache>>,
    pub spec: Option<SpecConfig>,
    /// Every slot's KV cache types and rotation.
    pub kv: cera::backend::KvSpec,
}

/// Prompt-lookup speculation in every slot.
#[derive(Clone, Debug)]
pub struct SpecConfig {
    pub options: SpecOptions,
    pub ngram_min: usize,
    pub ngram_max: usize,
}

/// A slot's drafter and its draft-length policy (a new one per request).
struct SlotSpec {
    drafter: NgramDrafter,
    adapt: Adapt,
    /// The draft fed this step (after the decode token).
    draft: Vec<u32>,
    ctx: Vec<u32>,
}

/// The HTTP side's handle: submit jobs, see the load.
pub struct Handle {
    tx: std::sync::Mutex<std::sync::mpsc::Sender<Job>>,
    /// Jobs submitted and not yet in a slot.
    pub queued: Arc<AtomicUsize>,
    pub busy: Arc<AtomicUsize>,
    pub max_queue: usize,
    pub n_ctx_slot: usize,
    pub shutdown: Arc<AtomicBool>,
}

#[derive(Debug)]
pub enum Refused {
    QueueFull,
    ShuttingDown,
}

impl Handle {
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        if self.shutdown.load(Ordering::Acquire) {
            return Err(Refused::ShuttingDown);
        }
        // reserve a place first, so concurrent submits cannot overshoot the bound
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.max_queue {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::QueueFull);
        }
        let sent = self.tx.lock().unwrap_or_else(|e| e.into_inner()).send(job);
        if sent.is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::ShuttingDown);
        }
        Ok(())
    }
}

/// Starts the scheduler thread.
pub fn start(engine: Engine, cfg: SchedulerConfig, metrics: Arc<Metrics>) -> Arc<Handle> {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = Arc::new(Handle {
        tx: std::sync::Mutex::new(tx),
        queued: Arc::new(AtomicUsize::new(0)),
        busy: Arc::new(AtomicUsize::new(0)),
        max_queue: cfg.max_queue,
        n_ctx_slot: cfg.n_ctx_slot,
        shutdown: Arc::new(AtomicBool::new(false)),
    });
    let h = Arc::clone(&handle);
    std::thread::Builder::new()
        .name("cera-scheduler".into())
        .spawn(move || run(engine, cfg, rx, h, metrics))
        .expect("spawn the scheduler thread");
    handle
}

enum Phase<'e> {
    Free,
    /// Feeding the prompt: `tokens[session.tokens().len()..]` is left.
    Prefill,
    /// Generating; `next` is the token to feed.
    Decode {
        g: Box<Generator<'e>>,
        next: u32,
    },
}

struct Slot<'e> {
    session: Session,
    spec: Option<SlotSpec>,
    phase: Phase<'e>,
    job: Option<Job>,
    cached: usize,
    started: Instant,
    first_token: Option<Instant>,
    last_token: Instant,
    prefill_time: Duration,
}

fn run(engine: Engine, cfg: SchedulerConfig, rx: Receiver<Job>, h: Arc<Handle>, m: Arc<Metrics>) {
    let mut sopts = cera::engine::SessionOptions::default();
    sopts.n_ctx = cfg.n_ctx_slot;
    sopts.kv_type = cfg.kv.k;
    sopts.kv_type_v = Some(cfg.kv.v);
    sopts.kv_rotate = cfg.kv.rotate;
    let mut slots: Vec<Slot<'_>> = (0..cfg.n_parallel.max(1))
        .map(|_| Slot {
            session: engine.session(sopts.clone()),
            spec: None,
            phase: Phase::Free,
            job: None,
            cached: 0,
            started: Instant::now(),
            first_token: None,
            last_token: Instant::now(),
            prefill_time: Duration::ZERO,
        })
        .collect();
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let mut step_out = cera::batch::StepLogits::default();
    let cache = cfg.prefix_cache.clone();
    loop {
        // intake: block only when there is nothing to do
        let idle = waiting.is_empty() && slots.iter().all(|s| matches!(s.phase, Phase::Free));
        if idle {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(j) => waiting.push_back(j),
                Err(RecvTimeoutError::Timeout) => {
                    if h.shutdown.load(Ordering::Acquire) {
                        return;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        while let Ok(j) = rx.try_recv() {
            waiting.push_back(j);
        }
        // drop jobs whose client left or whose deadline passed while queued
        waiting.retain(|j| {
            let gone = j.events.is_closed();
            let late = j.deadline.is_some_and(|d| Instant::now() >= d);
            if gone || late {
                h.queued.fetch_sub(1, Ordering::AcqRel);
                if late && !gone {
                    let _ = j
                        .events
                        .send(Event::Error("the request timed out in the queue".into()));
                }
                m.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            !(gone || late)
        });
        admit(&mut slots, &mut waiting, cache.as_deref(), &h, &m);
        m.queue_depth.store(waiting.len(), Ordering::Relaxed);
        if slots.iter().all(|s| matches!(s.phase, Phase::Free)) {
            continue;
        }
        if let Err(e) = step(
            &engine,
            &mut slots,
            &mut step_out,
            &cfg,
            cache.as_deref(),
            &h,
            &m,
        ) {
            // a failed step fails the jobs in it, never the scheduler
            for s in slots.iter_mut() {
                if !matches!(s.phase, Phase::Free) {
                    finish_error(s, &format!("the forward step failed: {e}"), &h);
                }
            }
        }
        let used: usize = slots
            .iter()
            .filter(|s| !matches!(s.phase, Phase::Free))
            .map(|s| s.session.tokens().len())
            .sum();
        m.kv_tokens.store(used, Ordering::Relaxed);
    }
}

/// Puts waiting jobs into free slots: the one sharing the longest prefix with each prompt.
fn admit(
    slots: &mut [Slot<'_>],
    waiting: &mut VecDeque<Job>,
    cache: Option<&PrefixCache>,
    h: &Handle,
    m: &Metrics,
) {
    while let Some(job) = waiting.front() {
        let best = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.phase, Phase::Free))
            .max_by_key(|(_, s)| {
                // a slot's context only helps under the same adapters (others clear it)
                if !s.session.loras().same_as(&job.lora) {
                    return (false, 0);
                }
                let shared = s
                    .session
                    .tokens()
                    .iter()
                    .zip(&job.prompt)
                    .take_while(|(a, b)| a == b)
                    .count();
                (true, shared)
            })
            .map(|(i, _)| i);
        let Some(i) = best else { break };
        let job = waiting.pop_front().expect("front exists");
        h.queued.fetch_sub(1, Ordering::AcqRel);
        let s = &mut slots[i];
        s.started = Instant::now();
        s.first_token = None;
        s.prefill_time = Duration::ZERO;
        if let Err(e) = s.session.set_loras(job.lora.clone()) {
            let _ = job.events.send(Event::Error(e.to_string()));
            continue;
        }
        match s.session.reuse_prefix(&job.prompt, cache) {
            Ok(rep) => {
                s.cached = rep.reused();
                m.prompt_tokens_cached
                    .fetch_add(rep.reused() as u64, Ordering::Relaxed);
                s.job = Some(job);
                s.phase = Phase::Prefill;
                h.busy.fetch_add(1, Ordering::AcqRel);
            }
            Err(e) => {
                let _ = job.events.send(Event::Error(e.to_string()));
                s.session.reset();
            }
        }
    }
}

fn finish_error(s: &mut Slot<'_>, msg: &str, h: &Handle) {
    if let Some(j) = s.job.take() {
        let _ = j.events.send(Event::Error(msg.to_owned()));
    }
    s.phase = Phase::Free;
    s.session.reset();
    h.busy.fetch_sub(1, Ordering::AcqRel);
}

/// One batched forward step, then sampling for every slot that got logits.
fn step<'e>(
    engine: &'e Engine,
    slots: &mut [Slot<'e>],
    out: &mut cera::batch::StepLogits,
    cfg: &SchedulerConfig,
    cache: Option<&PrefixCache>,
    h: &Handle,
    m: &Metrics,
) -> cera::Result<()> {
    let n_batch = cfg.n_batch;
    // cancel first: a client gone, a deadline passed
    for s in slots.iter_mut() {
        let Some(job) = &s.job else { continue };
        let gone = job.events.is_closed();
        let late = job.deadline.is_some_and(|d| Instant::now() >= d);
        if gone || late {
            m.cancelled.fetch_add(1, Ordering::Relaxed);
            if late && !gone {
                let secs = job.enqueued.elapsed().as_secs_f64();
                finish_error(s, &format!("the request timed out after {secs:.1} s"), h);
            } else {
                s.job = None;
                s.phase = Phase::Free;
                h.busy.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
    // what each slot feeds this step
    let mut budget = n_batch.max(1);
    let mut feeds: Vec<(usize, Vec<u32>, Logits)> = Vec::new();
    for (i, s) in slots.iter_mut().enumerate() {
        if let Phase::Decode { next, g } = &s.phase {
            let mut toks = vec![*next];
            if let Some(sp) = &mut s.spec {
                draft(sp, &s.session, g, *next, budget.saturating_sub(1), cfg)?;
                toks.extend_from_slice(&sp.draft);
            }
            let logits = if toks.len() > 1 {
                Logits::All
            } else {
                Logits::Last
            };
            budget = budget.saturating_sub(toks.len());
            feeds.push((i, toks, logits));
        }
    }
    for (i, s) in slots.iter().enumerate() {
        if !matches!(s.phase, Phase::Prefill) || budget == 0 {
            continue;
        }
        let prompt = &s.job.as_ref().expect("a prefilling slot has a job").prompt;
        let done = s.session.tokens().len();
        let n = (prompt.len() - done).min(budget);
        let last = done + n == prompt.len();
        feeds.push((
            i,
            prompt[done..done + n].to_vec(),
            if last { Logits::Last } else { Logits::None },
        ));
        budget -= n;
    }
    if feeds.is_empty() {
        return Ok(());
    }
    feeds.sort_by_key(|f| f.0);
    let t0 = Instant::now();
    {
        let mut batch = engine.batch();
        let mut rest: &mut [Slot<'e>] = slots;
        let mut base = 0;
        for (i, toks, logits) in &feeds {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(*i - base);
            let (one, tail) = tail.split_first_mut().expect("slot exists");
            base = i + 1;
            rest = tail;
            if let Err(e) = batch.add(&mut one.session, toks, *logits) {
                // this slot cannot go on (its context is full); the others can
                let msg = e.to_string();
                drop(batch);
                finish_error(&mut slots[*i], &msg, h);
                return Ok(());
            }
        }
        batch.run_into(out)?;
    }
    let dt = t0.elapsed();
    m.steps.fetch_add(1, Ordering::Relaxed);
    // sample
    for (entry, (i, toks, logits)) in feeds.into_iter().enumerate() {
        let s = &mut slots[i];
        if logits == Logits::All && matches!(s.phase, Phase::Decode { .. }) {
            verify(s, out.get(entry), h, cache, m);
            continue;
        }
        match &s.phase {
            Phase::Prefill => {
                s.prefill_time += dt;
                m.prompt_tokens
                    .fetch_add(toks.len() as u64, Ordering::Relaxed);
                if logits == Logits::None {
                    continue;
                }
                let job = s.job.as_ref().expect("job");
                s.spec = cfg.spec.as_ref().map(|c| SlotSpec {
                    drafter: NgramDrafter::new(c.ngram_min, c.ngram_max),
                    adapt: Adapt::new(&c.options),
                    draft: Vec::new(),
                    ctx: Vec::new(),
                });
                let mut g = engine.generator(&job.opts, s.session.tokens());
                if let Some(n) = job.logprobs {
                    g = g.with_logprobs(n);
                }
                s.phase = Phase::Decode {
                    g: Box::new(g),
                    next: 0,
                };
                sample(s, h, cache, m);
            }
            Phase::Decode { .. } => sample(s, h, cache, m),
            Phase::Free => {}
        }
    }
    Ok(())
}

/// Samples the slot's next token from its logits and streams it, or finishes the job.
fn sample(s: &mut Slot<'_>, h: &Handle, cache: Option<&PrefixCache>, m: &Metrics) {
    let Some(id) = emit(s, None, h, cache, m) else {
        return;
    };
    feed_next(s, id, h, cache, m);
}

/// `id` is the slot's next token to feed, unless its context is full (then the job ends).
fn feed_next(s: &mut Slot<'_>, id: u32, h: &Handle, cache: Option<&PrefixCache>, m: &Metrics) {
    if s.session.tokens().len() >= s.session.n_ctx() {
        let Phase::Decode { g, .. } = &mut s.phase else {
            return;
        };
        let text = match g.stop(FinishReason::ContextFull) {
            Step::Done { text, .. } => text,
            Step::Token { .. } => String::new(),
        };
        finish(s, FinishReason::ContextFull, text, h, cache, m);
        return;
    }
    if let Phase::Decode { next, .. } = &mut s.phase {
        *next = id;
    }
}

/// Samples a token from `logits` (the session's own when `None`) and streams it: `Some(id)`
/// when generation goes on after it, `None` when the job finished here (EOG, a stop, the
/// length; the slot is freed) or its client is gone (cancelled at the next step).
fn emit(
    s: &mut Slot<'_>,
    logits: Option<&mut [f32]>,
    h: &Handle,
    cache: Option<&PrefixCache>,
    m: &Metrics,
) -> Option<u32> {
    let Phase::Decode { g, .. } = &mut s.phase else {
        return None;
    };
    let r = match logits {
        Some(l) => g.step(l),
        None => g.step(s.session.logits_mut()),
    };
    match r {
        Step::Token { id, text } => {
            let lp = g.take_logprobs();
            let now = Instant::now();
            match s.first_token {
                None => {
                    s.first_token = Some(now);
                    if let Some(j) = &s.job {
                        m.ttft.observe((now - j.enqueued).as_secs_f64());
                    }
                }
                Some(_) => m.itl.observe((now - s.last_token).as_secs_f64()),
            }
            s.last_token = now;
            m.generated_tokens.fetch_add(1, Ordering::Relaxed);
            let sent = s.job.as_ref().is_some_and(|j| {
                j.events
                    .send(Event::Token {
                        id,
                        text,
                        logprobs: lp,
                    })
                    .is_ok()
            });
            sent.then_some(id)
        }
        Step::Done { reason, text } => {
            finish(s, reason, text, h, cache, m);
            None
        }
    }
}

/// Drafts what follows `next` for a generating slot into `sp.draft`: within the slot's
/// context, its token budget and the step's, cut where its grammar forbids a token.
fn draft(
    sp: &mut SlotSpec,
    session: &Session,
    g: &Generator<'_>,
    next: u32,
    step_room: usize,
    cfg: &SchedulerConfig,
) -> cera::Result<()> {
    sp.draft.clear();
    let Some(c) = &cfg.spec else { return Ok(()) };
    let mut room = session
        .n_ctx()
        .saturating_sub(session.tokens().len() + 1)
        .min(step_room);
    let max = g.max_tokens();
    if max > 0 {
        room = room.min(max.saturating_sub(g.n_generated()));
    }
    let k = sp.adapt.allowed().min(room);
    if k == 0 || k < c.options.draft_min {
        return Ok(());
    }
    sp.ctx.clear();
    sp.ctx.extend_from_slice(session.tokens());
    sp.ctx.push(next);
    sp.drafter.propose(&sp.ctx, k, &mut sp.draft)?;
    sp.draft
        .truncate(k.min(g.grammar_allowed_prefix(&sp.draft)));
    if sp.draft.len() < c.options.draft_min {
        sp.draft.clear();
    }
    Ok(())
}

/// A slot fed its decode token and a draft, with logits for every row: samples row by row
/// while the draft agrees, streams what was kept and rolls the rest back.
fn verify(s: &mut Slot<'_>, rows: &[f32], h: &Handle, cache: Option<&PrefixCache>, m: &Metrics) {
    let Some(sp) = &mut s.spec else { return };
    let draft = std::mem::take(&mut sp.draft);
    let n_vocab = rows.len() / (draft.len() + 1);
    // the context before this step's decode token
    let base = s.session.tokens().len() - draft.len() - 1;
    let mut kept = 0;
    let mut row = Vec::with_capacity(n_vocab);
    let mut pending = None;
    for i in 0..=draft.len() {
        row.clear();
        row.extend_from_slice(&rows[i * n_vocab..(i + 1) * n_vocab]);
        match emit(s, Some(&mut row), h, cache, m) {
            Some(id) if i < draft.len() && id == draft[i] => kept += 1,
            Some(id) => {
                pending = Some(id);
                break;
            }
            None => break,
        }
    }
    m.spec_drafted
        .fetch_add(draft.len() as u64, Ordering::Relaxed);
    m.spec_accepted.fetch_add(kept as u64, Ordering::Relaxed);
    if let Some(sp) = &mut s.spec {
        sp.adapt.record(kept, draft.len());
        sp.draft = draft;
    }
    if matches!(s.phase, Phase::Free) {
        return; // finished (EOG, stop, length) or cancelled
    }
    // keep the decode token and the accepted draft
    s.session.truncate(base + 1 + kept);
    let Some(id) = pending else { return };
    feed_next(s, id, h, cache, m);
}

fn finish(
    s: &mut Slot<'_>,
    reason: FinishReason,
    text: String,
    h: &Handle,
    cache: Option<&PrefixCache>,
    m: &Metrics,
) {
    let (full_text, n_gen) = match &s.phase {
        Phase::Decode { g, .. } => (g.text.clone(), g.n_generated()),
        _ => (String::new(), 0),
    };
    if let Some(job) = s.job.take() {
        if !text.is_empty() {
            let _ = job.events.send(Event::Token {
                id: u32::MAX,
                text,
                logprobs: None,
            });
        }
        let now = Instant::now();
        let first = s.first_token.unwrap_or(now);
        let _ = job.events.send(Event::Done(Done {
            finish: reason,
            text: full_text,
            prompt_tokens: job.prompt.len(),
            cached_tokens: s.cached,
            completion_tokens: n_gen,
            queued: s.started.saturating_duration_since(job.enqueued),
            prefill: s.prefill_time,
            decode: now.saturating_duration_since(first),
        }));
        m.finished.fetch_add(1, Ordering::Relaxed);
    }
    s.phase = Phase::Free;
    h.busy.fetch_sub(1, Ordering::AcqRel);
    // the context stays in the slot for the next prompt that shares it; long ones also go to
    // the prefix cache for the other slots
    if let Some(c) = cache {
        let _ = s.session.store_prefix(c);
    }
}
