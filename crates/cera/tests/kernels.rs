//! The CPU kernel table, three ways: every SIMD tier the host has against the scalar tier, and
//! both against an f64 reference, for every weight format with a kernel.
//!
//! Bounds (all relative to `M = Σ|w_i·a_i|`, the dot product of magnitudes):
//! - SIMD vs scalar, K-quants and IQ4_XS: equal bits (exact integer sums per super-block and the
//!   same final float formula).
//! - SIMD vs scalar, 32-element formats and F32/F16/BF16: `|Δ| ≤ 2e-5·M`. Both sides sum the
//!   same per-block (per-element) terms in f32, in different orders (vector lanes, FMA); for the
//!   4864-element rows here a worst-case ordering error is ~150 terms × 2^-24 ≈ 1e-5, a typical
//!   one far less (the observed maxima are printed).
//! - Any tier vs `Σ dequantize(w)_i · x_i` in f64 (`x` the f32 activations before quantization):
//!   the only error is the activation's rounding (plus f32 summation). For 8-bit activations
//!   each element is off by at most `0.5·d + 127·|d − f16(d)| ≈ 0.56·amax/127` of its block,
//!   about 0.9% of `M` if all errors lined up with uniform data; we allow 1%. F16 activations
//!   round by ≤ 2^-11 relative (allowed 1e-3), BF16 by ≤ 2^-8 (allowed 5e-3), F32 not at all
//!   (allowed 2e-5).
//! - llama.cpp's `test-quantize-fns` check against the *original* f32 weights (weight
//!   quantization error included): `|dot − w·x| / n < 0.02`, 0.04 for Q2_K, on its cosine data.

use cera::kernels::{CpuTier, KernelTable};
use cera::quant::{self, GgmlType};

use GgmlType::*;

const WEIGHT_TYPES: [GgmlType; 15] = [
    F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS,
];

/// Whether a tier's kernels for `ty` reproduce the scalar result bit for bit: the K-quants and
/// IQ4_XS everywhere, and on the NEON and `simd128` tiers every quantized format (their
/// 32-element kernels keep the scalar float order too). `simd128` runs the scalar F32/F16/BF16
/// kernels, so those match as well.
fn bit_exact(tier: CpuTier, ty: GgmlType) -> bool {
    let neon = matches!(
        tier,
        CpuTier::Neon | CpuTier::NeonDotprod | CpuTier::NeonI8mm
    );
    matches!(ty, Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS)
        || (neon && !matches!(ty, F32 | F16 | BF16))
        || tier == CpuTier::Simd128
}

const SIMD_VS_SCALAR: f64 = 2e-5;

fn ref_bound(act: GgmlType) -> f64 {
    match act {
        F32 => 2e-5,
        F16 => 1e-3,
        BF16 => 5e-3,
        _ => 1e-2,
    }
}

/// splitmix64: small, deterministic, good enough for test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Roughly normal (sum of four uniforms), with an occasional outlier.
    fn weight(&mut self) -> f32 {
        let s: f32 = (0..4).map(|_| self.uniform()).sum::<f32>() * 0.5;
        if self.next().is_multiple_of(97) {
            s * 8.0
        } else {
            s
        }
    }

    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.weight() * scale).collect()
    }
}

fn tables() -> Vec<KernelTable> {
    let tiers = CpuTier::supported();
    eprintln!("testing tiers: {tiers:?}");
    tiers
        .into_iter()
        .map(|t| KernelTable::for_tier(t).unwrap())
        .collect()
}

fn sizes(ty: GgmlType) -> Vec<usize> {
    let be = ty.block_elems().unwrap();
    let mut s: Vec<usize> = [32, 256, 576, 896, 1280, 4864]
        .into_iter()
        .filter(|k| k % be == 0)
        .collect();
    if be == 1 {
        s.extend([1, 7, 15, 17, 33, 100, 1000]);
    }
    s
}

