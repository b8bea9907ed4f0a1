//! Q5_0: 32 elements per block, symmetric 5-bit, `x = d * (q - 16)`.

use super::q8_0::BlockQ8_0;
use super::{Block, GgmlType, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast, f32_to_f16};

const QK: usize = 32;

/// One Q5_0 block (22 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ5_0 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Fifth bits, a little-endian u32: bit `j` belongs to element `j`.
    pub qh: [u8; 4],
    /// Low 4 bits: the low nibble of byte `j` is element `j`, the high nibble element `j + 16`.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(size_of::<BlockQ5_0>() == 22);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
    const ELEMS: usize = QK;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
#[inline]
pub fn dequantize(blocks: &[BlockQ5_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        let qh = u32::from_le_bytes(b.qh);
        let (lo, hi) = y.split_at_mut(QK / 2);
        for (j, ((&q, l), h)) in b.qs.iter().zip(lo).zip(hi).enumerate() {
            let h0 = ((qh >> j) & 1) as i32;
            let h1 = ((qh >> (j + QK / 2)) & 1) as i32;
            *l = d * (((q & 0x0F) as i32 | (h0 << 4)) - 16) as f32;
            *h = d * (((q >> 4) as i32 | (h1 << 4)) - 16) as f32;
        }
    }
}

/// ggml's `quantize_row_q5_0_ref`: like Q4_0 with the largest-magnitude element at -16.
pub fn quantize(src: &[f32], out: &mut [BlockQ5_0]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        let q = |v: f32| ((v * id + 16.5) as i32).clamp(0, 31) as u32;
        let mut qh = 0u32;
        for (j, byte) in b.qs.iter_mut().enumerate() {
            let (q0, q1) = (q(x[j]), q(x[j + QK / 2]));
            *byte = ((q0 & 0x0F) | ((q1 & 0x0F) << 4)) as u8;
            qh |= ((q0 >> 4) << j) | ((q1 >> 4) << (j + QK / 2));
        }
        b.qh = qh.to_le_bytes();
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_q5_0_q8_0`).
pub fn vec_dot_scalar(n: usize, w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let qh = u32::from_le_bytes(b.qh);
        let mut q = [0i8; QK];
        let (lo, hi) = q.split_at_mut(QK / 2);
        for (j, ((&x, l), h)) in b.qs.iter().zip(lo).zip(hi).enumerate() {
            let h0 = (((qh >> j) & 1) << 4) as u8;
            let h1 = (((qh >> (j + QK / 2)) & 1) << 4) as u8;
            *l = ((x & 0x0F) | h0) as i8 - 16;
            *h = ((x >> 4) | h1) as i8 - 16;
        }
        let sumi = dot_codes(&q, &y.qs);
        sumf += sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d));
    }
    sumf
}
