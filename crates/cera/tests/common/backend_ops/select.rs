//! `top_k` (greedy decoding's argmax, truncated sampling's candidates): exact against
//! [`top_k_rows`], which is itself checked against a full sort. Vocabulary-sized rows (one
//! chunk and many on a device), every row's top k at once, k = cols, ties, -inf and NaN, and a
//! k beyond what a device ranks in one workgroup (its fallback).

use super::*;

/// The top k of each row by a full sort: value descending (NaN lowest), then column.
fn by_sort(x: &[f32], cols: usize, k: usize) -> Vec<(u32, f32)> {
    let key = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
    x.chunks_exact(cols)
        .flat_map(|row| {
            let mut idx: Vec<u32> = (0..cols as u32).collect();
            idx.sort_by(|&a, &b| {
                key(row[b as usize])
                    .total_cmp(&key(row[a as usize]))
                    .then(a.cmp(&b))
            });
            idx.into_iter()
                .take(k)
                .map(|i| (i, row[i as usize]))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Pairs equal, values bit for bit.
fn same(a: &[(u32, f32)], b: &[(u32, f32)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.0 == y.0 && x.1.to_bits() == y.1.to_bits())
}

pub(super) fn top_k<B: Backend>(h: &mut H<B>) {
    // (rows, cols, k)
    let cases = [
        (1, 49152, 1),
        (1, 151936, 40),
        (4, 32000, 1),
        (3, 1000, 5),
        (2, 7, 7),
        (5, 300, 64),
        (1, 262145, 256),
    ];
    for (rows, cols, k) in cases {
        let mut x = h.rng.normal(rows * cols, 3.0);
        // ties at the top, banned tokens, a NaN, a run of equal values
        for r in 0..rows {
            let row = &mut x[r * cols..(r + 1) * cols];
            row[cols / 3] = f32::NEG_INFINITY;
            row[cols - 1] = f32::NAN;
            if cols > 10 {
                row[cols / 2] = 40.0;
                row[cols / 5] = 40.0;
                row[1..5].fill(-0.0);
                row[6] = 0.0;
            }
        }
        let case = format!("{rows}x{cols} k {k}");
        let want = by_sort(&x, cols, k);
        let mut cpu = Vec::new();
        cera::backend::top_k_rows(&x, cols, k, &mut cpu);
        if !same(&cpu, &want) {
            h.fail("top_k_rows", &case, "differs from a full sort");
        }
        let (t, _) = h.up(&x, rows, cols);
        let mut got = vec![(7, 7.0)];
        h.be.top_k(&mut h.cx, &t, k, &mut got);
        if got.first() != Some(&(7, 7.0)) {
            h.fail("top_k", &case, "did not append to the output");
        } else if !same(&got[1..], &want) {
            let first = got[1..].iter().zip(&want).position(|(a, b)| a != b);
            let what = format!("{} pairs; first difference at {first:?}", got.len() - 1);
            h.fail("top_k", &case, &what);
        } else {
            // exact: listed in the report with zero error
            h.worst.entry("top_k".into()).or_default();
        }
    }
}
