//! Merge-rank BPE, byte-level (GPT-2 style) or over UTF-8 characters (Gemma 4).
//!
//! Everything works on "raw" bytes: a byte-level vocabulary's texts are mapped back through the
//! GPT-2 byte↔unicode table once at load, so a word never has to be re-encoded. Each symbol
//! carries the id of its text (a token id, or a "virtual" id past the vocabulary for merge
//! halves that are not tokens), and merges are a map from a pair of ids to (rank, result id):
//! no strings are built while merging.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::vocab::{FxMap, Vocab};

/// The GPT-2 byte→char table: printable Latin-1 bytes map to themselves, the other 68 to
/// U+0100.. in byte order, so that every byte is a visible, non-space character.
#[cfg(test)]
pub(super) fn byte_to_char() -> &'static [char; 256] {
    static T: std::sync::OnceLock<[char; 256]> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let mut t = ['\0'; 256];
        let mut n = 0u32;
        for b in 0..256u32 {
            let printable = (0x21..=0x7E).contains(&b)
                || (0xA1..=0xAC).contains(&b)
                || (0xAE..=0xFF).contains(&b);
            t[b as usize] = if printable {
                char::from_u32(b).expect("latin-1")
            } else {
                n += 1;
                char::from_u32(0xFF + n).expect("U+0100..")
            };
        }
        t
    })
}

/// The byte a GPT-2 table character stands for.
pub(super) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    match cp {
        0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF => Some(cp as u8),
        0x100..=0x143 => {
            static EXTRA: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
            let extra = EXTRA.get_or_init(|| {
                (0..=255u8)
                    .filter(|&b| !matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF))
                    .collect()
            });
            Some(extra[(cp - 0x100) as usize])
        }
        _ => None,
    }
}

/// A byte-level text back to bytes; `None` when a character is outside the table.
#[cfg(test)]
fn decode_byte_level(text: &str) -> Option<Vec<u8>> {
    text.chars().map(char_to_byte).collect()
}

const NONE: u32 = u32::MAX;

pub(super) struct Bpe {
    byte_level: bool,
    /// A word that is itself a token is not merged (llama3-style `ignore_merges`).
    pub ignore_merges: bool,
    n_vocab: u32,
    /// Raw text → symbol id: token ids, then virtual ids for non-token merge halves.
    syms: FxMap<Box<[u8]>, u32>,
    merges: FxMap<(u32, u32), (u32, u32)>,
    /// Byte-level: the symbol of each single byte.
    byte_sym: [u32; 256],
    /// The token emitted for a byte of a symbol that is not a token (`NONE`: dropped).
    fallback: [u32; 256],
}

#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    end: u32,
    id: u32,
    prev: u32,
    next: u32,
}

/// Buffers reused across words.
#[derive(Default)]
pub(super) struct Scratch {
    syms: Vec<Sym>,
    ranks: Vec<u32>,
    heap: BinaryHeap<Reverse<(u32, u32, u32, u32)>>,
}

/// Words longer than this (in symbols) merge through a heap instead of a linear scan.
const HEAP_MIN: usize = 96;

