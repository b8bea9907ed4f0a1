//! Decoding allocates nothing: after a warm-up token, each further decode step (forward pass of
//! one token through the session, then greedy sampling) makes zero heap allocations. Counted
//! with a global allocator wrapper, on the catalog's default model (fetched if missing).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::fetch;
use cera::sample::{Sampler, SamplerConfig};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn decode_steps_allocate_nothing() {
    let entry = fetch::lookup("smollm2-135m-instruct-q4_1").unwrap();
    let path = fetch::ensure(entry, &mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch the test model: {e}"));
    for threads in [1, 2] {
        let mut opts = EngineOptions::default();
        opts.n_threads = Some(threads);
        let eng = Engine::load(&path, opts).unwrap();
        let mut s = eng.session(SessionOptions::default());
        let prompt = eng
            .tokenizer()
            .encode("The capital of France is", true, false);
        s.append_tokens(&prompt).unwrap();
        let mut sampler = Sampler::new(SamplerConfig::greedy());
        let mut logits = s.logits().to_vec();
        // warm-up: the first decode step sizes the scratch buffers
        let t = sampler.sample(&mut logits);
        s.append_tokens(&[t]).unwrap();
        logits.copy_from_slice(s.logits());
        ALLOCS.store(0, Ordering::SeqCst);
        COUNTING.store(true, Ordering::SeqCst);
        for _ in 0..32 {
            let t = sampler.sample(&mut logits);
            sampler.accept(t);
            s.append_tokens(&[t]).unwrap();
            logits.copy_from_slice(s.logits());
        }
        COUNTING.store(false, Ordering::SeqCst);
        let n = ALLOCS.load(Ordering::SeqCst);
        assert_eq!(
            n, 0,
            "{threads} threads: {n} heap allocations in 32 decode steps"
        );
    }
}
