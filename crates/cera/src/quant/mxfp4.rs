//! MXFP4 (OCP microscaling): 32 E2M1 (FP4) weights sharing one power-of-two E8M0 scale.

use super::iq_grids::KVALUES_E2M1;
use super::{Block, GgmlType};

/// 32 weights: `qs[j]` holds weight `j` in its low nibble and weight `16 + j` in its high nibble,
/// each an index into the E2M1 values. `e` is the E8M0 scale `2^(e - 127)`; since the table
/// holds doubled values, a weight is `2^(e - 128) * KVALUES_E2M1[nibble]`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockMxfp4 {
    /// E8M0 exponent.
    pub e: u8,
    pub qs: [u8; 16],
}

const _: () = assert!(size_of::<BlockMxfp4>() == 17);

// SAFETY: repr(C), only u8 and u8 arrays, size checked above against the type table.
unsafe impl Block for BlockMxfp4 {
    const TYPE: GgmlType = GgmlType::MXFP4;
    const ELEMS: usize = 32;
}

/// Half of the E8M0 scale, `2^(e - 128)`, built from its bits: e = 0 and 1 give the subnormals
/// 2^-128 and 2^-127, and e = 255 (NaN in E8M0) gives 2^127, as gguf does.
#[inline]
pub(super) fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

pub fn dequantize(blocks: &[BlockMxfp4], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<32>().0) {
        let d = e8m0_to_f32_half(b.e);
        let (lo, hi) = out.split_at_mut(16);
        for ((&q, lo), hi) in b.qs.iter().zip(lo).zip(hi) {
            *lo = d * KVALUES_E2M1[(q & 0x0f) as usize] as f32;
            *hi = d * KVALUES_E2M1[(q >> 4) as usize] as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_edges() {
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32_half(2), 2f32.powi(-126));
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(255), 2f32.powi(127));
    }

    #[test]
    fn nibble_order() {
        let mut b = BlockMxfp4 {
            e: 128,
            qs: [0; 16],
        };
        b.qs[1] = 0xf7;
        let mut out = [0.0; 32];
        dequantize(&[b], &mut out);
        assert_eq!(out[1], 12.0);
        assert_eq!(out[17], -12.0);
        assert_eq!(out[0].to_bits(), 0); // +0, never -0
    }
}
