//! Q8_1: 32 elements per block, symmetric 8-bit with the block sum precomputed, `x = d * q`.
//! Used for activations in dot products against Q4_1/Q5_1; gguf cannot dequantize it.

use super::{Block, GgmlType, f16_to_f32, f32_to_f16};

const QK: usize = 32;

/// One Q8_1 block (36 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ8_1 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// `d * sum(qs)`, f16 (the block sum that a type-1 dot product needs for the offset).
    pub s: [u8; 2],
    /// Quants, i8, in element order.
    pub qs: [u8; QK],
}

const _: () = assert!(size_of::<BlockQ8_1>() == 36);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ8_1 {
    const TYPE: GgmlType = GgmlType::Q8_1;
    const ELEMS: usize = QK;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values) as `d * q`.
pub fn dequantize(blocks: &[BlockQ8_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = q as i8 as f32 * d;
        }
    }
}

/// ggml's `quantize_row_q8_1_ref`: Q8_0's rounding plus `s = sum(q) * d`.
pub fn quantize(src: &[f32], out: &mut [BlockQ8_1]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            let qi = (v * id).round() as i8;
            *q = qi as u8;
            sum += qi as i32;
        }
        b.s = f32_to_f16(sum as f32 * d);
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// The activation quantizer of ggml's CPU backend, as [`super::q8_0::quantize_act`], plus
/// `s = d · Σq`.
pub fn quantize_act(src: &[f32], out: &mut [BlockQ8_1]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (d, sum) = super::q8_0::quantize_act_block(x, &mut b.qs);
        b.d = f32_to_f16(d);
        b.s = f32_to_f16(d * sum as f32);
    }
}
