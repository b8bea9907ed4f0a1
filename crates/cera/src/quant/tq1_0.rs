//! TQ1_0: ternary weights at 1.69 bits each, five trits packed per byte in base 3 as a
//! fixed-point fraction (so a trit is read by multiplying, not dividing).

use super::{Block, GgmlType, QK_K, f16_to_f32};

/// Powers of 3 that move trit `m` of a packed byte to the top.
const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// 256 ternary weights. A byte `q` holds 5 trits (4 in `qh`) as `q ≈ 256 * t / 243`; trit `m` is
/// `((q * 3^m mod 256) * 3) >> 8`, and the weight is `d * (trit - 1)`. Weight order: trit `m` of
/// `qs[j]`, j < 32, at `32m + j`; trit `m` of `qs[32 + j]`, j < 16, at `160 + 16m + j`; trit `m`
/// (m < 4) of `qh[j]` at `240 + 4m + j`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockTq1_0 {
    pub qs: [u8; 48],
    pub qh: [u8; 4],
    /// Block scale, f16.
    pub d: [u8; 2],
}

const _: () = assert!(size_of::<BlockTq1_0>() == 54);

// SAFETY: repr(C), only u8 arrays, size checked above against the type table.
unsafe impl Block for BlockTq1_0 {
    const TYPE: GgmlType = GgmlType::TQ1_0;
    const ELEMS: usize = QK_K;
}

pub fn dequantize(blocks: &[BlockTq1_0], out: &mut [f32]) {
    for (b, out) in blocks.iter().zip(out.as_chunks_mut::<QK_K>().0) {
        let d = f16_to_f32(b.d);
        let (out0, rest) = out.split_at_mut(160);
        let (out1, out2) = rest.split_at_mut(80);
        unpack(d, &b.qs[..32], &POW3, out0);
        unpack(d, &b.qs[32..], &POW3, out1);
        unpack(d, &b.qh, &POW3[..4], out2);
    }
}

/// Writes trit `m` of `bytes[j]` to `out[m * bytes.len() + j]`.
fn unpack(d: f32, bytes: &[u8], pow3: &[u8], out: &mut [f32]) {
    for (&p, out) in pow3.iter().zip(out.chunks_exact_mut(bytes.len())) {
        for (&q, o) in bytes.iter().zip(out) {
            let t = ((q.wrapping_mul(p) as u16 * 3) >> 8) as i8 - 1;
            *o = d * t as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trits_in_base3_fraction() {
        // Trits (2, 0, 1, 2, 1) of qs[0] = 2*81 + 0*27 + 1*9 + 2*3 + 1, stored as ceil(v*256/243).
        let v: u16 = 2 * 81 + 9 + 2 * 3 + 1;
        let mut b = BlockTq1_0 {
            qs: [0; 48],
            qh: [0; 4],
            d: crate::quant::f32_to_f16(0.5),
        };
        b.qs[0] = ((v * 256).div_ceil(243)) as u8;
        b.qh[3] = ((2 * 81u16 * 256).div_ceil(243)) as u8; // trits (2, 0, 0, 0)
        let mut out = [0.0; QK_K];
        dequantize(&[b], &mut out);
        let got: Vec<f32> = (0..5).map(|m| out[32 * m]).collect();
        assert_eq!(got, [0.5, -0.5, 0.0, 0.5, 0.0]);
        assert_eq!(out[1], -0.5);
        assert_eq!(
            [out[243], out[247], out[251], out[255]],
            [0.5, -0.5, -0.5, -0.5]
        );
    }
}