/// `bytes` copied to offset 1 of a fresh buffer, so the kernels see unaligned rows.
fn misaligned(bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; bytes.len() + 1];
    v[1..].copy_from_slice(bytes);
    v
}

struct Case {
    ty: GgmlType,
    k: usize,
    rows: usize,
    /// Quantized weights, `rows` rows of `k`.
    w: Vec<u8>,
    /// `dequantize(w)`.
    wd: Vec<f32>,
    /// The f32 activation row.
    x: Vec<f32>,
}

/// Largest observed relative errors, for the log.
#[derive(Default)]
struct Worst {
    simd: f64,
    reference: f64,
}

fn check_case(tables: &[KernelTable], c: &Case, worst: &mut Worst) {
    let act = KernelTable::vec_dot_type(c.ty).unwrap();
    let wb = c.ty.bytes_for(c.k as u64).unwrap() as usize;
    let ab = act.bytes_for(c.k as u64).unwrap() as usize;
    assert_eq!(KernelTable::act_row_bytes(c.ty, c.k), Some(ab));
    let scalar = &tables[0];
    assert_eq!(scalar.tier(), CpuTier::Scalar);

    let mut a_scalar = vec![0u8; ab];
    scalar.quantize_row(act, &c.x, &mut a_scalar);
    let ad = quant::dequantize_to_vec(act, &a_scalar, c.k).unwrap();

    let mut s_out = vec![0.0f32; c.rows];
    scalar.gemv(c.ty, c.k, &c.w, &a_scalar, &mut s_out);

    for t in tables {
        let mut a = vec![0u8; ab];
        t.quantize_row(act, &c.x, &mut a);
        assert!(
            a == a_scalar,
            "{} {act} activation bytes differ from scalar (k = {})",
            t.tier(),
            c.k
        );
        let a_mis = misaligned(&a);
        let mut out = vec![f32::NAN; c.rows];
        t.gemv(c.ty, c.k, &c.w, &a, &mut out);
        for r in 0..c.rows {
            let w_row = &c.w[r * wb..(r + 1) * wb];
            let w_mis = misaligned(w_row);
            let v = t.vec_dot(c.ty, c.k, w_row, &a);
            let v_mis = t.vec_dot(c.ty, c.k, &w_mis[1..], &a_mis[1..]);
            let ctx = format!("{} {} k = {} row {r}", t.tier(), c.ty, c.k);
            assert_eq!(v.to_bits(), out[r].to_bits(), "{ctx}: gemv vs vec_dot");
            assert_eq!(v.to_bits(), v_mis.to_bits(), "{ctx}: unaligned rows");

            let wd = &c.wd[r * c.k..(r + 1) * c.k];
            let mag_q: f64 = wd
                .iter()
                .zip(&ad)
                .map(|(&w, &a)| (w as f64 * a as f64).abs())
                .sum();
            let s = s_out[r];
            if t.tier() != CpuTier::Scalar {
                if bit_exact(t.tier(), c.ty) {
                    assert_eq!(v.to_bits(), s.to_bits(), "{ctx}: {v} vs scalar {s}");
                } else {
                    let d = (v as f64 - s as f64).abs();
                    assert!(
                        d <= SIMD_VS_SCALAR * mag_q + 1e-30,
                        "{ctx}: {v} vs scalar {s} (Σ|w·a| = {mag_q})"
                    );
                    if mag_q > 0.0 {
                        worst.simd = worst.simd.max(d / mag_q);
                    }
                }
            }

            let reference: f64 = wd
                .iter()
                .zip(&c.x)
                .map(|(&w, &x)| w as f64 * x as f64)
                .sum();
            let mag: f64 = wd
                .iter()
                .zip(&c.x)
                .map(|(&w, &x)| (w as f64 * x as f64).abs())
                .sum();
            let e = (v as f64 - reference).abs();
            assert!(
                e <= ref_bound(act) * mag + 1e-30,
                "{ctx}: {v} vs f64 reference {reference} (Σ|w·x| = {mag}, rel {})",
                e / mag
            );
            if mag > 0.0 {
                worst.reference = worst.reference.max(e / mag);
            }
        }
    }
}

