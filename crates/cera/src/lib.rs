//! Cera: a Rust-native LLM inference engine for GGUF models.
//!
//! The modules follow the pipeline: [`gguf`] reads and writes the container, [`quant`] knows
//! every ggml tensor type, [`kernels`] holds the SIMD dot products behind one runtime-chosen
//! table, [`backend`] the ops models are written against, [`models`] the architectures,
//! [`tokenizer`] and [`chat`] turn text into tokens and conversations into prompts, [`sample`]
//! picks tokens ([`grammar`] constrains it to GBNF grammars and JSON Schemas; [`tools`] renders
//! tool definitions and reads tool calls back), and [`engine`] / [`session`] tie it together;
//! [`batch`] runs several sessions in one forward step. [`fetch`] brings models into the local
//! cache.
//!
//! Below both `quant` and `kernels` sits the crate-private `simd` module, the x86 and NEON
//! building blocks the per-format SIMD kernels share, so the imports run `kernels` → `quant` →
//! `simd` and never back up.

pub mod backend;
pub mod batch;
pub mod chat;
pub mod convert;
pub mod decode;
pub mod embed;
pub mod engine;
pub mod error;
pub mod fetch;
pub mod gguf;
pub mod grammar;
#[cfg(feature = "hub")]
pub mod hub;
pub mod kernels;
pub mod keys;
pub mod lora;
pub mod media;
pub mod models;
pub mod quant;
pub mod runtime;
pub mod safetensors;
pub mod sample;
pub mod session;
pub(crate) mod simd;
pub mod spec;
pub mod state;
pub mod tokenizer;
pub mod tools;
pub mod transcribe;

pub use error::{Error, ErrorKind, Result};
