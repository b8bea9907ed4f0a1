//! Embedding input: positions whose input rows come as embeddings (an image's, an audio
//! clip's, in the model's input space) instead of token lookups. Each such position still
//! has an id in the context's token list, made from a hash of the rows, so that prefix
//! matching, the prefix cache and checkpoints tell one image from another (as llama.cpp's
//! server keys media by their hash); those ids lie past any vocabulary.

use std::sync::atomic::Ordering;

use super::Session;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::models::vision::{EncodedMedia, MediaPart};
use crate::runtime::time::Instant;

/// Where an image goes in a prompt: llama.cpp's mtmd marker, which every front end takes.
pub const MEDIA_MARKER: &str = "<__media__>";

/// Ids from here up stand for embedding rows, never for tokens.
pub const MEDIA_ID_BASE: u32 = 0x8000_0000;

/// Whether `id` stands for an embedding row (see [`media_ids`]).
pub fn is_media_id(id: u32) -> bool {
    id >= MEDIA_ID_BASE
}

/// The context ids of `n` positions whose input rows are `rows`: from a 64-bit FNV-1a hash
/// of the rows' bits, one id per position, all at or past [`MEDIA_ID_BASE`].
pub fn media_ids(rows: &[f32], n: usize) -> Vec<u32> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in rows {
        for b in v.to_bits().to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    (0..n as u64)
        .map(|i| {
            let x = h.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            MEDIA_ID_BASE | (x >> 33) as u32
        })
        .collect()
}

impl Engine {
    /// The input rows the token path gives `tokens` (`[n, n_embd]`, row by row): the
    /// embedding lookup with the scale the architecture applies. Fed back through
    /// [`Session::append_embeddings`] they compute exactly what the tokens do.
    pub fn token_embeddings(&self, tokens: &[u32]) -> Result<Vec<f32>> {
        let e = &self.inner;
        let mut ws = e.take_workspace();
        let mut out = Vec::new();
        let r = e.model.input_rows(&e.dev, &mut ws, tokens, &mut out);
        e.put_workspace(ws);
        r.map(|()| out)
    }

    /// Values per input row (the model's embedding width).
    pub fn n_embd(&self) -> usize {
        self.inner.model.n_embd()
    }
}

impl Session {
    /// Prefills `rows` (`[n, n_embd]`: an image's or an audio clip's embeddings, in the model's
    /// input space) as the next `n` positions, in batches of `n_ubatch`; returns the ids they
    /// hold in the context ([`media_ids`]). Fails before computing anything when the rows are
    /// not whole or do not fit.
    pub fn append_embeddings(&mut self, rows: &[f32]) -> Result<Vec<u32>> {
        let n_embd = self.engine.model.n_embd();
        if rows.is_empty() || n_embd == 0 || !rows.len().is_multiple_of(n_embd) {
            return Err(Error::Model(format!(
                "{} embedding values are not a whole number of rows of {n_embd}",
                rows.len()
            )));
        }
        let n = rows.len() / n_embd;
        let ids = media_ids(rows, n);
        self.make_room(n)?;
        let needed = self.tokens.len() + n;
        if needed > self.n_ctx() {
            return Err(Error::ContextOverflow {
                n_ctx: self.n_ctx(),
                needed,
            });
        }
        self.cancel.store(false, Ordering::Release);
        self.catch_up()?;
        let t0 = Instant::now();
        let before = self.tokens.len();
        let mut at = 0;
        let mut r = Ok(());
        while at < n {
            if self.cancel.swap(false, Ordering::AcqRel) {
                r = Err(Error::Cancelled);
                break;
            }
            let end = (at + self.n_ubatch()).min(n);
            r = self.forward_input(&ids[at..end], Some(&rows[at * n_embd..end * n_embd]), false);
            if r.is_err() {
                break;
            }
            at = end;
        }
        self.pending_prefill += t0.elapsed();
        self.pending_prompt += self.tokens.len().saturating_sub(before);
        r.map(|()| ids)
    }
}

impl Session {
    /// Appends an image as the mmproj's model reads it ([`Mmproj::encode_image`] on this
    /// engine's backend, then [`Session::append_media`]). Returns the positions it took.
    ///
    /// [`Mmproj::encode_image`]: crate::models::vision::Mmproj::encode_image
    pub fn append_image(
        &mut self,
        mmproj: &crate::models::vision::Mmproj,
        img: &crate::media::Rgb8,
    ) -> Result<usize> {
        self.check_width(mmproj)?;
        let enc = mmproj.encode_image(&self.engine.dev, img)?;
        self.append_media(&enc)
    }

    /// Appends encoded media: its marker text (special tokens parsed) and its embedding rows,
    /// in order. Returns the positions it took.
    pub fn append_media(&mut self, media: &EncodedMedia) -> Result<usize> {
        let before = self.tokens.len();
        for p in &media.parts {
            match p {
                MediaPart::Text(t) => self.append_text(t, true)?,
                MediaPart::Embeddings(rows) => {
                    self.append_embeddings(rows)?;
                }
            }
        }
        Ok(self.tokens.len() - before)
    }

    fn check_width(&self, mmproj: &crate::models::vision::Mmproj) -> Result<()> {
        let n_embd = self.engine.model.n_embd();
        if mmproj.n_embd_out() != n_embd {
            return Err(Error::Model(format!(
                "the mmproj's embeddings are {} wide, the model's {n_embd}: a pair made for \
                 another model",
                mmproj.n_embd_out()
            )));
        }
        Ok(())
    }

    /// Prefills `prompt` with `images` at its [`MEDIA_MARKER`]s, in order, as llama.cpp's mtmd
    /// does: the text between them tokenized with special tokens parsed (BOS per the model's
    /// metadata when the context is empty), each image encoded on this engine's backend. The
    /// markers must be as many as the images; all are encoded before anything is appended.
    pub fn append_with_images(
        &mut self,
        prompt: &str,
        mmproj: &crate::models::vision::Mmproj,
        images: &[crate::media::Rgb8],
    ) -> Result<()> {
        self.check_width(mmproj)?;
        marker_count(prompt, images.len())?;
        let enc = images
            .iter()
            .map(|img| mmproj.encode_image(&self.engine.dev, img))
            .collect::<Result<Vec<_>>>()?;
        self.append_with_media(prompt, &enc)
    }

    /// Prefills `prompt` with already encoded `media` at its [`MEDIA_MARKER`]s, in order (see
    /// [`Session::append_with_images`]).
    pub fn append_with_media(&mut self, prompt: &str, media: &[EncodedMedia]) -> Result<()> {
        marker_count(prompt, media.len())?;
        for (i, text) in prompt.split(MEDIA_MARKER).enumerate() {
            if !text.is_empty() {
                self.append_text(text, true)?;
            }
            if let Some(m) = media.get(i) {
                self.append_media(m)?;
            }
        }
        Ok(())
    }
}

/// Fails unless `prompt` has `n` media markers.
fn marker_count(prompt: &str, n: usize) -> Result<()> {
    let have = prompt.matches(MEDIA_MARKER).count();
    if have != n {
        return Err(Error::Media {
            what: "prompt".into(),
            reason: format!("{have} {MEDIA_MARKER} markers for {n} media"),
        });
    }
    Ok(())
}