#[test]
fn dot_products_three_way() {
    let tables = tables();
    let mut rng = Rng(0x5eed);
    for ty in WEIGHT_TYPES {
        let mut worst = Worst::default();
        for k in sizes(ty) {
            let rows = if k >= 4096 { 2 } else { 3 };
            // Rows of different scales, activations of another.
            let mut wf = Vec::with_capacity(rows * k);
            for r in 0..rows {
                wf.extend(rng.vec(k, [0.02, 1.0, 37.0][r % 3]));
            }
            let w = quant::quantize_to_vec(ty, &wf).unwrap();
            let wd = quant::dequantize_to_vec(ty, &w, rows * k).unwrap();
            let x = rng.vec(k, 3.0);
            check_case(
                &tables,
                &Case {
                    ty,
                    k,
                    rows,
                    w,
                    wd,
                    x,
                },
                &mut worst,
            );
        }
        eprintln!(
            "{ty:>6}: max |simd − scalar| / Σ|w·a| = {:.2e}, max |dot − ref| / Σ|w·x| = {:.2e}",
            worst.simd, worst.reference
        );
    }
}

/// f16 offsets of the scale fields in each block, which random bytes would make NaN or huge.
fn scale_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | IQ4_XS => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        _ => &[],
    }
}

/// Random bit patterns in every quant, scale and packed field (so every code, every sub-block
/// scale including the extremes, and Q8_0's -128 occur), with sane f16 super-scales.
#[test]
fn dot_products_on_random_blocks() {
    let tables = tables();
    let mut rng = Rng(0xb10c);
    for ty in WEIGHT_TYPES {
        let (be, bb) = ty.block().unwrap();
        if be == 1 {
            continue;
        }
        let mut worst = Worst::default();
        for k in sizes(ty) {
            let rows = 2;
            let mut w: Vec<u8> = (0..rows * k / be * bb).map(|_| rng.next() as u8).collect();
            for block in w.chunks_exact_mut(bb) {
                for &off in scale_fields(ty) {
                    let v = half::f16::from_f32(rng.uniform() * 0.1);
                    block[off..off + 2].copy_from_slice(&v.to_bits().to_le_bytes());
                }
            }
            let wd = quant::dequantize_to_vec(ty, &w, rows * k).unwrap();
            let x = rng.vec(k, 1.0);
            check_case(
                &tables,
                &Case {
                    ty,
                    k,
                    rows,
                    w,
                    wd,
                    x,
                },
                &mut worst,
            );
        }
        eprintln!(
            "{ty:>6} (random blocks): max |simd − scalar| / Σ|w·a| = {:.2e}, max |dot − ref| / Σ|w·x| = {:.2e}",
            worst.simd, worst.reference
        );
    }
}

/// llama.cpp's `test-quantize-fns` dot product check: weights and activations from its cosine
/// generator, quantized, `|vec_dot − Σ w·x| / n` against the original floats.
#[test]
fn llama_cpp_dot_product_error() {
    let n = 32 * 128;
    let gen_data = |offset: f32| -> Vec<f32> {
        (0..n)
            .map(|i| 0.1 + 2.0 * (i as f32 + offset).cos())
            .collect()
    };
    let (w, x) = (gen_data(0.0), gen_data(1.0));
    let reference: f32 = w.iter().zip(&x).map(|(a, b)| a * b).sum();
    for t in tables() {
        for ty in WEIGHT_TYPES {
            let act = KernelTable::vec_dot_type(ty).unwrap();
            let wq = quant::quantize_to_vec(ty, &w).unwrap();
            let mut a = vec![0u8; act.bytes_for(n as u64).unwrap() as usize];
            t.quantize_row(act, &x, &mut a);
            let dot = t.vec_dot(ty, n, &wq, &a);
            let err = (dot - reference).abs() / n as f32;
            let max = if ty == Q2_K { 0.04 } else { 0.02 };
            assert!(err < max, "{} {ty}: error {err} ≥ {max}", t.tier());
        }
    }
}

