//! Q8_1 on wasm32 `simd128`: the activation quantizer.

use super::{BlockQ8_1, QK};
use crate::quant::f32_to_f16;
use crate::quant::q8_0::wasm::quantize_block;

/// `simd128` version of `q8_1::quantize_act`, byte for byte the same output.
pub(crate) fn quantize(src: &[f32], out: &mut [BlockQ8_1]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (d, sum) = quantize_block(x, &mut b.qs);
        b.d = f32_to_f16(d);
        b.s = f32_to_f16(d * sum as f32);
    }
}
