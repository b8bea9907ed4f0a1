//! `gemv` and GEMM throughput per weight format and CPU tier.
//!
//! ```sh
//! cargo run --release -p cera --example bench_dot              # every format, every tier
//! cargo run --release -p cera --example bench_dot -- q4_k q6_k # some formats
//! ```
//!
//! The matrix is 896 rows × 4864 columns (Qwen2.5-0.5B's FFN down projection). GB/s counts the
//! weight bytes streamed per second (the activation row is quantized once per product and
//! stays in L1); then the GEMM of four tokens against four GEMVs, one token through the GEMM
//! (as decode runs it) in cache and streamed from memory (256 MiB of copies of the matrix, one
//! and two threads), and the activation quantizers. Each in-cache figure is the fastest of
//! many single products (~150 ms of repeats), so a shared machine's other load costs little.

use std::time::{Duration, Instant};

use cera::kernels::{ActRows, CpuTier, KernelTable, pack};
use cera::quant::GgmlType::{self, *};

const ROWS: usize = 896;
const K: usize = 4864;

const FORMATS: [GgmlType; 15] = [
    F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS,
];

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// f16 scale fields per block, set to small values so random bytes make finite weights.
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

/// Random weights (speed does not depend on the values; the reference quantizers would take
/// seconds for the K-quants).
fn weights(ty: GgmlType, rng: &mut Rng) -> Vec<u8> {
    let (be, bb) = ty.block().unwrap();
    let n = ROWS * K;
    match ty {
        F32 => (0..n).flat_map(|_| rng.uniform().to_le_bytes()).collect(),
        F16 | BF16 => {
            let x: Vec<f32> = (0..n).map(|_| rng.uniform()).collect();
            cera::quant::quantize_to_vec(ty, &x).unwrap()
        }
        _ => {
            let mut w: Vec<u8> = (0..n / be * bb).map(|_| rng.next() as u8).collect();
            for block in w.chunks_exact_mut(bb) {
                for &off in scale_fields(ty) {
                    let v = half::f16::from_f32(rng.uniform() * 0.01);
                    block[off..off + 2].copy_from_slice(&v.to_bits().to_le_bytes());
                }
            }
            w
        }
    }
}

/// `bytes` copied to a 64-byte aligned place in `buf` (tensor data in a GGUF file is aligned,
/// and so is its mmap; a plain `Vec` would make some wide loads split cache lines).
fn aligned<'a>(buf: &'a mut Vec<u8>, bytes: &[u8]) -> &'a mut [u8] {
    buf.clear();
    buf.resize(bytes.len() + 64, 0);
    let off = buf.as_ptr().align_offset(64);
    let out = &mut buf[off..off + bytes.len()];
    out.copy_from_slice(bytes);
    out
}

/// Fastest single `gemv` over ~150 ms of repeats: on a shared machine the minimum is the run
/// that nobody interrupted.
fn time_gemv(t: &KernelTable, ty: GgmlType, w: &[u8], act: &[u8], out: &mut [f32]) -> Duration {
    t.gemv(ty, K, w, act, out); // warm up
    let mut best = Duration::MAX;
    let start = Instant::now();
    let mut iters = 0;
    while iters < 5 || (start.elapsed() < Duration::from_millis(150) && iters < 2000) {
        let t0 = Instant::now();
        t.gemv(ty, K, w, act, out);
        best = best.min(t0.elapsed());
        iters += 1;
    }
    best
}

