//! SentencePiece BPE (`tokenizer.ggml.model = llama`): start from UTF-8 characters and keep
//! merging the adjacent pair whose concatenation is the highest-scoring token; characters left
//! that are not tokens become `<0xXX>` byte tokens.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::bpe::utf8_len;
use super::vocab::Vocab;

pub(super) struct Spm {
    byte_tokens: [Option<u32>; 256],
}

#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    len: u32,
    next: u32,
    prev: u32,
}

const NONE: u32 = u32::MAX;

/// A queued pair: highest score first, then the leftmost.
struct Bigram {
    score: f32,
    left: u32,
    right: u32,
    size: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then(Reverse(self.left).cmp(&Reverse(o.left)))
    }
}

impl Spm {
    pub fn new(v: &Vocab) -> Spm {
        let mut byte_tokens = [None; 256];
        for b in 0..=255u8 {
            // `<0xXX>`, else the byte itself as a one-character token
            byte_tokens[b as usize] = v.byte_token(b).or_else(|| v.id(&[b]));
        }
        Spm { byte_tokens }
    }

    /// Tokenizes text whose spaces are already escaped to U+2581.
    pub fn encode(&self, v: &Vocab, text: &str, out: &mut Vec<u32>) {
        let t = text.as_bytes();
        let mut syms = Vec::with_capacity(t.len());
        let mut i = 0;
        while i < t.len() {
            let n = utf8_len(t[i]).min(t.len() - i);
            syms.push(Sym {
                start: i as u32,
                len: n as u32,
                prev: if syms.is_empty() {
                    NONE
                } else {
                    syms.len() as u32 - 1
                },
                next: if i + n == t.len() {
                    NONE
                } else {
                    syms.len() as u32 + 1
                },
            });
            i += n;
        }
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<Bigram>, syms: &[Sym], l: u32, r: u32| {
            if l == NONE || r == NONE {
                return;
            }
            let (a, b) = (syms[l as usize], syms[r as usize]);
            let span = &t[a.start as usize..(b.start + b.len) as usize];
            if let Some(id) = v.id(span) {
                heap.push(Bigram {
                    score: v.scores[id as usize],
                    left: l,
                    right: r,
                    size: span.len() as u32,
                });
            }
        };
        for r in 1..syms.len() as u32 {
            push(&mut heap, &syms, r - 1, r);
        }
        while let Some(bg) = heap.pop() {
            let (l, r) = (syms[bg.left as usize], syms[bg.right as usize]);
            if l.len == 0 || r.len == 0 || l.len + r.len != bg.size {
                continue; // stale
            }
            syms[bg.left as usize].len += r.len;
            syms[bg.right as usize].len = 0;
            syms[bg.left as usize].next = r.next;
            if r.next != NONE {
                syms[r.next as usize].prev = bg.left;
            }
            push(&mut heap, &syms, l.prev, bg.left);
            push(&mut heap, &syms, bg.left, r.next);
        }
        let mut k = if syms.is_empty() { NONE } else { 0 };
        while k != NONE {
            let s = syms[k as usize];
            let span = &t[s.start as usize..(s.start + s.len) as usize];
            match v.id(span) {
                Some(id) => out.push(id),
                None => {
                    for &b in span {
                        // llama.cpp aborts when a byte has no token; we fall back to <unk>
                        if let Some(id) = self.byte_tokens[b as usize].or(v.specials.unk) {
                            out.push(id);
                        }
                    }
                }
            }
            k = s.next;
        }
    }
}
