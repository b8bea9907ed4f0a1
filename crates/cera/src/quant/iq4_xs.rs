//! IQ4_XS: 256-element super-blocks of 8 sub-blocks of 32, IQ4_NL's non-linear 4-bit code
//! book with a 6-bit scale per sub-block, `x = d * (ls - 32) * KVALUES_IQ4NL[q]`.

use super::iq4_nl::{KVALUES_IQ4NL, NTRY};
use super::k_common::{best_index_int8, iq4_block_scale, nearest_int};
use super::q8_k::BlockQ8_K;
use super::{
    Block, GgmlType, QK_K, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast, f32_to_f16,
};

/// One IQ4_XS super-block (136 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct BlockIQ4_XS {
    /// Super-block scale, f16.
    pub d: [u8; 2],
    /// Top 2 bits of the eight 6-bit sub-block scales, a little-endian u16: bits
    /// `2*ib..2*ib+2` belong to sub-block `ib`.
    pub scales_h: [u8; 2],
    /// Low 4 bits of the sub-block scales: sub-block `ib` uses nibble `ib % 2` of byte `ib / 2`.
    pub scales_l: [u8; QK_K / 64],
    /// 4-bit table indices, 16 bytes per sub-block: the low nibble of byte `j` is element `j` of
    /// the sub-block, the high nibble element `j + 16`.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockIQ4_XS>() == 136);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockIQ4_XS {
    const TYPE: GgmlType = GgmlType::IQ4_XS;
    const ELEMS: usize = QK_K;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
pub fn dequantize(blocks: &[BlockIQ4_XS], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        let scales_h = u16::from_le_bytes(b.scales_h);
        for (ib, (y, q)) in y
            .chunks_exact_mut(32)
            .zip(b.qs.chunks_exact(16))
            .enumerate()
        {
            let lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
            let hi = ((scales_h >> (2 * ib)) & 3) as u8;
            let dl = d * ((lo | (hi << 4)) as i32 - 32) as f32;
            let (y_lo, y_hi) = y.split_at_mut(16);
            for ((&q, l), h) in q.iter().zip(y_lo).zip(y_hi) {
                *l = dl * KVALUES_IQ4NL[(q & 0x0F) as usize] as f32;
                *h = dl * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
            }
        }
    }
}

/// ggml's `quantize_row_iq4_nl_impl` over a 256-element super-block without importance
/// weights: a scale search per sub-block, the scales quantized to 6 bits against the largest,
/// then each element takes the nearest table entry under its rounded sub-block scale.
pub fn quantize(src: &[f32], out: &mut [BlockIQ4_XS]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let mut scales = [0.0f32; QK_K / 32];
        let (mut amax_scale, mut max_scale) = (0.0f32, 0.0f32);
        for (s, xb) in scales.iter_mut().zip(x.chunks_exact(32)) {
            *s = iq4_block_scale(&KVALUES_IQ4NL, xb, NTRY);
            if s.abs() > amax_scale {
                amax_scale = s.abs();
                max_scale = *s;
            }
        }

        let d = -max_scale / 32.0;
        b.d = f32_to_f16(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        b.scales_l = [0; QK_K / 64];
        for (ib, (xb, q)) in x
            .chunks_exact(32)
            .zip(b.qs.chunks_exact_mut(16))
            .enumerate()
        {
            let l = nearest_int(id * scales[ib]).clamp(-32, 31);
            // Levels use the unrounded super-block scale, as ggml does.
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let level = |v: f32| best_index_int8(&KVALUES_IQ4NL, idl * v) as u8;
            for (j, byte) in q.iter_mut().enumerate() {
                *byte = level(xb[j]) | (level(xb[j + 16]) << 4);
            }
            let l = (l + 32) as u8;
            b.scales_l[ib / 2] |= (l & 0x0F) << (4 * (ib % 2));
            scales_h |= ((l >> 4) as u16) << (2 * ib);
        }
        b.scales_h = scales_h.to_le_bytes();
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// The eight sub-block scales with the bias of 32 removed (`-32..32`).
#[inline]
pub(crate) fn sub_scales(b: &BlockIQ4_XS) -> [i16; 8] {
    let scales_h = u16::from_le_bytes(b.scales_h);
    std::array::from_fn(|ib| {
        let lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
        let hi = ((scales_h >> (2 * ib)) & 3) as u8;
        (lo | (hi << 4)) as i16 - 32
    })
}

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_iq4_xs_q8_K`): per
/// super-block the exact `isum = Σ (ls − 32)·(v·a)`, then `sumf += d·d_a·isum` in f32 (the SIMD
/// kernels agree bit for bit).
pub fn vec_dot_scalar(n: usize, w: &[BlockIQ4_XS], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let ls = sub_scales(b);
        let mut isum = 0i32;
        for (ib, (qs, yq)) in b.qs.chunks_exact(16).zip(y.qs.chunks_exact(32)).enumerate() {
            let mut q = [0i8; 32];
            let (lo, hi) = q.split_at_mut(16);
            for ((&x, l), h) in qs.iter().zip(lo).zip(hi) {
                *l = KVALUES_IQ4NL[(x & 0x0F) as usize];
                *h = KVALUES_IQ4NL[(x >> 4) as usize];
            }
            isum += ls[ib] as i32 * dot_codes(&q, yq);
        }
        sumf += f16_to_f32_fast(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}
