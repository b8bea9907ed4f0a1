//! Host cost of recording GPU work: records many small ops (add, RMSNorm, scale) into one
//! step and reports microseconds per dispatch spent recording and submitting, apart from the
//! device's execution (`CERA_GPU_PROFILE=1` prints the backend's own split too).
//!
//!   cargo run --release --features gpu --example bench_gpu_record [DISPATCHES]

use std::time::Instant;

use cera::backend::Backend;
use cera::backend::gpu::Gpu;

fn main() -> cera::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(3000, |s| s.parse().expect("a count"));
    let be = Gpu::new()?;
    let mut cx = Default::default();
    let cols = 576;
    let data: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.01).sin()).collect();
    let w: Vec<f32> = vec![1.0; cols];
    let (mut x, mut y, mut h) = (be.zeros(1, cols), be.zeros(1, cols), be.zeros(1, cols));
    be.upload(&mut cx, &data, 1, cols, &mut x);
    be.upload(&mut cx, &data, 1, cols, &mut y);
    let mut out = Vec::new();
    be.download(&mut cx, &x, &mut out);
    for round in 0..3 {
        let t = Instant::now();
        for _ in 0..n / 3 {
            be.rms_norm(&mut cx, &x, &w, 1e-5, &mut h);
            be.add(&mut cx, &mut x, &h);
            be.scale(&mut cx, &mut x, 0.5);
        }
        let rec = t.elapsed();
        be.finish(&mut cx);
        let sub = t.elapsed();
        be.download(&mut cx, &x, &mut out);
        let all = t.elapsed();
        let us = |d: std::time::Duration| d.as_secs_f64() * 1e6 / n as f64;
        println!(
            "round {round}: {n} dispatches; us each: recording {:.2}, to submitted {:.2}, \
             to executed {:.2}",
            us(rec),
            us(sub),
            us(all)
        );
    }
    Ok(())
}
