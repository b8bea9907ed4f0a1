//! Q6_K: 256-element super-blocks of 16 sub-blocks of 16, symmetric 6-bit,
//! `x = d * sc * (q - 32)` with a signed 8-bit scale `sc` per sub-block.

use super::k_common::{GROUP_MAX_EPS, make_qx_quants, nearest_int};
use super::q8_k::BlockQ8_K;
use super::{
    Block, GgmlType, QK_K, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast, f32_to_f16,
};

/// One Q6_K super-block (210 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct BlockQ6_K {
    /// Low 4 bits. In each 128-element half h (64 bytes), byte `l` holds elements `l` (low
    /// nibble) and `l + 64` (high nibble), byte `32 + l` elements `l + 32` and `l + 96`.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits: in each half, bits `2s..2s+2` of byte `32*h + l` belong to element
    /// `128*h + 32*s + l`.
    pub qh: [u8; QK_K / 4],
    /// Sub-block scales, i8.
    pub scales: [u8; QK_K / 16],
    /// Super-block scale, f16.
    pub d: [u8; 2],
}

const _: () = assert!(size_of::<BlockQ6_K>() == 210);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ6_K {
    const TYPE: GgmlType = GgmlType::Q6_K;
    const ELEMS: usize = QK_K;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
pub fn dequantize(blocks: &[BlockQ6_K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        for (is, y) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * (b.scales[is] as i8) as f32;
            // Element e = 16*is + i = 128*h + 32*s + l.
            let (h, s, l0) = (is / 8, (is / 2) % 4, 16 * (is % 2));
            let ql = &b.ql[64 * h + 32 * (s % 2) + l0..][..16];
            let qh = &b.qh[32 * h + l0..][..16];
            for ((o, &ql), &qh) in y.iter_mut().zip(ql).zip(qh) {
                let low = (ql >> (4 * (s / 2))) & 0x0F;
                let high = (qh >> (2 * s)) & 3;
                *o = dl * ((low | (high << 4)) as i32 - 32) as f32;
            }
        }
    }
}

/// ggml's `quantize_row_q6_K_ref`: an x²-weighted scale search per sub-block
/// (`make_qx_quants`), the scales quantized to 8 bits against the largest, and the quants
/// recomputed with the rounded scales.
pub fn quantize(src: &[f32], out: &mut [BlockQ6_K]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let mut levels = [0u8; QK_K];
        let mut scales = [0.0f32; QK_K / 16];
        let (mut max_abs_scale, mut max_scale) = (0.0f32, 0.0f32);
        for (j, (xs, lv)) in x
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .enumerate()
        {
            scales[j] = make_qx_quants(32, xs, None, lv);
            if scales[j].abs() > max_abs_scale {
                max_abs_scale = scales[j].abs();
                max_scale = scales[j];
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            *b = BlockQ6_K {
                ql: [0; QK_K / 2],
                qh: [0; QK_K / 4],
                scales: [0; QK_K / 16],
                d: f32_to_f16(0.0),
            };
            continue;
        }

        let iscale = -128.0 / max_scale;
        b.d = f32_to_f16(1.0 / iscale);
        for (s, &sc) in b.scales.iter_mut().zip(&scales) {
            *s = nearest_int(iscale * sc).min(127) as i8 as u8;
        }

        let d = f16_to_f32(b.d);
        for j in 0..QK_K / 16 {
            let dl = d * (b.scales[j] as i8) as f32;
            if dl == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                levels[i] = (nearest_int(x[i] / dl).clamp(-32, 31) + 32) as u8;
            }
        }

        for (h, lv) in levels.chunks_exact(128).enumerate() {
            let ql = &mut b.ql[64 * h..64 * h + 64];
            let qh = &mut b.qh[32 * h..32 * h + 32];
            for l in 0..32 {
                let (q1, q2, q3, q4) = (lv[l], lv[l + 32], lv[l + 64], lv[l + 96]);
                ql[l] = (q1 & 0x0F) | ((q3 & 0x0F) << 4);
                ql[l + 32] = (q2 & 0x0F) | ((q4 & 0x0F) << 4);
                qh[l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_q6_K_q8_K`): per
/// super-block the exact `isum = Σ sc·((q − 32)·a)`, then `sumf += d·d_a·isum` in f32 (the SIMD
/// kernels agree bit for bit).
pub fn vec_dot_scalar(n: usize, w: &[BlockQ6_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let mut q = [0i8; QK_K];
        for (h, q) in q.chunks_exact_mut(128).enumerate() {
            let (ql, qh) = (&b.ql[64 * h..64 * h + 64], &b.qh[32 * h..32 * h + 32]);
            for l in 0..32 {
                let (a, b, hb) = (ql[l], ql[l + 32], qh[l]);
                q[l] = ((a & 0x0F) | ((hb & 3) << 4)) as i8 - 32;
                q[l + 32] = ((b & 0x0F) | (((hb >> 2) & 3) << 4)) as i8 - 32;
                q[l + 64] = ((a >> 4) | (((hb >> 4) & 3) << 4)) as i8 - 32;
                q[l + 96] = ((b >> 4) | (((hb >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        let mut isum = 0i32;
        for (is, &sc) in b.scales.iter().enumerate() {
            let r = 16 * is..16 * is + 16;
            isum += sc as i8 as i32 * dot_codes(&q[r.clone()], &y.qs[r]);
        }
        sumf += f16_to_f32_fast(b.d) * f32::from_le_bytes(y.d) * isum as f32;
    }
    sumf
}
