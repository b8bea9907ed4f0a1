//! A persistent thread pool for the compute kernels: workers spin briefly, then park; the caller
//! always takes part; work is split into chunks claimed from an atomic counter.
//!
//! Joining a job is optional for workers: when the caller has claimed the last chunk it closes
//! the job and waits only for workers already inside it. A worker that was descheduled (a
//! loaded machine) therefore never stalls the caller, which would otherwise wait a whole
//! scheduler slice for every op.
//!
//! One pool belongs to one engine (no process-wide global). Jobs from several sessions are
//! serialised by a submission lock, so concurrent sessions share the workers safely.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// How many spin iterations a worker waits for the next job before parking.
const SPIN_ITERS: u32 = 1 << 15;

/// `state` layout: generation in the high 32 bits, a "closed" flag, and the number of workers
/// inside the current job in the low bits.
const CLOSED: u64 = 1 << 31;
const ACTIVE_MASK: u64 = CLOSED - 1;

type Job<'a> = dyn Fn() + Sync + 'a;

struct Shared {
    state: AtomicU64,
    /// Points at a `&Job` on the submitting thread's stack, valid while the job is open or
    /// has active workers.
    job: AtomicPtr<()>,
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
            state: AtomicU64::new(CLOSED),
            job: AtomicPtr::new(std::ptr::null_mut()),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut workers = Vec::with_capacity(n_threads - 1);
        for idx in 1..n_threads {
            let s = Arc::clone(&shared);
            match std::thread::Builder::new()
                .name(format!("cera-worker-{idx}"))
                .spawn(move || worker(s))
            {
                Ok(h) => workers.push(h),
                // a host out of threads (the threads WebAssembly build answers EAGAIN when
                // every worker it started is taken): the pool runs on the ones it got
                Err(_) => break,
            }
        }
        let n_threads = workers.len() + 1;
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

    /// Runs `job` on the calling thread and on whichever workers join before it is closed;
    /// `job` must claim its own work (it is called once per participating thread).
    fn run_shared(&self, job: &Job<'_>) {
        let _guard = self.submit.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let holder: &Job<'_> = job;
        s.job
            .store(&holder as *const &Job<'_> as *mut (), Ordering::Release);
        let epoch = (s.state.load(Ordering::Acquire) >> 32).wrapping_add(1) & 0xffff_ffff;
        s.state.store(epoch << 32, Ordering::Release);
        if s.sleepers.load(Ordering::Acquire) > 0 {
            let _g = s.park.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(job));
        // close the job, then wait for the workers inside it
        let mut st = s.state.fetch_or(CLOSED, Ordering::AcqRel) | CLOSED;
        let mut spins = 0u32;
        while st & ACTIVE_MASK != 0 {
            spins += 1;
            if spins < SPIN_ITERS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            st = s.state.load(Ordering::Acquire);
        }
        s.job.store(std::ptr::null_mut(), Ordering::Release);
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::AcqRel) {
            panic!("a worker thread panicked while running a kernel");
        }
    }

    /// Calls `f(start..end)` for consecutive chunks of `0..n` of `chunk` items each, spread over
    /// up to `max_threads` threads, each thread claiming the next chunk from a shared counter.
    pub fn for_chunks(
        &self,
        n: usize,
        chunk: usize,
        max_threads: usize,
        f: &(dyn Fn(Range<usize>) + Sync),
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
        let seats = AtomicUsize::new(max_threads.min(self.n_threads));
        self.run_shared(&|| {
            // cap the number of participants
            if seats.fetch_sub(1, Ordering::AcqRel) == 0 {
                return;
            }
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

fn worker(s: Arc<Shared>) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            let st = s.state.load(Ordering::Acquire);
            let epoch = st >> 32;
            if epoch != seen {
                if st & CLOSED != 0 {
                    seen = epoch; // finished without us
                    continue;
                }
                if s.state
                    .compare_exchange_weak(st, st + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    seen = epoch;
                    break;
                }
                continue;
            }
            spins += 1;
            if spins < SPIN_ITERS {
                std::hint::spin_loop();
                continue;
            }
            let guard = s.park.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, Ordering::AcqRel);
            let st = s.state.load(Ordering::Acquire);
            if st >> 32 == seen && !s.shutdown.load(Ordering::Acquire) {
                let _g = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
            s.sleepers.fetch_sub(1, Ordering::AcqRel);
            spins = 0;
        }
        let p = s.job.load(Ordering::Acquire) as *const &Job<'static>;
        // SAFETY: we are counted as active, so the submitter keeps the job alive until we
        // decrement the count below.
        let job: &Job<'static> = unsafe { *p };
        if catch_unwind(AssertUnwindSafe(job)).is_err() {
            s.panicked.store(true, Ordering::Release);
        }
        s.state.fetch_sub(1, Ordering::AcqRel);
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
        for i in 0..3000 {
            pool.for_chunks(64, 1, 2, &|r| {
                total.fetch_add(r.len(), Ordering::Relaxed);
            });
            if i == 1000 {
                std::thread::sleep(std::time::Duration::from_millis(50)); // let the worker park
            }
        }
        assert_eq!(total.load(Ordering::Relaxed), 3000 * 64);
    }

    #[test]
    fn worker_panic_is_reported_not_hung() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.for_chunks(1000, 1, 2, &|r| {
                if r.start == 500 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        pool.for_chunks(10, 1, 2, &|r| {
            n.fetch_add(r.len(), Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 10);
    }
}
