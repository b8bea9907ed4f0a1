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

/// A prompt's positions in order: a run of tokens, or rows of embeddings (`[n, n_embd]`,
/// borrowed from the encoded media).
#[derive(Clone, Debug, PartialEq)]
pub enum PromptPiece<'a> {
    Tokens(Vec<u32>),
    Rows(&'a [f32]),
}

impl Engine {
    /// Loads the vision or audio projector made for this model (an mmproj GGUF), refusing one
    /// whose embeddings are not as wide as the model's.
    pub fn load_mmproj(&self, path: impl AsRef<std::path::Path>) -> Result<crate::models::Mmproj> {
        let file = crate::gguf::GgufFile::open(path)?;
        let m = crate::models::Mmproj::load(std::sync::Arc::new(file))?;
        self.check_mmproj(&m)?;
        Ok(m)
    }

    /// [`Engine::load_mmproj`] on a whole file's bytes (where there is no file system: the
    /// WebAssembly build).
    pub fn load_mmproj_bytes(&self, bytes: Vec<u8>) -> Result<crate::models::Mmproj> {
        let file = crate::gguf::GgufFile::from_bytes(bytes)?;
        let m = crate::models::Mmproj::load(std::sync::Arc::new(file))?;
        self.check_mmproj(&m)?;
        Ok(m)
    }

    fn check_mmproj(&self, mmproj: &crate::models::Mmproj) -> Result<()> {
        let n_embd = self.inner.model.n_embd();
        if mmproj.n_embd_out() != n_embd {
            return Err(Error::Model(format!(
                "the mmproj's embeddings are {} wide, the model's {n_embd}: a pair made for \
                 another model",
                mmproj.n_embd_out()
            )));
        }
        Ok(())
    }

    /// `img` as `mmproj` turns it into prompt parts, encoded on this engine's backend (see
    /// [`Mmproj::encode_image`]); fails when the mmproj is not as wide as the model's
    /// embeddings. Safe beside running sessions: the backend's work is queued between theirs.
    ///
    /// [`Mmproj::encode_image`]: crate::models::Mmproj::encode_image
    pub fn encode_image(
        &self,
        mmproj: &crate::models::Mmproj,
        img: &crate::media::Rgb8,
    ) -> Result<EncodedMedia> {
        self.check_mmproj(mmproj)?;
        mmproj.encode_image(&self.inner.dev, img)
    }

    /// 16 kHz mono `samples` as `mmproj`'s audio encoder turns them into prompt parts (see
    /// [`Mmproj::encode_audio`]), on this engine's backend; fails when the mmproj has no
    /// audio encoder or is not as wide as the model's embeddings.
    ///
    /// [`Mmproj::encode_audio`]: crate::models::Mmproj::encode_audio
    pub fn encode_audio(
        &self,
        mmproj: &crate::models::Mmproj,
        samples: &[f32],
    ) -> Result<EncodedMedia> {
        self.check_mmproj(mmproj)?;
        mmproj.encode_audio(&self.inner.dev, samples)
    }

    /// An image or an audio clip through `mmproj` ([`Engine::encode_image`],
    /// [`Engine::encode_audio`]).
    pub fn encode_media(
        &self,
        mmproj: &crate::models::Mmproj,
        media: &crate::media::MediaInput,
    ) -> Result<EncodedMedia> {
        match media {
            crate::media::MediaInput::Image(img) => self.encode_image(mmproj, img),
            crate::media::MediaInput::Audio(s) => self.encode_audio(mmproj, s),
        }
    }

    /// `prompt` with `media` at its [`MEDIA_MARKER`]s, in order, as llama.cpp's mtmd
    /// tokenizes it: the text between them and the media's marker text with special tokens
    /// parsed (BOS per the model's metadata first, when `add_bos`), the media's rows where
    /// they go; adjacent token runs merged. The markers must be as many as the media.
    pub fn media_prompt<'a>(
        &self,
        prompt: &str,
        media: &'a [EncodedMedia],
        add_bos: bool,
    ) -> Result<Vec<PromptPiece<'a>>> {
        let have = prompt.matches(MEDIA_MARKER).count();
        if have != media.len() {
            return Err(Error::Media {
                what: "prompt".into(),
                reason: format!("{have} {MEDIA_MARKER} markers for {} media", media.len()),
            });
        }
        let tok = &self.inner.tokenizer;
        let mut out: Vec<PromptPiece<'a>> = Vec::new();
        let mut first = add_bos;
        let mut text = |out: &mut Vec<PromptPiece<'a>>, t: &str| {
            if t.is_empty() {
                return;
            }
            let ids = tok.encode(t, std::mem::take(&mut first), true);
            match out.last_mut() {
                Some(PromptPiece::Tokens(run)) => run.extend(ids),
                _ => out.push(PromptPiece::Tokens(ids)),
            }
        };
        for (i, t) in prompt.split(MEDIA_MARKER).enumerate() {
            text(&mut out, t);
            for p in media.get(i).map_or(&[][..], |m| &m.parts[..]) {
                match p {
                    MediaPart::Text(t) => text(&mut out, t),
                    MediaPart::Embeddings(rows) => out.push(PromptPiece::Rows(rows)),
                }
            }
        }
        Ok(out)
    }
}

