//! What the media encoders (`models/vision/`, `models/audio/`) share: a linear layer with a
//! bias, and the prompt parts an image or audio clip becomes.

use crate::backend::Weight;

/// `[in, out]` weight and its bias.
pub struct Linear {
    pub w: Weight,
    pub b: Vec<f32>,
}

/// A part of the prompt an image or an audio clip becomes, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum MediaPart {
    /// Marker text between the parts (special tokens, parsed as such).
    Text(String),
    /// Rows of embeddings in the language model's input space: `[n, n_embd]`.
    Embeddings(Vec<f32>),
}

/// Media as its mmproj turns it into prompt parts, ready to append to any session of a model
/// of its width (encode once, append to as many sessions as need it).
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedMedia {
    pub parts: Vec<MediaPart>,
    /// Positions it takes in the context besides its marker text.
    pub n_embd_rows: usize,
}
