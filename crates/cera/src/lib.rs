//! Cera: a Rust-native LLM inference engine for GGUF models.
//!
//! The modules follow the pipeline: [`gguf`] reads and writes the container, [`quant`] knows
//! every ggml tensor type, [`kernels`] holds the CPU dot-product kernels picked at run time, and
//! [`fetch`] brings models into the local cache.

pub mod error;
pub mod fetch;
pub mod gguf;
pub mod kernels;
pub mod keys;
pub mod quant;

pub use error::{Error, Result};
