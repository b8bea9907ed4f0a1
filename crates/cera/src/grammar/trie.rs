//! Every token's bytes in a prefix tree, and the allowed-token mask of a grammar state computed
//! by one walk of it.
//!
//! The tree is stored in preorder: node `i`'s first child is `i + 1` (when `i + 1 < end[i]`)
//! and the next sibling of a child `c` is `end[c]`. The walk carries the grammar's stacks as
//! persistent linked lists in an arena (`push` and `pop` are O(1) and share tails), so a
//! subtree whose prefix the grammar rejects is skipped whole and nothing is copied per node.

use super::matcher::{Partial, Utf8Step};
use super::{Elem, Grammar, GrammarState};
use crate::tokenizer::Tokenizer;

const NIL: u32 = u32::MAX;

/// The vocabulary as a prefix tree over token bytes (special tokens as their text, so a
/// grammar literal `<tool_call>` can be produced by that one token). End-of-generation tokens
/// and tokens without bytes are left out; EOG is decided separately.
#[derive(Debug, Clone)]
pub struct TokenTrie {
    byte: Vec<u8>,
    /// One past the last node of each node's subtree.
    end: Vec<u32>,
    /// Tokens ending at node `i`: `toks[tok_start[i]..tok_start[i + 1]]`.
    tok_start: Vec<u32>,
    toks: Vec<u32>,
    n_vocab: usize,
}

impl TokenTrie {
    pub fn new(tok: &Tokenizer) -> TokenTrie {
        let n = tok.n_vocab();
        let mut ids: Vec<u32> = (0..n as u32)
            .filter(|&t| !tok.is_eog(t) && !tok.token_bytes(t).is_empty())
            .collect();
        ids.sort_by(|&a, &b| tok.token_bytes(a).cmp(tok.token_bytes(b)));
        TokenTrie::build(ids.iter().map(|&t| (t, tok.token_bytes(t))), n)
    }

    /// From `(id, bytes)` pairs sorted by bytes.
    fn build<'a>(sorted: impl Iterator<Item = (u32, &'a [u8])>, n_vocab: usize) -> TokenTrie {
        // node 0 is the root
        let mut byte = vec![0u8];
        let mut end = vec![0u32];
        let mut node_toks: Vec<Vec<u32>> = vec![Vec::new()];
        let mut path: Vec<u32> = vec![0]; // nodes from the root to the last inserted token
        let mut prev: &[u8] = &[];
        for (id, bytes) in sorted {
            let common = prev.iter().zip(bytes).take_while(|(a, b)| a == b).count();
            // close the nodes below the common prefix
            while path.len() > common + 1 {
                let done = path.pop().unwrap_or(0);
                end[done as usize] = byte.len() as u32;
            }
            for &b in &bytes[common..] {
                byte.push(b);
                end.push(0);
                node_toks.push(Vec::new());
                path.push((byte.len() - 1) as u32);
            }
            let last = *path.last().unwrap_or(&0) as usize;
            node_toks[last].push(id);
            prev = bytes;
        }
        for &p in &path {
            end[p as usize] = byte.len() as u32;
        }
        let mut tok_start = Vec::with_capacity(byte.len() + 1);
        let mut toks = Vec::new();
        for t in &node_toks {
            tok_start.push(toks.len() as u32);
            toks.extend_from_slice(t);
        }
        tok_start.push(toks.len() as u32);
        TokenTrie {
            byte,
            end,
            tok_start,
            toks,
            n_vocab,
        }
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    pub fn n_nodes(&self) -> usize {
        self.byte.len()
    }

    /// Sets in `mask` (one bit per token id) the tokens the grammar accepts from `state`.
    /// End-of-generation tokens are not included.
    pub fn mask(&self, g: &Grammar, state: &GrammarState, mask: &mut [u64]) {
        mask.iter_mut().for_each(|w| *w = 0);
        let mut w = Walk {
            g,
            trie: self,
            pos: Vec::with_capacity(4096),
            parent: Vec::with_capacity(4096),
            heads: Vec::with_capacity(4096),
            todo: Vec::new(),
            mask,
        };
        for s in &state.stacks {
            let mut h = NIL;
            for &p in s {
                h = w.node(p, h);
            }
            w.heads.push(h);
        }
        let n = w.heads.len();
        w.descend(0, 0, n, state.partial);
    }
}

struct Walk<'a> {
    g: &'a Grammar,
    trie: &'a TokenTrie,
    /// The arena of stack nodes: position and the node below (`NIL` at the bottom).
    pos: Vec<u32>,
    parent: Vec<u32>,
    /// Stack heads of every level of the walk, level after level (`NIL`: complete).
    heads: Vec<u32>,
    todo: Vec<u32>,
    mask: &'a mut [u64],
}

