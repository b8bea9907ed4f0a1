//! Going back: `truncate` keeps a prefix of the context. Cached keys and values of the kept
//! tokens stay valid as they are; a recurrent state (LFM2's convolutions) cannot be cut back,
//! so the session keeps copies of it ([`Snapshots`]): after each of the last [`RECENT`]
//! forward passes (every decode step), and at every multiple of [`EVERY`] positions of the
//! context (prefill chunks of a recurrent model end there: 64-token chunks cost nothing
//! against 512-token ones), thinned to every other one when more than [`SPARSE`] pile up.
//! Snapshots stay in backend memory (no read back after each decode step on a GPU).
//! `truncate` restores the newest snapshot at or before the cut and prefills again only the
//! tokens between: none when the cut is at a snapshot, as a chat turn or a speculative
//! rollback usually is, at most `EVERY` - 1 otherwise. The prefix cache stores the same
//! snapshots with an entry, so a recurrent model resumes within `EVERY` tokens of any shared
//! prefix.

use std::collections::VecDeque;

use super::Session;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::models::KeptState;

/// Snapshots after the most recent forward passes.
pub(crate) const RECENT: usize = 32;
/// Positions between the snapshots kept along the whole context.
pub(crate) const EVERY: usize = 64;
/// Snapshots along the context at most (then every other one goes).
pub(crate) const SPARSE: usize = 64;

/// A recurrent session's convolution snapshots (a few KB each).
#[derive(Clone, Default)]
pub(crate) struct Snapshots {
    recent: VecDeque<KeptState>,
    /// Ascending positions, multiples of `EVERY` (times a power of two after thinning).
    sparse: Vec<KeptState>,
    /// The spacing of `sparse` now.
    spacing: usize,
}

impl Snapshots {
    pub fn clear(&mut self) {
        self.recent.clear();
        self.sparse.clear();
        self.spacing = EVERY;
    }

    /// A buffer to take the next snapshot into (the oldest recent one, reused).
    fn spare(&mut self) -> KeptState {
        if self.recent.len() >= RECENT {
            self.recent.pop_front().unwrap_or_default()
        } else {
            KeptState::default()
        }
    }

    pub fn push(&mut self, snap: KeptState) {
        if self.spacing == 0 {
            self.spacing = EVERY;
        }
        if snap.pos > 0
            && snap.pos.is_multiple_of(self.spacing)
            && self.sparse.last().is_none_or(|s| s.pos < snap.pos)
        {
            self.sparse.push(snap.clone());
            if self.sparse.len() > SPARSE {
                self.spacing *= 2;
                let sp = self.spacing;
                self.sparse.retain(|s| s.pos.is_multiple_of(sp));
            }
        }
        self.recent.push_back(snap);
        while self.recent.len() > RECENT {
            self.recent.pop_front();
        }
    }

    /// Drops the snapshots past position `n`.
    pub fn drop_after(&mut self, n: usize) {
        while self.recent.back().is_some_and(|s| s.pos > n) {
            self.recent.pop_back();
        }
        self.recent.retain(|s| s.pos <= n);
        self.sparse.retain(|s| s.pos <= n);
    }

    /// The newest snapshot at or before `n` (position > 0).
    pub fn at_or_before(&self, n: usize) -> Option<&KeptState> {
        self.iter()
            .filter(|s| s.pos <= n && s.pos > 0)
            .max_by_key(|s| s.pos)
    }

    /// Every snapshot, each position once.
    pub fn iter(&self) -> impl Iterator<Item = &KeptState> {
        let recent = &self.recent;
        self.sparse
            .iter()
            .filter(move |s| !recent.iter().any(|r| r.pos == s.pos))
            .chain(recent.iter())
    }
}

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
        self.snaps.drop_after(limit);
        match self.snaps.at_or_before(limit).cloned() {
            Some(snap) => {
                let e = &self.engine;
                let st = &mut self.state;
                // restoring a snapshot of this very state cannot fail
                let r = st.seq.conv.restore_kept(&e.dev, &mut st.ws.cx, &snap);
                e.dev.finish(&mut st.ws.cx);
                match r {
                    Ok(()) => self.replay_from = (snap.pos < n).then_some(snap.pos),
                    Err(_) => self.replay_from = Some(0),
                }
            }
            None => self.replay_from = Some(0),
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
        if let Some(i) = self.tokens[from..]
            .iter()
            .position(|&t| super::is_media_id(t))
        {
            // the rows are not kept: what follows them cannot be computed again
            return Err(Error::Model(format!(
                "the recurrent state cannot be rebuilt over embedding input (position {}); \
                 prefill the context again",
                from + i
            )));
        }
        let replay: Vec<u32> = self.tokens.drain(from..).collect();
        if from == 0 {
            self.snaps.clear();
        }
        self.replay_from = None;
        if let Err(e) = self.forward_chunks(&replay, false, &mut Vec::new()) {
            // leave the session consistent: what was not replayed is gone
            self.logits_valid = false;
            return Err(e);
        }
        Ok(())
    }

    /// Where the chunk that starts at `pos` ends: every `n_ubatch` tokens, and for a
    /// recurrent model on the CPU also at each multiple of [`EVERY`] (where snapshots are
    /// kept). Not on a GPU: there a step's cost is mostly per dispatch, not per token, and
    /// 64-token chunks made LFM2-350M's 512-token prefill eight passes (H200: 8.9k t/s, the
    /// device busy a third of the time); its snapshots fall at chunk ends, and a rewind
    /// replays up to a chunk.
    pub(crate) fn chunk_end(&self, pos: usize, end: usize) -> usize {
        let mut e = (pos + self.n_ubatch()).min(end);
        if self.state.is_recurrent() && self.engine.dev.as_cpu().is_some() {
            e = e.min((pos / EVERY + 1) * EVERY);
        }
        e
    }

    /// After every forward pass: a recurrent model keeps a copy of its state here.
    pub(crate) fn after_forward(&mut self) {
        if !self.state.is_recurrent() {
            return;
        }
        let mut snap = self.snaps.spare();
        let e = &self.engine;
        let st = &mut self.state;
        st.seq.conv.keep_into(&e.dev, &mut st.ws.cx, &mut snap);
        // submitted now: a clone of the snapshot (the sparse list, a forked session) copies
        // at once, after what was submitted before it
        e.dev.finish(&mut st.ws.cx);
        self.snaps.push(snap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(pos: usize) -> KeptState {
        KeptState {
            pos,
            layers: vec![None],
        }
    }

    #[test]
    fn recent_and_sparse_snapshots() {
        let mut s = Snapshots::default();
        for p in 1..=10_000 {
            s.push(snap(p));
        }
        assert!(s.sparse.len() <= SPARSE);
        assert_eq!(s.recent.len(), RECENT);
        // recent positions are exact; older ones within the sparse spacing
        assert_eq!(s.at_or_before(9_990).unwrap().pos, 9_990);
        let old = s.at_or_before(5_000).unwrap().pos;
        assert!(
            old <= 5_000 && 5_000 - old < s.spacing,
            "{old} {}",
            s.spacing
        );
        s.drop_after(3_000);
        assert!(s.iter().all(|x| x.pos <= 3_000));
        assert!(s.at_or_before(3_000).is_some());
        // each position once
        let mut seen: Vec<usize> = s.iter().map(|x| x.pos).collect();
        let n = seen.len();
        seen.dedup();
        assert_eq!(seen.len(), n);
    }
}
