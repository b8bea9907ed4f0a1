//! IQ2_S: 2.56 bits per weight. A 10-bit grid index per 8 weights, explicit sign bits, and a
//! 4-bit scale per 16 weights.

use super::iq_grids::IQ2S_GRID;
use super::iq2_xxs::times_sign;
use super::{Block, GgmlType, QK_K, f16_to_f32};

/// 256 weights as 32 rows of 8. Row `k` uses grid index `qs[k] | ((qh[k/4] >> 2*(k%4)) & 3) << 8`
/// into `IQ2S_GRID` and sign byte `signs[k]` (bit `j` set negates element `j`). Rows `2m, 2m+1`
/// share the 4-bit scale `m` (low nibble of `scales[m/2]` for even `m`, high for odd). A weight
/// is `d * (0.5 + scale) * 0.25 * grid[j] * sign[j]`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockIq2S {
    /// Super-block scale, f16.
    pub d: [u8; 2],
    pub qs: [u8; 32],
    pub signs: [u8; 32],
    pub qh: [u8; 8],
    pub scales: [u8; 8],
}

const _: () = assert!(size_of::<BlockIq2S>() == 82);

// SAFETY: repr(C), only u8 arrays, size checked above against the type table.
unsafe impl Block for BlockIq2S {
    const TYPE: GgmlType = GgmlType::IQ2_S;
    const ELEMS: usize = QK_K;
}

pub fn dequantize(blocks: &[BlockIq2S], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<QK_K>().0) {
        let d = f16_to_f32(b.d);
        for (k, out) in out.as_chunks_mut::<8>().0.iter_mut().enumerate() {
            let sc = (b.scales[k / 4] >> (4 * ((k / 2) % 2))) & 0x0f;
            // Same order as gguf: (d * (0.5 + s)) * 0.25, all in f32.
            let db = d * (0.5 + sc as f32) * 0.25;
            let hi = ((b.qh[k / 4] >> (2 * (k % 4))) & 3) as usize;
            let row = IQ2S_GRID[b.qs[k] as usize | (hi << 8)];
            let signs = b.signs[k];
            for (j, o) in out.iter_mut().enumerate() {
                let g = ((row >> (8 * j)) & 0xff) as f32;
                *o = times_sign(db * g, (signs >> j) & 1 != 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_well_formed() {
        assert_eq!(IQ2S_GRID[0], 0x0808080808080808);
        assert_eq!(IQ2S_GRID[1], 0x080808080808082b);
        assert_eq!(IQ2S_GRID[1023], 0x2b2b2b2b2b2b2b2b);
        for row in IQ2S_GRID {
            assert!(
                row.to_le_bytes()
                    .iter()
                    .all(|b| [0x08, 0x19, 0x2b].contains(b))
            );
        }
    }

    #[test]
    fn high_index_bits_and_signs() {
        let mut b = BlockIq2S {
            d: crate::quant::f32_to_f16(1.0),
            qs: [0; 32],
            signs: [0; 32],
            qh: [0; 8],
            scales: [0; 8],
        };
        b.qs[5] = 0xff;
        b.qh[1] = 0b11 << 2; // row 5 = 4*1 + 1: high bits 3 -> grid index 1023
        b.signs[5] = 0x02;
        let mut out = [0.0; QK_K];
        dequantize(&[b], &mut out);
        assert_eq!(out[40], 0.125 * 43.0);
        assert_eq!(out[41], -0.125 * 43.0);
    }
}
