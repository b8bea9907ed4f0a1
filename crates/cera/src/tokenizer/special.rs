//! Splitting special tokens (control, user-defined, unknown) out of text before the model's
//! tokenizer sees it.
//!
//! llama.cpp takes the special tokens longest first and, for each, cuts every leftmost
//! non-overlapping occurrence out of the text fragments that remain, honouring LSTRIP/RSTRIP
//! (which also drop the adjacent whitespace). That is one full-text search per special token.
//! Here one pass over the text finds every occurrence of every special token with a byte trie;
//! only those candidates then go through the same priority rules, so the result is identical
//! and the cost is one scan plus a little work per candidate.

use std::collections::BTreeMap;

use super::vocab::{Vocab, attr};

/// A piece of input: text for the model's tokenizer, or a special token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

const NO: u32 = u32::MAX;

struct Node {
    /// Sorted by byte.
    children: Vec<(u8, u32)>,
    /// Priority of the token ending here (index in llama.cpp's order), or `NO`.
    rank: u32,
}

pub(super) struct Specials {
    root: Box<[u32; 256]>,
    nodes: Vec<Node>,
    /// Per rank: id and attributes.
    tokens: Vec<(u32, u16)>,
}

/// C `isspace`, which is what llama.cpp strips.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

impl Specials {
    pub fn new(v: &Vocab) -> Specials {
        let mut s = Specials {
            root: Box::new([NO; 256]),
            nodes: Vec::new(),
            tokens: Vec::new(),
        };
        for &id in &v.special_tokens {
            let text = v.texts[id as usize].as_bytes();
            let rank = s.tokens.len() as u32;
            s.tokens.push((id, v.attrs[id as usize]));
            let mut node = s.root[text[0] as usize];
            if node == NO {
                node = s.new_node();
                s.root[text[0] as usize] = node;
            }
            for &b in &text[1..] {
                let children = &s.nodes[node as usize].children;
                node = match children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => children[i].1,
                    Err(i) => {
                        let n = s.new_node();
                        s.nodes[node as usize].children.insert(i, (b, n));
                        n
                    }
                };
            }
            // same text twice: the first in priority order is the one found
            if s.nodes[node as usize].rank == NO {
                s.nodes[node as usize].rank = rank;
            }
        }
        s
    }

    fn new_node(&mut self) -> u32 {
        self.nodes.push(Node {
            children: Vec::new(),
            rank: NO,
        });
        self.nodes.len() as u32 - 1
    }

    /// Every occurrence `(rank, start, end)` of an allowed special token.
    fn candidates(&self, text: &[u8], parse_special: bool) -> Vec<(u32, u32, u32)> {
        let mut found = Vec::new();
        for start in 0..text.len() {
            let mut node = self.root[text[start] as usize];
            let mut end = start + 1;
            while node != NO {
                let n = &self.nodes[node as usize];
                if n.rank != NO
                    && (parse_special
                        || self.tokens[n.rank as usize].1 & (attr::CONTROL | attr::UNKNOWN) == 0)
                {
                    found.push((n.rank, start as u32, end as u32));
                }
                let Some(&b) = text.get(end) else { break };
                node = match n.children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => n.children[i].1,
                    Err(_) => NO,
                };
                end += 1;
            }
        }
        found
    }

    /// Splits `text` into fragments. Without `parse_special`, control and unknown tokens stay
    /// text; user-defined tokens are always split out (as llama.cpp and HF tokenizers do).
    pub fn split<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let bytes = text.as_bytes();
        let mut cands = if self.tokens.is_empty() {
            Vec::new()
        } else {
            self.candidates(bytes, parse_special)
        };
        if cands.is_empty() {
            return if text.is_empty() {
                Vec::new()
            } else {
                vec![Fragment::Text(text)]
            };
        }
        cands.sort_unstable();
        // Remaining text fragments, start → end; accepted tokens, start → id.
        let mut frags: BTreeMap<u32, u32> = BTreeMap::from([(0, bytes.len() as u32)]);
        let mut toks: BTreeMap<u32, u32> = BTreeMap::new();
        for (rank, p, q) in cands {
            let Some((&s, &e)) = frags.range(..=p).next_back() else {
                continue;
            };
            if q > e {
                continue; // crosses a token cut out earlier, or whitespace stripped for it
            }
            let (id, a) = self.tokens[rank as usize];
            let mut left_end = p;
            if a & attr::LSTRIP != 0 {
                while left_end > s && is_space(bytes[left_end as usize - 1]) {
                    left_end -= 1;
                }
            }
            let mut right_start = q;
            if a & attr::RSTRIP != 0 {
                while right_start < e && is_space(bytes[right_start as usize]) {
                    right_start += 1;
                }
            }
            frags.remove(&s);
            if left_end > s {
                frags.insert(s, left_end);
            }
            if right_start < e {
                frags.insert(right_start, e);
            }
            toks.insert(p, id);
        }
        let mut out = Vec::with_capacity(frags.len() + toks.len());
        let mut fi = frags.into_iter().peekable();
        let mut ti = toks.into_iter().peekable();
        loop {
            match (fi.peek(), ti.peek()) {
                (Some(&(fs, _)), Some(&(tp, _))) if fs < tp => {
                    let (s, e) = fi.next().expect("peeked");
                    out.push(Fragment::Text(&text[s as usize..e as usize]));
                }
                (_, Some(_)) => out.push(Fragment::Token(ti.next().expect("peeked").1)),
                (Some(_), None) => {
                    let (s, e) = fi.next().expect("peeked");
                    out.push(Fragment::Text(&text[s as usize..e as usize]));
                }
                (None, None) => break,
            }
        }
        out
    }
}
