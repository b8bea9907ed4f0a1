//! Vision encoders: an mmproj file (llama.cpp's mtmd format) turns an image into rows of
//! embeddings the language model reads in place of tokens (`decode::Chunk::Embeddings`).
//! `mmproj.rs` loads the file, `siglip.rs` runs the SigLIP tower and LFM2-VL's projector on
//! any backend, `lfm2.rs` prepares an image as mtmd does for LFM2-VL (the resize within the
//! token bounds, tiles and a thumbnail for large images, the marker tokens between them).

pub mod lfm2;
pub mod mmproj;
pub mod siglip;

pub use crate::models::common::media::{EncodedMedia, MediaPart};
pub use mmproj::{Projector, VisionHparams, VisionTower};

use crate::backend::Backend;
use crate::error::Result;
use crate::media::Rgb8;

impl VisionTower {
    /// `img` prepared as its projector's reference does (LFM2-VL: a thumbnail within the
    /// token bounds, large images also as tiles) and each image part encoded on `be`.
    pub fn encode_image<B: Backend>(&self, be: &B, img: &Rgb8) -> Result<EncodedMedia> {
        let pieces = match self.projector {
            Projector::Lfm2 => lfm2::prepare(img, &self.hp),
        };
        let mut parts = Vec::with_capacity(pieces.len());
        let mut n_embd_rows = 0;
        for p in pieces {
            parts.push(match p {
                lfm2::Piece::Text(t) => MediaPart::Text(t),
                lfm2::Piece::Image(part) => {
                    let px = part.normalized(self.hp.image_mean, self.hp.image_std);
                    let (rows, n) = self.encode(be, &px, part.width, part.height)?;
                    n_embd_rows += n;
                    MediaPart::Embeddings(rows)
                }
            });
        }
        Ok(EncodedMedia { parts, n_embd_rows })
    }
}
