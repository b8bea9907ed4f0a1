//! Cera: a Rust-native LLM inference engine for GGUF models.
//!
//! The modules follow the pipeline: [`gguf`] reads and writes the container, [`quant`] knows
//! every ggml tensor type, [`tokenizer`] turns text into token ids and back, and [`fetch`] brings
//! models into the local cache.

pub mod error;
pub mod fetch;
pub mod gguf;
pub mod keys;
pub mod quant;
pub mod tokenizer;

pub use error::{Error, Result};
