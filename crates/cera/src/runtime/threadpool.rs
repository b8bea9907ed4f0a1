//! A persistent thread pool for the compute kernels: workers spin briefly, then park; the caller
//! takes part as thread 0; work is split into chunks claimed from an atomic counter.
//!
//! One pool belongs to one engine (no process-wide global). Jobs from several sessions are
//! serialised by a submission lock, so concurrent sessions share the workers safely.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// How many spin iterations a worker waits for the next job before parking.
const SPIN_ITERS: u32 = 1 << 16;

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// The current job, type-erased; valid while `pending > 0` for this generation.
    job: Mutex<Option<&'static Job>>,
    generation: AtomicU64,
    pending: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    sleepers: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    submit: Mutex<()>,
    n_threads: usize,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ThreadPool({} threads)", self.n_threads)
    }
}

impl ThreadPool {
    /// A pool of `n_threads` including the calling thread (at least 1).
    pub fn new(n_threads: usize) -> ThreadPool {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            job: Mutex::new(None),
            generation: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..n_threads)
            .map(|idx| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("cera-worker-{idx}"))
                    .spawn(move || worker(s, idx))
                    .expect("spawn worker thread")
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            submit: Mutex::new(()),
            n_threads,
        }
    }

    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Runs `f(thread_index)` once on each of `n` threads (`n` clamped to the pool size) and
    /// returns when all have finished.
    pub fn run_on(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        let n = n.clamp(1, self.n_threads);
        if n == 1 {
            f(0);
            return;
        }
        let _guard = self.submit.lock().unwrap_or_else(|e| e.into_inner());
        let limited = move |idx: usize| {
            if idx < n {
                f(idx)
            }
        };
        let job: &(dyn Fn(usize) + Sync) = &limited;
        // SAFETY: the reference is only used by workers until `pending` reaches zero, and we
        // wait for that below before `limited` goes out of scope.
        let job: &'static Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static Job>(job) };
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
        self.shared
            .pending
            .store(self.workers.len(), Ordering::Release);
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        if self.shared.sleepers.load(Ordering::Acquire) > 0 {
            let _g = self.shared.park.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| job(0)));
        let mut spins = 0u32;
        while self.shared.pending.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins < SPIN_ITERS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if self.shared.panicked.swap(false, Ordering::AcqRel) {
            panic!("a worker thread panicked while running a kernel");
        }
    }

    /// Runs `f(thread_index)` on every thread of the pool.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        self.run_on(self.n_threads, f)
    }

    /// Calls `f(start..end)` for consecutive chunks of `0..n` of `chunk` items each, spread over
    /// up to `max_threads` threads, each thread claiming the next chunk from a shared counter.
    pub fn for_chunks(
        &self,
        n: usize,
        chunk: usize,
        max_threads: usize,
        f: &(dyn Fn(std::ops::Range<usize>) + Sync),
    ) {
        let chunk = chunk.max(1);
        let n_chunks = n.div_ceil(chunk);
        if n_chunks <= 1 || max_threads <= 1 || self.n_threads == 1 {
            for c in 0..n_chunks {
                f(c * chunk..((c + 1) * chunk).min(n));
            }
            return;
        }
        let next = AtomicUsize::new(0);
        self.run_on(max_threads.min(n_chunks), &|_| {
            loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= n_chunks {
                    break;
                }
                f(c * chunk..((c + 1) * chunk).min(n));
            }
        });
    }
}

fn worker(s: Arc<Shared>, idx: usize) {
    let mut seen = 0u64;
    loop {
        // spin, then park until the generation moves
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            spins += 1;
            if spins < SPIN_ITERS {
                std::hint::spin_loop();
                continue;
            }
            let guard = s.park.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, Ordering::AcqRel);
            if s.generation.load(Ordering::Acquire) == seen && !s.shutdown.load(Ordering::Acquire) {
                let _g = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
            s.sleepers.fetch_sub(1, Ordering::AcqRel);
            spins = 0;
        }
        let job = *s.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = job
            && catch_unwind(AssertUnwindSafe(|| job(idx))).is_err()
        {
            s.panicked.store(true, Ordering::Release);
        }
        s.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _g = self.shared.park.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_runs_once() {
        let pool = ThreadPool::new(3);
        for n in [0usize, 1, 7, 100, 1001] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.for_chunks(n, 8, 3, &|r| {
                for i in r {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn many_jobs_in_a_row_and_after_parking() {
        let pool = ThreadPool::new(2);
        let total = AtomicUsize::new(0);
        for i in 0..2000 {
            pool.run(&|_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
            if i == 1000 {
                std::thread::sleep(std::time::Duration::from_millis(50)); // let the worker park
            }
        }
        assert_eq!(total.load(Ordering::Relaxed), 4000);
    }

    #[test]
    fn worker_panic_is_reported_not_hung() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|idx| {
                if idx == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        // the pool still works afterwards
        let n = AtomicUsize::new(0);
        pool.run(&|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }
}
