//! Vision encoders: an mmproj file (llama.cpp's mtmd format) turns an image into rows of
//! embeddings the language model reads in place of tokens (`decode::Chunk::Embeddings`).
//! `mmproj.rs` loads the file, `siglip.rs` runs the SigLIP tower and LFM2-VL's projector on
//! any backend, `lfm2.rs` prepares an image as mtmd does for LFM2-VL (the resize within the
//! token bounds, tiles and a thumbnail for large images, the marker tokens between them).

pub mod lfm2;
pub mod mmproj;
pub mod siglip;

pub use mmproj::{Mmproj, Projector, VisionHparams};
