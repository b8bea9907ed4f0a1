//! Q8_K: 256-element blocks, symmetric 8-bit with an f32 scale and the sums of each 16
//! quants precomputed, `x = d * q`. The activation format for K-quant dot products; gguf
//! cannot dequantize it.

use super::k_common::nearest_int;
use super::{Block, GgmlType, QK_K};

/// One Q8_K block (292 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct BlockQ8_K {
    /// Scale, f32 little-endian.
    pub d: [u8; 4],
    /// Quants, i8, in element order.
    pub qs: [u8; QK_K],
    /// Sums of each 16 consecutive quants, 16 little-endian i16.
    pub bsums: [u8; QK_K / 16 * 2],
}

const _: () = assert!(size_of::<BlockQ8_K>() == 292);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ8_K {
    const TYPE: GgmlType = GgmlType::Q8_K;
    const ELEMS: usize = QK_K;
}

impl BlockQ8_K {
    /// Sum of quants `16*j..16*j + 16`.
    pub fn bsum(&self, j: usize) -> i16 {
        i16::from_le_bytes([self.bsums[2 * j], self.bsums[2 * j + 1]])
    }
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values) as `d * q`.
pub fn dequantize(blocks: &[BlockQ8_K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f32::from_le_bytes(b.d);
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = d * q as i8 as f32;
        }
    }
}

/// ggml's `quantize_row_q8_K_ref`: the element of largest magnitude maps to -127 (so its
/// sign is folded into `d`), the rest round to nearest even.
pub fn quantize(src: &[f32], out: &mut [BlockQ8_K]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            b.d = 0.0f32.to_le_bytes();
            b.qs = [0; QK_K];
            b.bsums = [0; QK_K / 16 * 2];
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).clamp(-128, 127) as i8 as u8;
        }
        for (j, sum) in b.bsums.chunks_exact_mut(2).enumerate() {
            let s: i16 = b.qs[16 * j..16 * j + 16]
                .iter()
                .map(|&q| q as i8 as i16)
                .sum();
            sum.copy_from_slice(&s.to_le_bytes());
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;
