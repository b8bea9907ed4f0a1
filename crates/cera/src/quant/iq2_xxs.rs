//! IQ2_XXS: 2.06 bits per weight. Groups of 8 weights are points of the E8-like lattice in
//! `IQ2XXS_GRID` (magnitudes only), with signs from a 7-bit index into `KSIGNS`.

use super::iq_grids::{IQ2XXS_GRID, KSIGNS};
use super::{Block, GgmlType, QK_K, f16_to_f32};

/// 256 weights in 8 groups of 32. Group `g` owns `qs[8g..8g+8]`, read as two little-endian u32:
/// the first is four 8-bit grid indices (one row of 8 magnitudes each); the second holds four
/// 7-bit sign indices (bits `7l..7l+7` for row `l`) and the group's 4-bit scale in bits 28..32.
/// A weight is `d * (0.5 + scale) * 0.25 * grid[j] * sign[j]`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockIq2Xxs {
    /// Super-block scale, f16.
    pub d: [u8; 2],
    pub qs: [u8; 64],
}

const _: () = assert!(size_of::<BlockIq2Xxs>() == 66);

// SAFETY: repr(C), only u8 arrays, size checked above against the type table.
unsafe impl Block for BlockIq2Xxs {
    const TYPE: GgmlType = GgmlType::IQ2_XXS;
    const ELEMS: usize = QK_K;
}

pub fn dequantize(blocks: &[BlockIq2Xxs], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<QK_K>().0) {
        let d = f16_to_f32(b.d);
        for (q, out) in
            b.qs.as_chunks::<8>()
                .0
                .iter()
                .zip(out.as_chunks_mut::<32>().0)
        {
            let aux = u32::from_le_bytes([q[4], q[5], q[6], q[7]]);
            // Same order as gguf: (d * (0.5 + s)) * 0.25, all in f32.
            let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
            for (l, out) in out.as_chunks_mut::<8>().0.iter_mut().enumerate() {
                let row = IQ2XXS_GRID[q[l] as usize];
                let signs = KSIGNS[((aux >> (7 * l)) & 0x7f) as usize];
                for (j, o) in out.iter_mut().enumerate() {
                    let g = ((row >> (8 * j)) & 0xff) as f32;
                    *o = times_sign(db * g, (signs >> j) & 1 != 0);
                }
            }
        }
    }
}

/// `x * -1.0` when `negative`, else `x`, as gguf's multiply by a +-1 sign array computes it. For
/// every non-NaN `x` that is exactly `-x`; a hardware multiply keeps a NaN's sign, whereas LLVM may
/// fold a multiply by -1 into a negation that flips it, so NaNs are left alone explicitly.
#[inline]
pub(super) fn times_sign(x: f32, negative: bool) -> f32 {
    if negative && !x.is_nan() { -x } else { x }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_and_signs_are_well_formed() {
        // First rows as published with the format.
        assert_eq!(IQ2XXS_GRID[0], 0x0808080808080808);
        assert_eq!(IQ2XXS_GRID[1], 0x080808080808082b);
        assert_eq!(IQ2XXS_GRID[255], 0x2b2b2b1908081908);
        for row in IQ2XXS_GRID {
            assert!(
                row.to_le_bytes()
                    .iter()
                    .all(|b| [0x08, 0x19, 0x2b].contains(b))
            );
        }
        // A sign byte is its 7-bit index plus a parity bit making the number of negatives even.
        for (i, &s) in KSIGNS.iter().enumerate() {
            assert_eq!(s & 0x7f, i as u8);
            assert_eq!(s.count_ones() % 2, 0);
        }
    }

    #[test]
    fn sign_keeps_nans_and_flips_zero() {
        let nan = f32::from_bits(0xffc0_0000);
        assert_eq!(times_sign(nan, true).to_bits(), nan.to_bits());
        assert_eq!(times_sign(0.0, true).to_bits(), (-0.0f32).to_bits());
        assert_eq!(times_sign(f32::INFINITY, true), f32::NEG_INFINITY);
        assert_eq!(times_sign(3.0, false), 3.0);
    }

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockIq2Xxs {
            d: crate::quant::f32_to_f16(2.0),
            qs: [0; 64],
        };
        // Group 0: row 0 uses grid index 1, sign index 1 (negates element 0, and element 7 by
        // parity), scale 3 -> db = 2 * 3.5 * 0.25 = 1.75.
        b.qs[0] = 1;
        b.qs[4..8].copy_from_slice(&(1u32 | (3 << 28)).to_le_bytes());
        let mut out = [0.0; QK_K];
        dequantize(&[b], &mut out);
        assert_eq!(out[0], -1.75 * 43.0);
        assert_eq!(out[1], 1.75 * 8.0);
        assert_eq!(out[7], -1.75 * 8.0);
        assert_eq!(out[8], 1.75 * 8.0);
        // Other groups have scale 0 -> db = 2 * 0.5 * 0.25.
        assert_eq!(out[32], 0.25 * 8.0);
    }
}
