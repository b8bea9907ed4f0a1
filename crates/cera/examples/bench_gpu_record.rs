//! Host and device cost of GPU dispatches. Without a model: records many small ops (add,
//! RMSNorm, scale) into one step and reports microseconds per dispatch spent recording and
//! submitting, apart from the device's execution (`CERA_GPU_PROFILE=1` prints the backend's
//! own split too). With a model: the decode GEMV (one token) of each of block 0's weights,
//! `DISPATCHES` times back to back in one step, microseconds per GEMV.
//!
//!   cargo run --release --features gpu --example bench_gpu_record [DISPATCHES] [MODEL.gguf]

use std::sync::Arc;
use std::time::Instant;

use cera::backend::gpu::{Gpu, GpuCtx};
use cera::backend::{Backend, Weight};
use cera::gguf::GgufFile;

fn us(d: std::time::Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

fn main() -> cera::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(3000, |s| s.parse().expect("a count"));
    let be = Gpu::new()?;
    if let Some(model) = args.next() {
        return gemvs(&be, n, &model);
    }
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
        println!(
            "round {round}: {n} dispatches; us each: recording {:.2}, to submitted {:.2}, \
             to executed {:.2}",
            us(rec, n),
            us(sub, n),
            us(all, n)
        );
    }
    Ok(())
}

/// Each weight of block 0 as a one-token GEMV, `n` times in one step; then, as a model's
/// step has them, the same GEMVs through the block's input norm (`norm_matmul`) and the FFN's
/// GLU (`glu_matmul_add`), and the plain GEMV cycling through every block's weight of that
/// name (weights not in the L2 cache, as a step reads them).
fn gemvs(be: &Gpu, n: usize, model: &str) -> cera::Result<()> {
    let file = Arc::new(GgufFile::open(model)?);
    let names: Vec<String> = file
        .tensors
        .iter()
        .filter(|t| t.name.starts_with("blk.0.") && t.name.ends_with(".weight"))
        .filter(|t| t.shape.len() == 2 && t.shape[1] > 1)
        .map(|t| t.name.clone())
        .collect();
    let mut cx = Default::default();
    let mut out = Vec::new();
    for name in names {
        let w = Weight::new(&file, file.tensor(&name).expect("listed"));
        // the same weight of every block, for the cold cycle
        let suffix = name.trim_start_matches("blk.0.");
        let all: Vec<Weight> = file
            .tensors
            .iter()
            .filter(|t| {
                t.name.starts_with("blk.")
                    && t.name.ends_with(suffix)
                    && t.shape == file.tensor(&name).expect("listed").shape
            })
            .map(|t| Weight::new(&file, t))
            .collect();
        let data: Vec<f32> = (0..w.cols).map(|i| (i as f32 * 0.01).sin()).collect();
        let norm = vec![1.0f32; w.cols];
        let mut x = be.zeros(1, w.cols);
        let mut g = be.zeros(1, w.cols);
        let mut h = be.zeros(1, w.cols);
        let mut y = be.zeros(1, w.rows);
        be.upload(&mut cx, &data, 1, w.cols, &mut x);
        be.upload(&mut cx, &data, 1, w.cols, &mut g);
        // warm: weights resident, pipelines compiled
        for v in &all {
            be.matmul(&mut cx, &mut [(v, &mut y)], &x)?;
        }
        be.norm_matmul(&mut cx, &x, &norm, 1e-5, &mut h, &mut [(&w, &mut y)])?;
        be.glu_matmul_add(&mut cx, &mut g, &x, cera::backend::Act::Silu, &w, &mut y)?;
        be.download(&mut cx, &y, &mut out);
        type Step<'a> = dyn FnMut(usize, &mut GpuCtx) -> cera::Result<()> + 'a;
        let mut time = |f: &mut Step| -> cera::Result<f64> {
            let mut best = f64::MAX;
            for _ in 0..3 {
                let t = Instant::now();
                for i in 0..n {
                    f(i, &mut cx)?;
                }
                // (reading anything back waits for the whole step)
                be.download(&mut cx, &x, &mut out);
                best = best.min(us(t.elapsed(), n));
            }
            Ok(best)
        };
        let plain = time(&mut |_, cx| be.matmul(cx, &mut [(&w, &mut y)], &x))?;
        let normed =
            time(&mut |_, cx| be.norm_matmul(cx, &x, &norm, 1e-5, &mut h, &mut [(&w, &mut y)]))?;
        let glu = time(&mut |_, cx| {
            be.glu_matmul_add(cx, &mut g, &x, cera::backend::Act::Silu, &w, &mut y)
        })?;
        let cold = time(&mut |i, cx| be.matmul(cx, &mut [(&all[i % all.len()], &mut y)], &x))?;
        println!(
            "{name} {} [{} x {}]: us per GEMV ({n} in a step): plain {plain:.2}, norm {normed:.2}, \
             glu {glu:.2}, cold (cycling {} blocks) {cold:.2}",
            w.ty,
            w.rows,
            w.cols,
            all.len()
        );
    }
    Ok(())
}
