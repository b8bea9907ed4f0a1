//! SentencePiece vocabularies (`tokenizer.model`, a protobuf `ModelProto`) as GGUF metadata,
//! as convert_hf_to_gguf.py writes them for Llama-2-style, Gemma and Phi-3 checkpoints.
//!
//! Only the pieces are read (field 1: each a message of piece text, score and type); the
//! trainer and normalizer specs are skipped, as the converter reads only pieces too.

use std::path::Path;

use serde_json::Value as Json;

use super::Kv;
use super::checkpoint::{bad, read_json};
use crate::error::Result;
use crate::gguf::{Array, Value};

const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;
const BYTE: i32 = 6;

struct Piece {
    text: String,
    score: f32,
    ty: i32,
}

/// A protobuf reader over a byte slice: just what `ModelProto` needs.
struct Proto<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Proto<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.b.get(self.at)?;
            self.at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// The next field: (number, wire type, its bytes for length-delimited and fixed fields,
    /// its value for varints).
    fn field(&mut self) -> Option<(u64, u64, &'a [u8], u64)> {
        let key = self.varint()?;
        let (num, wire) = (key >> 3, key & 7);
        let take = |p: &mut Self, n: usize| {
            let s = p.b.get(p.at..p.at.checked_add(n)?)?;
            p.at += n;
            Some(s)
        };
        match wire {
            0 => Some((num, wire, &[][..], self.varint()?)),
            1 => Some((num, wire, take(self, 8)?, 0)),
            2 => {
                let n = usize::try_from(self.varint()?).ok()?;
                Some((num, wire, take(self, n)?, 0))
            }
            5 => Some((num, wire, take(self, 4)?, 0)),
            _ => None,
        }
    }

    fn done(&self) -> bool {
        self.at >= self.b.len()
    }
}

fn pieces(dir: &Path) -> Result<Vec<Piece>> {
    let path = dir.join("tokenizer.model");
    let bytes = std::fs::read(&path).map_err(|e| crate::error::Error::io(&path, e))?;
    parse(&bytes).map_err(|what| {
        bad(
            dir,
            format!("tokenizer.model is not a SentencePiece model: {what}"),
        )
    })
}

/// The pieces of a serialized `ModelProto`.
fn parse(bytes: &[u8]) -> std::result::Result<Vec<Piece>, &'static str> {
    let mut p = Proto { b: bytes, at: 0 };
    let mut out = Vec::new();
    while !p.done() {
        let (num, wire, body, _) = p.field().ok_or("truncated field")?;
        if num != 1 || wire != 2 {
            continue;
        }
        let mut q = Proto { b: body, at: 0 };
        let mut piece = Piece {
            text: String::new(),
            score: 0.0,
            ty: NORMAL,
        };
        while !q.done() {
            let (n, w, b, v) = q.field().ok_or("truncated piece")?;
            match (n, w) {
                (1, 2) => {
                    piece.text =
                        String::from_utf8(b.to_vec()).map_err(|_| "a piece is not UTF-8")?
                }
                (2, 5) => piece.score = f32::from_le_bytes(b.try_into().expect("4 bytes")),
                (3, 0) => piece.ty = v as i32,
                _ => {}
            }
        }
        out.push(piece);
    }
    if out.is_empty() {
        return Err("no pieces");
    }
    Ok(out)
}

fn looks_special(t: &str) -> bool {
    super::vocab::looks_special(t)
}

