//! Execution runtime: the thread pool that kernels run on.

pub mod threadpool;

pub use threadpool::ThreadPool;
