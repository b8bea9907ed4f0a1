//! What the media parity tests (`vision_parity.rs`, `audio_parity.rs`) share: the rows an
//! encoding hands the model, mtmd's rows from a fixture, and how close they are.
#![allow(dead_code)]

use cera::models::vision::{EncodedMedia, MediaPart};

/// Every embedding part's rows, in order.
pub fn embedding_rows(enc: &EncodedMedia) -> Vec<f32> {
    enc.parts
        .iter()
        .filter_map(|p| match p {
            MediaPart::Embeddings(r) => Some(r.as_slice()),
            MediaPart::Text(_) => None,
        })
        .flatten()
        .copied()
        .collect()
}

/// A fixture's rows (f16 LE, as the generators store mtmd's).
pub fn f16_rows(path: &str) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    bytes
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect()
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

/// Each row's cosine against the fixture at `path` (rows of `width`); the counts must agree.
pub fn row_cosines(enc: &EncodedMedia, path: &str, width: usize) -> Vec<f64> {
    let rows = embedding_rows(enc);
    let reference = f16_rows(path);
    assert_eq!(
        rows.len(),
        reference.len(),
        "{path}: the media's token count"
    );
    rows.chunks(width)
        .zip(reference.chunks(width))
        .map(|(a, b)| cosine(a, b))
        .collect()
}

/// The least of [`row_cosines`].
pub fn least_cosine(enc: &EncodedMedia, path: &str, width: usize) -> f64 {
    row_cosines(enc, path, width)
        .into_iter()
        .fold(1f64, f64::min)
}
