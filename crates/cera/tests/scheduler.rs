//! The core's scheduler: requests run together in shared steps give each the text it gets
//! alone (greedy and sampled), choices forked from one prefill equal requests run alone with
//! the seeds they get, a request with no free slot waits for one, a `Stop` from the callback
//! cancels, `remove` frees a slot, and a prompt over the context fails alone.

use cera::decode::{Event, Finished, Removed, Request, RequestId, SchedulerOptions};
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::session::{Control, FinishReason, GenerateOptions};

#[path = "common/models.rs"]
mod models;

fn engine() -> Engine {
    let mut o = EngineOptions::default();
    o.n_threads = Some(2);
    Engine::load(models::real_model("smollm2"), o).unwrap()
}

fn sopts() -> SessionOptions {
    let mut o = SessionOptions::default();
    o.n_ctx = 256;
    o
}

fn opts(max_tokens: usize, temperature: f32, seed: u64) -> GenerateOptions {
    let mut o = GenerateOptions::default();
    o.max_tokens = max_tokens;
    o.sampler.temperature = temperature;
    o.sampler.seed = seed;
    o
}

/// `prompt` prefilled and generated in a session of its own.
fn alone(eng: &Engine, prompt: &str, o: &GenerateOptions) -> String {
    let mut s = eng.session(sopts());
    s.append_text(prompt, false).unwrap();
    s.generate(o, &mut |_: u32, _: &str| Control::Continue)
        .unwrap()
        .text
}

#[derive(Default)]
struct Log {
    texts: Vec<String>,
    done: Vec<Option<Finished>>,
    errors: Vec<(RequestId, String)>,
    /// (event kind, id) in order: `s` started, `d` done.
    order: Vec<(char, RequestId)>,
}

impl Log {
    fn new(n: usize) -> Log {
        Log {
            texts: vec![String::new(); n],
            done: vec![None; n],
            ..Default::default()
        }
    }

    fn on(&mut self, ev: Event) -> Control {
        match ev {
            Event::Started { id, .. } => self.order.push(('s', id)),
            Event::Token { id, text, .. } | Event::Text { id, text, .. } => {
                self.texts[id as usize].push_str(&text)
            }
            Event::Done { id, finished } => {
                self.order.push(('d', id));
                self.done[id as usize] = Some(*finished);
            }
            Event::Error { id, error } => self.errors.push((id, error.to_string())),
            _ => {}
        }
        Control::Continue
    }
}

const PROMPTS: [&str; 4] = [
    "Once upon a time",
    "The capital of France is",
    "def fibonacci(n):",
    "My favourite food is",
];

#[test]
fn requests_in_shared_steps_equal_each_alone() {
    let eng = engine();
    for o in [opts(24, 0.0, 0), opts(24, 0.8, 7)] {
        // three slots for four prompts: the last waits for the first to finish
        let mut sched = eng.scheduler(3, sopts(), SchedulerOptions::default());
        for p in PROMPTS {
            let toks = eng.tokenizer().encode(p, true, false);
            sched.submit(Request::new(toks, o.clone()));
        }
        let mut log = Log::new(PROMPTS.len());
        sched.run_all(&mut |ev| log.on(ev));
        assert!(log.errors.is_empty(), "{:?}", log.errors);
        for (i, p) in PROMPTS.iter().enumerate() {
            assert_eq!(log.texts[i], alone(&eng, p, &o), "prompt {i}");
            let d = log.done[i].as_ref().unwrap();
            assert_eq!(d.summary.text, log.texts[i]);
            assert!(d.summary.generated_tokens > 0);
        }
        let started_3 = log.order.iter().position(|&e| e == ('s', 3)).unwrap();
        let first_done = log.order.iter().position(|e| e.0 == 'd').unwrap();
        assert!(started_3 > first_done, "{:?}", log.order);
        assert!(sched.is_idle());
    }
}

#[test]
fn choices_fork_from_one_prefill() {
    let eng = engine();
    let prompt = "The sea at night is";
    let toks = eng.tokenizer().encode(prompt, true, false);
    let o = opts(20, 1.0, 11);
    // four slots for three choices; then two slots, where the third choice waits for one
    for n_slots in [4, 2] {
        let mut sched = eng.scheduler(n_slots, sopts(), SchedulerOptions::default());
        let id = sched.submit(Request::new(toks.clone(), o.clone()).with_n(3));
        assert_eq!(id, 0);
        let mut log = Log::new(3);
        sched.run_all(&mut |ev| log.on(ev));
        assert!(log.errors.is_empty(), "{:?}", log.errors);
        for k in 0..3 {
            let want = alone(&eng, prompt, &opts(20, 1.0, 11 + k as u64));
            assert_eq!(log.texts[k], want, "choice {k} with {n_slots} slots");
        }
        assert!(log.texts[0] != log.texts[1] || log.texts[1] != log.texts[2]);
        // the forks copied the prompt's context instead of computing it
        let d1 = log.done[1].as_ref().unwrap();
        assert_eq!(d1.cached_tokens, toks.len());
    }
}

