//! IQ3_XXS: 3.06 bits per weight. Groups of 4 weights are points of the lattice in
//! `IQ3XXS_GRID` (magnitudes only); signs come per 8 weights from a 7-bit index into `KSIGNS`.

use super::iq_grids::{IQ3XXS_GRID, KSIGNS};
use super::iq2_xxs::times_sign;
use super::{Block, GgmlType, QK_K, f16_to_f32};

/// 256 weights in 8 groups of 32. Group `g` takes grid indices `qs[8g..8g+8]` (one row of 4
/// magnitudes each) and the little-endian u32 `scales[4g..4g+4]`: four 7-bit sign indices
/// (bits `7l..7l+7` sign weights `8l..8l+8`, i.e. grid rows `2l, 2l+1`) and a 4-bit scale in
/// bits 28..32. A weight is `d * (0.5 + scale) * 0.5 * grid[j] * sign[j]`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockIq3Xxs {
    /// Super-block scale, f16.
    pub d: [u8; 2],
    pub qs: [u8; 64],
    pub scales: [u8; 32],
}

const _: () = assert!(size_of::<BlockIq3Xxs>() == 98);

// SAFETY: repr(C), only u8 arrays, size checked above against the type table.
unsafe impl Block for BlockIq3Xxs {
    const TYPE: GgmlType = GgmlType::IQ3_XXS;
    const ELEMS: usize = QK_K;
}

pub fn dequantize(blocks: &[BlockIq3Xxs], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<QK_K>().0) {
        let d = f16_to_f32(b.d);
        let groups =
            b.qs.as_chunks::<8>()
                .0
                .iter()
                .zip(b.scales.as_chunks::<4>().0);
        for ((q, sc), out) in groups.zip(out.as_chunks_mut::<32>().0) {
            let aux = u32::from_le_bytes(*sc);
            // Same order as gguf: (d * (0.5 + s)) * 0.5, all in f32.
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for (l, out) in out.as_chunks_mut::<8>().0.iter_mut().enumerate() {
                let signs = KSIGNS[((aux >> (7 * l)) & 0x7f) as usize];
                let row = IQ3XXS_GRID[q[2 * l] as usize] as u64
                    | (IQ3XXS_GRID[q[2 * l + 1] as usize] as u64) << 32;
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
        assert_eq!(IQ3XXS_GRID[0], 0x04040404);
        assert_eq!(IQ3XXS_GRID[1], 0x04040414);
        assert_eq!(IQ3XXS_GRID[255], 0x3e341c04);
        let allowed = [0x04, 0x0c, 0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3e];
        for row in IQ3XXS_GRID {
            assert!(row.to_le_bytes().iter().all(|b| allowed.contains(b)));
        }
    }

    #[test]
    fn sign_index_spans_two_grid_rows() {
        let mut b = BlockIq3Xxs {
            d: crate::quant::f32_to_f16(1.0),
            qs: [0; 64],
            scales: [0; 32],
        };
        b.qs[3] = 255; // group 0, second grid row of weights 8..16
        // Sign index 0x3f for weights 8..16 (even parity: negates 8..14 only), scale 1 -> 0.75.
        b.scales[..4].copy_from_slice(&((0x3fu32 << 7) | (1 << 28)).to_le_bytes());
        let mut out = [0.0; QK_K];
        dequantize(&[b], &mut out);
        assert_eq!(out[0], 0.75 * 4.0);
        assert_eq!(out[8], -0.75 * 4.0);
        assert_eq!(out[12], -0.75 * 4.0);
        assert_eq!(out[13], -0.75 * 28.0);
        assert_eq!(out[14], 0.75 * 52.0);
        assert_eq!(out[15], 0.75 * 62.0);
    }
}
