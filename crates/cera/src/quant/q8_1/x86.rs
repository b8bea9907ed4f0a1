//! Q8_1 on x86-64: the activation quantizer (AVX2).

use super::{BlockQ8_1, QK};
use crate::quant::q8_0::x86::{f32_to_f16_bits, quantize_block};

/// AVX2 version of `q8_1::quantize_act`, byte for byte the same output.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize_avx2(src: &[f32], out: &mut [BlockQ8_1]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (d, sum) = quantize_block(x, &mut b.qs);
        b.d = f32_to_f16_bits(d);
        b.s = f32_to_f16_bits(d * sum as f32);
    }
}
