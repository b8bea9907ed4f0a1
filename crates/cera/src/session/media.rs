//! Embedding input: positions whose input rows come as embeddings (an image's, an audio
//! clip's, in the model's input space) instead of token lookups. Each such position still
//! has an id in the context's token list, made from a hash of the rows, so that prefix
//! matching, the prefix cache and checkpoints tell one image from another (as llama.cpp's
//! server keys media by their hash); those ids lie past any vocabulary.

use std::sync::atomic::Ordering;

use super::Session;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::runtime::time::Instant;

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
    /// Appends an image as the mmproj's model reads it: the image prepared as its projector's
    /// reference does (LFM2-VL: a thumbnail within the token bounds, large images also as
    /// tiles), each part encoded by the vision tower on this engine's backend and appended as
    /// embedding rows, between the marker tokens of its template. Returns the positions it
    /// took. The tower's output must be as wide as the model's embeddings.
    pub fn append_image(
        &mut self,
        mmproj: &crate::models::vision::Mmproj,
        img: &crate::media::Rgb8,
    ) -> Result<usize> {
        use crate::models::vision::{Projector, lfm2};
        let n_embd = self.engine.model.n_embd();
        if mmproj.n_embd_out() != n_embd {
            return Err(Error::Model(format!(
                "the mmproj's embeddings are {} wide, the model's {n_embd}: a pair made for \
                 another model",
                mmproj.n_embd_out()
            )));
        }
        let pieces = match mmproj.projector {
            Projector::Lfm2 => lfm2::prepare(img, &mmproj.hp),
        };
        let before = self.tokens.len();
        for p in pieces {
            match p {
                lfm2::Piece::Text(t) => self.append_text(&t, true)?,
                lfm2::Piece::Image(part) => {
                    let px = part.normalized(mmproj.hp.image_mean, mmproj.hp.image_std);
                    let (rows, _) =
                        mmproj.encode(&self.engine.dev, &px, part.width, part.height)?;
                    self.append_embeddings(&rows)?;
                }
            }
        }
        Ok(self.tokens.len() - before)
    }
}
