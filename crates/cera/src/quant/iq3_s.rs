//! IQ3_S: 3.44 bits per weight. A 9-bit grid index per 4 weights into `IQ3S_GRID`, explicit
//! sign bits, and a 4-bit odd scale per 32 weights.

use super::iq_grids::IQ3S_GRID;
use super::iq2_xxs::times_sign;
use super::{Block, GgmlType, QK_K, f16_to_f32};

/// 256 weights as 64 grid rows of 4. Row `k` uses index `qs[k] | ((qh[k/8] >> (k%8)) & 1) << 8`.
/// Weight `i` is negated when bit `i%8` of `signs[i/8]` is set. Each 32 weights (8 rows) share
/// the scale nibble `m` (low nibble of `scales[m/2]` for even `m`, high for odd). A weight is
/// `d * (1 + 2*scale) * grid[j] * sign[j]`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockIq3S {
    /// Super-block scale, f16.
    pub d: [u8; 2],
    pub qs: [u8; 64],
    pub qh: [u8; 8],
    pub signs: [u8; 32],
    pub scales: [u8; 4],
}

const _: () = assert!(size_of::<BlockIq3S>() == 110);

// SAFETY: repr(C), only u8 arrays, size checked above against the type table.
unsafe impl Block for BlockIq3S {
    const TYPE: GgmlType = GgmlType::IQ3_S;
    const ELEMS: usize = QK_K;
}

pub fn dequantize(blocks: &[BlockIq3S], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<QK_K>().0) {
        let d = f16_to_f32(b.d);
        for (m, out) in out.as_chunks_mut::<32>().0.iter_mut().enumerate() {
            let sc = (b.scales[m / 2] >> (4 * (m % 2))) & 0x0f;
            // gguf forms 1 + 2*s in integers (at most 31), then one f32 product.
            let db = d * (1 + 2 * sc) as f32;
            for (l, out) in out.as_chunks_mut::<8>().0.iter_mut().enumerate() {
                let signs = b.signs[4 * m + l];
                let row = |k: usize| {
                    let hi = ((b.qh[k / 8] >> (k % 8)) & 1) as usize;
                    IQ3S_GRID[b.qs[k] as usize | (hi << 8)] as u64
                };
                let k = 8 * m + 2 * l;
                let row = row(k) | row(k + 1) << 32;
                for (j, o) in out.iter_mut().enumerate() {
                    let g = ((row >> (8 * j)) & 0xff) as f32;
                    *o = times_sign(db * g, (signs >> j) & 1 != 0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_well_formed() {
        assert_eq!(IQ3S_GRID[0], 0x01010101);
        assert_eq!(IQ3S_GRID[1], 0x01010103);
        assert_eq!(IQ3S_GRID[511], 0x0f0f0101);
        for row in IQ3S_GRID {
            assert!(row.to_le_bytes().iter().all(|b| b % 2 == 1 && *b <= 0x0f));
        }
    }

    #[test]
    fn high_bit_and_scale() {
        let mut b = BlockIq3S {
            d: crate::quant::f32_to_f16(1.0),
            qs: [0; 64],
            qh: [0; 8],
            signs: [0; 32],
            scales: [0; 4],
        };
        b.qs[9] = 255;
        b.qh[1] = 0b10; // row 9 -> index 511
        b.signs[4] = 0x80; // weight 39 = last of row 9
        b.scales[0] = 0x20; // weights 32..64: scale 2 -> 5
        let mut out = [0.0; QK_K];
        dequantize(&[b], &mut out);
        assert_eq!(out[0], 1.0);
        assert_eq!(out[32], 5.0);
        assert_eq!(out[36], 5.0);
        assert_eq!(out[38], 75.0);
        assert_eq!(out[39], -75.0);
    }
}
