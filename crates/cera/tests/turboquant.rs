//! TurboQuant (tq3/tq4 KV caches) against an independent NumPy implementation of the paper's
//! quantizer (`scripts/gen-turboquant-fixtures.py` → `fixtures/turboquant.json`): the
//! Lloyd–Max codebooks, the random signs, the randomized Hadamard rotation and the codes and
//! scale of encoded vectors.

use cera::backend::{KvType, Rotation, turbo};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/turboquant.json")).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn codebooks_match_the_numpy_reference() {
    let fx = fixture();
    for (key, want) in fx["codebooks"].as_object().unwrap() {
        let (bits, b) = key.split_once('_').unwrap();
        let (bits, b): (u32, usize) = (bits.parse().unwrap(), b.parse().unwrap());
        let got = &turbo::codebook(bits, b).centroids;
        let want = floats(want);
        assert_eq!(got.len(), want.len(), "{key}");
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 2e-5, "{key}: {got:?} vs {want:?}");
        }
    }
}

#[test]
fn signs_and_rotation_match_the_numpy_reference() {
    let fx = fixture();
    for (b, want) in fx["signs"].as_object().unwrap() {
        let b: usize = b.parse().unwrap();
        assert_eq!(turbo::signs(b), floats(want).as_slice(), "signs of {b}");
    }
    for v in fx["vectors"].as_array().unwrap() {
        let b = v["b"].as_u64().unwrap() as usize;
        let rot = Rotation::for_side(KvType::TQ3, b, true, true);
        assert_eq!(rot.n, b);
        let mut y = floats(&v["x"]);
        rot.forward(&mut y);
        let want = floats(&v["rotated"]);
        let norm = want.iter().map(|x| x * x).sum::<f32>().sqrt();
        for (g, w) in y.iter().zip(&want) {
            assert!((g - w).abs() < 1e-5 * norm, "rotation of {b}: {g} vs {w}");
        }
    }
}

#[test]
fn encoded_vectors_match_the_numpy_reference() {
    let fx = fixture();
    let (mut total, mut differ) = (0, 0);
    for v in fx["vectors"].as_array().unwrap() {
        let (bits, b) = (
            v["bits"].as_u64().unwrap() as u32,
            v["b"].as_u64().unwrap() as usize,
        );
        let cb = turbo::codebook(bits, b);
        let y = floats(&v["rotated"]);
        let mut bytes = vec![0u8; turbo::block_bytes(bits, b)];
        turbo::encode_block(bits, &y, &mut bytes);
        let mut got = vec![0f32; b];
        turbo::decode_block(bits, &bytes, &mut got);
        let scale = v["scale"].as_f64().unwrap() as f32;
        // the scale is kept in f16
        let got_scale = got[0] / cb.centroids[v["codes"][0].as_u64().unwrap() as usize];
        assert!(
            (got_scale - scale).abs() < 1e-3 * scale.abs(),
            "{bits} bits, {b}: scale {got_scale} vs {scale}"
        );
        for (j, (g, c)) in got.iter().zip(v["codes"].as_array().unwrap()).enumerate() {
            let want = scale * cb.centroids[c.as_u64().unwrap() as usize];
            total += 1;
            if (g - want).abs() > 2e-3 * scale.abs() * 3.0 {
                differ += 1;
                eprintln!("{bits} bits, {b}: coordinate {j}: {g} vs {want}");
            }
        }
    }
    // a coordinate within float rounding of a decision boundary may fall either way
    assert!(
        differ * 200 <= total,
        "{differ} of {total} coordinates differ"
    );
}
