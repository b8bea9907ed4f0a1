//! NVFP4: 64 E2M1 (FP4) weights in four sub-blocks of 16, each with an unsigned E4M3 scale.

use super::iq_grids::KVALUES_E2M1;
use super::{Block, GgmlType};

/// 64 weights. `d[s]` is the UE4M3 scale of weights `16s..16s+16`; `qs[8s + j]` holds weight
/// `16s + j` in its low nibble and `16s + 8 + j` in its high nibble, indices into the (doubled)
/// E2M1 values. A weight is `ue4m3(d[s]) / 2 * KVALUES_E2M1[nibble]`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockNvfp4 {
    /// UE4M3 scales, one per 16 weights.
    pub d: [u8; 4],
    pub qs: [u8; 32],
}

const _: () = assert!(size_of::<BlockNvfp4>() == 36);

// SAFETY: repr(C), only u8 arrays, size checked above against the type table.
unsafe impl Block for BlockNvfp4 {
    const TYPE: GgmlType = GgmlType::NVFP4;
    const ELEMS: usize = 64;
}

/// Half a UE4M3 scale (exponent bias 7, subnormals at exponent 0), as gguf decodes it: bit 7 is
/// ignored, and 0x7f (NaN in E4M3) decodes to 0. Every step is exact in f32.
#[inline]
pub(super) fn ue4m3_to_f32_half(x: u8) -> f32 {
    if x == 0 || x == 0x7f {
        return 0.0;
    }
    let exp = ((x >> 3) & 0x0f) as i32;
    let man = (x & 7) as f32;
    let raw = if exp == 0 {
        man * (1.0 / 512.0)
    } else {
        // 2^(exp - 7) built from its bits; exp is 1..=15, a normal f32.
        (1.0 + man / 8.0) * f32::from_bits(((exp - 7 + 127) as u32) << 23)
    };
    raw * 0.5
}

pub fn dequantize(blocks: &[BlockNvfp4], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<64>().0) {
        let subs = b.d.iter().zip(b.qs.as_chunks::<8>().0);
        for ((&sc, q), out) in subs.zip(out.as_chunks_mut::<16>().0) {
            let d = ue4m3_to_f32_half(sc);
            let (lo, hi) = out.split_at_mut(8);
            for ((&q, lo), hi) in q.iter().zip(lo).zip(hi) {
                *lo = d * KVALUES_E2M1[(q & 0x0f) as usize] as f32;
                *hi = d * KVALUES_E2M1[(q >> 4) as usize] as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_decoding() {
        assert_eq!(ue4m3_to_f32_half(0x38), 0.5); // 1.0
        assert_eq!(ue4m3_to_f32_half(0x01), 2f32.powi(-10)); // smallest subnormal
        assert_eq!(ue4m3_to_f32_half(0x7e), 224.0); // largest finite, 448
        assert_eq!(ue4m3_to_f32_half(0x7f), 0.0);
        assert_eq!(ue4m3_to_f32_half(0xb8), 0.5); // bit 7 ignored
        assert_eq!(ue4m3_to_f32_half(0xff), 240.0); // only 0x7f is special-cased
    }

    #[test]
    fn sub_block_order() {
        let mut b = BlockNvfp4 {
            d: [0x38, 0x40, 0x38, 0x38],
            qs: [0; 32],
        };
        b.qs[9] = 0x9f; // sub-block 1, weight 1 low nibble, weight 9 high nibble
        let mut out = [0.0; 64];
        dequantize(&[b], &mut out);
        assert_eq!(out[17], -12.0);
        assert_eq!(out[25], -1.0);
    }
}
