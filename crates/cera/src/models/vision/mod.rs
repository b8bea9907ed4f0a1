//! Vision encoders: an mmproj file (llama.cpp's mtmd format) turns an image into rows of
//! embeddings the language model reads in place of tokens (`decode::Chunk::Embeddings`).
//! `mmproj.rs` loads the file, `siglip.rs` runs the SigLIP tower and the projectors on any
//! backend; `lfm2.rs` and `idefics3.rs` prepare an image as mtmd does for LFM2-VL and for
//! Idefics3 / SmolVLM (the resizes, the tiles or slices and the whole image, the marker tokens
//! between them).
//!
//! Why Idefics3 (SmolVLM) as the second family: its tower is the same SigLIP ViT block for
//! block (LFM2-VL's NaFlex variant only resizes the position embeddings) and its projector the
//! same pixel shuffle (mtmd's `build_patch_merge_permute` for both), so everything but a
//! bias-free Linear and the preprocessing is shared; and SmolVLM (256M, 500M) is the vision
//! model users pair with small language models. Qwen2.5-VL would need 2D RoPE and window
//! attention, Gemma 3 a 400M tower and pooling, InternVL its own pixel shuffle and MLP.

pub mod idefics3;
pub mod lfm2;
pub mod mmproj;
pub mod siglip;

pub use crate::models::common::media::{EncodedMedia, MediaPart};
pub use mmproj::{Projector, VisionHparams, VisionTower};

use crate::backend::Backend;
use crate::error::Result;
use crate::media::Rgb8;

/// A part of the prompt an image becomes, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    /// Marker text (special tokens, parsed as such), tokenized on its own.
    Text(String),
    /// An image at the encoder's size.
    Image(Rgb8),
}

impl VisionTower {
    /// `img` prepared as its projector's reference does (LFM2-VL: a thumbnail within the
    /// token bounds, large images also as tiles) and each image part encoded on `be`.
    pub fn encode_image<B: Backend>(&self, be: &B, img: &Rgb8) -> Result<EncodedMedia> {
        let pieces = self.prepare(img)?;
        let mut parts = Vec::with_capacity(pieces.len());
        let mut n_embd_rows = 0;
        for p in pieces {
            parts.push(match p {
                Piece::Text(t) => MediaPart::Text(t),
                Piece::Image(part) => {
                    let px = part.normalized(self.hp.image_mean, self.hp.image_std);
                    let (rows, n) = self.encode(be, &px, part.width, part.height)?;
                    n_embd_rows += n;
                    MediaPart::Embeddings(rows)
                }
            });
        }
        Ok(EncodedMedia { parts, n_embd_rows })
    }

    /// The pieces `img` becomes for this projector (the resizes, tiles or slices, markers),
    /// before any is normalized or encoded: mtmd's preprocessing.
    pub fn prepare(&self, img: &Rgb8) -> Result<Vec<Piece>> {
        Ok(match self.projector {
            Projector::Lfm2 => lfm2::prepare(img, &self.hp),
            Projector::Idefics3 => idefics3::prepare(img, &self.hp)?,
        })
    }
}
