//! The context shift (off by default; [`crate::engine::SessionOptions::context_shift`]): when
//! the context fills, keep the first `n_keep` tokens (plus BOS), discard half of the rest, move
//! the remainder down and rotate its cached keys back to their new positions, as llama.cpp's
//! `--context-shift` does. The model then attends over a context it never saw whole, so the
//! output is not what a fresh prefill would give; that is the trade the flag makes. Without it
//! an overflow is the typed [`crate::Error::ContextOverflow`] error.

use super::Session;
use crate::error::{Error, Result};

impl Session {
    /// Turns the context shift on (keeping `n_keep` tokens after BOS) or off.
    pub fn set_context_shift(&mut self, n_keep: Option<usize>) {
        self.shift_keep = n_keep;
    }

    /// Shifts the context (if on) until `n_new` more tokens leave a free cell, the rule
    /// llama.cpp applies before each batch (`n_past + n_new >= n_ctx`).
    pub(crate) fn make_room(&mut self, n_new: usize) -> Result<()> {
        if self.shift_keep.is_none() {
            return Ok(());
        }
        while self.tokens.len() + n_new >= self.n_ctx() && self.tokens.len() > self.n_keep_total() {
            let before = self.tokens.len();
            self.shift_context()?;
            if self.tokens.len() == before {
                break;
            }
        }
        Ok(())
    }

    /// Tokens the shift never drops: `n_keep`, plus the BOS token when the model adds one.
    fn n_keep_total(&self) -> usize {
        let bos = self.engine.tokenizer.add_bos() as usize;
        (self.shift_keep.unwrap_or(0) + bos).min(self.tokens.len())
    }

    /// One shift: discards half of the tokens after the kept ones. Returns how many went.
    pub fn shift_context(&mut self) -> Result<usize> {
        self.catch_up()?;
        let n_past = self.tokens.len();
        let keep = self.n_keep_total();
        let n_discard = (n_past - keep) / 2;
        if n_discard == 0 {
            return Err(Error::ContextShift(format!(
                "nothing to discard: the context holds {n_past} tokens and {keep} are kept"
            )));
        }
        let e = &self.engine;
        let ropes = e.model.layer_ropes();
        for (kv, rope) in self.state.seq.kv.iter_mut().zip(ropes) {
            crate::backend::Backend::kv_shift(&e.dev, kv, keep, n_discard, n_past, rope);
        }
        self.tokens.drain(keep..keep + n_discard);
        // the convolution state holds the last inputs, which are still the last tokens
        self.state.seq.conv.n_past = self.tokens.len();
        self.snaps.clear();
        self.n_shifts += 1;
        Ok(n_discard)
    }
}