impl Walk<'_> {
    #[inline]
    fn node(&mut self, pos: u32, parent: u32) -> u32 {
        self.pos.push(pos);
        self.parent.push(parent);
        (self.pos.len() - 1) as u32
    }

    /// Adds a head unless an equal one is already in this level (from `from`).
    #[inline]
    fn push_head(&mut self, from: usize, h: u32) {
        let (p, q) = if h == NIL {
            (NIL, NIL)
        } else {
            (self.pos[h as usize], self.parent[h as usize])
        };
        for &o in &self.heads[from..] {
            if o == h
                || (o != NIL
                    && h != NIL
                    && self.pos[o as usize] == p
                    && self.parent[o as usize] == q)
            {
                return;
            }
        }
        self.heads.push(h);
    }

    /// Expands `base` (a stack whose top may be a reference) into heads with a class on top.
    fn expand(&mut self, from: usize, base: u32) {
        self.todo.push(base);
        while let Some(x) = self.todo.pop() {
            if x == NIL {
                self.push_head(from, NIL);
                continue;
            }
            let top = self.pos[x as usize];
            match self.g.elems[top as usize] {
                Elem::Class(_) => self.push_head(from, x),
                Elem::Ref(r) => {
                    let mut b = self.parent[x as usize];
                    let ret = top + 1;
                    if self.g.elems[ret as usize] != Elem::End {
                        b = self.node(ret, b);
                    }
                    for &alt in &self.g.rules[r as usize] {
                        if self.g.elems[alt as usize] != Elem::End {
                            let n = self.node(alt, b);
                            self.todo.push(n);
                        } else {
                            self.todo.push(b);
                        }
                    }
                }
                Elem::End => {}
            }
        }
    }

    /// Visits the children of trie node `t`, whose grammar heads are `heads[lo..hi]`.
    fn descend(&mut self, t: usize, lo: usize, hi: usize, partial: Partial) {
        let trie = self.trie;
        let end = trie.end[t] as usize;
        let mut c = t + 1;
        while c < end {
            let next = trie.end[c] as usize;
            let arena = self.pos.len();
            let from = self.heads.len();
            let mut child_partial = Partial::default();
            match partial.step(trie.byte[c]) {
                Utf8Step::Invalid => {}
                Utf8Step::Char(ch) => {
                    for i in lo..hi {
                        let h = self.heads[i];
                        if h == NIL {
                            continue;
                        }
                        let top = self.pos[h as usize];
                        let Elem::Class(k) = self.g.elems[top as usize] else {
                            continue;
                        };
                        if !self.g.classes[k as usize].contains(ch) {
                            continue;
                        }
                        let mut base = self.parent[h as usize];
                        if self.g.elems[top as usize + 1] != Elem::End {
                            base = self.node(top + 1, base);
                        }
                        self.expand(from, base);
                    }
                }
                Utf8Step::More(p, a, b) => {
                    child_partial = p;
                    for i in lo..hi {
                        let h = self.heads[i];
                        if h == NIL {
                            continue;
                        }
                        if let Elem::Class(k) = self.g.elems[self.pos[h as usize] as usize]
                            && self.g.classes[k as usize].intersects(a, b)
                        {
                            self.heads.push(h);
                        }
                    }
                }
            }
            let to = self.heads.len();
            if to > from {
                for &tok in &trie.toks[trie.tok_start[c] as usize..trie.tok_start[c + 1] as usize] {
                    self.mask[(tok >> 6) as usize] |= 1u64 << (tok & 63);
                }
                if c + 1 < next {
                    self.descend(c, from, to, child_partial);
                }
            }
            self.heads.truncate(from);
            self.pos.truncate(arena);
            self.parent.truncate(arena);
            c = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trie_mask_matches_token_by_token_check() {
        let words: Vec<&[u8]> = vec![
            b"a",
            b"ab",
            b"abc",
            b"b",
            b"{",
            b"{\"",
            b"\"",
            b"1",
            b"12",
            b"x",
            "é".as_bytes(),
            &"é".as_bytes()[..1],
            b"\xff",
            b" ",
            b"\"a\"",
            b"\xe0",
            b"\xe0\x81",
            b"\xed\xa0",
            b"\xf4\x90",
            "€".as_bytes(),
            &"€".as_bytes()[..2],
        ];
        let mut pairs: Vec<(u32, &[u8])> = words
            .iter()
            .enumerate()
            .map(|(i, w)| (i as u32, *w))
            .collect();
        pairs.sort_by(|a, b| a.1.cmp(b.1));
        let trie = TokenTrie::build(pairs.iter().copied(), words.len());
        for src in [
            super::super::JSON_GBNF,
            "root ::= \"a\" [b-c]* | \"é\"+ | [0-9]{1,3}",
        ] {
            let g = Grammar::parse(src).unwrap();
            for prefix in ["", "{", "{\"a", "a", "ab", "1", "é", "[\"", "[1"] {
                let Some(st) = g.initial_state().advance_bytes(&g, prefix.as_bytes()) else {
                    continue;
                };
                let mut mask = vec![0u64; 1];
                trie.mask(&g, &st, &mut mask);
                for (i, w) in words.iter().enumerate() {
                    let want = st.advance_bytes(&g, w).is_some();
                    let got = mask[0] >> i & 1 != 0;
                    assert_eq!(got, want, "grammar {src:?} prefix {prefix:?} token {w:?}");
                }
            }
        }
    }
}