fn main() {
    let wanted: Vec<GgmlType> = std::env::args()
        .skip(1)
        .map(|a| GgmlType::from_name(&a).unwrap_or_else(|| panic!("unknown type {a}")))
        .collect();
    let formats: Vec<GgmlType> = FORMATS
        .into_iter()
        .filter(|f| wanted.is_empty() || wanted.contains(f))
        .collect();
    let tiers = CpuTier::supported();
    let tables: Vec<KernelTable> = tiers
        .iter()
        .map(|&t| KernelTable::for_tier(t).unwrap())
        .collect();

    println!("gemv {ROWS} × {K}, one thread; GB/s of weights (ms per product)");
    print!("{:>7} {:>9}", "format", "MiB");
    for t in &tiers {
        print!(" {:>18}", t.name());
    }
    println!();

    let mut rng = Rng(42);
    let x: Vec<f32> = (0..K).map(|_| rng.uniform()).collect();
    let mut out = vec![0.0f32; ROWS];
    let (mut wbuf, mut abuf) = (Vec::new(), Vec::new());
    for ty in formats {
        let w = aligned(&mut wbuf, &weights(ty, &mut rng));
        let act_ty = KernelTable::vec_dot_type(ty).unwrap();
        let act = aligned(
            &mut abuf,
            &vec![0u8; KernelTable::act_row_bytes(ty, K).unwrap()],
        );
        print!(
            "{:>7} {:>9.2}",
            ty.name(),
            w.len() as f64 / (1 << 20) as f64
        );
        for t in &tables {
            t.quantize_row(act_ty, &x, act);
            let dt = time_gemv(t, ty, w, act, &mut out);
            let gbs = w.len() as f64 / dt.as_secs_f64() / 1e9;
            print!(" {:>9.2} ({:>5.2})", gbs, dt.as_secs_f64() * 1e3);
        }
        println!();
    }

    // GEMM of four tokens against four GEMVs, on every tier with GEMM kernels
    for best in tables
        .iter()
        .filter(|t| FORMATS.iter().any(|&f| t.has_gemm(f)))
    {
        println!();
        println!(
            "{} tier, four tokens: GEMM against four GEMVs, ms (speed-up)",
            best.tier().name()
        );
        let mut pbuf = Vec::new();
        for ty in FORMATS
            .into_iter()
            .filter(|f| (wanted.is_empty() || wanted.contains(f)) && best.has_gemm(*f))
        {
            let w = weights(ty, &mut rng);
            let act_ty = KernelTable::vec_dot_type(ty).unwrap();
            let ab = KernelTable::act_row_bytes(ty, K).unwrap();
            let mut acts = vec![vec![0u8; ab]; 4];
            for a in &mut acts {
                let xs: Vec<f32> = (0..K).map(|_| rng.uniform()).collect();
                best.quantize_row(act_ty, &xs, a);
            }
            let rows: Vec<&[u8]> = acts.iter().map(|a| a.as_slice()).collect();
            let mut packed = vec![0u8; ActRows::packed_len(4, K / 32)];
            if matches!(act_ty, Q8_0 | Q8_1) {
                ActRows::pack(act_ty, &rows, K / 32, &mut packed);
            }
            let a = ActRows {
                n: 4,
                rows: std::array::from_fn(|i| rows[i]),
                packed: &packed,
            };
            let wk = if best.gemm_packs_weights(ty) {
                let mut p = vec![0u8; pack::packed_len(ty, ROWS, K).unwrap()];
                pack::pack(ty, ROWS, K, &w, &mut p);
                p
            } else {
                w.clone()
            };
            let wk = aligned(&mut pbuf, &wk);
            let mut out4 = vec![0.0f32; 4 * ROWS];
            let mut t_gemm = Duration::MAX;
            let mut t_gemv = Duration::MAX;
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(300) {
                let t0 = Instant::now();
                best.gemm(ty, K, ROWS, wk, &a, &mut out4, ROWS);
                t_gemm = t_gemm.min(t0.elapsed());
                let t0 = Instant::now();
                for (i, r) in rows.iter().enumerate() {
                    best.gemv(ty, K, &w, r, &mut out4[i * ROWS..(i + 1) * ROWS]);
                }
                t_gemv = t_gemv.min(t0.elapsed());
            }
            println!(
                "{:>7} {:>8.3} {:>8.3} ({:.2}x)",
                ty.name(),
                t_gemm.as_secs_f64() * 1e3,
                t_gemv.as_secs_f64() * 1e3,
                t_gemv.as_secs_f64() / t_gemm.as_secs_f64()
            );
        }
    }
    // decode: one token through the GEMM (as the engine decodes), in cache and streamed from
    // memory (copies of the packed matrix, 256 MiB in all, each read once per pass)
    if let Some(best) = tables
        .last()
        .filter(|t| FORMATS.iter().any(|&f| t.has_gemm(f)))
    {
        println!();
        println!(
            "{} tier, one token through the GEMM: GB/s of weights in cache and streamed \
             from memory (one thread), from memory (two threads)",
            best.tier().name()
        );
        for ty in FORMATS
            .into_iter()
            .filter(|f| (wanted.is_empty() || wanted.contains(f)) && best.has_gemm(*f))
        {
            let w = weights(ty, &mut rng);
            let act_ty = KernelTable::vec_dot_type(ty).unwrap();
            let mut act = vec![0u8; KernelTable::act_row_bytes(ty, K).unwrap()];
            best.quantize_row(act_ty, &x, &mut act);
            let mut packed = vec![0u8; ActRows::packed_len(4, K / 32)];
            let rows: [&[u8]; 4] = [&act, &act, &act, &act];
            if matches!(act_ty, Q8_0 | Q8_1) {
                ActRows::pack(act_ty, &rows, K / 32, &mut packed);
            }
            let a = ActRows {
                n: 1,
                rows,
                packed: &packed,
            };
            let wk = if best.gemm_packs_weights(ty) {
                let mut p = vec![0u8; pack::packed_len(ty, ROWS, K).unwrap()];
                pack::pack(ty, ROWS, K, &w, &mut p);
                p
            } else {
                w.clone()
            };
            let copies = ((256usize << 20) / wk.len()).max(2);
            let mut all = vec![0u8; copies * wk.len() + 64];
            let off = all.as_ptr().align_offset(64);
            for c in 0..copies {
                let at = off + c * wk.len();
                all[at..at + wk.len()].copy_from_slice(&wk);
            }
            let mut out1 = vec![0.0f32; ROWS];
            let mut t_cache = Duration::MAX;
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(150) {
                let t0 = Instant::now();
                best.gemm(ty, K, ROWS, &all[off..off + wk.len()], &a, &mut out1, ROWS);
                t_cache = t_cache.min(t0.elapsed());
            }
            let mut t_mem = Duration::MAX;
            for _ in 0..3 {
                let t0 = Instant::now();
                for c in 0..copies {
                    let at = off + c * wk.len();
                    best.gemm(ty, K, ROWS, &all[at..at + wk.len()], &a, &mut out1, ROWS);
                }
                t_mem = t_mem.min(t0.elapsed() / copies as u32);
            }
            // two threads, each streaming its own half of the copies (as a decode step's two
            // threads take chunks of one matrix's rows)
            let half = copies / 2;
            let mut t_mem2 = Duration::MAX;
            for _ in 0..3 {
                let t0 = Instant::now();
                std::thread::scope(|sc| {
                    for h in 0..2 {
                        let (all, a, n) = (&all, &a, wk.len());
                        sc.spawn(move || {
                            let mut o = vec![0.0f32; ROWS];
                            for c in h * half..(h + 1) * half {
                                let at = off + c * n;
                                best.gemm(ty, K, ROWS, &all[at..at + n], a, &mut o, ROWS);
                            }
                        });
                    }
                });
                t_mem2 = t_mem2.min(t0.elapsed() / (2 * half) as u32);
            }
            let gbs = |t: Duration| wk.len() as f64 / t.as_secs_f64() / 1e9;
            println!(
                "{:>7} {:>8.2} {:>8.2} {:>8.2}",
                ty.name(),
                gbs(t_cache),
                gbs(t_mem),
                gbs(t_mem2)
            );
        }
    }
    println!();
    println!("quantize_row of {K} f32 activations, µs");
    print!("{:>7}", "act");
    for t in &tiers {
        print!(" {:>8}", t.name());
    }
    println!();
    for act_ty in [F16, BF16, Q8_0, Q8_1, Q8_K] {
        print!("{:>7}", act_ty.name());
        let mut act = vec![0u8; act_ty.bytes_for(K as u64).unwrap() as usize];
        for t in &tables {
            let mut best = Duration::MAX;
            for _ in 0..200 {
                let t0 = Instant::now();
                t.quantize_row(act_ty, &x, &mut act);
                best = best.min(t0.elapsed());
            }
            print!(" {:>8.2}", best.as_secs_f64() * 1e6);
        }
        println!();
    }
}