/// Activation rows with the awkward cases: exact rounding ties, zero blocks, the largest
/// magnitude on either sign (and both), tiny and huge scales, subnormals.
fn tricky_activations(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut x = rng.vec(n, 1.0);
    for (b, blk) in x.chunks_mut(32).enumerate() {
        match b % 8 {
            // amax = 127 → d = 1 (Q8_0) and iscale = ±1 (Q8_K): halves are exact ties.
            0 => {
                for (i, v) in blk.iter_mut().enumerate() {
                    *v = (i as f32 - 16.0) + 0.5;
                }
                blk[0] = 127.0;
            }
            1 => blk.fill(0.0),
            2 => {
                blk[3] = -9.0;
                blk[7] = 9.0;
            }
            3 => {
                for (i, v) in blk.iter_mut().enumerate() {
                    *v = (i as f32 - 16.0) * 2.5;
                }
                blk[31] = -127.0;
            }
            4 => blk.iter_mut().for_each(|v| *v *= 1e-30),
            5 => blk.iter_mut().for_each(|v| *v *= 6e4),
            6 => blk.iter_mut().for_each(|v| *v *= 1e-40),
            _ => {}
        }
    }
    x
}

/// The scalar activation quantizer each tier must reproduce: ggml's CPU quantizer for Q8_0 and
/// Q8_1 (`quantize_act`), the reference quantizer for the others.
fn act_reference(act: cera::quant::GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; act.bytes_for(x.len() as u64).unwrap() as usize];
    match act {
        Q8_0 => quant::q8_0::quantize_act(x, quant::as_blocks_mut(&mut out)),
        Q8_1 => quant::q8_1::quantize_act(x, quant::as_blocks_mut(&mut out)),
        _ => return quant::quantize_to_vec(act, x).unwrap(),
    }
    out
}

#[test]
fn activation_quantizers_match_scalar_bytes() {
    let tables = tables();
    let mut rng = Rng(0xac7);
    for act in [F32, F16, BF16, Q8_0, Q8_1, Q8_K] {
        let be = act.block_elems().unwrap();
        for n in [256usize, 512, 4864, 256 * 9] {
            let n = n / be * be;
            for variant in 0..3 {
                let x = match variant {
                    0 => rng.vec(n, 1.0),
                    1 => tricky_activations(&mut rng, n),
                    _ => rng.vec(n, 1e-3),
                };
                let bytes = act.bytes_for(n as u64).unwrap() as usize;
                let reference = act_reference(act, &x);
                for t in &tables {
                    let mut out = vec![0xAAu8; bytes];
                    t.quantize_row(act, &x, &mut out);
                    if let Some(i) = out.iter().zip(&reference).position(|(a, b)| a != b) {
                        panic!(
                            "{} {act} n = {n} variant {variant}: byte {i} is {:#04x}, reference {:#04x}",
                            t.tier(),
                            out[i],
                            reference[i]
                        );
                    }
                }
            }
        }
    }
    // Odd lengths for the one-element types (the SIMD converters' scalar tails).
    for act in [F32, F16, BF16] {
        for n in [1usize, 7, 8, 15, 16, 17, 33] {
            let x = rng.vec(n, 10.0);
            let reference = quant::quantize_to_vec(act, &x).unwrap();
            for t in &tables {
                let mut out = vec![0u8; reference.len()];
                t.quantize_row(act, &x, &mut out);
                assert_eq!(out, reference, "{} {act} n = {n}", t.tier());
            }
        }
    }
}

