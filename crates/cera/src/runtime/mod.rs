//! Execution runtime: the thread pool that kernels run on, and clocks for every target.

pub mod threadpool;
pub mod time;
pub mod topology;

pub use threadpool::ThreadPool;
