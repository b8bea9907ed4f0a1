//! WordPiece (`tokenizer.ggml.model = bert`): BERT normalization (lowercase, accent stripping,
//! punctuation and CJK characters as words of their own), then greedy longest-match per word.
//! The GGUF vocabulary marks word starts with U+2581 instead of marking continuations with
//! `##`, so each word is looked up with a leading U+2581.

use super::unicode::{self, CONTROL, MARK, PUNCTUATION, SYMBOL, WHITESPACE};
use super::vocab::Vocab;

/// The CJK ranges BERT splits per character (one bound as in the reference implementation).
fn is_chinese(cp: u32) -> bool {
    matches!(cp,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

fn words(v: &Vocab, text: &str) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars() {
        let mut cp = c as u32;
        if v.strip_accents {
            cp = unicode::nfd_first(cp);
        }
        let f = unicode::flags(cp);
        if f & WHITESPACE != 0 {
            if !words.last().expect("non-empty").is_empty() {
                words.push(String::new());
            }
            continue;
        }
        if cp == 0 || cp == 0xFFFD || f & CONTROL != 0 {
            continue;
        }
        if v.strip_accents && f & MARK != 0 {
            continue;
        }
        let out = if v.lowercase {
            unicode::to_lower(cp)
        } else {
            cp
        };
        let ch = char::from_u32(out).unwrap_or('\u{FFFD}');
        if f & PUNCTUATION != 0 || (cp < 0x7F && f & SYMBOL != 0) || is_chinese(cp) {
            if !words.last().expect("non-empty").is_empty() {
                words.push(String::new());
            }
            words.last_mut().expect("non-empty").push(ch);
            words.push(String::new());
        } else {
            words.last_mut().expect("non-empty").push(ch);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

pub(super) fn encode(v: &Vocab, text: &str, out: &mut Vec<u32>) {
    for word in words(v, text) {
        if word.is_empty() {
            continue;
        }
        let w = format!("\u{2581}{word}");
        let b = w.as_bytes();
        let n = b.len();
        let mark = out.len();
        let mut i = 0;
        while i < n {
            let mut j = n.min(i + v.max_token_len + 1);
            let mut hit = None;
            while j > i {
                if let Some(id) = v.id(&b[i..j]) {
                    hit = Some((id, j));
                    break;
                }
                j -= 1;
            }
            match hit {
                Some((id, j)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    out.truncate(mark); // the whole word becomes <unk>
                    break;
                }
            }
        }
        if out.len() == mark
            && let Some(unk) = v.specials.unk
        {
            out.push(unk);
        }
    }
}
