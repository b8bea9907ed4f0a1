//! Reference quantizers of the legacy, K-quant and IQ4 formats: round-trip error within the
//! bounds of ggml's test-quantize-fns, zero handling, the precomputed sums of Q8_1/Q8_K, and
//! robustness against arbitrary bytes and hostile floats.

use cera::quant::{self, GgmlType, as_blocks, q8_1::BlockQ8_1, q8_k::BlockQ8_K};

const TYPES: [GgmlType; 14] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// ggml's `MAX_QUANTIZATION_TOTAL_ERROR*` bounds.
fn max_error(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::Q2_K => 0.0075,
        GgmlType::Q3_K => 0.0040,
        _ => 0.002,
    }
}

/// test-quantize-fns' synthetic data: `0.1 + 2*cos(i + offset)` (the sum taken in double).
fn ggml_test_data(n: usize, offset: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1 + (2.0 * (i as f32 + offset).cos()) as f64) as f32)
        .collect()
}

/// test-quantize-fns' `array_rmse`: `sqrt(sum of squared differences) / n`. Despite the name it
/// is the RMSE divided by `sqrt(n)`, and the bounds are stated in it.
fn ggml_rmse(a: &[f32], b: &[f32]) -> f32 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    (sum.sqrt() as f32) / a.len() as f32
}

fn true_rmse(a: &[f32], b: &[f32]) -> f64 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    (sum / a.len() as f64).sqrt()
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let q = quant::quantize_to_vec(ty, x).unwrap();
    quant::dequantize_to_vec(ty, &q, x.len()).unwrap()
}

/// xorshift64*: deterministic test noise without a dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next_u64() >> 56) as u8).collect()
    }
    /// Roughly normal: sum of four uniforms, centred.
    fn normal(&mut self) -> f32 {
        let u = |r: &mut Rng| (r.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        (u(self) + u(self) + u(self) + u(self) - 2.0) * 1.7
    }
}

/// Input for the golden test: noise at several magnitudes, a zero sub-block, a constant
/// sub-block and an outlier, built from exact float operations only (no libm) so it is the
/// same on every platform.
fn golden_input() -> Vec<f32> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut x: Vec<f32> = (0..256 * 12).map(|_| rng.normal()).collect();
    for (i, b) in x.chunks_exact_mut(256).enumerate() {
        let scale = [1.0, 1e-3, 37.5, 0.25, 1e-6, 1.0][i % 6];
        for v in b.iter_mut() {
            *v *= scale;
        }
    }
    x[256 * 2..256 * 2 + 32].fill(0.0);
    x[256 * 3 + 64..256 * 3 + 96].fill(0.75);
    x[256 * 5 + 17] = 40.0;
    for v in &mut x[256 * 6..256 * 7] {
        *v = v.abs() + 0.5;
    }
    for v in &mut x[256 * 7..256 * 8] {
        *v = -v.abs() - 0.5;
    }
    x
}

/// SHA-256 of `quantize(golden_input())` as produced by ggml's reference quantizers
/// (`quantize_row_*_ref`; `ggml_quantize_chunk` without imatrix for IQ4_NL, whose
/// `quantize_row_iq4_nl_ref` skips the scale search), recorded from a llama.cpp build.
const GGML_GOLDEN: [(GgmlType, &str); 14] = [
    (
        GgmlType::Q4_0,
        "ce9f2ed07b01773c9fc878304f8d0444b83deb200667d364a3f506c2e528503b",
    ),
    (
        GgmlType::Q4_1,
        "84304a7eee0c94d297b2265077d3fd2dd87173444bfda9c097c895236164d145",
    ),
    (
        GgmlType::Q5_0,
        "cf111a48b7ac35f592fa45512d93c372b42159ccf54ef0c08c88e4fe7a7a3140",
    ),
    (
        GgmlType::Q5_1,
        "9ee39e006c06422d574d69eff9bc5a939b7f78b2c108d9a1edb09fd38ec44eec",
    ),
    (
        GgmlType::Q8_0,
        "e08d6eacd5b80c378a6a7927546f741093af86ed392a0e934c0c0503072e4717",
    ),
    (
        GgmlType::Q8_1,
        "861671179eab2f801e29d6e8cec554eb18eab9d757684175992297477fabeabe",
    ),
    (
        GgmlType::Q2_K,
        "3db421a088861b25c242ee366a163ffcb5bad5690a6f88486f41343a6dd61035",
    ),
    (
        GgmlType::Q3_K,
        "f0ab31dff60e897c243f981ca47d7aeda46e25a5df89971d6baefe0260381fbc",
    ),
    (
        GgmlType::Q4_K,
        "398b715ac604a6c0158272697242b0d7f58d0179a1b77a72df66da77d44e8f35",
    ),
    (
        GgmlType::Q5_K,
        "6ab4acaa678a8a1fee9007a92aa6725fd2460e49dabb005dada9673352042e59",
    ),
    (
        GgmlType::Q6_K,
        "d8523f3905c207e3384958902436389d058b4bd4fd120efa3e124cd74d4b78ea",
    ),
    (
        GgmlType::Q8_K,
        "8a51a39a6ca2fa62b5ac4d1c6f1d23b5b96d4fb197260ff6539e79325f560094",
    ),
    (
        GgmlType::IQ4_NL,
        "d7e872db37593adf55bc1e581059ec4f8f0c51aa2f46f2f5bd7fdaeb761ca230",
    ),
    (
        GgmlType::IQ4_XS,
        "dd7444d4cc838c29d9ecab80d2dfca5cd9644d902579d9912e0bb60a9d7e38da",
    ),
];

