//! Q5_1: 32 elements per block, asymmetric 5-bit, `x = d * q + m`.

use super::q8_1::BlockQ8_1;
use super::{Block, GgmlType, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast, f32_to_f16};

const QK: usize = 32;

/// One Q5_1 block (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ5_1 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Offset (the block minimum), f16.
    pub m: [u8; 2],
    /// Fifth bits, a little-endian u32: bit `j` belongs to element `j`.
    pub qh: [u8; 4],
    /// Low 4 bits: the low nibble of byte `j` is element `j`, the high nibble element `j + 16`.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(size_of::<BlockQ5_1>() == 24);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
    const ELEMS: usize = QK;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
#[inline]
pub fn dequantize(blocks: &[BlockQ5_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        let m = f16_to_f32(b.m);
        let qh = u32::from_le_bytes(b.qh);
        let (lo, hi) = y.split_at_mut(QK / 2);
        for (j, ((&q, l), h)) in b.qs.iter().zip(lo).zip(hi).enumerate() {
            let h0 = ((qh >> j) & 1) as u8;
            let h1 = ((qh >> (j + QK / 2)) & 1) as u8;
            *l = d * ((q & 0x0F) | (h0 << 4)) as f32 + m;
            *h = d * ((q >> 4) | (h1 << 4)) as f32 + m;
        }
    }
}

/// ggml's `quantize_row_q5_1_ref`: the block's min..max range split into 31 steps.
pub fn quantize(src: &[f32], out: &mut [BlockQ5_1]) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in x {
            if v < min {
                min = v;
            }
            if v > max {
                max = v;
            }
        }
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(min);
        let q = |v: f32| (((v - min) * id + 0.5) as i32).clamp(0, 31) as u32;
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

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_q5_1_q8_1`).
pub fn vec_dot_scalar(n: usize, w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let qh = u32::from_le_bytes(b.qh);
        let mut q = [0i8; QK];
        let (lo, hi) = q.split_at_mut(QK / 2);
        for (j, ((&x, l), h)) in b.qs.iter().zip(lo).zip(hi).enumerate() {
            let h0 = (((qh >> j) & 1) << 4) as u8;
            let h1 = (((qh >> (j + QK / 2)) & 1) << 4) as u8;
            *l = ((x & 0x0F) | h0) as i8;
            *h = ((x >> 4) | h1) as i8;
        }
        let sumi = dot_codes(&q, &y.qs);
        sumf += sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d))
            + f16_to_f32_fast(b.m) * f16_to_f32_fast(y.s);
    }
    sumf
}
