//! Self-attention with Transformer-XL relative positions (the conformer's `rel_pos` MHSA), on
//! host memory: the default of [`super::Backend::rel_pos_attention`] for every backend.
//!
//! For query `i` and key `j` of head `h`, the score is
//! `((q_i + u_h)·k_j + (q_i + v_h)·p_{n-1-i+j}) / √head_dim`, where row `r` of `p` is the
//! projected sinusoid of relative distance `n - 1 - r` (so the term reads distance `i - j`);
//! softmax over `j`, then the values. This is mtmd's `matrix_ac + rel_shift(matrix_bd)`.

/// Checks the shapes [`super::Backend::rel_pos_attention`] takes: `[q, k, v, p]` as `(rows,
/// cols)`: `q`, `k`, `v` `[n, d]` (n ≥ 1), `p` `[2n - 1, d]`, both biases `d`, `d` a multiple
/// of `n_head`.
pub fn check_shapes(
    shapes: [(usize, usize); 4],
    bias_u: usize,
    bias_v: usize,
    n_head: usize,
) -> crate::error::Result<()> {
    let [q, k, v, p] = shapes;
    let (n, d) = q;
    if n == 0
        || k != q
        || v != q
        || p != (2 * n - 1, d)
        || bias_u != d
        || bias_v != d
        || n_head == 0
        || !d.is_multiple_of(n_head)
    {
        return Err(crate::error::Error::Model(format!(
            "rel_pos_attention: q {q:?}, k {k:?}, v {v:?}, p {p:?}, biases {bias_u} and \
             {bias_v}, {n_head} heads"
        )));
    }
    Ok(())
}

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

/// One head: `[n, hd]`, through the widest vector unit the host has (the loops are written
/// for the compiler to vectorize: the scores of a query over all keys as sums of scaled rows of
/// the transposed keys and positions, so no lane waits on another).
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
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the host has AVX-512F.
            return unsafe { head_avx512(q, k, v, p, bu, bv, n, d, c0, hd) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the host has AVX2.
            return unsafe { head_avx2(q, k, v, p, bu, bv, n, d, c0, hd) };
        }
    }
    head_any(q, k, v, p, bu, bv, n, d, c0, hd)
}

/// [`head_any`] compiled for AVX-512.
///
/// # Safety
/// The host must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn head_avx512(
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
    head_any(q, k, v, p, bu, bv, n, d, c0, hd)
}

