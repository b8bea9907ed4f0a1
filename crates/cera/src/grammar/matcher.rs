//! Running a grammar over text: the state is a set of parse stacks (positions in
//! [`Grammar::elems`], innermost last) plus a partly read UTF-8 character.
//!
//! Every stack's top is a character class (references are expanded eagerly); an empty stack
//! means a complete sentence. Feeding a code point keeps the stacks whose top class holds it,
//! advances them and expands again. While a character is incomplete, the stacks whose top
//! class cannot hold any character with the bytes seen so far are dropped.

use super::{Elem, Grammar};

/// A UTF-8 character in progress: the value so far and how many continuation bytes are still
/// needed (0: none in progress), with the sequence's length (to reject overlong forms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Partial {
    pub value: u32,
    pub need: u8,
    pub len: u8,
}

pub(crate) enum Utf8Step {
    /// A whole code point.
    Char(u32),
    /// More bytes needed; the code points this prefix can still become.
    More(Partial, u32, u32),
    Invalid,
}

impl Partial {
    #[inline]
    pub(crate) fn step(self, b: u8) -> Utf8Step {
        if self.need == 0 {
            let (value, need) = match b {
                0x00..=0x7F => return Utf8Step::Char(b as u32),
                0xC2..=0xDF => ((b & 0x1F) as u32, 1u8),
                0xE0..=0xEF => ((b & 0x0F) as u32, 2),
                0xF0..=0xF4 => ((b & 0x07) as u32, 3),
                _ => return Utf8Step::Invalid,
            };
            let p = Partial {
                value,
                need,
                len: need + 1,
            };
            return p.more();
        }
        if b & 0xC0 != 0x80 {
            return Utf8Step::Invalid;
        }
        let value = (self.value << 6) | (b & 0x3F) as u32;
        let need = self.need - 1;
        if need == 0 {
            let ok = match self.len {
                2 => true,
                3 => value >= 0x800 && !(0xD800..=0xDFFF).contains(&value),
                _ => (0x1_0000..=0x10_FFFF).contains(&value),
            };
            return if ok {
                Utf8Step::Char(value)
            } else {
                Utf8Step::Invalid
            };
        }
        Partial {
            value,
            need,
            len: self.len,
        }
        .more()
    }

    /// The code points that can still start with the bytes read so far (overlong forms,
    /// surrogates and values past U+10FFFF excluded), or `Invalid` if there are none.
    fn more(self) -> Utf8Step {
        let shift = 6 * self.need as u32;
        let lo = self.value << shift;
        let hi = (lo | ((1u32 << shift) - 1)).min(0x10_FFFF);
        let lo = lo.max(match self.len {
            2 => 0x80,
            3 => 0x800,
            _ => 0x1_0000,
        });
        if lo > hi || (lo >= 0xD800 && hi <= 0xDFFF) {
            return Utf8Step::Invalid;
        }
        Utf8Step::More(self, lo, hi)
    }
}

/// Where a grammar stands after some text. Compare and hash it to cache work per state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GrammarState {
    /// Sorted, without duplicates.
    pub(crate) stacks: Vec<Vec<u32>>,
    pub(crate) partial: Partial,
}

impl Grammar {
    /// The state before any text.
    pub fn initial_state(&self) -> GrammarState {
        let mut out = Vec::new();
        for &alt in &self.rules[self.root as usize] {
            let mut s = Vec::new();
            if self.elems[alt as usize] != Elem::End {
                s.push(alt);
            }
            self.expand(s, &mut out);
        }
        out.sort_unstable();
        out.dedup();
        GrammarState {
            stacks: out,
            partial: Partial::default(),
        }
    }

    /// Expands references on top of `stack` until every resulting stack has a class (or
    /// nothing) on top; appends them to `out`.
    pub(crate) fn expand(&self, stack: Vec<u32>, out: &mut Vec<Vec<u32>>) {
        let mut todo = vec![stack];
        while let Some(mut s) = todo.pop() {
            let Some(&top) = s.last() else {
                out.push(s);
                continue;
            };
            match self.elems[top as usize] {
                Elem::Class(_) => out.push(s),
                Elem::Ref(r) => {
                    s.pop();
                    let ret = top + 1;
                    if self.elems[ret as usize] != Elem::End {
                        s.push(ret);
                    }
                    for &alt in &self.rules[r as usize] {
                        let mut n = s.clone();
                        if self.elems[alt as usize] != Elem::End {
                            n.push(alt);
                        }
                        todo.push(n);
                    }
                }
                Elem::End => {}
            }
        }
    }
}

