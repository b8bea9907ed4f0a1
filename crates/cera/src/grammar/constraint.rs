//! A grammar applied to sampling, step by step.
//!
//! Each step samples as usual first and checks only that token against the grammar (a few
//! bytes through the matcher). Only when the grammar rejects it is the full mask computed (one
//! trie walk, cached per grammar state), the logits restored, the rejected tokens set to −∞
//! and the sampler run again. End-of-generation tokens are allowed only where the grammar can
//! be complete. Lazy grammars watch the output for a trigger and start at it.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use crate::runtime::time::Instant;

use super::{Grammar, GrammarConstraint, GrammarState, TokenTrie, Trigger};
use crate::sample::Sampler;
use crate::tokenizer::Tokenizer;

/// Masks kept per generation at most (each is `n_vocab / 8` bytes).
const MASK_CACHE: usize = 512;

pub(crate) struct Constraint<'a> {
    grammar: std::sync::Arc<Grammar>,
    triggers: Vec<Trigger>,
    trie: &'a TokenTrie,
    tok: &'a Tokenizer,
    /// `None` while a lazy grammar waits for its trigger.
    state: Option<GrammarState>,
    /// Output bytes so far while waiting for a trigger word.
    waiting: Vec<u8>,
    saved: Vec<f32>,
    /// Per grammar position, the fewest code points completing its alternative.
    rest: Vec<u32>,
    cache: HashMap<GrammarState, Rc<Vec<u64>>>,
    /// How many steps needed the full mask (for diagnostics and benchmarks).
    pub(crate) n_masked: usize,
    /// Time spent on the grammar: checks, masks, the second draw, advancing the state.
    pub(crate) time: Duration,
}

impl<'a> Constraint<'a> {
    pub(crate) fn new(c: &GrammarConstraint, trie: &'a TokenTrie, tok: &'a Tokenizer) -> Self {
        let state = c.triggers.is_empty().then(|| c.grammar.initial_state());
        Constraint {
            grammar: std::sync::Arc::clone(&c.grammar),
            triggers: c.triggers.clone(),
            trie,
            tok,
            state,
            waiting: Vec::new(),
            saved: Vec::new(),
            rest: c.grammar.rest_lengths(),
            cache: HashMap::new(),
            n_masked: 0,
            time: Duration::ZERO,
        }
    }

    /// The grammar is active and complete, and nothing more can follow.
    pub(crate) fn is_finished(&self) -> bool {
        self.state.as_ref().is_some_and(GrammarState::is_finished)
    }

    fn allows(&self, st: &GrammarState, t: u32) -> bool {
        if self.tok.is_eog(t) {
            return st.is_complete();
        }
        let bytes = self.tok.token_bytes(t);
        !bytes.is_empty() && st.advance_bytes(&self.grammar, bytes).is_some()
    }

    /// Picks the next token; `None` when the grammar allows no token at all (a dead end).
    /// With `left` (the tokens that may still be generated, this one included), the text is
    /// kept completable within them: near the limit, a token after which the grammar needs
    /// more code points than tokens remain is replaced by the likeliest one that leaves enough
    /// (closing a string, an object, a tool call before the limit cuts it).
    pub(crate) fn sample(
        &mut self,
        sampler: &mut Sampler,
        logits: &mut [f32],
        left: Option<usize>,
    ) -> Option<u32> {
        if self.state.is_none() {
            return Some(sampler.sample(logits));
        }
        let t0 = Instant::now();
        self.saved.clear();
        self.saved.extend_from_slice(logits);
        let copy = t0.elapsed();
        // the draw itself is what unconstrained sampling costs too: not counted
        let t = sampler.sample(logits);
        let t1 = Instant::now();
        let mut r = self.check_or_resample(t, sampler, logits);
        if let (Some(t), Some(left)) = (r, left) {
            r = Some(self.within(t, left.saturating_sub(1)));
        }
        self.time += copy + t1.elapsed();
        r
    }

    /// Code points still needed after token `t` from the current state (`u32::MAX`: `t`
    /// is not allowed).
    fn distance_after(&self, st: &GrammarState, t: u32) -> u32 {
        if self.tok.is_eog(t) {
            return if st.is_complete() { 0 } else { u32::MAX };
        }
        let bytes = self.tok.token_bytes(t);
        if bytes.is_empty() {
            return u32::MAX;
        }
        st.advance_bytes(&self.grammar, bytes)
            .map_or(u32::MAX, |n| n.distance(&self.rest))
    }

