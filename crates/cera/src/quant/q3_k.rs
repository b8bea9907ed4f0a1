//! Q3_K: 256-element super-blocks of 16 sub-blocks of 16, symmetric 3-bit,
//! `x = d * (sc - 32) * q` with a 6-bit scale `sc` per sub-block and `q` in -4..3.

use super::k_common::{make_q3_quants, nearest_int, pack_2bit, scales_q3k};
use super::q8_k::BlockQ8_K;
use super::{
    Block, GgmlType, QK_K, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast, f32_to_f16,
};

/// One Q3_K super-block (110 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct BlockQ3_K {
    /// High (third) bits, inverted: bit `j / 32` of byte `j % 32` is set when element `j` is
    /// non-negative (its low bits are not offset by -4).
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits: byte `32*h + l` holds elements `128*h + 32*s + l` (s = 0..4) in bits
    /// `2s..2s+2`.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales biased by 32: bytes 0..8 hold the low nibbles of scales 0..8 (low
    /// half) and 8..16 (high half); bits `2k..2k+2` of byte `8 + i` are the top bits of scale
    /// `4k + i`.
    pub scales: [u8; 12],
    /// Super-block scale, f16.
    pub d: [u8; 2],
}

const _: () = assert!(size_of::<BlockQ3_K>() == 110);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ3_K {
    const TYPE: GgmlType = GgmlType::Q3_K;
    const ELEMS: usize = QK_K;
}

/// Sub-block scale `j` (0..16), with the bias of 32 removed.
#[inline]
fn scale(scales: &[u8; 12], j: usize) -> i32 {
    let lo = if j < 8 {
        scales[j] & 0x0F
    } else {
        scales[j - 8] >> 4
    };
    let hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    (lo | (hi << 4)) as i32 - 32
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
pub fn dequantize(blocks: &[BlockQ3_K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        // 16 outputs per sub-block `is`: half h, shift s, and which 16 of the 32 bytes.
        for (is, y) in y.chunks_exact_mut(16).enumerate() {
            let (h, s, part) = (is / 8, (is / 2) % 4, is % 2);
            let dl = d * scale(&b.scales, is) as f32;
            let bit = is / 2; // = element index / 32
            let q = &b.qs[32 * h + 16 * part..][..16];
            let hm = &b.hmask[16 * part..][..16];
            for ((o, &q), &hm) in y.iter_mut().zip(q).zip(hm) {
                let low = ((q >> (2 * s)) & 3) as i32;
                let high = if (hm >> bit) & 1 != 0 { 0 } else { 4 };
                *o = dl * (low - high) as f32;
            }
        }
    }
}

/// ggml's `quantize_row_q3_K_ref`: an x²-weighted refinement per sub-block
/// (`make_q3_quants`), the sixteen scales quantized to 6 bits against the largest, and the
/// quants recomputed with the rounded scales.
pub fn quantize(src: &[f32], out: &mut [BlockQ3_K]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let mut levels = [0u8; QK_K];
        let mut scales = [0.0f32; QK_K / 16];
        let (mut amax, mut max_scale) = (0.0f32, 0.0f32);
        for (j, (xs, lv)) in x
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .enumerate()
        {
            let xs: &[f32; 16] = xs.try_into().expect("16 elements");
            let lv: &mut [u8; 16] = lv.try_into().expect("16 levels");
            scales[j] = make_q3_quants(4, xs, lv);
            if scales[j].abs() > amax {
                amax = scales[j].abs();
                max_scale = scales[j];
            }
        }

        b.scales = [0; 12];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &sc) in scales.iter().enumerate() {
                let l = ((nearest_int(iscale * sc) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    b.scales[j] = l & 0x0F;
                } else {
                    b.scales[j - 8] |= (l & 0x0F) << 4;
                }
                b.scales[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
            }
            b.d = f32_to_f16(1.0 / iscale);
        } else {
            b.d = f32_to_f16(0.0);
        }

        let d = f16_to_f32(b.d);
        for j in 0..QK_K / 16 {
            let dl = d * scale(&b.scales, j) as f32;
            if dl == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                levels[i] = (nearest_int(x[i] / dl).clamp(-4, 3) + 4) as u8;
            }
        }

        // Levels 4..8 keep their high bit in hmask; the rest get the -4 offset on decode.
        b.hmask = [0; QK_K / 8];
        for (j, l) in levels.iter_mut().enumerate() {
            if *l > 3 {
                b.hmask[j % 32] |= 1 << (j / 32);
                *l -= 4;
            }
        }
        pack_2bit(&levels, &mut b.qs);
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_q3_K_q8_K`): per
/// super-block the exact `isum = Σ (sc − 32)·(q·a)` with `q` in -4..4, then
/// `sumf += d·d_a·isum` in f32 (the SIMD kernels agree bit for bit).
pub fn vec_dot_scalar(n: usize, w: &[BlockQ3_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let sc = scales_q3k(&b.scales);
        // Element 128h + 32s + l: bits 2s..2s+2 of qs[32h + l], high bit 4h + s of hmask[l].
        let mut q = [0i8; QK_K];
        for (j, q) in q.chunks_exact_mut(32).enumerate() {
            let (h, s) = (j / 4, j % 4);
            let qs = &b.qs[32 * h..32 * h + 32];
            for ((q, &x), &m) in q.iter_mut().zip(qs).zip(&b.hmask) {
                let low = ((x >> (2 * s)) & 3) as i8;
                *q = low - (((m >> j) & 1) ^ 1) as i8 * 4;
            }
        }
        let mut isum = 0i32;
        for (is, &sc) in sc.iter().enumerate() {
            let r = 16 * is..16 * is + 16;
            isum += sc as i32 * dot_codes(&q[r.clone()], &y.qs[r]);
        }
        sumf += f16_to_f32_fast(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}
