//! IQ4_NL: 32 elements per block, 4-bit indices into a fixed non-linear table,
//! `x = d * KVALUES_IQ4NL[q]`.

use super::k_common::{best_index_int8, iq4_block_scale};
use super::q8_0::BlockQ8_0;
use super::{Block, GgmlType, dot_blocks, dot_codes, f16_to_f32, f16_to_f32_fast, f32_to_f16};

const QK: usize = 32;

/// The non-linear 4-bit code book shared with IQ4_XS: denser near zero, where weights cluster.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Candidate scales tried on each side of the initial one (ggml's `ntry` without imatrix).
pub(super) const NTRY: i32 = 7;

/// One IQ4_NL block (18 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct BlockIQ4_NL {
    /// Scale, f16.
    pub d: [u8; 2],
    /// 4-bit table indices: the low nibble of byte `j` is element `j`, the high nibble element
    /// `j + 16`.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(size_of::<BlockIQ4_NL>() == 18);

// SAFETY: repr(C), byte arrays only, size checked above.
unsafe impl Block for BlockIQ4_NL {
    const TYPE: GgmlType = GgmlType::IQ4_NL;
    const ELEMS: usize = QK;
}

/// Decodes whole blocks into `out` (`blocks.len() * ELEMS` values), in the float operation
/// order of gguf's numpy reference so the results match it bit for bit.
#[inline]
pub fn dequantize(blocks: &[BlockIQ4_NL], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        let (lo, hi) = y.split_at_mut(QK / 2);
        for ((&q, l), h) in b.qs.iter().zip(lo).zip(hi) {
            *l = d * KVALUES_IQ4NL[(q & 0x0F) as usize] as f32;
            *h = d * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
        }
    }
}

/// ggml's `quantize_row_iq4_nl_impl` for one 32-element block without importance weights:
/// scale search, then each element takes the nearest table entry under that scale.
pub fn quantize(src: &[f32], out: &mut [BlockIQ4_NL]) {
    quantize_with(src, out, NTRY)
}

/// ggml's `quantize_row_iq4_nl_ref` (what its CPU backend stores KV cache rows with): the same
/// without the scale search (`ntry = -1`: the initial scale and one least-squares refinement).
pub fn quantize_row_ref(src: &[f32], out: &mut [BlockIQ4_NL]) {
    quantize_with(src, out, -1)
}

fn quantize_with(src: &[f32], out: &mut [BlockIQ4_NL], ntry: i32) {
    for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let d = iq4_block_scale(&KVALUES_IQ4NL, x, ntry);
        b.d = f32_to_f16(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let q = |v: f32| best_index_int8(&KVALUES_IQ4NL, id * v) as u8;
        for (j, byte) in b.qs.iter_mut().enumerate() {
            *byte = q(x[j]) | (q(x[j + QK / 2]) << 4);
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Scalar reference for `Σ w·a` over the first `n` elements (ggml's `vec_dot_iq4_nl_q8_0`).
pub fn vec_dot_scalar(n: usize, w: &[BlockIQ4_NL], a: &[BlockQ8_0]) -> f32 {
    let nb = dot_blocks(n, QK, w.len(), a.len());
    let mut sumf = 0.0f32;
    for (b, y) in w[..nb].iter().zip(&a[..nb]) {
        let mut q = [0i8; QK];
        let (lo, hi) = q.split_at_mut(QK / 2);
        for ((&x, l), h) in b.qs.iter().zip(lo).zip(hi) {
            *l = KVALUES_IQ4NL[(x & 0x0F) as usize];
            *h = KVALUES_IQ4NL[(x >> 4) as usize];
        }
        let sumi = dot_codes(&q, &y.qs);
        sumf += sumi as f32 * (f16_to_f32_fast(b.d) * f16_to_f32_fast(y.d));
    }
    sumf
}
