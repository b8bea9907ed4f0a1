//! Going back: `truncate` keeps a prefix of the context. Cached keys and values of the kept
//! tokens stay valid as they are; a recurrent state (LFM2's convolutions) cannot be cut back,
//! so the session keeps copies of it at recent positions (every decode step and the end of
//! each prefill chunk, the last [`SNAPSHOTS`]) and restores the newest one at or before the
//! cut, prefilling again only the tokens between (none when the cut is at a snapshot, as a
//! chat turn or a speculative rollback usually is).

use super::Session;
use crate::error::Result;

/// Convolution snapshots a recurrent session keeps (a few KB each).
pub(crate) const SNAPSHOTS: usize = 48;

impl Session {
    /// Keeps the first `n` tokens (see the module docs for recurrent models).
    pub fn truncate(&mut self, n: usize) {
        if n >= self.tokens.len() {
            return;
        }
        self.tokens.truncate(n);
        self.logits_valid = false;
        if !self.state.is_recurrent() || n == 0 {
            self.replay_from = None;
            self.snaps.clear();
            return;
        }
        // a pending replay already starts somewhere at or before its own point
        let limit = self.replay_from.map_or(n, |r| r.min(n));
        while self.snaps.back().is_some_and(|s| s.pos > limit) {
            self.snaps.pop_back();
        }
        match self.snaps.back() {
            Some(snap) if snap.pos > 0 => {
                let snap = snap.clone();
                let e = &self.engine;
                let st = &mut self.state;
                // restoring a snapshot of this very state cannot fail
                match st.seq.conv.restore(&e.cpu, &mut st.ws.cx, &snap) {
                    Ok(()) => self.replay_from = (snap.pos < n).then_some(snap.pos),
                    Err(_) => self.replay_from = Some(0),
                }
            }
            _ => self.replay_from = Some(0),
        }
    }

    /// Whether appending now needs a re-prefill first, and from where.
    pub fn pending_replay(&self) -> Option<usize> {
        self.replay_from
    }

    /// After a truncate on a model with recurrent state: prefills again the tokens after the
    /// restored snapshot, so the state matches `tokens` before anything new is appended.
    pub(crate) fn catch_up(&mut self) -> Result<()> {
        let Some(from) = self.replay_from else {
            return Ok(());
        };
        let replay: Vec<u32> = self.tokens.drain(from..).collect();
        if from == 0 {
            self.snaps.clear();
        }
        self.replay_from = None;
        for chunk in replay.chunks(self.n_ubatch) {
            if let Err(e) = self.forward(chunk, false) {
                // leave the session consistent: what was not replayed is gone
                self.logits_valid = false;
                return Err(e);
            }
        }
        Ok(())
    }

    /// After every forward pass: a recurrent model keeps a copy of its state here.
    pub(crate) fn after_forward(&mut self) {
        if !self.state.is_recurrent() {
            return;
        }
        let mut snap = if self.snaps.len() >= SNAPSHOTS {
            self.snaps.pop_front().unwrap_or_default()
        } else {
            Default::default()
        };
        let e = &self.engine;
        let st = &mut self.state;
        st.seq.conv.snapshot_into(&e.cpu, &mut st.ws.cx, &mut snap);
        self.snaps.push_back(snap);
    }
}