impl Session {
    /// The engine this session runs on.
    pub fn engine(&self) -> Engine {
        Engine {
            inner: std::sync::Arc::clone(&self.engine),
        }
    }

    /// Appends an image as the mmproj's model reads it ([`Engine::encode_image`], then
    /// [`Session::append_media`]). Returns the positions it took.
    pub fn append_image(
        &mut self,
        mmproj: &crate::models::Mmproj,
        img: &crate::media::Rgb8,
    ) -> Result<usize> {
        let enc = self.engine().encode_image(mmproj, img)?;
        self.append_media(&enc)
    }

    /// Appends an audio clip (16 kHz mono samples) as the mmproj's model reads it
    /// ([`Engine::encode_audio`], then [`Session::append_media`]). Returns the positions it
    /// took.
    pub fn append_audio(
        &mut self,
        mmproj: &crate::models::Mmproj,
        samples: &[f32],
    ) -> Result<usize> {
        // a clip longer than the whole context is refused before it is encoded (its encoder
        // grows with the square of its length)
        if let Some(a) = &mmproj.audio {
            let n = a.n_tokens_for(samples.len());
            if n > self.n_ctx() {
                return Err(Error::ContextOverflow {
                    n_ctx: self.n_ctx(),
                    needed: self.tokens.len() + n,
                });
            }
        }
        let enc = self.engine().encode_audio(mmproj, samples)?;
        self.append_media(&enc)
    }

    /// Appends encoded media: its marker text (special tokens parsed) and its embedding rows,
    /// in order. Returns the positions it took.
    pub fn append_media(&mut self, media: &EncodedMedia) -> Result<usize> {
        let before = self.tokens.len();
        self.append_with_media(MEDIA_MARKER, std::slice::from_ref(media))?;
        Ok(self.tokens.len() - before)
    }

    /// Prefills `prompt` with `images` at its [`MEDIA_MARKER`]s, in order, as llama.cpp's mtmd
    /// does (see [`Engine::media_prompt`]; BOS when the context is empty), each image encoded
    /// on this engine's backend, all before anything is appended.
    pub fn append_with_images(
        &mut self,
        prompt: &str,
        mmproj: &crate::models::Mmproj,
        images: &[crate::media::Rgb8],
    ) -> Result<()> {
        let have = prompt.matches(MEDIA_MARKER).count();
        if have != images.len() {
            return Err(Error::Media {
                what: "prompt".into(),
                reason: format!("{have} {MEDIA_MARKER} markers for {} images", images.len()),
            });
        }
        let engine = self.engine();
        let enc = images
            .iter()
            .map(|img| engine.encode_image(mmproj, img))
            .collect::<Result<Vec<_>>>()?;
        self.append_with_media(prompt, &enc)
    }

    /// Prefills `prompt` with already encoded `media` at its [`MEDIA_MARKER`]s (see
    /// [`Engine::media_prompt`]; BOS when the context is empty).
    pub fn append_with_media(&mut self, prompt: &str, media: &[EncodedMedia]) -> Result<()> {
        let engine = self.engine();
        for piece in engine.media_prompt(prompt, media, self.tokens.is_empty())? {
            match piece {
                PromptPiece::Tokens(t) => self.append_tokens(&t)?,
                PromptPiece::Rows(r) => {
                    self.append_embeddings(r)?;
                }
            }
        }
        Ok(())
    }
}

impl Session {
    /// [`Session::prefill`] for a prompt of tokens and media rows ([`Engine::media_prompt`]):
    /// the longest prefix shared with the context (or `cache`) is kept, media positions
    /// matched by the hash of their rows, and only the rest is computed.
    pub fn prefill_pieces(
        &mut self,
        pieces: &[PromptPiece<'_>],
        cache: Option<&crate::state::PrefixCache>,
    ) -> Result<super::PrefillReport> {
        let t0 = Instant::now();
        let n_embd = self.engine.model.n_embd();
        let mut ids = Vec::new();
        for p in pieces {
            match p {
                PromptPiece::Tokens(t) => ids.extend_from_slice(t),
                PromptPiece::Rows(r) => ids.extend(media_ids(r, r.len() / n_embd.max(1))),
            }
        }
        let mut rep = self.reuse_prefix(&ids, cache)?;
        let mut at = 0;
        for p in pieces {
            let have = self.tokens.len();
            match p {
                PromptPiece::Tokens(t) => {
                    if at + t.len() > have {
                        self.append_tokens(&t[have.max(at) - at..])?;
                    }
                    at += t.len();
                }
                PromptPiece::Rows(r) => {
                    let n = r.len() / n_embd.max(1);
                    if at + n > have {
                        self.append_embeddings(&r[(have.max(at) - at) * n_embd..])?;
                    }
                    at += n;
                }
            }
        }
        if let Some(c) = cache
            && rep.prefilled > 0
        {
            self.store_prefix(c)?;
        }
        rep.time = t0.elapsed();
        Ok(rep)
    }
}
