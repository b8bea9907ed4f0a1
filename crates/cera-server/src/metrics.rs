//! Counters, gauges and histograms for `GET /metrics`, in Prometheus' text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A histogram with fixed buckets (seconds).
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    /// Sum in microseconds.
    sum_us: AtomicU64,
    n: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
            n: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, secs: f64) {
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            if secs <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_us
            .fetch_add((secs * 1e6).max(0.0) as u64, Ordering::Relaxed);
        self.n.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{b}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
        let n = self.n.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {n}");
    }
}

const TTFT: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
const ITL: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

pub struct Metrics {
    /// (endpoint, status) → count
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    pub prompt_tokens: AtomicU64,
    pub prompt_tokens_cached: AtomicU64,
    pub generated_tokens: AtomicU64,
    pub cancelled: AtomicU64,
    /// Speculation (`--spec ngram`): tokens drafted and verified, and of those kept.
    pub spec_drafted: AtomicU64,
    pub spec_accepted: AtomicU64,
    pub finished: AtomicU64,
    pub steps: AtomicU64,
    pub queue_depth: AtomicUsize,
    pub kv_tokens: AtomicUsize,
    pub ttft: Histogram,
    pub itl: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Mutex::new(BTreeMap::new()),
            prompt_tokens: AtomicU64::new(0),
            prompt_tokens_cached: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            spec_drafted: AtomicU64::new(0),
            spec_accepted: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            queue_depth: AtomicUsize::new(0),
            kv_tokens: AtomicUsize::new(0),
            ttft: Histogram::new(TTFT),
            itl: Histogram::new(ITL),
        }
    }
}

impl Metrics {
    pub fn request(&self, endpoint: &str, status: u16) {
        let mut r = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *r.entry((endpoint.to_owned(), status)).or_default() += 1;
    }

    /// The whole registry; `busy`, `slots`, `queued` and `kv_capacity` come from the scheduler.
    pub fn render(&self, busy: usize, slots: usize, queued: usize, kv_capacity: usize) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP cera_requests_total HTTP requests by endpoint and status\n# TYPE cera_requests_total counter"
        );
        for ((e, s), n) in self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "cera_requests_total{{endpoint=\"{e}\",status=\"{s}\"}} {n}"
            );
        }
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: usize| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        counter(
            &mut out,
            "cera_prompt_tokens_total",
            "Prompt tokens prefilled",
            ld(&self.prompt_tokens),
        );
        counter(
            &mut out,
            "cera_prompt_tokens_cached_total",
            "Prompt tokens reused from a slot or the prefix cache",
            ld(&self.prompt_tokens_cached),
        );
        counter(
            &mut out,
            "cera_generated_tokens_total",
            "Tokens generated",
            ld(&self.generated_tokens),
        );
        counter(
            &mut out,
            "cera_requests_cancelled_total",
            "Requests cancelled (client gone or timed out)",
            ld(&self.cancelled),
        );
        counter(
            &mut out,
            "cera_spec_drafted_tokens_total",
            "Drafted tokens verified (speculative decoding)",
            ld(&self.spec_drafted),
        );
        counter(
            &mut out,
            "cera_spec_accepted_tokens_total",
            "Drafted tokens kept (speculative decoding)",
            ld(&self.spec_accepted),
        );
        counter(
            &mut out,
            "cera_requests_finished_total",
            "Generations finished",
            ld(&self.finished),
        );
        counter(
            &mut out,
            "cera_steps_total",
            "Batched forward steps",
            ld(&self.steps),
        );
        self.ttft.render(
            "cera_time_to_first_token_seconds",
            "Time from arrival to the first token",
            &mut out,
        );
        self.itl.render(
            "cera_inter_token_latency_seconds",
            "Time between consecutive tokens of a request",
            &mut out,
        );
        gauge(
            &mut out,
            "cera_queue_depth",
            "Requests waiting for a slot",
            queued,
        );
        gauge(
            &mut out,
            "cera_slots_busy",
            "Slots generating or prefilling",
            busy,
        );
        gauge(&mut out, "cera_slots_total", "Slots (-np)", slots);
        gauge(
            &mut out,
            "cera_kv_cache_tokens",
            "Tokens held in the busy slots' KV caches",
            self.kv_tokens.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "cera_kv_cache_capacity_tokens",
            "Tokens the slots' KV caches hold together",
            kv_capacity,
        );
        out
    }
}
