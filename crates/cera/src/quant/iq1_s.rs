//! IQ1_S: 1.56 bits per weight. Groups of 8 weights are points of the ternary lattice in
//! `IQ1S_GRID`, shifted by a per-32 offset of +-1/8 and scaled by a 3-bit odd scale.

use super::iq_grids::IQ1S_GRID;
use super::{Block, GgmlType, QK_K, f16_to_f32};

/// Offset added to every grid value before scaling (gguf's `delta`).
pub(super) const DELTA: f32 = 0.125;

/// 256 weights in 8 groups of 32 (4 grid rows of 8). Group `g` has the little-endian u16
/// `h = qh[2g..2g+2]`: row `l` uses grid index `qs[4g+l] | ((h >> 3l) & 7) << 8`, bits 12..15 are
/// the scale `s`, bit 15 the sign of the offset. A weight is `d * (2s + 1) * (grid[j] + delta)`
/// with `delta = +1/8`, or `-1/8` when bit 15 is set.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockIq1S {
    /// Super-block scale, f16.
    pub d: [u8; 2],
    pub qs: [u8; 32],
    pub qh: [u8; 16],
}

const _: () = assert!(size_of::<BlockIq1S>() == 50);

// SAFETY: repr(C), only u8 arrays, size checked above against the type table.
unsafe impl Block for BlockIq1S {
    const TYPE: GgmlType = GgmlType::IQ1_S;
    const ELEMS: usize = QK_K;
}

pub fn dequantize(blocks: &[BlockIq1S], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<QK_K>().0) {
        let d = f16_to_f32(b.d);
        let groups = b.qs.as_chunks::<4>().0.iter().zip(b.qh.as_chunks::<2>().0);
        for ((q, h), out) in groups.zip(out.as_chunks_mut::<32>().0) {
            let h = u16::from_le_bytes(*h);
            // gguf forms the odd multiplier in integers, then one f32 product.
            let dl = d * (2 * ((h >> 12) & 7) + 1) as f32;
            let delta = if h & 0x8000 == 0 { DELTA } else { -DELTA };
            for (l, out) in out.as_chunks_mut::<8>().0.iter_mut().enumerate() {
                let idx = q[l] as usize | (((h >> (3 * l)) & 7) as usize) << 8;
                let row = IQ1S_GRID[idx];
                for (j, o) in out.iter_mut().enumerate() {
                    *o = dl * (grid_value(row, j) + delta);
                }
            }
        }
    }
}

/// Element `j` of a packed `IQ1S_GRID` row: a signed byte, -1, 0 or 1.
#[inline]
pub(super) fn grid_value(row: u64, j: usize) -> f32 {
    (row >> (8 * j)) as u8 as i8 as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_well_formed() {
        assert_eq!(IQ1S_GRID[0], 0xffffffffffffffff);
        assert_eq!(IQ1S_GRID[1], 0xffffffffffffff01);
        assert_eq!(IQ1S_GRID[2047], 0x0101010101010101);
        for row in IQ1S_GRID {
            assert!(
                row.to_le_bytes()
                    .iter()
                    .all(|b| [0xff, 0x00, 0x01].contains(b))
            );
        }
    }

    #[test]
    fn offset_and_scale() {
        let mut b = BlockIq1S {
            d: crate::quant::f32_to_f16(1.0),
            qs: [0; 32],
            qh: [0; 16],
        };
        b.qs[5] = 0xff;
        // group 1: row 1 gets high index bits 7 (-> 2047), scale 2 (-> 5), negative offset.
        b.qh[2..4].copy_from_slice(&((7u16 << 3) | (2 << 12) | 0x8000).to_le_bytes());
        let mut out = [0.0; QK_K];
        dequantize(&[b], &mut out);
        assert_eq!(out[0], -0.875);
        assert_eq!(out[32], 5.0 * -1.125);
        assert_eq!(out[40], 5.0 * 0.875);
    }
}
