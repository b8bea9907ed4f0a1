//! Codepoint classification shared by the pre-tokenizers and WordPiece: general category (one
//! of eight groups), the `White_Space` property, simple lowercase and the first codepoint of
//! the NFD form. Tables are Unicode 15.1, the version llama.cpp's are built from.

use std::sync::OnceLock;

use super::unicode_data::{CATEGORY_RUNS, LOWERCASE, NFD_FIRST};

/// Flags of one codepoint: exactly one category bit, plus [`WHITESPACE`] where it applies.
pub(super) type Flags = u16;

pub(super) const UNDEFINED: Flags = 1 << 0;
pub(super) const NUMBER: Flags = 1 << 1;
pub(super) const LETTER: Flags = 1 << 2;
#[cfg_attr(not(test), allow(dead_code))]
pub(super) const SEPARATOR: Flags = 1 << 3;
pub(super) const MARK: Flags = 1 << 4;
pub(super) const PUNCTUATION: Flags = 1 << 5;
pub(super) const SYMBOL: Flags = 1 << 6;
pub(super) const CONTROL: Flags = 1 << 7;
pub(super) const WHITESPACE: Flags = 1 << 8;
/// The category bits.
pub(super) const CATEGORIES: Flags = 0xFF;

/// Unicode `White_Space` (PropList.txt).
const WHITESPACE_CPS: [u32; 25] = [
    0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
    0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
];

const BLOCK_BITS: u32 = 8;
const BLOCK: usize = 1 << BLOCK_BITS;
const N_BLOCKS: usize = 0x110000 >> BLOCK_BITS;

/// Two-level table: block index per 256 codepoints, then deduplicated blocks of flags.
struct Table {
    index: Vec<u16>,
    blocks: Vec<[Flags; BLOCK]>,
}

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        let mut flat = vec![UNDEFINED; 0x110000];
        for (i, &(start, code)) in CATEGORY_RUNS.iter().enumerate() {
            let end = CATEGORY_RUNS.get(i + 1).map_or(0x110000, |r| r.0);
            flat[start as usize..end as usize].fill(1 << code);
        }
        for &cp in &WHITESPACE_CPS {
            flat[cp as usize] |= WHITESPACE;
        }
        let mut index = Vec::with_capacity(N_BLOCKS);
        let mut blocks: Vec<[Flags; BLOCK]> = Vec::new();
        let mut seen = std::collections::HashMap::new();
        for chunk in flat.chunks_exact(BLOCK) {
            let block: [Flags; BLOCK] = chunk.try_into().expect("block size");
            let id = *seen.entry(block).or_insert_with(|| {
                blocks.push(block);
                blocks.len() - 1
            });
            index.push(id as u16);
        }
        Table { index, blocks }
    })
}

/// Flags of a codepoint; values past U+10FFFF are undefined.
#[inline]
pub(super) fn flags(cp: u32) -> Flags {
    let t = table();
    match t.index.get((cp >> BLOCK_BITS) as usize) {
        Some(&b) => t.blocks[b as usize][(cp as usize) & (BLOCK - 1)],
        None => UNDEFINED,
    }
}

/// The simple lowercase mapping (UnicodeData.txt field 13).
pub(super) fn to_lower(cp: u32) -> u32 {
    if cp < 0x80 {
        return (cp as u8).to_ascii_lowercase() as u32;
    }
    match LOWERCASE.binary_search_by_key(&cp, |p| p.0) {
        Ok(i) => LOWERCASE[i].1,
        Err(_) => cp,
    }
}

/// The first codepoint of the canonical decomposition (what BERT's accent stripping keeps).
pub(super) fn nfd_first(cp: u32) -> u32 {
    let i = NFD_FIRST.partition_point(|r| r.0 <= cp);
    match i.checked_sub(1).map(|i| NFD_FIRST[i]) {
        Some((first, last, target)) if first <= cp && cp <= last => target,
        _ => cp,
    }
}

/// A string decoded into codepoints with their byte offsets (one extra offset at the end), so
/// pre-tokenizers can look ahead by codepoints and still cut the original bytes.
pub(super) struct Cps {
    pub cps: Vec<u32>,
    pub offs: Vec<u32>,
}

impl Cps {
    pub fn new(s: &str) -> Cps {
        let mut cps = Vec::with_capacity(s.len());
        let mut offs = Vec::with_capacity(s.len() + 1);
        for (i, c) in s.char_indices() {
            cps.push(c as u32);
            offs.push(i as u32);
        }
        offs.push(s.len() as u32);
        Cps { cps, offs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories() {
        assert_eq!(flags('a' as u32), LETTER);
        assert_eq!(flags('7' as u32), NUMBER);
        assert_eq!(flags(' ' as u32), SEPARATOR | WHITESPACE);
        assert_eq!(flags('\n' as u32), CONTROL | WHITESPACE);
        assert_eq!(flags(0x3000), SEPARATOR | WHITESPACE);
        assert_eq!(flags('!' as u32), PUNCTUATION);
        assert_eq!(flags('$' as u32), SYMBOL);
        assert_eq!(flags(0x301), MARK);
        assert_eq!(flags(0x4E2D), LETTER);
        assert_eq!(flags(0x2EBF0), LETTER); // CJK extension I, new in 15.1
        assert_eq!(flags(0x10D40), UNDEFINED); // Garay, new in 16.0
        assert_eq!(flags(0x1F600), SYMBOL);
        assert_eq!(flags(0xE000), CONTROL); // private use
        assert_eq!(flags(0x110000), UNDEFINED);
        assert_eq!(crate::tokenizer::UNICODE_VERSION, "15.1.0");
    }

    #[test]
    fn case_and_nfd() {
        assert_eq!(to_lower('A' as u32), 'a' as u32);
        assert_eq!(to_lower(0xC9), 0xE9);
        assert_eq!(to_lower(0x130), 'i' as u32);
        assert_eq!(to_lower(0x416), 0x436);
        assert_eq!(nfd_first(0xE9), 'e' as u32);
        assert_eq!(nfd_first(0xC0), 'A' as u32);
        assert_eq!(nfd_first('x' as u32), 'x' as u32);
        assert_eq!(nfd_first(0xAC00), 0x1100); // Hangul syllable
    }
}
