//! The server's side of the core's [`Scheduler`]: one thread owns it (and the model) and
//! runs its batched steps; HTTP handlers submit jobs through a [`Handle`] and read their
//! events from a channel.
//!
//! `-np N` slots each hold a session (their context is `-c / N`, as llama-server divides it);
//! the core's scheduler does the continuous batching, the prefix reuse and, with
//! `--spec ngram`, prompt-lookup speculation in every slot. Here: the bounded queue (a full
//! one is refused at the door, 503), the metrics, and cancellation: a request whose client
//! went away (its event channel closed), or whose deadline passed, is dropped within one step
//! and its slot freed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

pub use cera::decode::SpecConfig;
use cera::decode::{Request, RequestId, Scheduler, SchedulerOptions};
use cera::engine::Engine;
use cera::session::{Control, FinishReason, GenerateOptions, TokenLogprobs};
use cera::state::PrefixCache;
use tokio::sync::mpsc::UnboundedSender;

use crate::metrics::Metrics;

/// One generation job, tokenized and validated by the HTTP side.
pub struct Job {
    /// Tokens, or text and media chunks.
    pub prompt: cera::decode::Prompt,
    pub opts: GenerateOptions,
    /// Logprobs of each chosen token with this many alternatives.
    pub logprobs: Option<usize>,
    pub events: UnboundedSender<Event>,
    pub deadline: Option<Instant>,
    pub enqueued: Instant,
    /// The LoRA adapters the job runs with.
    pub lora: cera::lora::LoraSet,
    /// Choices: sequences forked from one prefill of the prompt (their events say which).
    pub n: usize,
}

/// What a job's stream carries.
#[derive(Debug)]
pub enum Event {
    Token {
        id: u32,
        text: String,
        logprobs: Option<TokenLogprobs>,
        /// Which of the job's choices.
        choice: usize,
    },
    Done(Done),
    Error(String),
}

#[derive(Clone, Debug)]
pub struct Done {
    /// Which of the job's choices finished.
    pub choice: usize,
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

/// A submitted job as the server tracks it.
struct Live {
    events: UnboundedSender<Event>,
    deadline: Option<Instant>,
    enqueued: Instant,
    started: bool,
    first_token: bool,
    last_token: Instant,
    /// Its client went away (a send failed): the core ends it as cancelled.
    gone: bool,
    /// Its choices: the core's requests `id..id + n`.
    n: usize,
    /// Choices not finished yet.
    n_left: usize,
}

/// The jobs in flight, by the core's id of their first choice, and each choice's job.
#[derive(Default)]
struct Jobs {
    live: HashMap<RequestId, Live>,
    /// core request id → (the job's first id, choice)
    choice: HashMap<RequestId, (RequestId, usize)>,
    /// Jobs that failed in a step (first id, choices): their other choices are dropped
    /// after it.
    failed: Vec<(RequestId, usize)>,
}

impl Jobs {
    fn get(&mut self, id: RequestId) -> Option<(usize, &mut Live)> {
        let &(base, k) = self.choice.get(&id)?;
        self.live.get_mut(&base).map(|j| (k, j))
    }