/// Rounding policy: Q8_0/Q8_1 (as ggml's CPU quantizer) and Q8_K round halves to even, on
/// every tier.
#[test]
fn rounding_of_ties() {
    let mut x = vec![0.0f32; 256];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -2.5;
    x[3] = 3.5;
    for t in tables() {
        let mut q8_0 = vec![0u8; 8 * 34];
        t.quantize_row(Q8_0, &x, &mut q8_0);
        assert_eq!(&q8_0[2..6], &[127, 2, (-2i8) as u8, 4], "{}", t.tier());
        let mut q8_k = vec![0u8; 292];
        t.quantize_row(Q8_K, &x, &mut q8_k);
        // iscale = -127 / 127 = -1: 2.5 → -2.5 → -2, -2.5 → 2, 3.5 → -4.
        assert_eq!(
            &q8_k[4..8],
            &[(-127i8) as u8, (-2i8) as u8, 2, (-4i8) as u8],
            "{}",
            t.tier()
        );
    }
}

#[test]
fn gemv_edge_cases() {
    for t in tables() {
        // No rows.
        let mut out: [f32; 0] = [];
        t.gemv(Q4_0, 64, &[], &[0u8; 68], &mut out);
        // Zero-length rows.
        let mut out = [1.0f32; 3];
        t.gemv(F32, 0, &[], &[], &mut out);
        assert_eq!(out, [0.0; 3]);
        // A row longer than k: only the first k elements count in vec_dot.
        let w: Vec<u8> = [1.0f32; 64].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(t.vec_dot(F32, 32, &w, &w), 32.0);
        assert_eq!(t.vec_dot(F32, 64, &w, &w), 64.0);
        // 127 quantizes to d = 1, q = 127 exactly.
        let w = quant::quantize_to_vec(Q8_0, &[127.0f32; 64]).unwrap();
        let mut a = vec![0u8; 68];
        t.quantize_row(Q8_0, &[127.0f32; 64], &mut a);
        assert_eq!(t.vec_dot(Q8_0, 32, &w, &a), 32.0 * 127.0 * 127.0);
        assert_eq!(t.vec_dot(Q8_0, 64, &w, &a), 64.0 * 127.0 * 127.0);
    }
}

#[test]
// (wasm32-wasip1 aborts on a panic, so a test that expects one cannot run there)
#[cfg_attr(target_os = "wasi", ignore)]
#[should_panic(expected = "no dot product kernel")]
fn unsupported_weight_type_panics() {
    KernelTable::get().vec_dot(IQ2_XXS, 256, &[0u8; 66], &[0u8; 292]);
}

#[test]
// (wasm32-wasip1 aborts on a panic, so a test that expects one cannot run there)
#[cfg_attr(target_os = "wasi", ignore)]
#[should_panic(expected = "not a whole number")]
fn partial_block_panics() {
    KernelTable::get().vec_dot(Q4_0, 48, &[0u8; 36], &[0u8; 68]);
}

#[test]
// (wasm32-wasip1 aborts on a panic, so a test that expects one cannot run there)
#[cfg_attr(target_os = "wasi", ignore)]
#[should_panic(expected = "rows of")]
fn gemv_row_count_mismatch_panics() {
    let mut out = [0.0f32; 2];
    KernelTable::get().gemv(Q8_0, 32, &[0u8; 34], &[0u8; 34], &mut out);
}