/// Writes `tokenizer.ggml.*` for a SentencePiece checkpoint. `phi3` follows Phi-3's own
/// variant (added tokens from tokenizer.json too, no look-special test).
pub(super) fn write(
    dir: &Path,
    config: &serde_json::Map<String, Json>,
    kv: &mut Kv,
    phi3: bool,
) -> Result<usize> {
    let sp = pieces(dir)?;
    let n_vocab = config
        .get("vocab_size")
        .and_then(Json::as_u64)
        .map_or(sp.len(), |n| n as usize);
    let mut tokens: Vec<String> = (0..n_vocab).map(|i| format!("[PAD{i}]")).collect();
    let mut scores = vec![-10000.0f32; n_vocab];
    let mut types = vec![UNUSED; n_vocab];
    for (i, p) in sp.iter().enumerate().take(n_vocab) {
        tokens[i] = p.text.clone();
        scores[i] = p.score;
        // the processor's tests: user-defined pieces count as normal
        types[i] = match p.ty {
            UNKNOWN | CONTROL | UNUSED | BYTE => p.ty,
            _ => NORMAL,
        };
    }
    if let Some(Json::Object(added)) = read_json(dir, "added_tokens.json")? {
        for (text, id) in added {
            if let Some(id) = id.as_u64().map(|i| i as usize).filter(|&i| i < n_vocab) {
                tokens[id] = text.clone();
                scores[id] = -1000.0;
                types[id] = USER_DEFINED;
            }
        }
    }
    let mut apply = |entries: Vec<(usize, String, bool)>, look: bool| {
        for (id, text, special) in entries {
            if id >= n_vocab {
                continue;
            }
            if special || (look && looks_special(&text)) {
                tokens[id] = text;
                types[id] = CONTROL;
            } else {
                tokens[id] = if look {
                    text.replace('\u{2581}', " ")
                } else {
                    text
                };
                types[id] = USER_DEFINED;
            }
            scores[id] = -1000.0;
        }
    };
    let decoder_entries = |tc: &Json| -> Vec<(usize, String, bool)> {
        tc.get("added_tokens_decoder")
            .and_then(Json::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(id, t)| {
                        Some((
                            id.parse().ok()?,
                            t.get("content")?.as_str()?.to_owned(),
                            t.get("special").and_then(Json::as_bool).unwrap_or(false),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    if let Some(tc) = read_json(dir, "tokenizer_config.json")? {
        apply(decoder_entries(&tc), !phi3);
    }
    if phi3 && let Some(tj) = read_json(dir, "tokenizer.json")? {
        let entries = tj
            .get("added_tokens")
            .and_then(Json::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| {
                        Some((
                            t.get("id")?.as_u64()? as usize,
                            t.get("content")?.as_str()?.to_owned(),
                            t.get("special").and_then(Json::as_bool).unwrap_or(false),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        apply(entries, false);
    }
    let n = tokens.len();
    kv.set("tokenizer.ggml.model", "llama");
    kv.set("tokenizer.ggml.pre", "default");
    kv.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    kv.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    kv.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    super::vocab::special_vocab(dir, config, Vec::new(), Some(n), kv)?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(text: &str, score: f32, ty: Option<u8>) -> Vec<u8> {
        let mut b = vec![0x0a, text.len() as u8];
        b.extend_from_slice(text.as_bytes());
        b.push(0x15);
        b.extend_from_slice(&score.to_le_bytes());
        if let Some(t) = ty {
            b.extend_from_slice(&[0x18, t]);
        }
        let mut out = vec![0x0a, b.len() as u8];
        out.extend(b);
        out
    }

    #[test]
    fn model_protos_parse_and_skip_other_fields() {
        let mut m = piece("<unk>", 0.0, Some(2));
        m.extend(piece("\u{2581}a", -1.5, None));
        // a trainer spec (field 2) with a varint inside: skipped
        m.extend([0x12, 0x02, 0x18, 0x02]);
        m.extend(piece("<0x0A>", 0.0, Some(6)));
        let p = parse(&m).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!((p[0].text.as_str(), p[0].ty), ("<unk>", UNKNOWN));
        assert_eq!(
            (p[1].text.as_str(), p[1].score, p[1].ty),
            ("\u{2581}a", -1.5, NORMAL)
        );
        assert_eq!(p[2].ty, BYTE);
        assert!(parse(&m[..m.len() - 3]).is_err(), "a cut piece");
        assert!(parse(&[0x12, 0x00]).is_err(), "no pieces");
        assert!(
            parse(&[
                0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
            ])
            .is_err()
        );
    }
}
