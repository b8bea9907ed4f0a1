//! GEMM throughput with the weights streaming from memory against the same work in cache,
//! one thread, one and four tokens: whether a kernel keeps up with memory (the two times
//! equal) or stalls on it (streaming slower), and how much four tokens cost over one.
//!
//! ```sh
//! cargo run --release -p cera --example bench_stream -- q4_k   # q4_1 (default), q5_0, q4_k, q6_k, q8_0
//! ```
//!
//! The matrix is 16384 × 4096 (40-110 MB packed: far past the L3), multiplied in chunks of 256
//! rows as the matmul does; "in cache" repeats the first chunk as often. Fastest of 8 passes.
use cera::kernels::{ActRows, KernelTable, pack};
use cera::quant::GgmlType::{self, *};
use std::time::{Duration, Instant};
fn main() {
    let t = KernelTable::get();
    let ty: GgmlType = match std::env::args().nth(1).as_deref() {
        Some("q4_k") => Q4_K,
        Some("q5_0") => Q5_0,
        Some("q6_k") => Q6_K,
        Some("q8_0") => Q8_0,
        _ => Q4_1,
    };
    let (rows, k) = (16384usize, 4096usize);
    let x: Vec<f32> = (0..rows * k)
        .map(|i| ((i * 2654435761usize) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let w = cera::quant::quantize_to_vec(ty, &x).unwrap();
    drop(x);
    let mut p = vec![0u8; pack::packed_len(ty, rows, k).unwrap()];
    pack::pack(ty, rows, k, &w, &mut p);
    let act_ty = KernelTable::vec_dot_type(ty).unwrap();
    let ab = KernelTable::act_row_bytes(ty, k).unwrap();
    let mut acts = vec![vec![0u8; ab]; 4];
    for (j, a) in acts.iter_mut().enumerate() {
        let xs: Vec<f32> = (0..k)
            .map(|i| ((i * 7 + j) % 13) as f32 / 6.0 - 1.0)
            .collect();
        t.quantize_row(act_ty, &xs, a);
    }
    let r: Vec<&[u8]> = acts.iter().map(|a| a.as_slice()).collect();
    let mut packed = vec![0u8; ActRows::packed_len(4, k / 32)];
    if matches!(act_ty, Q8_0 | Q8_1) {
        ActRows::pack(act_ty, &r, k / 32, &mut packed);
    }
    let gb = pack::superblock_bytes(ty).unwrap() * (k / pack::block_cols(ty));
    let mut tile = vec![0f32; 4 * 256];
    for n in [1usize, 4] {
        let a = ActRows {
            n,
            rows: std::array::from_fn(|i| r[i.min(n - 1)]),
            packed: &packed,
        };
        let (mut best, mut hot) = (Duration::MAX, Duration::MAX);
        for _ in 0..8 {
            let t0 = Instant::now();
            for r0 in (0..rows).step_by(256) {
                t.gemm(
                    ty,
                    k,
                    256,
                    &p[r0 / 8 * gb..(r0 + 256) / 8 * gb],
                    &a,
                    &mut tile,
                    256,
                );
            }
            best = best.min(t0.elapsed());
            let t0 = Instant::now();
            for _ in (0..rows).step_by(256) {
                t.gemm(ty, k, 256, &p[..256 / 8 * gb], &a, &mut tile, 256);
            }
            hot = hot.min(t0.elapsed());
        }
        println!(
            "{} n={n}: DRAM {:.2} ms ({:.1} GB/s), in cache {:.2} ms",
            ty.name(),
            best.as_secs_f64() * 1e3,
            p.len() as f64 / best.as_secs_f64() / 1e9,
            hot.as_secs_f64() * 1e3
        );
    }
}