/// `CERA_CPU_TIER` through the process-wide table: the test runs its own binary again with the
/// variable set (the table is built once per process), and the child checks the tier it got
/// (`CERA_TEST_EXPECT_TIER`).
#[test]
fn cpu_tier_env_override() {
    if let Ok(expect) = std::env::var("CERA_TEST_EXPECT_TIER") {
        assert_eq!(KernelTable::get().tier().name(), expect);
        return;
    }
    // wasm32-wasip1 cannot start a process: there `scripts/test.sh` runs this test once per
    // setting, with the two variables set, and the first branch checks each run.
    if cfg!(target_os = "wasi") {
        return;
    }
    let detected = CpuTier::detect();
    let mut cases: Vec<(String, CpuTier, Option<&str>)> = CpuTier::supported()
        .into_iter()
        .map(|t| (t.name().to_uppercase(), t, None))
        .collect();
    cases.push(("sse9".into(), detected, Some("unknown tier")));
    if !detected.includes(CpuTier::Avx512) {
        cases.push(("avx512".into(), detected, Some("does not support")));
    }
    let exe = std::env::current_exe().unwrap();
    // Under an emulator (the aarch64 CI runs this binary with qemu-user), the child needs it too.
    let runner = std::env::var("CERA_TEST_RUNNER").unwrap_or_default();
    let runner = runner.split_whitespace();
    for (req, expect, message) in cases {
        let mut cmd = match runner.clone().next() {
            Some(prog) => {
                let mut c = std::process::Command::new(prog);
                c.args(runner.clone().skip(1)).arg(&exe);
                c
            }
            None => std::process::Command::new(&exe),
        };
        let out = cmd
            .args(["--exact", "cpu_tier_env_override", "--nocapture"])
            .env("CERA_CPU_TIER", &req)
            .env("CERA_TEST_EXPECT_TIER", expect.name())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "CERA_CPU_TIER={req}: {stderr}");
        match message {
            Some(m) => assert!(stderr.contains(m), "CERA_CPU_TIER={req}: {stderr}"),
            None => assert!(!stderr.contains("error:"), "CERA_CPU_TIER={req}: {stderr}"),
        }
    }
}

/// The three-way check on real weights: the first tensors of each type in the two models (up to
/// 96 rows each), against random activations. Models come through the project's fetch step.
#[test]
fn real_model_tensors() {
    use cera::fetch;
    use cera::gguf::GgufFile;
    let tables = tables();
    let mut rng = Rng(0x4ea1);
    for name in [
        "smollm2-135m-instruct-q4_1",
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
    ] {
        let entry = fetch::lookup(name).unwrap();
        let path = fetch::ensure(entry, &mut |_| {})
            .unwrap_or_else(|e| panic!("could not fetch test model {name}: {e}"));
        let g = GgufFile::open(path).unwrap();
        let mut per_type = std::collections::BTreeMap::<&str, usize>::new();
        for t in &g.tensors {
            let seen = per_type.entry(t.ty.name()).or_default();
            if KernelTable::vec_dot_type(t.ty).is_none() || *seen >= 3 {
                continue;
            }
            *seen += 1;
            let (k, rows) = t.rows();
            let (k, rows) = (k as usize, (rows as usize).min(96));
            let wb = t.ty.bytes_for(k as u64).unwrap() as usize;
            let w = g.tensor_data(t)[..rows * wb].to_vec();
            let wd = quant::dequantize_to_vec(t.ty, &w, rows * k).unwrap();
            let x = rng.vec(k, 1.0);
            let mut worst = Worst::default();
            check_case(
                &tables,
                &Case {
                    ty: t.ty,
                    k,
                    rows,
                    w,
                    wd,
                    x,
                },
                &mut worst,
            );
            eprintln!(
                "{name} {} ({}, k = {k}): simd {:.1e}, reference {:.1e}",
                t.name, t.ty, worst.simd, worst.reference
            );
        }
    }
}

/// Whether a tier's GEMM for `ty` gives its GEMV's bits: where both match the scalar bits
/// ([`bit_exact`]), the AVX2 F32/BF16 GEMMs, which keep the AVX2 dot product's order, and on
/// the NEON tiers every format (their GEMMs keep the GEMV's float order per row and token, F32,
/// F16 and BF16 included).
fn gemm_bit_exact(tier: CpuTier, ty: GgmlType) -> bool {
    bit_exact(tier, ty)
        || (tier == CpuTier::Avx2 && matches!(ty, F32 | BF16))
        || matches!(
            tier,
            CpuTier::Neon | CpuTier::NeonDotprod | CpuTier::NeonI8mm
        )
}

