//! Q4_0: 32 elements per block, symmetric 4-bit, `x = d * (q - 8)`.

use super::q8_0::BlockQ8_0;
use super::{Block, GgmlType, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast, f32_to_f16};

const QK: usize = 32;

/// One Q4_0 block (18 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ4_0 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// 4-bit quants: the low nibble of byte `j` is element `j`, the high nibble element `j + 16`.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(size_of::<BlockQ4_0>() == 18);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
    const ELEMS: usize = QK;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
#[inline]
pub fn dequantize(blocks: &[BlockQ4_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        let (lo, hi) = y.split_at_mut(QK / 2);
        for ((&q, l), h) in b.qs.iter().zip(lo).zip(hi) {
            *l = d * ((q & 0x0F) as i32 - 8) as f32;
            *h = d * ((q >> 4) as i32 - 8) as f32;
        }
    }
}

/// ggml's `quantize_row_q4_0_ref`: the element of largest magnitude maps to -8 exactly, so
/// its sign decides which end of the asymmetric range -8..7 is used.
pub fn quantize(src: &[f32], out: &mut [BlockQ4_0]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        // Truncation after adding 8.5 rounds to nearest (the value is non-negative).
        let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
        for (j, byte) in b.qs.iter_mut().enumerate() {
            *byte = q(x[j]) | (q(x[j + QK / 2]) << 4);
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_q4_0_q8_0`): an
/// exact integer dot product per block, scaled by `d_w * d_a` and summed in f32.
pub fn vec_dot_scalar(n: usize, w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let mut q = [0i8; QK];
        let (lo, hi) = q.split_at_mut(QK / 2);
        for ((&x, l), h) in b.qs.iter().zip(lo).zip(hi) {
            *l = (x & 0x0F) as i8 - 8;
            *h = (x >> 4) as i8 - 8;
        }
        let sumi = dot_codes(&q, &y.qs);
        sumf += sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d));
    }
    sumf
}