/// [`head_any`] compiled for AVX2.
///
/// # Safety
/// The host must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn head_avx2(
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
    head_any(q, k, v, p, bu, bv, n, d, c0, hd)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn head_any(
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
    let np = 2 * n - 1;
    // [hd, n] keys and [hd, 2n - 1] positions transposed: a query's scores are sums of their
    // rows scaled by its values; [n, hd] values
    let mut kt = vec![0f32; hd * n];
    let mut pt = vec![0f32; hd * np];
    let mut vs = vec![0f32; n * hd];
    for j in 0..n {
        for e in 0..hd {
            kt[e * n + j] = k[j * d + c0 + e];
        }
        vs[j * hd..(j + 1) * hd].copy_from_slice(&v[j * d + c0..j * d + c0 + hd]);
    }
    for r in 0..np {
        for e in 0..hd {
            pt[e * np + r] = p[r * d + c0 + e];
        }
    }
    const J: usize = 64;
    let mut out = vec![0f32; n * hd];
    let mut s = vec![0f32; n];
    let (mut qa, mut qb) = (vec![0f32; hd], vec![0f32; hd]);
    for i in 0..n {
        let qi = &q[i * d + c0..i * d + c0 + hd];
        for e in 0..hd {
            qa[e] = qi[e] + bu[c0 + e];
            qb[e] = qi[e] + bv[c0 + e];
        }
        // keys in chunks of `J` held in registers over the whole head dimension (a row of
        // scores through memory per dimension would be load- and store-bound); distance
        // i - j is position row n - 1 - i + j
        let p0 = n - 1 - i;
        let mut j0 = 0;
        while j0 + J <= n {
            let mut acc = [0f32; J];
            for e in 0..hd {
                let (a, b) = (qa[e], qb[e]);
                let kr = &kt[e * n + j0..e * n + j0 + J];
                let pr = &pt[e * np + p0 + j0..e * np + p0 + j0 + J];
                for t in 0..J {
                    acc[t] += a * kr[t] + b * pr[t];
                }
            }
            s[j0..j0 + J].copy_from_slice(&acc);
            j0 += J;
        }
        s[j0..].fill(0.0);
        for e in 0..hd {
            let (a, b) = (qa[e], qb[e]);
            let kr = &kt[e * n + j0..(e + 1) * n];
            let pr = &pt[e * np + p0 + j0..e * np + p0 + n];
            for ((sj, &kv), &pv) in s[j0..].iter_mut().zip(kr).zip(pr) {
                *sj += a * kv + b * pv;
            }
        }
        let mut max = f32::NEG_INFINITY;
        for sj in s.iter_mut() {
            *sj *= scale;
            max = max.max(*sj);
        }
        let mut sum = 0f32;
        for sj in s.iter_mut() {
            *sj = (*sj - max).exp();
            sum += *sj;
        }
        let inv = 1.0 / sum;
        for w in s.iter_mut() {
            *w *= inv;
        }
        // the output 16 values at a time, held in registers over all keys
        let o = &mut out[i * hd..(i + 1) * hd];
        let mut e0 = 0;
        while e0 < hd {
            let m = (hd - e0).min(16);
            let mut acc = [0f32; 16];
            if m == 16 {
                // four keys at a time into four sums: one chain of additions would wait on
                // each
                let mut acc4 = [[0f32; 16]; 4];
                let mut j = 0;
                while j + 4 <= n {
                    for (u, acc) in acc4.iter_mut().enumerate() {
                        let w = s[j + u];
                        let vr = &vs[(j + u) * hd + e0..(j + u) * hd + e0 + 16];
                        for t in 0..16 {
                            acc[t] += w * vr[t];
                        }
                    }
                    j += 4;
                }
                for (jj, &w) in s.iter().enumerate().skip(j) {
                    let vr = &vs[jj * hd + e0..jj * hd + e0 + 16];
                    for t in 0..16 {
                        acc[t] += w * vr[t];
                    }
                }
                for t in 0..16 {
                    acc[t] += (acc4[0][t] + acc4[1][t]) + (acc4[2][t] + acc4[3][t]);
                }
            } else {
                for (j, &w) in s.iter().enumerate() {
                    for t in 0..m {
                        acc[t] += w * vs[j * hd + e0 + t];
                    }
                }
            }
            o[e0..e0 + m].copy_from_slice(&acc[..m]);
            e0 += m;
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The definition written out in f64, with the shift as mtmd builds it (pad a zero
    /// column, view the rows one element later): `[n, n_head · hd]`.
    pub(crate) fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        p: &[f32],
        bu: &[f32],
        bv: &[f32],
        n_head: usize,
    ) -> Vec<f64> {
        let d = bu.len();
        let (n, hd) = (q.len() / d, d / n_head);
        let mut out = vec![0f64; n * d];
        for h in 0..n_head {
            let c = |x: &[f32], r: usize, e: usize| f64::from(x[r * d + h * hd + e]);
            // bd_raw[i][r] over all 2n-1 rows, then mtmd's shift: a zero column in front, the
            // buffer read as rows of n from element n on
            let mut padded = vec![0f64; n * 2 * n];
            for i in 0..n {
                for r in 0..2 * n - 1 {
                    let s: f64 = (0..hd)
                        .map(|e| (c(q, i, e) + f64::from(bv[h * hd + e])) * c(p, r, e))
                        .sum();
                    padded[i * 2 * n + 1 + r] = s;
                }
            }
            for i in 0..n {
                let mut sc: Vec<f64> = (0..n)
                    .map(|j| {
                        let ac: f64 = (0..hd)
                            .map(|e| (c(q, i, e) + f64::from(bu[h * hd + e])) * c(k, j, e))
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
                    out[i * d + h * hd + e] = (0..n).map(|j| sc[j] / z * c(v, j, e)).sum();
                }
            }
        }
        out
    }

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
        let want = reference(&q, &k, &v, &p, &bu, &bv, n_head);
        for (i, (got, want)) in out.iter().zip(&want).enumerate() {
            assert!(
                (f64::from(*got) - want).abs() < 1e-5,
                "[{i}]: {got} vs {want}"
            );
        }
    }

    /// A wrong shape is an error naming them, not a panic (nor an empty clip).
    #[test]
    fn refuses_wrong_shapes() {
        assert!(check_shapes([(3, 8), (3, 8), (3, 8), (5, 8)], 8, 8, 2).is_ok());
        for (shapes, bu, heads) in [
            ([(3, 8), (3, 8), (3, 8), (6, 8)], 8, 2),
            ([(3, 8), (2, 8), (3, 8), (5, 8)], 8, 2),
            ([(3, 8), (3, 8), (3, 8), (5, 8)], 7, 2),
            ([(3, 8), (3, 8), (3, 8), (5, 8)], 8, 3),
            ([(0, 8), (0, 8), (0, 8), (0, 8)], 8, 2),
        ] {
            let e = check_shapes(shapes, bu, 8, heads).unwrap_err().to_string();
            assert!(e.contains("rel_pos_attention"), "{e}");
        }
    }
}