/// One GEMM of `rows` × `k` weights `w` (plain rows of `ty`) against 1..=4 of the activations
/// `xs`, each token's results against the GEMV's: the same bits where [`gemm_bit_exact`], else
/// within `SIMD_VS_SCALAR` of `Σ|w·a|`; nothing written past the rows. Returns the cases run.
fn check_gemm(
    t: &KernelTable,
    ty: GgmlType,
    k: usize,
    rows: usize,
    w: &[u8],
    xs: &[Vec<f32>],
) -> usize {
    use cera::kernels::{ActRows, pack};
    let act_ty = KernelTable::vec_dot_type(ty).unwrap();
    let wd = quant::dequantize_to_vec(ty, w, rows * k).unwrap();
    let ab = KernelTable::act_row_bytes(ty, k).unwrap();
    let nb = k / 32;
    let mut acts = vec![vec![0u8; ab]; 4];
    for i in 0..4 {
        t.quantize_row(act_ty, &xs[i], &mut acts[i]);
    }
    let wk = if t.gemm_packs_weights(ty) {
        let mut p = vec![0u8; pack::packed_len(ty, rows, k).unwrap()];
        pack::pack(ty, rows, k, w, &mut p);
        p
    } else {
        w.to_vec()
    };
    for n in 1..=4 {
        let act_rows: Vec<&[u8]> = acts[..n].iter().map(|a| a.as_slice()).collect();
        let mut packed = vec![0u8; ActRows::packed_len(n, nb)];
        if matches!(act_ty, Q8_0 | Q8_1) {
            ActRows::pack(act_ty, &act_rows, nb, &mut packed);
        }
        let a = ActRows {
            n,
            rows: std::array::from_fn(|i| acts[i].as_slice()),
            packed: &packed,
        };
        let ldo = rows + 3;
        let mut out = vec![f32::NAN; 4 * ldo];
        t.gemm(ty, k, rows, &wk, &a, &mut out, ldo);
        for tok in 0..n {
            let mut want = vec![0f32; rows];
            t.gemv(ty, k, w, &acts[tok], &mut want);
            for r in 0..rows {
                let mag: f64 = (0..k)
                    .map(|c| (wd[r * k + c] * xs[tok][c]).abs() as f64)
                    .sum();
                let got = out[tok * ldo + r];
                if gemm_bit_exact(t.tier(), ty) {
                    assert_eq!(
                        got.to_bits(),
                        want[r].to_bits(),
                        "{:?} {ty} k={k} rows={rows} n={n} tok={tok} r={r}: GEMM {got} and GEMV {} bits",
                        t.tier(),
                        want[r]
                    );
                }
                let err = (got as f64 - want[r] as f64).abs();
                assert!(
                    err <= SIMD_VS_SCALAR * mag.max(1e-6),
                    "{:?} {ty} k={k} rows={rows} n={n} tok={tok} r={r}: {got} vs {}",
                    t.tier(),
                    want[r]
                );
            }
            // nothing written past the rows
            assert!(
                out[tok * ldo + rows..(tok + 1) * ldo]
                    .iter()
                    .all(|v| v.is_nan())
            );
        }
    }
    4
}

