//! Encoder products ([`Backend::matmul_encoder`]: a vision or audio tower's, which may sum in
//! another order than [`Backend::matmul`]) against the reference's products, within the
//! same bounds; and an encoder's feed-forward ([`Backend::encoder_ffn`], which a backend may
//! run a block of rows at a time) against the reference's whole one.

use super::*;

impl<B: Backend> H<'_, B> {
    /// [`Backend::matmul_encoder`] of several weights on one input against the reference's
    /// products (an encoder's product may sum in another order, within the same bounds).
    fn matmul_encoder_case(&mut self, ws: &[&Weight], x: &[f32], n: usize, case: &str) {
        let (xt, xr) = self.up(x, n, ws[0].cols);
        let mut outs: Vec<_> = ws.iter().map(|_| self.garbage()).collect();
        let e = {
            let mut ops: Vec<(&Weight, &mut B::Tensor)> = ws
                .iter()
                .copied()
                .zip(outs.iter_mut().map(|o| &mut o.0))
                .collect();
            self.be.matmul_encoder(&mut self.cx, &mut ops, &xt)
        };
        for (w, (o, or)) in ws.iter().zip(outs.iter_mut()) {
            self.r.matmul(&mut (), &mut [(*w, or)], &xr).unwrap();
            let op = format!("matmul_encoder {}", w.ty);
            match &e {
                Ok(()) => {
                    let s = term_norms(w, x);
                    self.check_with(&op, case, o, or, Some(&s), bounds::matmul(w.ty))
                }
                Err(e) => self.fail(&op, case, &e.to_string()),
            }
        }
    }
}

impl<B: Backend> H<'_, B> {
    /// [`Backend::encoder_ffn`] of `n` rows against the reference's (its parts, all rows at
    /// once): a backend that runs blocks of rows must add each block's output to its own rows.
    fn encoder_ffn_case(&mut self, up: &Weight, down: &Weight, n: usize, case: &str) {
        let (d, d_ff) = (up.cols, up.rows);
        let (x, h) = (self.rng.vec(n * d, 1.0), self.rng.vec(n * d, 1.0));
        let (b_up, b_down) = (self.rng.vec(d_ff, 0.5), self.rng.vec(d, 0.5));
        let ((mut xt, mut xr), (ht, hr)) = (self.up(&x, n, d), self.up(&h, n, d));
        let ((mut mid, mut mr), (mut out, mut or)) = (self.garbage(), self.garbage());
        let e = self.be.encoder_ffn(
            &mut self.cx,
            &mut xt,
            &ht,
            (up, Some(&b_up)),
            (down, Some(&b_down)),
            Act::Gelu,
            &mut mid,
            &mut out,
        );
        let r = self.r.encoder_ffn(
            &mut (),
            &mut xr,
            &hr,
            (up, Some(&b_up)),
            (down, Some(&b_down)),
            Act::Gelu,
            &mut mr,
            &mut or,
        );
        let op = format!("encoder_ffn {}", up.ty);
        match (e, r) {
            (Ok(()), Ok(())) => {
                // two products and a GELU on top of an O(1) residual: the product's bound,
                // twice over, for the sum's size
                let b = bounds::matmul(up.ty);
                let b = Bound {
                    nmse: b.nmse * 4.0,
                    max_rel: b.max_rel * 2.0,
                };
                self.check(&op, case, &xt, &xr, b)
            }
            (Err(e), _) | (_, Err(e)) => self.fail(&op, case, &e.to_string()),
        }
    }
}

/// The float formats, panels of 32 rows and blocks of 12 inputs with their remainders, and
/// three weights of two types on one input.
pub(super) fn encoder_products<B: Backend>(h: &mut H<B>) {
    let mut specs = Vec::new();
    let enc_types = [GgmlType::F32, GgmlType::F16, GgmlType::BF16];
    for ty in enc_types {
        for k in [1usize, 7, 33, 100] {
            for rows in [1usize, 17, 33, 64, 70] {
                let v = h.rng.normal(rows * k, 0.5);
                specs.push((
                    format!("e{ty}{k}x{rows}"),
                    ty,
                    vec![k as u64, rows as u64],
                    v,
                ));
            }
        }
    }
    let file = gguf(&specs);
    for ty in enc_types {
        for k in [1usize, 7, 33, 100] {
            for rows in [1usize, 17, 33, 64, 70] {
                let w = weight(&file, &format!("e{ty}{k}x{rows}"));
                for n in [1usize, 5, 12, 13, 25, 40] {
                    let x = h.rng.vec(n * k, 1.0);
                    h.matmul_encoder_case(&[&w], &x, n, &format!("{ty} {rows}x{k} rows {n}"));
                }
            }
        }
    }
    let (a, b, c) = (
        weight(&file, "eF1633x33"),
        weight(&file, "eF3233x70"),
        weight(&file, "eF1633x17"),
    );
    let x = h.rng.vec(25 * 33, 1.0);
    h.matmul_encoder_case(&[&a, &b, &c], &x, 25, "F16, F32, F16 on one input");

    // the feed-forward: up [d, 4d], down [4d, d]; row counts within one block, a block and a
    // remainder, several blocks (the CPU's blocks are 256 rows)
    // (widths in Q8_0's blocks of 32)
    let (d, d_ff) = (32usize, 128usize);
    let mut specs = Vec::new();
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0] {
        for (name, k, rows) in [("up", d, d_ff), ("down", d_ff, d)] {
            specs.push((
                format!("ffn_{name}_{ty}"),
                ty,
                vec![k as u64, rows as u64],
                h.rng.normal(rows * k, 0.3),
            ));
        }
    }
    let file = gguf(&specs);
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0] {
        let (up, down) = (
            weight(&file, &format!("ffn_up_{ty}")),
            weight(&file, &format!("ffn_down_{ty}")),
        );
        for n in [1usize, 5, 256, 300, 600] {
            h.encoder_ffn_case(&up, &down, n, &format!("{ty} {n} rows"));
        }
    }
}
