//! The CPU backend: the small set of ops models are written against (matmul, norms, RoPE,
//! attention, activations), on plain f32 buffers. A GPU backend implements the same ops.

mod attention;
mod elementwise;
mod matmul;
mod rope;

pub use attention::{AttentionParams, KvLayer, KvType};
pub use elementwise::*;
pub use matmul::{QuantizedActs, Weight};
pub use rope::{RopeConfig, RopeKind, RopeScaling};

use crate::kernels::KernelTable;
use crate::runtime::ThreadPool;

/// The CPU backend: a kernel table (chosen at start-up from the CPU's features) and a pool.
pub struct Cpu {
    pub(crate) pool: ThreadPool,
    pub(crate) table: &'static KernelTable,
}

impl std::fmt::Debug for Cpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cpu({} threads)", self.n_threads())
    }
}

impl Cpu {
    pub fn new(n_threads: usize) -> Cpu {
        Cpu {
            pool: ThreadPool::new(n_threads),
            table: KernelTable::get(),
        }
    }

    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// Threads for an op that reads about `bytes` of weights: at least `CERA_MIN_WORK` bytes
    /// (default 32 KiB) per thread, since handing a job to a thread and joining it costs about
    /// as much as a few tens of kilobytes of kernel work. `-t` stays the upper bound.
    pub fn width_for(&self, bytes: usize) -> usize {
        (bytes / min_bytes_per_thread()).clamp(1, self.n_threads())
    }

    pub fn table(&self) -> &'static KernelTable {
        self.table
    }
}

fn min_bytes_per_thread() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("CERA_MIN_WORK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(32 << 10)
    })
}

/// A raw pointer that may be shared across the pool's threads; each thread writes a disjoint
/// part of the buffer it points into.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr<T>(pub *mut T);
// SAFETY: users guarantee disjoint writes and that the buffer outlives the parallel region.
unsafe impl<T> Send for SyncPtr<T> {}
unsafe impl<T> Sync for SyncPtr<T> {}

impl<T> SyncPtr<T> {
    /// # Safety
    /// `start..start+len` must be in bounds and not aliased by another thread.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}
