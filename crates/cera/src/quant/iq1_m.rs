//! IQ1_M: 1.75 bits per weight. The IQ1_S grid with an offset sign per 8 weights and a 3-bit
//! scale per 16; the f16 super-block scale is spread over the top nibbles of the scale words.

use super::iq_grids::IQ1S_GRID;
use super::iq1_s::{DELTA, grid_value};
use super::{Block, GgmlType, QK_K, f16_to_f32};

/// 256 weights as 32 grid rows of 8. Row `k` takes nibble `n = qh[k/2] >> 4*(k%2)`: grid index
/// `qs[k] | (n & 7) << 8`, and bit 3 of `n` makes its offset `-1/8` instead of `+1/8`. `scales` is
/// four little-endian u16 `w0..w3`: bits `3m..3m+3` of `w[m/4]` (m%4 = position) are the 3-bit
/// scale of weights `16m..16m+16`, and the top nibbles `w0>>12 | w1>>12<<4 | w2>>12<<8 |
/// w3>>12<<12` are the bits of the f16 super-block scale `d`. A weight is
/// `d * (2s + 1) * (grid[j] + delta)`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockIq1M {
    pub qs: [u8; 32],
    pub qh: [u8; 16],
    pub scales: [u8; 8],
}

const _: () = assert!(size_of::<BlockIq1M>() == 56);

// SAFETY: repr(C), only u8 arrays, size checked above against the type table.
unsafe impl Block for BlockIq1M {
    const TYPE: GgmlType = GgmlType::IQ1_M;
    const ELEMS: usize = QK_K;
}

pub fn dequantize(blocks: &[BlockIq1M], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<QK_K>().0) {
        let w: [u16; 4] =
            std::array::from_fn(|i| u16::from_le_bytes([b.scales[2 * i], b.scales[2 * i + 1]]));
        let d_bits = (w[0] >> 12) | (w[1] >> 12) << 4 | (w[2] >> 12) << 8 | (w[3] >> 12) << 12;
        let d = f16_to_f32(d_bits.to_le_bytes());
        for (k, out) in out.as_chunks_mut::<8>().0.iter_mut().enumerate() {
            let m = k / 2;
            let s = (w[m / 4] >> (3 * (m % 4))) & 7;
            // gguf forms the odd multiplier in integers, then one f32 product.
            let dl = d * (2 * s + 1) as f32;
            let n = b.qh[k / 2] >> (4 * (k % 2));
            let delta = if n & 0x08 == 0 { DELTA } else { -DELTA };
            let row = IQ1S_GRID[b.qs[k] as usize | ((n & 7) as usize) << 8];
            for (j, o) in out.iter_mut().enumerate() {
                *o = dl * (grid_value(row, j) + delta);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_scale_and_per_row_offset() {
        let mut b = BlockIq1M {
            qs: [0; 32],
            qh: [0; 16],
            scales: [0; 8],
        };
        // d = 2.0 = f16 0x4000: only the top nibble of w3 is non-zero.
        let w = [0x0000u16, 0x0000, 0x0000, 0x4000 | (3 << 3)]; // w3: scale of m=13 is 3 -> 7
        for (c, w) in b.scales.chunks_exact_mut(2).zip(w) {
            c.copy_from_slice(&w.to_le_bytes());
        }
        b.qs[27] = 0xff;
        b.qh[13] = 0xf0; // row 27 (odd): index bits 7 -> 2047, negative offset
        let mut out = [0.0; QK_K];
        dequantize(&[b], &mut out);
        assert_eq!(out[0], 2.0 * -0.875);
        assert_eq!(out[208], 14.0 * -0.875); // row 26: scale 7, positive offset
        assert_eq!(out[216], 14.0 * 0.875); // row 27: grid 1, offset -1/8
    }
}
