//! IQ2_XS: 2.31 bits per weight. Like IQ2_XXS but with a 9-bit grid index and a 7-bit sign
//! index per 8 weights, and a 4-bit scale per 16 weights.

use super::iq_grids::{IQ2XS_GRID, KSIGNS};
use super::iq2_xxs::times_sign;
use super::{Block, GgmlType, QK_K, f16_to_f32};

/// 256 weights as 32 rows of 8. Row `k` is the little-endian u16 at `qs[2k..2k+2]`: bits 0..9
/// index `IQ2XS_GRID`, bits 9..16 index `KSIGNS`. Rows `2m, 2m+1` share the 4-bit scale `m`
/// (low nibble of `scales[m/2]` for even `m`, high nibble for odd). A weight is
/// `d * (0.5 + scale) * 0.25 * grid[j] * sign[j]`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockIq2Xs {
    /// Super-block scale, f16.
    pub d: [u8; 2],
    pub qs: [u8; 64],
    pub scales: [u8; 8],
}

const _: () = assert!(size_of::<BlockIq2Xs>() == 74);

// SAFETY: repr(C), only u8 arrays, size checked above against the type table.
unsafe impl Block for BlockIq2Xs {
    const TYPE: GgmlType = GgmlType::IQ2_XS;
    const ELEMS: usize = QK_K;
}

pub fn dequantize(blocks: &[BlockIq2Xs], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<QK_K>().0) {
        let d = f16_to_f32(b.d);
        let rows = b.qs.as_chunks::<2>().0;
        for (k, (q, out)) in rows.iter().zip(out.as_chunks_mut::<8>().0).enumerate() {
            let sc = (b.scales[k / 4] >> (4 * ((k / 2) % 2))) & 0x0f;
            // Same order as gguf: (d * (0.5 + s)) * 0.25, all in f32.
            let db = d * (0.5 + sc as f32) * 0.25;
            let v = u16::from_le_bytes(*q);
            let row = IQ2XS_GRID[(v & 511) as usize];
            let signs = KSIGNS[(v >> 9) as usize];
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
        assert_eq!(IQ2XS_GRID[0], 0x0808080808080808);
        assert_eq!(IQ2XS_GRID[1], 0x080808080808082b);
        assert_eq!(IQ2XS_GRID[511], 0x2b2b2b2b2b2b2b2b);
        for row in IQ2XS_GRID {
            assert!(
                row.to_le_bytes()
                    .iter()
                    .all(|b| [0x08, 0x19, 0x2b].contains(b))
            );
        }
    }

    #[test]
    fn scale_nibbles_cover_pairs_of_rows() {
        let mut b = BlockIq2Xs {
            d: crate::quant::f32_to_f16(1.0),
            qs: [0; 64],
            scales: [0; 8],
        };
        b.scales[0] = 0x31; // rows 0,1: scale 1; rows 2,3: scale 3
        b.qs[2..4].copy_from_slice(&(511u16 | (1 << 9)).to_le_bytes()); // row 1: last grid row, signs 0x81
        let mut out = [0.0; QK_K];
        dequantize(&[b], &mut out);
        assert_eq!(out[0], 1.5 * 0.25 * 8.0);
        assert_eq!(out[8], -1.5 * 0.25 * 43.0);
        assert_eq!(out[9], 1.5 * 0.25 * 43.0);
        assert_eq!(out[15], -1.5 * 0.25 * 43.0);
        assert_eq!(out[16], 3.5 * 0.25 * 8.0);
        assert_eq!(out[32], 0.5 * 0.25 * 8.0);
    }
}