#[test]
fn quantizers_match_ggml_reference_bytes() {
    use sha2::{Digest, Sha256};
    let x = golden_input();
    let mut failures = Vec::new();
    for (ty, want) in GGML_GOLDEN {
        let q = quant::quantize_to_vec(ty, &x).unwrap();
        let got = format!("{:x}", Sha256::digest(&q));
        if got != want {
            failures.push(format!("{ty}: {got}"));
        }
    }
    assert!(failures.is_empty(), "differ from ggml: {failures:?}");
}

#[test]
fn round_trip_error_within_ggml_bounds() {
    let x = ggml_test_data(32 * 128, 0.0);
    let mut failures = Vec::new();
    for ty in TYPES {
        let y = round_trip(ty, &x);
        let err = ggml_rmse(&x, &y);
        eprintln!(
            "{ty}: ggml error {err:.6} (bound {}), true RMSE {:.6}",
            max_error(ty),
            true_rmse(&x, &y)
        );
        if err.is_nan() || err >= max_error(ty) {
            failures.push(format!("{ty}: {err} >= {}", max_error(ty)));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn round_trip_error_on_other_offsets_and_noise() {
    let mut rng = Rng(0x5eed);
    let noise: Vec<f32> = (0..4096).map(|_| rng.normal()).collect();
    for ty in TYPES {
        for x in [
            ggml_test_data(4096, 0.5),
            ggml_test_data(4096, 3.7),
            noise.clone(),
        ] {
            let err = ggml_rmse(&x, &round_trip(ty, &x));
            assert!(err < max_error(ty), "{ty}: {err}");
        }
    }
}

#[test]
fn q8_0_requantization_is_stable() {
    let x = ggml_test_data(4096, 0.0);
    let once = round_trip(GgmlType::Q8_0, &x);
    let twice = round_trip(GgmlType::Q8_0, &once);
    for (i, (a, b)) in once.iter().zip(&twice).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "element {i}: {a} then {b}");
    }
}

#[test]
fn zero_input_gives_zero_output() {
    let x = vec![0.0f32; 512];
    for ty in TYPES {
        let y = round_trip(ty, &x);
        assert!(y.iter().all(|&v| v == 0.0), "{ty}: {:?}", &y[..8]);
    }
    // Zero blocks next to non-zero ones, and a zero sub-block inside a super-block.
    let mut x = ggml_test_data(1024, 0.0);
    x[256..512].fill(0.0);
    x[600..632].fill(0.0);
    for ty in TYPES {
        let y = round_trip(ty, &x);
        assert!(y.iter().all(|v| v.is_finite()), "{ty}");
        assert!(y[256..512].iter().all(|&v| v == 0.0), "{ty}");
    }
}

#[test]
fn q8_1_stores_scaled_block_sum() {
    let mut rng = Rng(81);
    let x: Vec<f32> = (0..32 * 64).map(|_| rng.normal()).collect();
    let q = quant::quantize_to_vec(GgmlType::Q8_1, &x).unwrap();
    for b in as_blocks::<BlockQ8_1>(&q) {
        let d = half::f16::from_le_bytes(b.d).to_f32();
        let s = half::f16::from_le_bytes(b.s).to_f32();
        let sum: i32 = b.qs.iter().map(|&q| q as i8 as i32).sum();
        let exact = sum as f32 * d;
        // s is `sum * d` rounded to f16, computed from the f32 scale before it too was
        // rounded to f16: two half-ulp roundings, relative 2^-11 each.
        assert!(
            (s - exact).abs() <= exact.abs() * 2f32.powi(-10) + 1e-7,
            "s = {s}, d * sum = {exact}"
        );
    }
}

#[test]
fn q8_k_stores_group_sums() {
    let mut rng = Rng(88);
    let x: Vec<f32> = (0..256 * 8).map(|_| rng.normal()).collect();
    let q = quant::quantize_to_vec(GgmlType::Q8_K, &x).unwrap();
    for b in as_blocks::<BlockQ8_K>(&q) {
        for j in 0..16 {
            let sum: i32 = b.qs[16 * j..16 * j + 16]
                .iter()
                .map(|&q| q as i8 as i32)
                .sum();
            assert_eq!(b.bsum(j) as i32, sum, "group {j}");
        }
        // The largest magnitude maps to -127 (its sign lives in d).
        assert!(b.qs.iter().any(|&q| q as i8 == -127));
    }
}

#[test]
fn q8_1_and_q8_k_dequantize_to_d_times_q() {
    let mut rng = Rng(18);
    let n1 = 40;
    let mut raw = rng.bytes(n1 * 36);
    for b in raw.chunks_exact_mut(36) {
        b[..2].copy_from_slice(&half::f16::from_f32(rng.normal()).to_le_bytes());
    }
    let y = quant::dequantize_to_vec(GgmlType::Q8_1, &raw, n1 * 32).unwrap();
    for (b, y) in as_blocks::<BlockQ8_1>(&raw).iter().zip(y.chunks_exact(32)) {
        let d = half::f16::from_le_bytes(b.d).to_f32();
        for (&q, &v) in b.qs.iter().zip(y) {
            assert_eq!(v.to_bits(), (d * q as i8 as f32).to_bits());
        }
    }

    let nk = 6;
    let mut raw = rng.bytes(nk * 292);
    for b in raw.chunks_exact_mut(292) {
        b[..4].copy_from_slice(&(rng.normal() * 1e-3).to_le_bytes());
    }
    let y = quant::dequantize_to_vec(GgmlType::Q8_K, &raw, nk * 256).unwrap();
    for (b, y) in as_blocks::<BlockQ8_K>(&raw).iter().zip(y.chunks_exact(256)) {
        let d = f32::from_le_bytes(b.d);
        for (&q, &v) in b.qs.iter().zip(y) {
            assert_eq!(v.to_bits(), (d * q as i8 as f32).to_bits());
        }
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = Rng(0xbad);
    for ty in TYPES {
        let (be, bb) = ty.block().unwrap();
        let mut raw = rng.bytes(bb * 64);
        // Include all-ones blocks: NaN/inf scales and every bit set.
        raw[..bb].fill(0xff);
        let y = quant::dequantize_to_vec(ty, &raw, be * 64).unwrap();
        assert_eq!(y.len(), be * 64);
    }
}

#[test]
fn hostile_input_never_panics() {
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        1e-40,
        -1e-45,
        1e30,
        0.0,
        -0.0,
    ];
    for ty in TYPES {
        for &s in &specials {
            // One special value among ordinary ones, and a block made only of it.
            let mut x = ggml_test_data(512, 0.0);
            x[7] = s;
            x[300..].fill(s);
            let _ = round_trip(ty, &x);
        }
        // Tiny values near GROUP_MAX_EPS and huge dynamic range.
        let x: Vec<f32> = (0..512).map(|i| (i as f32 - 256.0) * 1e-17).collect();
        let _ = round_trip(ty, &x);
        let x: Vec<f32> = (0..512u32)
            .map(|i| if i.is_multiple_of(37) { 1e20 } else { 1e-20 })
            .collect();
        let _ = round_trip(ty, &x);
    }
}