    /// Forgets a job; returns it.
    fn remove(&mut self, base: RequestId) -> Option<Live> {
        let j = self.live.remove(&base)?;
        for k in 0..j.n {
            self.choice.remove(&(base + k as RequestId));
        }
        Some(j)
    }
}

fn run(engine: Engine, cfg: SchedulerConfig, rx: Receiver<Job>, h: Arc<Handle>, m: Arc<Metrics>) {
    let mut sopts = cera::engine::SessionOptions::default();
    sopts.n_ctx = cfg.n_ctx_slot;
    sopts.kv_type = cfg.kv.k;
    sopts.kv_type_v = Some(cfg.kv.v);
    sopts.kv_rotate = cfg.kv.rotate;
    let mut opts = SchedulerOptions::default();
    opts.n_batch = cfg.n_batch.max(1);
    opts.prefix_cache = cfg.prefix_cache.clone();
    opts.spec = cfg.spec.clone();
    let mut sched = engine.scheduler(cfg.n_parallel.max(1), sopts, opts);
    let mut jobs = Jobs::default();
    loop {
        // intake: block only when there is nothing to do
        if sched.is_idle() {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(j) => submit(&mut sched, &mut jobs, j),
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
            submit(&mut sched, &mut jobs, j);
        }
        drop_abandoned(&mut sched, &mut jobs, &h, &m);
        m.queue_depth.store(sched.n_waiting(), Ordering::Relaxed);
        let stepped = sched.n_running() > 0 || sched.n_waiting() > 0;
        sched.step(&mut |ev| on_event(ev, &mut jobs, &h, &m));
        if stepped {
            m.steps.fetch_add(1, Ordering::Relaxed);
        }
        // a job that failed in the step: its other choices stop too
        for (base, n) in std::mem::take(&mut jobs.failed) {
            for k in 0..n {
                sched.remove(base + k as RequestId);
            }
        }
        m.kv_tokens.store(sched.kv_tokens(), Ordering::Relaxed);
    }
}

fn submit(sched: &mut Scheduler<'_>, jobs: &mut Jobs, j: Job) {
    let n = j.n.max(1);
    let req = match j.prompt {
        cera::decode::Prompt::Chunks(c) => Request::chunks(c, j.opts),
        cera::decode::Prompt::Tokens(t) => Request::new(t, j.opts),
        _ => Request::new(Vec::new(), j.opts),
    };
    let mut req = req.with_lora(j.lora).with_n(n);
    req.logprobs = j.logprobs;
    let id = sched.submit(req);
    for k in 0..n {
        jobs.choice.insert(id + k as RequestId, (id, k));
    }
    jobs.live.insert(
        id,
        Live {
            events: j.events,
            deadline: j.deadline,
            enqueued: j.enqueued,
            started: false,
            first_token: false,
            last_token: Instant::now(),
            gone: false,
            n,
            n_left: n,
        },
    );
}

/// Drops jobs whose client left or whose deadline passed (queued or running).
fn drop_abandoned(sched: &mut Scheduler<'_>, jobs: &mut Jobs, h: &Handle, m: &Metrics) {
    let now = Instant::now();
    let gone: Vec<RequestId> = jobs
        .live
        .iter()
        .filter(|(_, j)| j.events.is_closed() || j.deadline.is_some_and(|d| now >= d))
        .map(|(&id, _)| id)
        .collect();
    for base in gone {
        let Some(j) = jobs.remove(base) else { continue };
        for k in 0..j.n {
            sched.remove(base + k as RequestId);
        }
        let late = !j.events.is_closed();
        if j.started {
            h.busy.fetch_sub(1, Ordering::AcqRel);
            if late {
                let secs = j.enqueued.elapsed().as_secs_f64();
                let msg = format!("the request timed out after {secs:.1} s");
                let _ = j.events.send(Event::Error(msg));
            }
        } else {
            h.queued.fetch_sub(1, Ordering::AcqRel);
            if late {
                let _ = j
                    .events
                    .send(Event::Error("the request timed out in the queue".into()));
            }
        }
        m.cancelled.fetch_add(1, Ordering::Relaxed);
    }
}

fn on_event(ev: cera::decode::Event, jobs: &mut Jobs, h: &Handle, m: &Metrics) -> Control {
    use cera::decode::Event as E;
    match ev {
        E::Started { id, .. } => {
            if let Some((_, j)) = jobs.get(id)
                && !j.started
            {
                j.started = true;
                h.queued.fetch_sub(1, Ordering::AcqRel);
                h.busy.fetch_add(1, Ordering::AcqRel);
            }
        }
        E::Token {
            id,
            token,
            text,
            logprobs,
        } => {
            let Some((choice, j)) = jobs.get(id) else {
                return Control::Stop;
            };
            let now = Instant::now();
            if !j.first_token {
                j.first_token = true;
                m.ttft.observe((now - j.enqueued).as_secs_f64());
            } else if choice == 0 {
                m.itl.observe((now - j.last_token).as_secs_f64());
            }
            if choice == 0 {
                j.last_token = now;
            }
            m.generated_tokens.fetch_add(1, Ordering::Relaxed);
            let ev = Event::Token {
                id: token,
                text,
                logprobs,
                choice,
            };
            if j.events.send(ev).is_err() {
                j.gone = true;
                return Control::Stop;
            }
        }
        E::Text { id, text, .. } => {
            if let Some((choice, j)) = jobs.get(id) {
                let _ = j.events.send(Event::Token {
                    id: u32::MAX,
                    text,
                    logprobs: None,
                    choice,
                });
            }
        }
        E::Done { id, finished } => {
            let Some((choice, j)) = jobs.get(id) else {
                return Control::Continue;
            };
            let s = &finished.summary;
            if choice == 0 {
                m.prompt_tokens.fetch_add(
                    s.prompt_tokens.saturating_sub(finished.cached_tokens) as u64,
                    Ordering::Relaxed,
                );
                m.prompt_tokens_cached
                    .fetch_add(finished.cached_tokens as u64, Ordering::Relaxed);
            }
            m.spec_drafted
                .fetch_add(finished.spec.drafted as u64, Ordering::Relaxed);
            m.spec_accepted
                .fetch_add(finished.spec.accepted as u64, Ordering::Relaxed);
            j.n_left -= 1;
            let gone = j.gone;
            if !gone {
                let _ = j.events.send(Event::Done(Done {
                    choice,
                    finish: s.finish,
                    text: s.text.clone(),
                    prompt_tokens: s.prompt_tokens,
                    cached_tokens: finished.cached_tokens,
                    completion_tokens: s.generated_tokens,
                    queued: finished.queued,
                    prefill: s.prefill,
                    decode: s.decode,
                }));
            }
            if j.n_left == 0 {
                let base = id - choice as RequestId;
                jobs.remove(base);
                h.busy.fetch_sub(1, Ordering::AcqRel);
                let counter = if gone { &m.cancelled } else { &m.finished };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        E::Error { id, error } => {
            if let Some((choice, j)) = jobs.get(id) {
                if j.started {
                    h.busy.fetch_sub(1, Ordering::AcqRel);
                } else {
                    h.queued.fetch_sub(1, Ordering::AcqRel);
                }
                let _ = j.events.send(Event::Error(error.to_string()));
                let base = id - choice as RequestId;
                if let Some(j) = jobs.remove(base)
                    && j.n > 1
                {
                    jobs.failed.push((base, j.n));
                }
            }
        }
        _ => {}
    }
    Control::Continue
}