impl Grammar {
    /// Per element position, the fewest code points that complete the rest of its
    /// alternative (`u32::MAX`: it cannot complete), by fixpoint over the rules' shortest
    /// lengths: what [`GrammarState::distance`] adds up.
    pub(crate) fn rest_lengths(&self) -> Vec<u32> {
        let n = self.elems.len();
        let mut rule_min = vec![u32::MAX; self.rules.len()];
        let mut rest = vec![u32::MAX; n];
        loop {
            let mut changed = false;
            // backwards, so a position sees the rest after it from this very pass
            for i in (0..n).rev() {
                let after = || rest.get(i + 1).copied().unwrap_or(u32::MAX);
                let v = match self.elems[i] {
                    Elem::End => 0,
                    Elem::Class(_) => after().saturating_add(1),
                    Elem::Ref(r) => rule_min[r as usize].saturating_add(after()),
                };
                if v < rest[i] {
                    rest[i] = v;
                    changed = true;
                }
            }
            for (r, alts) in self.rules.iter().enumerate() {
                let m = alts
                    .iter()
                    .map(|&a| rest[a as usize])
                    .min()
                    .unwrap_or(u32::MAX);
                if m < rule_min[r] {
                    rule_min[r] = m;
                    changed = true;
                }
            }
            if !changed {
                return rest;
            }
        }
    }
}

impl GrammarState {
    /// The fewest code points that complete the text from here (0: complete already), with
    /// `rest` from [`Grammar::rest_lengths`].
    pub(crate) fn distance(&self, rest: &[u32]) -> u32 {
        self.stacks
            .iter()
            .map(|s| {
                s.iter()
                    .fold(0u32, |acc, &p| acc.saturating_add(rest[p as usize]))
            })
            .min()
            .unwrap_or(u32::MAX)
    }

    /// No stack left: nothing can follow.
    pub fn is_dead(&self) -> bool {
        self.stacks.is_empty()
    }

    /// The text so far is a complete sentence (more may still follow).
    pub fn is_complete(&self) -> bool {
        self.partial.need == 0 && self.stacks.iter().any(|s| s.is_empty())
    }

    /// Whether the text so far is complete and nothing more can follow.
    pub fn is_finished(&self) -> bool {
        self.partial.need == 0 && self.stacks.iter().all(|s| s.is_empty())
    }

    /// The state after one code point; `None` if the grammar rejects it.
    pub fn advance_char(&self, g: &Grammar, c: u32) -> Option<GrammarState> {
        let mut out = Vec::new();
        for s in &self.stacks {
            let Some(&top) = s.last() else { continue };
            let Elem::Class(k) = g.elems[top as usize] else {
                continue;
            };
            if !g.classes[k as usize].contains(c) {
                continue;
            }
            let mut n = s[..s.len() - 1].to_vec();
            if g.elems[top as usize + 1] != Elem::End {
                n.push(top + 1);
            }
            g.expand(n, &mut out);
        }
        if out.is_empty() {
            return None;
        }
        out.sort_unstable();
        out.dedup();
        Some(GrammarState {
            stacks: out,
            partial: Partial::default(),
        })
    }

    /// The state after one byte of UTF-8; `None` if the grammar (or UTF-8) rejects it.
    pub fn advance_byte(&self, g: &Grammar, b: u8) -> Option<GrammarState> {
        match self.partial.step(b) {
            Utf8Step::Invalid => None,
            Utf8Step::Char(c) => self.advance_char(g, c),
            Utf8Step::More(p, lo, hi) => {
                let stacks: Vec<Vec<u32>> = self
                    .stacks
                    .iter()
                    .filter(|s| {
                        s.last().is_some_and(|&top| match g.elems[top as usize] {
                            Elem::Class(k) => g.classes[k as usize].intersects(lo, hi),
                            _ => false,
                        })
                    })
                    .cloned()
                    .collect();
                if stacks.is_empty() {
                    return None;
                }
                Some(GrammarState { stacks, partial: p })
            }
        }
    }

    /// The state after `bytes`; `None` as soon as a byte is rejected.
    pub fn advance_bytes(&self, g: &Grammar, bytes: &[u8]) -> Option<GrammarState> {
        let mut st = self.clone();
        for &b in bytes {
            st = st.advance_byte(g, b)?;
        }
        Some(st)
    }
}