impl Bpe {
    pub fn new(v: &Vocab, merges: &[(String, String)], byte_level: bool) -> Bpe {
        let n_vocab = v.n() as u32;
        // a token's raw bytes into `buf` (false: not decodable, can never match)
        let raw = |t: &str, buf: &mut Vec<u8>| -> bool {
            buf.clear();
            if byte_level {
                for c in t.chars() {
                    match char_to_byte(c) {
                        Some(b) => buf.push(b),
                        None => return false,
                    }
                }
            } else {
                buf.extend_from_slice(t.as_bytes());
            }
            true
        };
        let mut syms: FxMap<Box<[u8]>, u32> = FxMap::default();
        syms.reserve(v.n() + merges.len() / 4);
        let mut buf = Vec::new();
        for (i, t) in v.texts.iter().enumerate() {
            if raw(t, &mut buf) {
                syms.insert(buf.as_slice().into(), i as u32); // last duplicate wins, as text lookup does
            }
        }
        let mut next_virtual = n_vocab;
        // looked up before inserting: almost every merge half and result is a token, so the
        // key is allocated only for the few that are not (151k merges: Qwen2.5's tokenizer
        // was a quarter of a cold `cera run -n 1`)
        let mut sym_of = |syms: &mut FxMap<Box<[u8]>, u32>, r: &[u8]| -> u32 {
            if let Some(&id) = syms.get(r) {
                return id;
            }
            next_virtual += 1;
            syms.insert(r.into(), next_virtual - 1);
            next_virtual - 1
        };
        let mut table: FxMap<(u32, u32), (u32, u32)> = FxMap::default();
        table.reserve(merges.len());
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        for (rank, (a, b)) in merges.iter().enumerate() {
            if !raw(a, &mut ra) || !raw(b, &mut rb) {
                continue; // can never match an encoded word
            }
            let (sa, sb) = (sym_of(&mut syms, &ra), sym_of(&mut syms, &rb));
            ra.extend_from_slice(&rb);
            let res = sym_of(&mut syms, &ra);
            table.entry((sa, sb)).or_insert((rank as u32, res));
        }
        let mut byte_sym = [NONE; 256];
        let mut fallback = [NONE; 256];
        for b in 0..=255u8 {
            if byte_level {
                byte_sym[b as usize] = sym_of(&mut syms, &[b]);
                // llama.cpp looks up each byte of the *encoded* text as a one-byte token, which
                // only exists for bytes that encode to themselves (printable ASCII).
                if (0x21..=0x7E).contains(&b) {
                    fallback[b as usize] = v.id(&[b]).unwrap_or(NONE);
                }
            } else {
                fallback[b as usize] = v.byte_token(b).unwrap_or(NONE);
            }
        }
        Bpe {
            byte_level,
            ignore_merges: false,
            n_vocab,
            syms,
            merges: table,
            byte_sym,
            fallback,
        }
    }

    /// The token id of a whole raw text, if it is one.
    pub fn token(&self, raw: &[u8]) -> Option<u32> {
        self.syms.get(raw).copied().filter(|&s| s < self.n_vocab)
    }

    #[inline]
    fn rank(&self, a: u32, b: u32) -> Option<(u32, u32)> {
        if a == NONE || b == NONE {
            return None;
        }
        self.merges.get(&(a, b)).copied()
    }

    /// Appends the tokens of one pre-tokenized word.
    pub fn encode_word(&self, word: &[u8], out: &mut Vec<u32>, s: &mut Scratch) {
        if word.is_empty() {
            return;
        }
        if self.ignore_merges
            && let Some(id) = self.token(word)
        {
            out.push(id);
            return;
        }
        s.syms.clear();
        if self.byte_level {
            for (i, &b) in word.iter().enumerate() {
                s.syms.push(Sym {
                    start: i as u32,
                    end: i as u32 + 1,
                    id: self.byte_sym[b as usize],
                    prev: 0,
                    next: 0,
                });
            }
        } else {
            let mut i = 0;
            while i < word.len() {
                let n = utf8_len(word[i]).min(word.len() - i);
                let id = self.syms.get(&word[i..i + n]).copied().unwrap_or(NONE);
                s.syms.push(Sym {
                    start: i as u32,
                    end: (i + n) as u32,
                    id,
                    prev: 0,
                    next: 0,
                });
                i += n;
            }
        }
        if s.syms.len() < HEAP_MIN {
            self.merge_scan(s);
            for k in 0..s.syms.len() {
                let sym = s.syms[k];
                self.emit(word, sym, out);
            }
        } else {
            self.merge_heap(s);
            let mut k = 0;
            while k != NONE {
                let sym = s.syms[k as usize];
                self.emit(word, sym, out);
                k = sym.next;
            }
        }
    }

