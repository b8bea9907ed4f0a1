//! TQ2_0: ternary weights at 2.06 bits each, four 2-bit codes per byte.

use super::{Block, GgmlType, QK_K, f16_to_f32};

/// 256 ternary weights: code `c` in 0..=2 (3 also decodes, to 2) means `d * (c - 1)`. Weight
/// `128h + 32s + j` is bits `2s..2s+2` of `qs[32h + j]`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockTq2_0 {
    pub qs: [u8; 64],
    /// Block scale, f16.
    pub d: [u8; 2],
}

const _: () = assert!(size_of::<BlockTq2_0>() == 66);

// SAFETY: repr(C), only u8 arrays, size checked above against the type table.
unsafe impl Block for BlockTq2_0 {
    const TYPE: GgmlType = GgmlType::TQ2_0;
    const ELEMS: usize = QK_K;
}

pub fn dequantize(blocks: &[BlockTq2_0], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<QK_K>().0) {
        let d = f16_to_f32(b.d);
        for (q, out) in
            b.qs.as_chunks::<32>()
                .0
                .iter()
                .zip(out.as_chunks_mut::<128>().0)
        {
            for (s, out) in out.as_chunks_mut::<32>().0.iter_mut().enumerate() {
                for (&q, o) in q.iter().zip(out) {
                    let c = ((q >> (2 * s)) & 3) as i8 - 1;
                    *o = d * c as f32;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_positions() {
        let mut b = BlockTq2_0 {
            qs: [0x55; 64],
            d: crate::quant::f32_to_f16(2.0),
        };
        b.qs[33] = 0b11_10_00_01;
        let mut out = [0.0; QK_K];
        dequantize(&[b], &mut out);
        assert_eq!(out[0], 0.0);
        assert_eq!(
            [out[129], out[161], out[193], out[225]],
            [0.0, -2.0, 2.0, 4.0]
        );
    }
}
