//! Checkpoints of a session: its tokens, logits, KV cache and recurrent state as bytes (format:
//! [`crate::state::checkpoint`]), to memory or to a file written atomically. A restore
//! continues bit-identically: the next logits equal those of the uninterrupted session.

use std::path::Path;

use super::Session;
use crate::error::{Error, Result};
use crate::state::checkpoint::{self, Header, Kind};
use crate::state::snapshot;

/// A checkpoint file mapped read-only (restoring reads it once, straight into the cache).
pub(crate) fn map_file(path: &Path) -> Result<memmap2::Mmap> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // SAFETY: the map is read-only and lives only while this restore reads it; checkpoints
    // are written by rename, so the file mapped is never rewritten in place
    unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::io(path, e))
}

impl Session {
    /// The session's whole state as a checkpoint. A pending re-prefill (after a truncate on a
    /// recurrent model) runs first, so the saved state matches the tokens.
    pub fn checkpoint(&mut self) -> Result<Vec<u8>> {
        self.checkpoint_with(Kind::Session, &[])
    }

    pub(crate) fn checkpoint_with(&mut self, kind: Kind, app: &[u8]) -> Result<Vec<u8>> {
        self.catch_up()?;
        let n = self.tokens.len();
        let h = Header {
            version: checkpoint::FORMAT_VERSION,
            kind,
            fingerprint: self.state_fingerprint(),
            kv_types: self.kv_types,
            n_ctx: self.n_ctx(),
            n_tokens: n,
            logits_valid: self.logits_valid,
            shifted: self.n_shifts > 0,
        };
        let mut w = checkpoint::begin(&h);
        w.u32s(&self.tokens);
        w.f32s(if self.logits_valid { &self.logits } else { &[] });
        let e = &self.engine;
        snapshot::write_kv(&e.dev, &self.state.seq.kv, n, &mut w);
        if self.state.is_recurrent() {
            w.u8(1);
            let st = &mut self.state;
            let snap = st.seq.conv.snapshot(&e.dev, &mut st.ws.cx);
            snapshot::write_conv(&snap, &mut w);
        } else {
            w.u8(0);
        }
        w.bytes(app);
        Ok(checkpoint::finish(w))
    }

    /// [`Session::checkpoint`] to `path`, atomically (the old file stays whole until the new
    /// one is complete).
    pub fn save_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let bytes = self.checkpoint()?;
        crate::state::atomic_write(path.as_ref(), &bytes)
    }

    /// Replaces the context with a checkpoint's (of this model, with this session's KV cache
    /// types, fitting its context). On an error the session is left empty, never half
    /// restored.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.restore_with(bytes, "checkpoint").map(|_| ())
    }

    /// [`Session::restore`] from a file.
    pub fn load_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = map_file(path)?;
        let what = format!("checkpoint {}", path.display());
        self.restore_with(&bytes, &what).map(|_| ())
    }

    /// Restores and returns the header and the app data (a chat's conversation).
    pub(crate) fn restore_with(&mut self, bytes: &[u8], what: &str) -> Result<(Header, Vec<u8>)> {
        self.reset();
        let (h, mut r) = checkpoint::open(bytes, what)?;
        checkpoint::check_fits(
            &h,
            what,
            self.state_fingerprint(),
            self.kv_types,
            self.n_ctx(),
        )?;
        let r = self.restore_body(&h, &mut r);
        if r.is_err() {
            self.reset();
        }
        r.map(|app| (h, app))
    }

    fn restore_body(&mut self, h: &Header, r: &mut crate::state::codec::Reader) -> Result<Vec<u8>> {
        let tokens = r.u32s("tokens")?;
        if tokens.len() != h.n_tokens {
            return Err(r.error(format!(
                "{} tokens in the body, the header says {}",
                tokens.len(),
                h.n_tokens
            )));
        }
        let n_vocab = self.engine.model.n_vocab();
        if let Some(&bad) = tokens
            .iter()
            .find(|&&t| t as usize >= n_vocab && !super::is_media_id(t))
        {
            return Err(r.error(format!("token id {bad} is past the vocabulary ({n_vocab})")));
        }
        let logits = r.f32s("logits")?;
        let want = if h.logits_valid { n_vocab } else { 0 };
        if logits.len() != want {
            return Err(r.error(format!("{} logits, expected {want}", logits.len())));
        }
        let e = std::sync::Arc::clone(&self.engine);
        snapshot::read_kv(&e.dev, &mut self.state.seq.kv, tokens.len(), r)?;
        match (r.u8("convolution flag")?, self.state.is_recurrent()) {
            (0, false) => {}
            (1, true) => {
                let snap = snapshot::read_conv(r)?;
                if snap.pos != tokens.len() {
                    return Err(r.error(format!(
                        "the convolution state is at position {}, the context has {} tokens",
                        snap.pos,
                        tokens.len()
                    )));
                }
                let st = &mut self.state;
                st.seq
                    .conv
                    .restore(&e.dev, &mut st.ws.cx, &snap)
                    .map_err(|err| r.error(err.to_string()))?;
            }
            (f, rec) => {
                return Err(r.error(format!(
                    "convolution flag {f} for a model {} recurrent state",
                    if rec { "with" } else { "without" }
                )));
            }
        }
        let app = r.bytes("app data")?.to_vec();
        r.finish()?;
        self.tokens.extend_from_slice(&tokens);
        self.logits = logits;
        self.logits_valid = h.logits_valid;
        self.n_shifts = h.shifted as usize;
        self.state.seq.conv.n_past = self.tokens.len();
        self.after_forward();
        Ok(app)
    }
}
