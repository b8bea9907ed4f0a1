//! Q8_0: 32 elements per block, symmetric 8-bit, `x = d * q`.

use super::{Block, GgmlType, dot_blocks, dot_i8, f16_to_f32, f16_to_f32_fast, f32_to_f16};

const QK: usize = 32;

/// One Q8_0 block (34 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Quants, i8, in element order.
    pub qs: [u8; QK],
}

const _: () = assert!(size_of::<BlockQ8_0>() == 34);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
    const ELEMS: usize = QK;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
#[inline]
pub fn dequantize(blocks: &[BlockQ8_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = q as i8 as f32 * d;
        }
    }
}

/// ggml's `quantize_row_q8_0_ref`: `d = amax / 127`, quants rounded half away from zero.
pub fn quantize(src: &[f32], out: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8 as u8;
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_q8_0_q8_0`).
pub fn vec_dot_scalar(n: usize, w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sumi = dot_i8(&b.qs, &y.qs);
        sumf += sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d));
    }
    sumf
}

/// The activation quantizer of ggml's CPU backend (what llama.cpp runs for every matmul input):
/// `id = 127 / amax`, `q = round_half_even(x · id)`. It differs from the reference [`quantize`]
/// (`q = round(x / d)`) in the last bit now and then, which is enough to move logits after 30
/// layers; matching it keeps our numbers on llama.cpp's.
pub fn quantize_act(src: &[f32], out: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (d, _) = quantize_act_block(x, &mut b.qs);
        b.d = f32_to_f16(d);
    }
}

/// One block of [`quantize_act`]; returns `d` (before f16 rounding) and the sum of the quants.
pub(crate) fn quantize_act_block(x: &[f32], qs: &mut [u8]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        let qi = (v * id).round_ties_even().clamp(-128.0, 127.0) as i8;
        *q = qi as u8;
        sum += qi as i32;
    }
    (d, sum)
}
