//! Encoder products ([`Backend::matmul_encoder`]: a vision or audio tower's, which may sum in
//! another order than [`Backend::matmul`]) against the reference's products, within the
//! same bounds.

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
}
