//! Cera: a Rust-native LLM inference engine for GGUF models.
//!
//! The modules follow the pipeline: [`gguf`] reads and writes the container, [`quant`] knows
//! every ggml tensor type, and [`fetch`] brings models into the local cache.

pub mod chat;
pub mod error;
pub mod fetch;
pub mod gguf;
pub mod keys;
pub mod quant;

pub use error::{Error, Result};
pub mod backend;
pub mod kernels;
pub mod models;
pub mod runtime;
pub mod sample;
