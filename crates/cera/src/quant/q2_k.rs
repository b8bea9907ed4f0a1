//! Q2_K: 256-element super-blocks of 16 sub-blocks of 16, asymmetric 2-bit,
//! `x = d * sc * q - dmin * m` with a 4-bit scale `sc` and min `m` per sub-block.

use super::k_common::{Qkx2Search, make_qkx2_quants, nearest_int, pack_2bit};
use super::q8_k::BlockQ8_K;
use super::{
    Block, GgmlType, QK_K, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast, f32_to_f16,
};

/// One Q2_K super-block (84 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct BlockQ2_K {
    /// Per sub-block: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// 2-bit quants: byte `32*h + l` holds elements `128*h + 32*s + l` (s = 0..4) in bits
    /// `2s..2s+2`.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale for the sub-block scales, f16.
    pub d: [u8; 2],
    /// Super-block scale for the sub-block mins, f16.
    pub dmin: [u8; 2],
}

const _: () = assert!(size_of::<BlockQ2_K>() == 84);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockQ2_K {
    const TYPE: GgmlType = GgmlType::Q2_K;
    const ELEMS: usize = QK_K;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
pub fn dequantize(blocks: &[BlockQ2_K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        let dmin = f16_to_f32(b.dmin);
        // 16 outputs per sub-block `is`: half h, shift s, and which 16 of the 32 bytes.
        for (is, (y, &sc)) in y.chunks_exact_mut(16).zip(&b.scales).enumerate() {
            let (h, s, part) = (is / 8, (is / 2) % 4, is % 2);
            let dl = d * (sc & 0x0F) as f32;
            let ml = dmin * (sc >> 4) as f32;
            let q = &b.qs[32 * h + 16 * part..][..16];
            for (o, &q) in y.iter_mut().zip(q) {
                *o = dl * ((q >> (2 * s)) & 3) as f32 - ml;
            }
        }
    }
}

/// ggml's `quantize_row_q2_K_ref`: a scale/min search per sub-block (weights |x|, absolute
/// error), the scales and mins then quantized to 4 bits against their maxima, and the quants
/// recomputed with the rounded scales.
pub fn quantize(src: &[f32], out: &mut [BlockQ2_K]) {
    const SEARCH: Qkx2Search = Qkx2Search {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let mut levels = [0u8; QK_K];
        let mut scales = [0.0f32; QK_K / 16];
        let mut mins = [0.0f32; QK_K / 16];
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..QK_K / 16 {
            let xs = &x[16 * j..16 * j + 16];
            let mut weights = [0.0f32; 16];
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let lv = &mut levels[16 * j..16 * j + 16];
            (scales[j], mins[j]) = make_qkx2_quants(3, xs, &weights, lv, &SEARCH);
            max_scale = max_scale.max(scales[j]);
            max_min = max_min.max(mins[j]);
        }

        b.scales = [0; QK_K / 16];
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for (s, &sc) in b.scales.iter_mut().zip(&scales) {
                *s = nearest_int(iscale * sc) as u8;
            }
            b.d = f32_to_f16(max_scale / 15.0);
        } else {
            b.d = f32_to_f16(0.0);
        }
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for (s, &m) in b.scales.iter_mut().zip(&mins) {
                *s |= (nearest_int(iscale * m) << 4) as u8;
            }
            b.dmin = f32_to_f16(max_min / 15.0);
        } else {
            b.dmin = f32_to_f16(0.0);
        }

        let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        for (j, &sc) in b.scales.iter().enumerate() {
            let dl = d * (sc & 0x0F) as f32;
            if dl == 0.0 {
                continue;
            }
            let ml = dmin * (sc >> 4) as f32;
            for i in 16 * j..16 * j + 16 {
                levels[i] = nearest_int((x[i] + ml) / dl).clamp(0, 3) as u8;
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

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_q2_K_q8_K`): per
/// super-block the exact `isum = Σ sc·(q·a)` and `msum = Σ m·bsum`, then
/// `sumf += d·d_a·isum − dmin·d_a·msum` in f32 (the SIMD kernels agree bit for bit).
pub fn vec_dot_scalar(n: usize, w: &[BlockQ2_K], a: &[BlockQ8_K]) -> f32 {
    let nb = dot_blocks(n, QK_K, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        // Element 128h + 32s + l: bits 2s..2s+2 of qs[32h + l].
        let mut q = [0i8; QK_K];
        for (j, q) in q.chunks_exact_mut(32).enumerate() {
            let (h, s) = (j / 4, j % 4);
            for (q, &x) in q.iter_mut().zip(&b.qs[32 * h..32 * h + 32]) {
                *q = ((x >> (2 * s)) & 3) as i8;
            }
        }
        let (mut isum, mut msum) = (0i32, 0i32);
        for (is, &sc) in b.scales.iter().enumerate() {
            let r = 16 * is..16 * is + 16;
            isum += (sc & 0x0F) as i32 * dot_codes(&q[r.clone()], &y.qs[r]);
            msum += (sc >> 4) as i32 * y.bsum(is) as i32;
        }
        let ad = f32::from_le_bytes(y.d);
        let (d, dmin) = (f16_to_f32_fast(b.d) * ad, f16_to_f32_fast(b.dmin) * ad);
        sumf += d * isum as f32 - dmin * msum as f32;
    }
    sumf
}