    /// `t`, or, when completing the text after it would need more than `after` tokens (one
    /// code point each, at worst), the likeliest token that leaves it completable in time.
    fn within(&self, t: u32, after: usize) -> u32 {
        let Some(st) = &self.state else { return t };
        // far from the limit: no token can make completing need that many more
        const SLACK: usize = 64;
        let now = st.distance(&self.rest) as usize;
        if now.saturating_add(SLACK) < after || self.distance_after(st, t) as usize <= after {
            return t;
        }
        let mut order: Vec<u32> = (0..self.saved.len() as u32)
            .filter(|&i| self.saved[i as usize] > f32::NEG_INFINITY)
            .collect();
        order.sort_unstable_by(|&a, &b| self.saved[b as usize].total_cmp(&self.saved[a as usize]));
        order
            .into_iter()
            .find(|&c| self.distance_after(st, c) as usize <= after)
            .unwrap_or(t)
    }

    fn check_or_resample(
        &mut self,
        t: u32,
        sampler: &mut Sampler,
        logits: &mut [f32],
    ) -> Option<u32> {
        let st = self.state.as_ref()?;
        if self.allows(st, t) {
            return Some(t);
        }
        self.n_masked += 1;
        let mask = match self.cache.get(st) {
            Some(m) => Rc::clone(m),
            None => {
                let mut m = vec![0u64; logits.len().div_ceil(64)];
                self.trie.mask(&self.grammar, st, &mut m);
                let m = Rc::new(m);
                if self.cache.len() >= MASK_CACHE {
                    self.cache.clear();
                }
                self.cache.insert(st.clone(), Rc::clone(&m));
                m
            }
        };
        let eog_ok = st.is_complete();
        logits.copy_from_slice(&self.saved);
        let mut any = false;
        for (i, l) in logits.iter_mut().enumerate() {
            let allowed = if mask[i >> 6] >> (i & 63) & 1 != 0 {
                true
            } else {
                eog_ok && self.tok.is_eog(i as u32)
            };
            if allowed {
                any |= *l > f32::NEG_INFINITY;
            } else {
                *l = f32::NEG_INFINITY;
            }
        }
        if !any {
            return None;
        }
        let t = sampler.sample(logits);
        self.allows(st, t).then_some(t)
    }

    /// How many of `draft`'s tokens in a row the grammar allows from here (its state is not
    /// changed). A lazy grammar still waiting for its trigger allows them all: where a
    /// trigger would start it is decided when the tokens are really accepted.
    pub(crate) fn allowed_prefix(&self, draft: &[u32]) -> usize {
        let Some(st) = &self.state else {
            return draft.len();
        };
        let mut st = st.clone();
        for (i, &t) in draft.iter().enumerate() {
            if self.tok.is_eog(t) {
                return if st.is_complete() { i + 1 } else { i };
            }
            let bytes = self.tok.token_bytes(t);
            match (!bytes.is_empty())
                .then(|| st.advance_bytes(&self.grammar, bytes))
                .flatten()
            {
                Some(n) => st = n,
                None => return i,
            }
        }
        draft.len()
    }

    /// Feeds the chosen token; `false` when the grammar cannot continue with it.
    pub(crate) fn accept(&mut self, t: u32) -> bool {
        let t0 = Instant::now();
        let r = self.accept_inner(t);
        self.time += t0.elapsed();
        r
    }

    fn accept_inner(&mut self, t: u32) -> bool {
        let bytes = self.tok.token_bytes(t);
        if let Some(st) = &self.state {
            if self.tok.is_eog(t) {
                return st.is_complete();
            }
            return match st.advance_bytes(&self.grammar, bytes) {
                Some(n) => {
                    self.state = Some(n);
                    true
                }
                None => false,
            };
        }
        // waiting for a trigger
        let start = self.waiting.len();
        self.waiting.extend_from_slice(bytes);
        let mut from: Option<usize> = None;
        for tr in &self.triggers {
            match tr {
                Trigger::Token(id) if *id == t => from = Some(from.map_or(start, |f| f.min(start))),
                Trigger::Word(w) if !w.is_empty() => {
                    // only occurrences that end in this token's bytes are new
                    let lo = start.saturating_sub(w.len() - 1);
                    if let Some(i) = find(&self.waiting[lo..], w.as_bytes()) {
                        let at = lo + i;
                        from = Some(from.map_or(at, |f| f.min(at)));
                    }
                }
                _ => {}
            }
        }
        let Some(at) = from else {
            if self.waiting.len() > 4096 {
                let cut = self.waiting.len() - 1024;
                self.waiting.drain(..cut);
            }
            return true;
        };
        match self
            .grammar
            .initial_state()
            .advance_bytes(&self.grammar, &self.waiting[at..])
        {
            Some(st) => {
                self.state = Some(st);
                true
            }
            None => false,
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}
