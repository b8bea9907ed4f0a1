//! Self-attention with Transformer-XL relative positions (the conformer's `rel_pos` MHSA), on
//! host memory: the default of [`super::Backend::rel_pos_attention`] for every backend.
//!
//! For query `i` and key `j` of head `h`, the score is
//! `((q_i + u_h)·k_j + (q_i + v_h)·p_{n-1-i+j}) / √head_dim`, where row `r` of `p` is the
//! projected sinusoid of relative distance `n - 1 - r` (so the term reads distance `i - j`);
//! softmax over `j`, then the values. This is mtmd's `matrix_ac + rel_shift(matrix_bd)`.

/// `[n, n_head · hd]` attention output of `q`, `k`, `v` (`[n, n_head · hd]`) and `p`
/// (`[2n - 1, n_head · hd]`), heads split over the machine's threads.
#[allow(clippy::too_many_arguments)]
pub fn rel_pos_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    p: &[f32],
    bias_u: &[f32],
    bias_v: &[f32],
    n_head: usize,
    out: &mut [f32],
) {
    let d = bias_u.len();
    let n = q.len() / d;
    let hd = d / n_head;
    let threads = std::thread::available_parallelism()
        .map(|t| t.get())
        .unwrap_or(1)
        .min(n_head);
    // [n_head][n, hd] results, gathered into `out` after
    let mut per_head: Vec<Vec<f32>> = vec![Vec::new(); n_head];
    let run = |h: usize| head(q, k, v, p, bias_u, bias_v, n, d, h * hd, hd);
    if threads <= 1 || cfg!(target_family = "wasm") {
        for (h, r) in per_head.iter_mut().enumerate() {
            *r = run(h);
        }
    } else {
        std::thread::scope(|s| {
            let chunk = n_head.div_ceil(threads);
            for (c, rs) in per_head.chunks_mut(chunk).enumerate() {
                let run = &run;
                s.spawn(move || {
                    for (i, r) in rs.iter_mut().enumerate() {
                        *r = run(c * chunk + i);
                    }
                });
            }
        });
    }
    for (h, r) in per_head.iter().enumerate() {
        for i in 0..n {
            out[i * d + h * hd..][..hd].copy_from_slice(&r[i * hd..(i + 1) * hd]);
        }
    }
}

/// One head: `[n, hd]`.
#[allow(clippy::too_many_arguments)]
fn head(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    p: &[f32],
    bu: &[f32],
    bv: &[f32],
    n: usize,
    d: usize,
    c0: usize,
    hd: usize,
) -> Vec<f32> {
    let scale = 1.0 / (hd as f32).sqrt();
    let row = |x: &[f32], i: usize| -> Vec<f32> { x[i * d + c0..][..hd].to_vec() };
    // the head's keys, values and positions, contiguous
    let ks: Vec<Vec<f32>> = (0..n).map(|j| row(k, j)).collect();
    let vs: Vec<Vec<f32>> = (0..n).map(|j| row(v, j)).collect();
    let ps: Vec<Vec<f32>> = (0..2 * n - 1).map(|r| row(p, r)).collect();
    let mut out = vec![0f32; n * hd];
    let mut s = vec![0f32; n];
    for i in 0..n {
        let qi = &q[i * d + c0..][..hd];
        let qu: Vec<f32> = qi
            .iter()
            .zip(&bu[c0..c0 + hd])
            .map(|(a, b)| a + b)
            .collect();
        let qv: Vec<f32> = qi
            .iter()
            .zip(&bv[c0..c0 + hd])
            .map(|(a, b)| a + b)
            .collect();
        let mut max = f32::NEG_INFINITY;
        for (j, sj) in s.iter_mut().enumerate() {
            *sj = (dot(&qu, &ks[j]) + dot(&qv, &ps[n - 1 - i + j])) * scale;
            max = max.max(*sj);
        }
        let mut sum = 0f32;
        for sj in s.iter_mut() {
            *sj = (*sj - max).exp();
            sum += *sj;
        }
        let inv = 1.0 / sum;
        let o = &mut out[i * hd..(i + 1) * hd];
        for (j, &w) in s.iter().enumerate() {
            let w = w * inv;
            for (a, &b) in o.iter_mut().zip(&vs[j]) {
                *a += w * b;
            }
        }
    }
    out
}

/// A dot product in eight lanes (which the compiler keeps in vector registers).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the definition written out in f64, with the shift as mtmd builds it (pad a
    /// zero column, view the rows one element later).
    #[test]
    fn matches_the_padded_shift() {
        let (n, n_head, hd) = (5usize, 2usize, 3usize);
        let d = n_head * hd;
        let val = |i: usize| ((i * 37 % 23) as f32 - 11.0) / 13.0;
        let q: Vec<f32> = (0..n * d).map(val).collect();
        let k: Vec<f32> = (0..n * d).map(|i| val(i + 7)).collect();
        let v: Vec<f32> = (0..n * d).map(|i| val(i + 3)).collect();
        let p: Vec<f32> = (0..(2 * n - 1) * d).map(|i| val(i + 11)).collect();
        let bu: Vec<f32> = (0..d).map(|i| val(i + 5) * 0.5).collect();
        let bv: Vec<f32> = (0..d).map(|i| val(i + 9) * 0.5).collect();
        let mut out = vec![0f32; n * d];
        rel_pos_attention(&q, &k, &v, &p, &bu, &bv, n_head, &mut out);
        for h in 0..n_head {
            let c = |x: &[f32], r: usize, e: usize| f64::from(x[r * d + h * hd + e]);
            // bd_raw[i][r] over all 2n-1 rows, then mtmd's shift: a zero column in front, the
            // buffer read as rows of n from element n on
            let mut padded = vec![0f64; n * 2 * n];
            for i in 0..n {
                for r in 0..2 * n - 1 {
                    let s: f64 = (0..hd)
                        .map(|e| (c(&q, i, e) + f64::from(bv[h * hd + e])) * c(&p, r, e))
                        .sum();
                    padded[i * 2 * n + 1 + r] = s;
                }
            }
            for i in 0..n {
                let mut sc: Vec<f64> = (0..n)
                    .map(|j| {
                        let ac: f64 = (0..hd)
                            .map(|e| (c(&q, i, e) + f64::from(bu[h * hd + e])) * c(&k, j, e))
                            .sum();
                        let bd = padded[n + i * (2 * n - 1) + j];
                        (ac + bd) / (hd as f64).sqrt()
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = sc
                    .iter_mut()
                    .map(|s| {
                        *s = (*s - m).exp();
                        *s
                    })
                    .sum();
                for e in 0..hd {
                    let want: f64 = (0..n).map(|j| sc[j] / z * c(&v, j, e)).sum();
                    let got = f64::from(out[i * d + h * hd + e]);
                    assert!((got - want).abs() < 1e-5, "h{h} i{i} e{e}: {got} vs {want}");
                }
            }
        }
    }
}
