//! Q4_1: 32 elements per block, asymmetric 4-bit, `x = d * q + m`.

use super::q8_1::BlockQ8_1;
use super::{Block, GgmlType, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast, f32_to_f16};

const QK: usize = 32;

/// One Q4_1 block (20 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ4_1 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Offset (the block minimum), f16.
    pub m: [u8; 2],
    /// 4-bit quants: the low nibble of byte `j` is element `j`, the high nibble element `j + 16`.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(size_of::<BlockQ4_1>() == 20);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
    const ELEMS: usize = QK;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
#[inline]
pub fn dequantize(blocks: &[BlockQ4_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        let m = f16_to_f32(b.m);
        let (lo, hi) = y.split_at_mut(QK / 2);
        for ((&q, l), h) in b.qs.iter().zip(lo).zip(hi) {
            *l = d * (q & 0x0F) as f32 + m;
            *h = d * (q >> 4) as f32 + m;
        }
    }
}

/// ggml's `quantize_row_q4_1_ref`: the block's min..max range split into 15 steps.
pub fn quantize(src: &[f32], out: &mut [BlockQ4_1]) {
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
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(min);
        let q = |v: f32| (((v - min) * id + 0.5) as i32).clamp(0, 15) as u8;
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

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_q4_1_q8_1`): per
/// block `d_w d_a Σ q·a_q + m_w s_a`, where `s_a = d_a Σ a_q` is precomputed in the activation.
pub fn vec_dot_scalar(n: usize, w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let mut q = [0i8; QK];
        let (lo, hi) = q.split_at_mut(QK / 2);
        for ((&x, l), h) in b.qs.iter().zip(lo).zip(hi) {
            *l = (x & 0x0F) as i8;
            *h = (x >> 4) as i8;
        }
        let sumi = dot_codes(&q, &y.qs);
        sumf += sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d))
            + f16_to_f32_fast(b.m) * f16_to_f32_fast(y.s);
    }
    sumf
}