    fn emit(&self, word: &[u8], sym: Sym, out: &mut Vec<u32>) {
        if sym.id < self.n_vocab {
            out.push(sym.id);
        } else {
            for &b in &word[sym.start as usize..sym.end as usize] {
                let t = self.fallback[b as usize];
                if t != NONE {
                    out.push(t);
                }
            }
        }
    }

    /// Short words: keep the rank of every adjacent pair and repeatedly merge the lowest (the
    /// leftmost among equals), the same order as llama.cpp's queue.
    fn merge_scan(&self, s: &mut Scratch) {
        let syms = &mut s.syms;
        let ranks = &mut s.ranks;
        ranks.clear();
        let mut results = Vec::new();
        for w in syms.windows(2) {
            let r = self.rank(w[0].id, w[1].id);
            ranks.push(r.map_or(NONE, |r| r.0));
            results.push(r.map_or(NONE, |r| r.1));
        }
        loop {
            let mut best = NONE;
            let mut at = 0;
            for (i, &r) in ranks.iter().enumerate() {
                if r < best {
                    best = r;
                    at = i;
                }
            }
            if best == NONE {
                return;
            }
            syms[at].end = syms[at + 1].end;
            syms[at].id = results[at];
            syms.remove(at + 1);
            ranks.remove(at);
            results.remove(at);
            if at > 0 {
                let r = self.rank(syms[at - 1].id, syms[at].id);
                ranks[at - 1] = r.map_or(NONE, |r| r.0);
                results[at - 1] = r.map_or(NONE, |r| r.1);
            }
            if at < ranks.len() {
                let r = self.rank(syms[at].id, syms[at + 1].id);
                ranks[at] = r.map_or(NONE, |r| r.0);
                results[at] = r.map_or(NONE, |r| r.1);
            }
        }
    }

    /// Long words: a priority queue of (rank, left index), with stale entries skipped.
    fn merge_heap(&self, s: &mut Scratch) {
        let syms = &mut s.syms;
        let n = syms.len() as u32;
        for (i, sym) in syms.iter_mut().enumerate() {
            sym.prev = if i == 0 { NONE } else { i as u32 - 1 };
            sym.next = if i as u32 + 1 == n {
                NONE
            } else {
                i as u32 + 1
            };
        }
        let heap = &mut s.heap;
        heap.clear();
        let push = |heap: &mut BinaryHeap<_>, syms: &[Sym], l: u32, r: u32| {
            if l == NONE || r == NONE {
                return;
            }
            let (a, b) = (syms[l as usize].id, syms[r as usize].id);
            if let Some((rank, _)) = self.rank(a, b) {
                heap.push(Reverse((rank, l, a, b)));
            }
        };
        for i in 1..n {
            push(heap, syms, i - 1, i);
        }
        while let Some(Reverse((_, l, a, b))) = heap.pop() {
            let left = syms[l as usize];
            let r = left.next;
            if left.end == left.start || r == NONE {
                continue;
            }
            let right = syms[r as usize];
            if left.id != a || right.id != b {
                continue; // one side changed since this pair was queued
            }
            let (_, res) = self.rank(a, b).expect("queued pairs have a merge");
            let merged = &mut syms[l as usize];
            merged.end = right.end;
            merged.id = res;
            merged.next = right.next;
            syms[r as usize].end = syms[r as usize].start; // dead
            if right.next != NONE {
                syms[right.next as usize].prev = l;
            }
            push(heap, syms, left.prev, l);
            push(heap, syms, l, right.next);
        }
    }
}

/// Length of a UTF-8 sequence from its first byte (1 for stray continuation bytes).
#[inline]
pub(super) fn utf8_len(b: u8) -> usize {
    match b {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_roundtrip() {
        let t = byte_to_char();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
        assert_eq!(char_to_byte('中'), None);
        assert_eq!(decode_byte_level("ĠhelloĊ").unwrap(), b" hello\n");
    }
}
