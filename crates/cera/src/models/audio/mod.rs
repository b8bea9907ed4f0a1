//! Audio encoders: the audio half of an mmproj file (llama.cpp's mtmd format) turns 16 kHz
//! samples into rows of embeddings the language model reads in place of tokens.
//! `conformer.rs` is LFM2-Audio's FastConformer and adapter; the log-mel front end it reads
//! is `media::mel`.

pub mod conformer;

pub use conformer::{AudioHparams, Conformer, SAMPLE_RATE};
