//! `prefill`: make the context a given token sequence, computing only what is new. The
//! session's own context is reused up to the common prefix; with a [`PrefixCache`], a longer
//! cached prefix is restored instead, and the result is stored for the next prompt.

use crate::runtime::time::Instant;

use super::Session;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::state::codec::{Reader, Writer};
use crate::state::prefix::{Namespace, PrefixCache};
use crate::state::snapshot;

/// What a [`Session::prefill`] reused and computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrefillReport {
    /// Tokens kept from the session's own context.
    pub kept: usize,
    /// Tokens restored from the prefix cache (instead of `kept`).
    pub from_cache: usize,
    /// Tokens computed (the new part, plus any recurrent-state replay).
    pub prefilled: usize,
    /// Tokens of the old context dropped after the common prefix: what a template that
    /// rewrites earlier turns costs.
    pub discarded: usize,
    /// Of `prefilled`, tokens computed again to rebuild recurrent state after a cut.
    pub replayed: usize,
    /// Wall time of the whole call.
    pub time: std::time::Duration,
}

impl PrefillReport {
    /// Tokens that were not computed.
    pub fn reused(&self) -> usize {
        self.kept + self.from_cache
    }
}

fn lcp(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Session {
    /// Makes the context exactly `tokens`, prefilling only what differs from the current one
    /// (at least the last token is computed when anything changed, so the logits are fresh).
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<PrefillReport> {
        self.prefill_inner(tokens, None)
    }

    /// [`Session::prefill`], also trying `cache` for a longer prefix, and storing the result
    /// there.
    pub fn prefill_cached(&mut self, tokens: &[u32], cache: &PrefixCache) -> Result<PrefillReport> {
        self.prefill_inner(tokens, Some(cache))
    }

    fn prefill_inner(
        &mut self,
        tokens: &[u32],
        cache: Option<&PrefixCache>,
    ) -> Result<PrefillReport> {
        let t0 = Instant::now();
        let mut rep = self.reuse_prefix(tokens, cache)?;
        let start = self.tokens.len();
        if start < tokens.len() {
            self.append_tokens(&tokens[start..])?;
            if let Some(c) = cache {
                self.store_prefix(c)?;
            }
        }
        rep.time = t0.elapsed();
        Ok(rep)
    }

    /// The first half of [`Session::prefill`]: keeps (or restores from `cache`) the longest
    /// usable prefix of `tokens` and leaves the rest, `tokens[self.tokens().len()..]`, for the
    /// caller to feed (a scheduler feeds it in chunks among other sequences' steps). The
    /// report's `prefilled` counts what is left to feed plus any recurrent-state replay.
    pub fn reuse_prefix(
        &mut self,
        tokens: &[u32],
        cache: Option<&PrefixCache>,
    ) -> Result<PrefillReport> {
        let t0 = Instant::now();
        if tokens.is_empty() {
            return Err(Error::Model("prefill needs at least one token".into()));
        }
        if tokens.len() > self.n_ctx() && self.shift_keep.is_none() {
            return Err(Error::ContextOverflow {
                n_ctx: self.n_ctx(),
                needed: tokens.len(),
            });
        }
        let mut rep = PrefillReport::default();
        let common = lcp(&self.tokens, tokens);
        if common == tokens.len() && common == self.tokens.len() && self.logits_valid {
            rep.kept = common;
            rep.time = t0.elapsed();
            return Ok(rep);
        }
        let own = common.min(tokens.len() - 1);
        let hit = match cache {
            Some(c) if self.n_shifts == 0 || own == 0 => {
                c.lookup(self.namespace(), tokens, self.n_ctx())
            }
            _ => None,
        };
        rep.discarded = self.tokens.len() - own;
        match hit {
            Some(h) if h.n > own => {
                self.restore_prefix(&h.body, h.n_saved, &tokens[..h.n])?;
                rep.from_cache = h.n;
            }
            _ => {
                self.truncate(own);
                rep.kept = own;
                if let Some(from) = self.replay_from {
                    rep.replayed = own - from;
                }
            }
        }
        rep.prefilled = tokens.len() - self.tokens.len() + rep.replayed;
        rep.time = t0.elapsed();
        Ok(rep)
    }

    fn namespace(&self) -> Namespace {
        Namespace::new(self.state_fingerprint(), self.kv_types)
    }

    /// Stores the current context in `cache` (not a shifted one: its state is not what the
    /// tokens alone give).
    pub fn store_prefix(&mut self, cache: &PrefixCache) -> Result<()> {
        self.catch_up()?;
        let n = self.tokens.len();
        if self.n_shifts > 0 || n < cache.options().min_tokens.max(1) {
            return Ok(());
        }
        let mut w = Writer::default();
        let e = &self.engine;
        snapshot::write_kv(&e.dev, &self.state.seq.kv, n, &mut w);
        let recurrent = self.state.is_recurrent();
        let st = &mut self.state;
        let snaps: Vec<_> = self
            .snaps
            .iter()
            .filter(|s| s.pos <= n && s.pos > 0)
            .map(|s| st.seq.conv.kept_to_host(&e.dev, &mut st.ws.cx, s))
            .collect();
        w.u32(snaps.len() as u32);
        for s in &snaps {
            snapshot::write_conv(s, &mut w);
        }
        let conv_pos = snaps.iter().map(|s| s.pos).collect();
        cache.insert(self.namespace(), &self.tokens, recurrent, conv_pos, w.buf);
        Ok(())
    }

    /// Replaces the context with `tokens` from a cache entry's state of `n_saved` positions.
    fn restore_prefix(&mut self, body: &[u8], n_saved: usize, tokens: &[u32]) -> Result<()> {
        self.reset();
        let r = self.restore_prefix_inner(body, n_saved, tokens);
        if r.is_err() {
            self.reset();
        }
        r
    }

    fn restore_prefix_inner(&mut self, body: &[u8], n_saved: usize, tokens: &[u32]) -> Result<()> {
        let mut r = Reader::new(body, "prefix-cache entry");
        let e = std::sync::Arc::clone(&self.engine);
        snapshot::read_kv(&e.dev, &mut self.state.seq.kv, n_saved, &mut r)?;
        let n_snaps = r.u32("snapshot count")? as usize;
        let n = tokens.len();
        let mut snaps = Vec::new();
        for _ in 0..n_snaps.min(r.remaining()) {
            let s = snapshot::read_conv(&mut r)?;
            if s.pos <= n {
                snaps.push(s);
            }
        }
        r.finish()?;
        snaps.sort_by_key(|s| s.pos);
        for s in snaps {
            let st = &mut self.state;
            let kept = st.seq.conv.host_to_kept(&e.dev, &mut st.ws.cx, &s)?;
            // (submitted before the list may clone it)
            e.dev.finish(&mut st.ws.cx);
            self.snaps.push(kept);
        }
        if self.state.is_recurrent() {
            let Some(snap) = self.snaps.iter().find(|s| s.pos == n).cloned() else {
                return Err(r.error(format!("no convolution snapshot at position {n}")));
            };
            let st = &mut self.state;
            st.seq.conv.restore_kept(&e.dev, &mut st.ws.cx, &snap)?;
            e.dev.finish(&mut st.ws.cx);
        }
        self.tokens.extend_from_slice(tokens);
        self.state.seq.conv.n_past = n;
        self.logits_valid = false;
        Ok(())
    }
}
