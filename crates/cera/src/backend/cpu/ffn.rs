//! [`Backend::encoder_ffn`] a block of rows at a time: an encoder's hidden activations are
//! four times its width (Whisper base: 1500 × 2048 f32, 12 MiB), the biggest buffer of its
//! peak; a block's (256 rows) costs nothing in speed, since the encoder products already
//! run 256 rows at a time (`matmul_encoder`), and the block's buffers stay in the context, so
//! a window after the first faults no page in.
//!
//! [`Backend::encoder_ffn`]: crate::backend::Backend::encoder_ffn

use super::{Cpu, CpuCtx, CpuTensor};
use crate::backend::{Act, Backend, Weight, elementwise as ew};
use crate::error::Result;

/// Input rows per block.
const ROWS: usize = 256;

/// A block's input `[ROWS, d]`, hidden activations `[ROWS, d_ff]` and output `[ROWS, d]`.
#[derive(Default)]
pub(crate) struct FfnScratch {
    h: CpuTensor,
    mid: CpuTensor,
    out: CpuTensor,
}

impl Cpu {
    pub(super) fn ffn_by_rows(
        &self,
        cx: &mut CpuCtx,
        x: &mut CpuTensor,
        h: &CpuTensor,
        up: (&Weight, Option<&[f32]>),
        down: (&Weight, Option<&[f32]>),
        act: Act,
    ) -> Result<()> {
        let (n, d) = (h.rows, h.cols);
        assert_eq!(
            (x.rows, x.cols),
            (n, down.0.rows),
            "encoder_ffn: residual shape"
        );
        // (taken out of the context: the products below borrow it)
        let mut s = std::mem::take(&mut cx.ffn);
        let res = (|| {
            for r0 in (0..n).step_by(ROWS) {
                let nr = ROWS.min(n - r0);
                s.h.reshape(nr, d)
                    .copy_from_slice(&h.data()[r0 * d..(r0 + nr) * d]);
                self.matmul_encoder(cx, &mut [(up.0, &mut s.mid)], &s.h)?;
                if let Some(b) = up.1 {
                    ew::add_bias(s.mid.data_mut(), b);
                }
                self.act(s.mid.data_mut(), act);
                self.matmul_encoder(cx, &mut [(down.0, &mut s.out)], &s.mid)?;
                if let Some(b) = down.1 {
                    ew::add_bias(s.out.data_mut(), b);
                }
                let xd = x.cols;
                ew::add_inplace(&mut x.data_mut()[r0 * xd..(r0 + nr) * xd], s.out.data());
            }
            Ok(())
        })();
        cx.ffn = s;
        res
    }
}
