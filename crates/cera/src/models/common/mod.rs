//! Blocks shared by the architectures: the dense decoder layer stack and its hyperparameters,
//! and what the media encoders share.

pub mod decoder;
pub mod hparams;
pub mod load;
pub mod media;
pub mod shortconv;

pub use decoder::{Decoder, DecoderConfig, FfnAct, LayerWeights, NormPlacement, QkNorm};
pub use hparams::BaseHparams;
