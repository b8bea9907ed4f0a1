//! An mmproj GGUF as llama.cpp's mtmd reads it (`general.architecture` `clip`): a vision
//! tower, an audio encoder, or both, each with its projector to the language model's
//! embeddings. Which halves a file has: `clip.has_vision_encoder`, `clip.has_audio_encoder`;
//! their projectors: `clip.vision.projector_type` / `clip.audio.projector_type`, else
//! `clip.projector_type`.

use std::sync::Arc;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::media::Rgb8;
use crate::models::audio::Conformer;
use crate::models::common::media::{EncodedMedia, MediaPart};
use crate::models::vision::{Projector, VisionTower};

/// A loaded mmproj.
pub struct Mmproj {
    pub vision: Option<VisionTower>,
    pub audio: Option<Conformer>,
}

impl Mmproj {
    /// Reads an mmproj file; what it lacks or holds in the wrong shape is named.
    pub fn load(file: Arc<GgufFile>) -> Result<Mmproj> {
        let arch = file.architecture()?;
        if arch != "clip" {
            return Err(Error::Model(format!(
                "general.architecture is '{arch}': an mmproj file says 'clip' (is this the \
                 text model?)"
            )));
        }
        let has_audio = file.get_opt::<bool>("clip.has_audio_encoder")? == Some(true);
        let has_vision = file
            .get_opt::<bool>("clip.has_vision_encoder")?
            .unwrap_or(!has_audio);
        let kind = |k: &str| -> Result<String> {
            let key = format!("clip.{k}.projector_type");
            let key = if file.get(&key).is_some() {
                key
            } else {
                "clip.projector_type".to_owned()
            };
            Ok(file.get_str(&key)?.to_owned())
        };
        let vision = if has_vision {
            let p = Projector::parse(&kind("vision")?)?;
            Some(VisionTower::load(&file, p)?)
        } else {
            None
        };
        let audio = if has_audio {
            match kind("audio")?.as_str() {
                "lfm2a" => Some(Conformer::load(&file)?),
                other => {
                    return Err(Error::Model(format!(
                        "audio projector '{other}' is not supported (supported: lfm2a)"
                    )));
                }
            }
        } else {
            None
        };
        if vision.is_none() && audio.is_none() {
            return Err(Error::Model(
                "the mmproj has neither a vision nor an audio encoder".into(),
            ));
        }
        Ok(Mmproj { vision, audio })
    }

    /// The width of the embeddings it hands the language model (the vision tower's, else the
    /// audio encoder's; a file with both has them equal).
    pub fn n_embd_out(&self) -> usize {
        match (&self.vision, &self.audio) {
            (Some(v), _) => v.n_embd_out(),
            (None, Some(a)) => a.n_embd_out(),
            (None, None) => 0,
        }
    }

    fn vision(&self) -> Result<&VisionTower> {
        self.vision.as_ref().ok_or_else(|| Error::Media {
            what: "image".into(),
            reason: "this mmproj has no vision encoder (it is an audio projector)".into(),
        })
    }

    fn audio(&self) -> Result<&Conformer> {
        self.audio.as_ref().ok_or_else(|| Error::Media {
            what: "audio".into(),
            reason: "this mmproj has no audio encoder (it is a vision projector)".into(),
        })
    }

    /// `img` prepared as its projector's reference does and encoded on `be`.
    pub fn encode_image<B: Backend>(&self, be: &B, img: &Rgb8) -> Result<EncodedMedia> {
        self.vision()?.encode_image(be, img)
    }

    /// 16 kHz mono samples through the audio encoder's front end and encoder on `be`: one
    /// run of embeddings (LFM2-Audio puts no marker text around audio).
    pub fn encode_audio<B: Backend>(&self, be: &B, samples: &[f32]) -> Result<EncodedMedia> {
        let a = self.audio()?;
        let mel = a.mel(samples)?;
        let (rows, n) = a.encode(be, &mel)?;
        Ok(EncodedMedia {
            parts: vec![MediaPart::Embeddings(rows)],
            n_embd_rows: n,
        })
    }

    /// Whether it reads images / audio.
    pub fn has_vision(&self) -> bool {
        self.vision.is_some()
    }

    pub fn has_audio(&self) -> bool {
        self.audio.is_some()
    }
}