/// GEMM (several tokens per weight block) against GEMV (one token at a time), for every weight
/// type and tier that has a GEMM kernel, every token count 1..=4, odd and even row counts (and
/// one case of outliers: extreme codes and scales): the same sums up to float rounding
/// (`SIMD_VS_SCALAR` of `Σ|w·a|`), and the same bits where [`gemm_bit_exact`] (so decode, one
/// token, computes what prefill computes).
#[test]
fn gemm_matches_gemv() {
    let mut rng = Rng(0x6e33);
    let mut checked = 0;
    for t in tables() {
        for &ty in &WEIGHT_TYPES {
            if !t.has_gemm(ty) {
                continue;
            }
            for k in sizes(ty) {
                let shapes = [
                    (1usize, false),
                    (2, false),
                    (7, false),
                    (16, false),
                    (21, false),
                ];
                for (rows, outliers) in shapes.into_iter().chain([(5, true)]) {
                    // outliers: one large value in 37 (the blocks around it at the largest
                    // scales, the rest at the smallest codes), activations with spikes
                    let spike = |v: Vec<f32>, at: usize, by: f32| -> Vec<f32> {
                        let f = |(i, x): (usize, f32)| if i % at == 0 { x * by } else { x };
                        v.into_iter().enumerate().map(f).collect()
                    };
                    let wf = rng.vec(rows * k, 0.1);
                    let wf = if outliers { spike(wf, 37, 80.0) } else { wf };
                    let w = quant::quantize_to_vec(ty, &wf).unwrap();
                    let xs: Vec<Vec<f32>> = (0..4)
                        .map(|_| rng.vec(k, 1.0))
                        .map(|x| if outliers { spike(x, 29, 60.0) } else { x })
                        .collect();
                    checked += check_gemm(&t, ty, k, rows, &w, &xs);
                }
            }
        }
    }
    eprintln!("{checked} GEMM cases");
    if CpuTier::supported().contains(&CpuTier::Avx512) {
        assert!(checked > 0, "the AVX-512 tier has GEMM kernels");
    }
    if CpuTier::supported().contains(&CpuTier::Neon) {
        assert!(checked > 0, "the NEON tiers have GEMM kernels");
    }
}

/// [`gemm_matches_gemv`] at the edges of the formats' ranges, where an i16 pair sum of
/// `vpmaddubsw` would saturate if a kernel let it: blocks of all-ones and all-zero bytes (every
/// code and sub-block scale at its maximum or minimum, every high bit set or clear), alternating
/// and random bytes, under the largest f16 scales of either sign and tiny ones; activations that
/// quantize to ±127 everywhere, alternate in sign, or are random. Float weights at ±65504 (the
/// largest f16) and random large values.
#[test]
fn gemm_matches_gemv_extremes() {
    let mut rng = Rng(0x7e57);
    let mut checked = 0;
    for t in tables() {
        for &ty in &WEIGHT_TYPES {
            if !t.has_gemm(ty) {
                continue;
            }
            let (be, bb) = ty.block().unwrap();
            for (k, rows) in [(768usize, 9usize), (256, 16)] {
                let xs: Vec<Vec<f32>> = vec![
                    vec![1.0; k],
                    vec![-1.0; k],
                    (0..k)
                        .map(|i| if i % 2 == 0 { 3.0 } else { -3.0 })
                        .collect(),
                    rng.vec(k, 1.0),
                ];
                let n_blocks = rows * k / be;
                for pattern in 0..4u8 {
                    let w = if matches!(ty, F32 | F16 | BF16) {
                        let wf: Vec<f32> = (0..rows * k)
                            .map(|i| match pattern {
                                0 => 65504.0,
                                1 => -65504.0,
                                2 => {
                                    if i % 3 == 0 {
                                        65504.0
                                    } else {
                                        -65504.0
                                    }
                                }
                                _ => rng.uniform() * 6e4,
                            })
                            .collect();
                        quant::quantize_to_vec(ty, &wf).unwrap()
                    } else {
                        let mut w: Vec<u8> = (0..n_blocks * bb)
                            .map(|i| match pattern {
                                0 => 0xFF,
                                1 => 0x00,
                                2 => {
                                    if i % 2 == 0 {
                                        0xAA
                                    } else {
                                        0x55
                                    }
                                }
                                _ => rng.next() as u8,
                            })
                            .collect();
                        for (b, block) in w.chunks_exact_mut(bb).enumerate() {
                            for &off in scale_fields(ty) {
                                // f16 max, its negative, one, the smallest subnormal
                                let d: u16 = [0x7BFF, 0xFBFF, 0x3C00, 0x0001][(b + off) % 4];
                                block[off..off + 2].copy_from_slice(&d.to_le_bytes());
                            }
                        }
                        w
                    };
                    checked += check_gemm(&t, ty, k, rows, &w, &xs);
                }
            }
        }
    }
    eprintln!("{checked} GEMM cases");
}
