//! A conversation's media in its checkpoint: the encoded images and clips (their marker text
//! and embedding rows) after the conversation's JSON, so a restored chat renders and prefills
//! its history as the saved one did, without the mmproj or the files. Layout (the state codec's
//! little-endian, every length checked on reading): the count, then per media its rows and its
//! parts, each a kind byte (0 text, 1 rows) and a length-prefixed payload.

use crate::error::Result;
use crate::models::common::media::{EncodedMedia, MediaPart};
use crate::state::codec::{Reader, Writer};

/// The byte that ends the conversation's JSON when media follow (JSON text never holds one).
pub(super) const SEPARATOR: u8 = 0;

/// Appends `media` to `w`.
pub(super) fn write(media: &[EncodedMedia], w: &mut Writer) {
    w.u64(media.len() as u64);
    for m in media {
        w.u64(m.n_embd_rows as u64);
        w.u64(m.parts.len() as u64);
        for p in &m.parts {
            match p {
                MediaPart::Text(t) => {
                    w.u8(0);
                    w.bytes(t.as_bytes());
                }
                MediaPart::Embeddings(rows) => {
                    w.u8(1);
                    w.f32s(rows);
                }
            }
        }
    }
}

/// Reads what [`write`] wrote, for a model whose embeddings are `n_embd` wide: every part of
/// rows whole rows, their count the one recorded.
pub(super) fn read(r: &mut Reader<'_>, n_embd: usize) -> Result<Vec<EncodedMedia>> {
    // (each media takes at least its two counts, each part at least a kind and a length)
    let n = r.len("media count", r.remaining() / 16)?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let n_embd_rows = r.len("media rows", usize::MAX)?;
        let n_parts = r.len("media parts", r.remaining() / 9)?;
        let mut parts = Vec::with_capacity(n_parts);
        let mut rows_seen = 0;
        for _ in 0..n_parts {
            parts.push(match r.u8("media part kind")? {
                0 => {
                    let t = r.bytes("media text")?;
                    let t = std::str::from_utf8(t)
                        .map_err(|_| r.error(format!("media {i}: marker text is not UTF-8")))?;
                    MediaPart::Text(t.to_owned())
                }
                1 => {
                    let rows = r.f32s("media rows")?;
                    if n_embd == 0 || !rows.len().is_multiple_of(n_embd) {
                        return Err(r.error(format!(
                            "media {i}: {} values are not rows of the model's {n_embd}",
                            rows.len()
                        )));
                    }
                    rows_seen += rows.len() / n_embd;
                    MediaPart::Embeddings(rows)
                }
                k => return Err(r.error(format!("media {i}: unknown part kind {k}"))),
            });
        }
        if rows_seen != n_embd_rows {
            return Err(r.error(format!(
                "media {i}: {rows_seen} rows of embeddings, but {n_embd_rows} recorded"
            )));
        }
        out.push(EncodedMedia { parts, n_embd_rows });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<EncodedMedia> {
        vec![EncodedMedia {
            parts: vec![
                MediaPart::Text("<|image_start|>".into()),
                MediaPart::Embeddings((0..12).map(|i| i as f32 * 0.5).collect()),
                MediaPart::Text("<|image_end|>".into()),
            ],
            n_embd_rows: 3,
        }]
    }

    fn bytes(m: &[EncodedMedia]) -> Vec<u8> {
        let mut w = Writer::default();
        write(m, &mut w);
        w.buf
    }

    #[test]
    fn round_trips() {
        let b = bytes(&sample());
        let mut r = Reader::new(&b, "chat checkpoint");
        assert_eq!(read(&mut r, 4).unwrap(), sample());
        r.finish().unwrap();
    }

    #[test]
    fn hostile_sections_are_named() {
        let b = bytes(&sample());
        // rows of another width, a cut, a wrong row count, an unknown part
        let e = read(&mut Reader::new(&b, "ck"), 5).unwrap_err().to_string();
        assert!(e.contains("not rows of the model's 5"), "{e}");
        for cut in [1, 9, 30, b.len() - 3] {
            let e = read(&mut Reader::new(&b[..cut], "ck"), 4)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("truncated") || e.contains("at most"),
                "{cut}: {e}"
            );
        }
        let mut wrong = sample();
        wrong[0].n_embd_rows = 4;
        let e = read(&mut Reader::new(&bytes(&wrong), "ck"), 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("3 rows of embeddings, but 4 recorded"), "{e}");
        let mut odd = b.clone();
        odd[24] = 7; // the first part's kind
        let e = read(&mut Reader::new(&odd, "ck"), 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown part kind 7"), "{e}");
    }
}
