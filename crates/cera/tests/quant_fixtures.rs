//! Dequantization must equal `gguf.quants.dequantize` bit for bit on random blocks of every
//! type. Fixtures come from `scripts/gen-quant-fixtures.py random`.

use std::path::PathBuf;

use cera::quant::{self, GgmlType};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quant")
}

/// Runs one fixture; returns a description of the first mismatch, if any.
fn check(ty: GgmlType) -> Result<usize, String> {
    let path = fixture_dir().join(format!("{}.bin", ty.name()));
    let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let n_blocks = u32::from_le_bytes(data[..4].try_into().unwrap()) as usize;
    let (mut be, mut bb) = ty.block().unwrap();
    if be == 1 {
        // plain float fixtures group 64 elements per record
        be = 64;
        bb *= 64;
    }
    let raw = &data[4..4 + n_blocks * bb];
    let expect: Vec<f32> = data[4 + n_blocks * bb..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(expect.len(), n_blocks * be, "{ty}: fixture size");
    let got = quant::dequantize_to_vec(ty, raw, expect.len()).map_err(|e| e.to_string())?;
    for (i, (g, e)) in got.iter().zip(&expect).enumerate() {
        if g.to_bits() != e.to_bits() {
            return Err(format!(
                "{ty}: element {i} (block {}, index {}): got {g:e} ({:#010x}), want {e:e} ({:#010x})",
                i / be,
                i % be,
                g.to_bits(),
                e.to_bits()
            ));
        }
    }
    Ok(expect.len())
}

#[test]
fn every_fixture_type_matches_reference_bit_for_bit() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(fixture_dir()).expect("fixture dir") {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".bin") else {
            continue;
        };
        let ty = GgmlType::from_name(stem).unwrap_or_else(|| panic!("unknown fixture {name}"));
        match check(ty) {
            Ok(n) => {
                checked += 1;
                eprintln!("{ty}: {n} values match");
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(
        checked + failures.len() >= 26,
        "expected fixtures for 26 types"
    );
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}