#[test]
fn stop_cancels_and_remove_frees_the_slot() {
    let eng = engine();
    let toks = eng.tokenizer().encode(PROMPTS[0], true, false);
    let mut sched = eng.scheduler(1, sopts(), SchedulerOptions::default());
    let a = sched.submit(Request::new(toks.clone(), opts(50, 0.0, 0)));
    let b = sched.submit(Request::new(toks.clone(), opts(50, 0.0, 0)));
    let (mut n_a, mut fin) = (0, None);
    while sched.step(&mut |ev| match ev {
        Event::Token { id, .. } if id == a => {
            n_a += 1;
            if n_a == 3 {
                Control::Stop
            } else {
                Control::Continue
            }
        }
        Event::Done { id, finished } if id == a => {
            fin = Some(finished.summary.finish);
            Control::Continue
        }
        _ => Control::Continue,
    }) {
        if fin.is_some() {
            break;
        }
    }
    assert_eq!(fin, Some(FinishReason::Cancelled));
    assert_eq!(n_a, 3);
    // b got the slot; removing it frees it without an event
    sched.step(&mut |_| Control::Continue);
    assert_eq!(sched.n_running(), 1);
    assert_eq!(sched.remove(b), Removed::Running);
    assert!(sched.is_idle());
    assert_eq!(sched.remove(b), Removed::Unknown);
}

#[test]
fn a_prompt_over_the_context_fails_alone() {
    let eng = engine();
    let mut sched = eng.scheduler(2, sopts(), SchedulerOptions::default());
    let long = vec![1u32; 300];
    let ok = eng.tokenizer().encode(PROMPTS[1], true, false);
    sched.submit(Request::new(long, opts(4, 0.0, 0)));
    sched.submit(Request::new(ok, opts(4, 0.0, 0)));
    let mut log = Log::new(2);
    sched.run_all(&mut |ev| log.on(ev));
    assert_eq!(log.errors.len(), 1);
    assert_eq!(log.errors[0].0, 0);
    assert!(log.errors[0].1.contains("context"), "{}", log.errors[0].1);
    assert_eq!(log.texts[1], alone(&eng, PROMPTS[1], &opts(4, 0.0, 0)));
}

/// Options out of range fail their request before it runs, naming the option, through the
/// scheduler and `Session::generate` alike; the other request runs.
#[test]
fn options_out_of_range_fail_named() {
    let eng = engine();
    let mut sched = eng.scheduler(2, sopts(), SchedulerOptions::default());
    let p = eng.tokenizer().encode(PROMPTS[1], true, false);
    let mut bad = opts(4, 0.8, 0);
    bad.sampler.top_p = 1.5;
    sched.submit(Request::new(p.clone(), bad.clone()));
    sched.submit(Request::new(p, opts(4, 0.0, 0)));
    let mut log = Log::new(2);
    sched.run_all(&mut |ev| log.on(ev));
    assert_eq!(log.errors.len(), 1, "{:?}", log.errors);
    assert_eq!(log.errors[0].0, 0);
    assert!(log.errors[0].1.contains("top_p") && log.errors[0].1.contains("1.5"));
    assert!(log.texts[0].is_empty());
    assert_eq!(log.texts[1], alone(&eng, PROMPTS[1], &opts(4, 0.0, 0)));

    let mut s = eng.session(sopts());
    s.append_text(PROMPTS[0], false).unwrap();
    for (field, set) in [
        (
            "min_p",
            (|o: &mut GenerateOptions| o.sampler.min_p = f32::NAN) as fn(&mut _),
        ),
        ("repeat_penalty", |o| o.sampler.repeat_penalty = 0.0),
        ("logit_bias", |o| {
            o.sampler.logit_bias = vec![(5, f32::INFINITY)]
        }),
    ] {
        let mut o = opts(4, 0.8, 0);
        set(&mut o);
        let e = s
            .generate(&o, &mut |_: u32, _: &str| Control::Continue)
            .unwrap_err();
        assert!(e.to_string().starts_with(field), "{field}: {e}");
    }
}

#[test]
fn a_request_joining_a_running_one_changes_neither() {
    // the first runs alone for a few steps (a one-slot step reads only the top candidates of
    // its logits), then the second joins it in batched steps, then it runs alone again
    let eng = engine();
    for o in [opts(40, 0.0, 0), opts(40, 0.9, 3)] {
        let mut sched = eng.scheduler(2, sopts(), SchedulerOptions::default());
        let mut log = Log::new(2);
        let a = eng.tokenizer().encode(PROMPTS[0], true, false);
        sched.submit(Request::new(a, o.clone()));
        for _ in 0..5 {
            sched.step(&mut |ev| log.on(ev));
        }
        let mut short = o.clone();
        short.max_tokens = 10;
        let b = eng.tokenizer().encode(PROMPTS[1], true, false);
        sched.submit(Request::new(b, short.clone()));
        sched.run_all(&mut |ev| log.on(ev));
        assert!(log.errors.is_empty(), "{:?}", log.errors);
        assert_eq!(log.texts[0], alone(&eng, PROMPTS[0], &o));
        assert_eq!(log.texts[1], alone(&eng, PROMPTS[1], &short));
    }
}
