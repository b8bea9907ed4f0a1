//! Token → bytes, and streaming decoding that only ever emits whole UTF-8 characters.

use super::Tokenizer;
use super::bpe::char_to_byte;
use super::vocab::{Kind, Vocab, attr};

/// The bytes each token stands for (llama.cpp's `token_to_piece` with `special = true`):
/// control, unknown and user-defined tokens as written, normal tokens with U+2581 turned back
/// into spaces (SentencePiece) or through the GPT-2 byte table (byte-level BPE), byte tokens
/// as their byte, and tokens of undefined type as nothing.
pub(super) fn pieces(v: &Vocab, byte_level: bool) -> Vec<Box<[u8]>> {
    (0..v.n())
        .map(|i| {
            let text = &v.texts[i];
            let a = v.attrs[i];
            let bytes: Vec<u8> = if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
                text.as_bytes().to_vec()
            } else if a & attr::NORMAL != 0 {
                if v.kind == Kind::Bpe && byte_level {
                    // Characters outside the byte table (rare, hand-added tokens) pass through
                    // as UTF-8; llama.cpp renders them as "[UNK_BYTE_0x..]".
                    let mut out = Vec::with_capacity(text.len());
                    for c in text.chars() {
                        match char_to_byte(c) {
                            Some(b) => out.push(b),
                            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                    out
                } else {
                    text.replace('\u{2581}', " ").into_bytes()
                }
            } else if a & attr::BYTE != 0 {
                v.byte_of(i as u32).map(|b| vec![b]).unwrap_or_default()
            } else {
                Vec::new()
            };
            bytes.into_boxed_slice()
        })
        .collect()
}

/// Decodes a stream of tokens into text, one token at a time, never splitting a UTF-8
/// character: bytes of an incomplete character are held back until the token that completes
/// it arrives. Bytes that can never form a character come out as U+FFFD.
///
/// ```no_run
/// # fn demo(tok: &cera::tokenizer::Tokenizer, ids: &[u32]) {
/// let mut dec = tok.stream_decoder();
/// for &id in ids {
///     print!("{}", dec.push(id));
/// }
/// print!("{}", dec.finish());
/// # }
/// ```
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    pending: Vec<u8>,
    special: bool,
}

impl<'a> StreamDecoder<'a> {
    pub(super) fn new(tok: &'a Tokenizer) -> Self {
        StreamDecoder {
            tok,
            pending: Vec::new(),
            special: true,
        }
    }

    /// Whether control and unknown tokens are rendered as their text (default: true, as
    /// [`Tokenizer::decode`]); generation output usually wants false.
    pub fn render_special(mut self, on: bool) -> Self {
        self.special = on;
        self
    }

    /// Adds one token and returns the text completed by it (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        if self.special || !self.tok.is_control(id) && !self.tok.is_unknown(id) {
            self.pending.extend_from_slice(self.tok.token_bytes(id));
        }
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let ok = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..ok]).expect("valid prefix"));
                    match e.error_len() {
                        // an incomplete character at the end: wait for more bytes
                        None => {
                            self.pending.drain(..ok);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..ok + bad);
                        }
                    }
                }
            }
        }
    }

    /// Flushes what is held back (an unfinished character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }

    /// Bytes held back, waiting for the rest of a character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }
}
