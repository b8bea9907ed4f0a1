//! Prompt lookup: propose the continuation of the most recent earlier occurrence of the
//! context's last n tokens (n from `max_n` down to `min_n`), from an index of every n-gram's
//! positions kept up to date as the context grows, so a proposal never rescans the context.

use std::collections::HashMap;

use super::Drafter;

/// n-grams are keyed by a 64-bit hash; a hit is checked against the tokens themselves, so a
/// collision or a position past a rollback is skipped, never proposed.
fn key(ng: &[u32]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ ng.len() as u64;
    for &t in ng {
        h = (h ^ t as u64)
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(17);
    }
    h
}

pub struct NgramDrafter {
    min_n: usize,
    max_n: usize,
    /// per n (index n - 1): n-gram → the positions just after it, most recent last
    index: Vec<HashMap<u64, Vec<u32>>>,
    /// Positions of the context indexed so far.
    indexed: usize,
}

impl NgramDrafter {
    pub fn new(min_n: usize, max_n: usize) -> NgramDrafter {
        let max_n = max_n.max(1);
        NgramDrafter {
            min_n: min_n.clamp(1, max_n),
            max_n,
            index: (0..max_n).map(|_| HashMap::new()).collect(),
            indexed: 0,
        }
    }

    fn update(&mut self, ctx: &[u32]) {
        // a rollback: later entries stay but are checked against the tokens at lookup
        self.indexed = self.indexed.min(ctx.len());
        for end in self.indexed + 1..=ctx.len() {
            for n in 1..=self.max_n.min(end) {
                let ng = &ctx[end - n..end];
                self.index[n - 1]
                    .entry(key(ng))
                    .or_default()
                    .push(end as u32);
            }
        }
        self.indexed = ctx.len();
    }
}

/// Earlier occurrences of an n-gram compared per proposal at most (the most recent ones).
const SCAN: usize = 8;
/// How far back a candidate's match is measured (tokens).
const MATCH_CAP: usize = 64;

impl NgramDrafter {
    /// How many tokens before `p` equal the ones before `len` (at most `MATCH_CAP`).
    fn match_len(ctx: &[u32], p: usize, len: usize) -> usize {
        let mut m = 0;
        while m < MATCH_CAP && m < p && ctx[p - 1 - m] == ctx[len - 1 - m] {
            m += 1;
        }
        m
    }
}

impl Drafter for NgramDrafter {
    fn propose(&mut self, ctx: &[u32], k: usize, out: &mut Vec<u32>) -> crate::Result<()> {
        out.clear();
        self.update(ctx);
        let len = ctx.len();
        for n in (self.min_n..=self.max_n.min(len)).rev() {
            let tail = &ctx[len - n..];
            let Some(ps) = self.index[n - 1].get(&key(tail)) else {
                continue;
            };
            // of the most recent earlier occurrences that are really this n-gram and have a
            // continuation, the one whose match reaches furthest back (the most recent on a
            // tie): in code that is copied with edits, a short n-gram recurs in many places
            // and the longest match is the place being copied
            let mut best: Option<(usize, usize)> = None;
            let mut seen = 0;
            for &p in ps.iter().rev() {
                let p = p as usize;
                if p >= len || p < n || &ctx[p - n..p] != tail {
                    continue;
                }
                let m = Self::match_len(ctx, p, len);
                if best.is_none_or(|(_, bm)| m > bm) {
                    best = Some((p, m));
                }
                seen += 1;
                if seen >= SCAN || m >= MATCH_CAP {
                    break;
                }
            }
            let Some((p, _)) = best else { continue };
            out.extend_from_slice(&ctx[p..(p + k).min(len)]);
            return Ok(());
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "ngram"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_the_continuation_of_the_latest_match() {
        let mut d = NgramDrafter::new(2, 4);
        let ctx = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3, 7, 8, 0, 2, 3];
        let mut out = Vec::new();
        d.propose(&ctx, 3, &mut out).unwrap();
        // "2 3" last occurred before "7 8 0"
        assert_eq!(out, vec![7, 8, 0]);
        // the longest n-gram wins: "1 2 3" → "7 8 ..." versus "x 2 3"
        let mut ctx2 = ctx.to_vec();
        ctx2.extend([1, 2, 3]);
        d.propose(&ctx2, 2, &mut out).unwrap();
        assert_eq!(out, vec![7, 8]);
        // after a rollback, positions past the end are never used
        d.propose(&ctx2[..9], 4, &mut out).unwrap();
        assert_eq!(out, vec![3, 4, 5, 9]);
        d.propose(&[42, 43], 4, &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn prefers_the_occurrence_whose_match_reaches_furthest_back() {
        // only 2-grams are indexed: "2 3" occurs after "5 1" (then 40) and after "6" (then 50);
        // the context ends in "5 1 2 3", so the older occurrence is the one being copied
        let mut d = NgramDrafter::new(2, 2);
        let ctx = [5, 1, 2, 3, 40, 41, 6, 2, 3, 50, 51, 5, 1, 2, 3];
        let mut out = Vec::new();
        d.propose(&ctx, 2, &mut out).unwrap();
        assert_eq!(out, vec![40, 41]);
        // with equal matches the most recent wins
        let ctx = [7, 2, 3, 40, 41, 7, 2, 3, 50, 51, 7, 2, 3];
        let mut d = NgramDrafter::new(2, 2);
        d.propose(&ctx, 2, &mut out).unwrap();
        assert_eq!(out, vec![50, 51]);
    }
}
