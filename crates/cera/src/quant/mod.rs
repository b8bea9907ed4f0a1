//! GGML tensor types: the type table, block layouts, dequantization and reference quantization.
//!
//! One file per block format. Each holds a `#[repr(C)]` block struct made only of byte arrays
//! (alignment 1, every bit pattern valid, so it can be viewed straight out of an mmap), a
//! compile-time size check, the scalar dequantizer and, where we support it, the reference
//! quantizer, and the scalar dot product against the format's activation type (`vec_dot_scalar`).
//! SIMD versions of the dot products live in a submodule per instruction set beside the format
//! (`q4_0/x86.rs` for AVX2 and AVX-512, `q4_0/neon.rs` for aarch64); `kernels` picks one per
//! type at run time. They are built from the shared building blocks in `simd`, the layer below
//! this one: `kernels` imports `quant` and `simd`, `quant` imports `simd`, and `quant` never
//! imports `kernels` (`tests/layering.rs` checks it). The shared pieces that need this module's
//! types are here: the x8 layout's geometry (`x8_layout`), the `NeonI8mm` GEMM drivers
//! (`i8mm`) and the `Neon`/`NeonDotprod` ones (`neon_gemm`).

use std::fmt;

use crate::error::{Error, Result};

pub(crate) mod float;
#[cfg(target_arch = "aarch64")]
pub(crate) mod i8mm;
pub mod iq1_m;
pub mod iq1_s;
pub mod iq2_s;
pub mod iq2_xs;
pub mod iq2_xxs;
pub mod iq3_s;
pub mod iq3_xxs;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod iq_grids;
pub(crate) mod k_common;
pub mod mse;
pub mod mxfp4;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon_gemm;
pub mod nvfp4;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;
pub mod tq1_0;
pub mod tq2_0;
pub(crate) mod x8_layout;

/// Elements per super-block of the K-quants and most IQ formats.
pub const QK_K: usize = 256;

macro_rules! ggml_types {
    ($( $variant:ident = $id:literal, $name:literal, $block:expr ;)*) => {
        /// Every type id in ggml's type table, including ids that were retired (their layout is
        /// gone from ggml, so they have no block size and cannot be read).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(non_camel_case_types)]
        #[non_exhaustive]
        pub enum GgmlType { $( $variant, )* }

        impl GgmlType {
            pub const ALL: &'static [GgmlType] = &[ $( GgmlType::$variant, )* ];

            /// The numeric id stored in GGUF tensor infos.
            pub const fn id(self) -> u32 { match self { $( GgmlType::$variant => $id, )* } }

            /// ggml's name for the type, as `gguf` and llama.cpp print it.
            pub const fn name(self) -> &'static str { match self { $( GgmlType::$variant => $name, )* } }

            pub fn from_id(id: u32) -> Option<GgmlType> {
                match id { $( $id => Some(GgmlType::$variant), )* _ => None }
            }

            /// `(elements per block, bytes per block)`; `None` for retired ids.
            pub const fn block(self) -> Option<(usize, usize)> {
                match self { $( GgmlType::$variant => $block, )* }
            }
        }
    };
}

const fn b(elems: usize, bytes: usize) -> Option<(usize, usize)> {
    Some((elems, bytes))
}

ggml_types! {
    F32 = 0, "F32", b(1, 4);
    F16 = 1, "F16", b(1, 2);
    Q4_0 = 2, "Q4_0", b(32, 18);
    Q4_1 = 3, "Q4_1", b(32, 20);
    Q4_2 = 4, "Q4_2", None;
    Q4_3 = 5, "Q4_3", None;
    Q5_0 = 6, "Q5_0", b(32, 22);
    Q5_1 = 7, "Q5_1", b(32, 24);
    Q8_0 = 8, "Q8_0", b(32, 34);
    Q8_1 = 9, "Q8_1", b(32, 36);
    Q2_K = 10, "Q2_K", b(QK_K, 84);
    Q3_K = 11, "Q3_K", b(QK_K, 110);
    Q4_K = 12, "Q4_K", b(QK_K, 144);
    Q5_K = 13, "Q5_K", b(QK_K, 176);
    Q6_K = 14, "Q6_K", b(QK_K, 210);
    Q8_K = 15, "Q8_K", b(QK_K, 292);
    IQ2_XXS = 16, "IQ2_XXS", b(QK_K, 66);
    IQ2_XS = 17, "IQ2_XS", b(QK_K, 74);
    IQ3_XXS = 18, "IQ3_XXS", b(QK_K, 98);
    IQ1_S = 19, "IQ1_S", b(QK_K, 50);
    IQ4_NL = 20, "IQ4_NL", b(32, 18);
    IQ3_S = 21, "IQ3_S", b(QK_K, 110);
    IQ2_S = 22, "IQ2_S", b(QK_K, 82);
    IQ4_XS = 23, "IQ4_XS", b(QK_K, 136);
    I8 = 24, "I8", b(1, 1);
    I16 = 25, "I16", b(1, 2);
    I32 = 26, "I32", b(1, 4);
    I64 = 27, "I64", b(1, 8);
    F64 = 28, "F64", b(1, 8);
    IQ1_M = 29, "IQ1_M", b(QK_K, 56);
    BF16 = 30, "BF16", b(1, 2);
    Q4_0_4_4 = 31, "Q4_0_4_4", None;
    Q4_0_4_8 = 32, "Q4_0_4_8", None;
    Q4_0_8_8 = 33, "Q4_0_8_8", None;
    TQ1_0 = 34, "TQ1_0", b(QK_K, 54);
    TQ2_0 = 35, "TQ2_0", b(QK_K, 66);
    IQ4_NL_4_4 = 36, "IQ4_NL_4_4", None;
    IQ4_NL_4_8 = 37, "IQ4_NL_4_8", None;
    IQ4_NL_8_8 = 38, "IQ4_NL_8_8", None;
    MXFP4 = 39, "MXFP4", b(32, 17);
    NVFP4 = 40, "NVFP4", b(64, 36);
    Q1_0 = 41, "Q1_0", b(128, 18);
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl GgmlType {
    /// Looks a type up by its name, case-insensitively (`q4_k`, `Q4_K`).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    pub fn block_elems(self) -> Option<usize> {
        self.block().map(|b| b.0)
    }

    pub fn block_bytes(self) -> Option<usize> {
        self.block().map(|b| b.1)
    }

    /// Bytes taken by `n` elements, or `None` when the type is retired, `n` is not a whole
    /// number of blocks, or the size overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let (be, bb) = self.block()?;
        if !n.is_multiple_of(be as u64) {
            return None;
        }
        (n / be as u64).checked_mul(bb as u64)
    }

    /// Whether [`dequantize`] supports this type.
    pub fn can_dequantize(self) -> bool {
        dequantizer(self).is_some()
    }

    /// Whether [`quantize`] supports this type.
    pub fn can_quantize(self) -> bool {
        quantizer(self).is_some()
    }
}

/// A block of a quantized format.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, made only of `u8` and arrays of `u8` (so alignment is 1,
/// there is no padding and every bit pattern is a valid value), and `size_of::<Self>()` must equal
/// `Self::TYPE.block_bytes()`.
pub unsafe trait Block: Copy + Send + Sync + 'static {
    const TYPE: GgmlType;
    /// Elements that one block encodes.
    const ELEMS: usize;
}

/// Views raw bytes as blocks. `bytes.len()` must be a multiple of the block size.
pub fn as_blocks<B: Block>(bytes: &[u8]) -> &[B] {
    let size = std::mem::size_of::<B>();
    assert!(
        bytes.len().is_multiple_of(size),
        "byte length is not a whole number of blocks"
    );
    // SAFETY: `Block` guarantees alignment 1, no padding and no invalid bit patterns.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size) }
}

/// Mutable variant of [`as_blocks`].
pub fn as_blocks_mut<B: Block>(bytes: &mut [u8]) -> &mut [B] {
    let size = std::mem::size_of::<B>();
    assert!(
        bytes.len().is_multiple_of(size),
        "byte length is not a whole number of blocks"
    );
    // SAFETY: as in `as_blocks`; the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<B>(), bytes.len() / size) }
}

/// Number of blocks in an `n`-element dot product; panics unless `n` is a whole number of
/// `elems`-element blocks and both operands (`w` and `a` blocks long) hold that many.
#[inline]
pub(crate) fn dot_blocks(n: usize, elems: usize, w: usize, a: usize) -> usize {
    assert!(
        n.is_multiple_of(elems),
        "dot product length {n} is not a multiple of the block size {elems}"
    );
    let nb = n / elems;
    assert!(
        w >= nb && a >= nb,
        "dot product operands hold {w} and {a} blocks, {nb} needed"
    );
    nb
}

/// Views blocks as raw bytes.
pub fn blocks_as_bytes<B: Block>(blocks: &[B]) -> &[u8] {
    // SAFETY: `Block` types have no padding, so every byte is initialised.
    unsafe {
        std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks))
    }
}

#[inline]
pub(crate) fn f16_to_f32(bits: [u8; 2]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes(bits)).to_f32()
}

/// f16 to f32 without branches or a library call, for the scalar dot products (the same value as
/// [`f16_to_f32`] for every non-NaN input; NaN stays NaN). The f16 exponent and mantissa are
/// placed in an f32 and scaled by 2^112, which is exact for normal and subnormal values alike.
#[inline]
pub(crate) fn f16_to_f32_fast(bits: [u8; 2]) -> f32 {
    let h = u16::from_le_bytes(bits) as u32;
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    let v = if em >= 0x7c00 {
        f32::from_bits(0x7f80_0000 | ((em & 0x3ff) << 13))
    } else {
        f32::from_bits(em << 13) * f32::from_bits(0x7780_0000)
    };
    f32::from_bits(v.to_bits() | sign)
}

/// `Σ a_i·b_i` over bytes holding i8 values (quants as the blocks store them), in i32. Written
/// so the compiler vectorizes it on any target.
#[inline]
pub(crate) fn dot_i8(a: &[u8], b: &[u8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x as i8 as i32 * y as i8 as i32)
        .sum()
}

/// `Σ q_i·a_i` of decoded codes against bytes holding i8 values, in i32 (vectorizable).
#[inline]
pub(crate) fn dot_codes(q: &[i8], a: &[u8]) -> i32 {
    q.iter()
        .zip(a)
        .map(|(&x, &y)| x as i32 * y as i8 as i32)
        .sum()
}

#[inline]
pub(crate) fn f32_to_f16(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

type DequantFn = fn(&[u8], &mut [f32]);
type QuantFn = fn(&[f32], &mut [u8]);

/// Adapts a typed per-format dequantizer to raw bytes.
fn dq<B: Block>(f: fn(&[B], &mut [f32])) -> impl Fn(&[u8], &mut [f32]) {
    move |src, dst| f(as_blocks::<B>(src), dst)
}

macro_rules! dequant_table {
    ($ty:expr, $( $variant:ident => $block:ty, $func:path; )*) => {
        match $ty {
            $( GgmlType::$variant => Some((|s: &[u8], d: &mut [f32]| dq::<$block>($func)(s, d)) as DequantFn), )*
            _ => None,
        }
    };
}

macro_rules! quant_table {
    ($ty:expr, $( $variant:ident => $block:ty, $func:path; )*) => {
        match $ty {
            $( GgmlType::$variant => Some((|s: &[f32], d: &mut [u8]| $func(s, as_blocks_mut::<$block>(d))) as QuantFn), )*
            _ => None,
        }
    };
}

fn dequantizer(ty: GgmlType) -> Option<DequantFn> {
    match ty {
        GgmlType::F32 => return Some(float::dequantize_f32),
        GgmlType::F16 => return Some(float::dequantize_f16),
        GgmlType::BF16 => return Some(float::dequantize_bf16),
        _ => {}
    }
    dequant_table!(
        ty,
        Q4_0 => q4_0::BlockQ4_0, q4_0::dequantize;
        Q4_1 => q4_1::BlockQ4_1, q4_1::dequantize;
        Q5_0 => q5_0::BlockQ5_0, q5_0::dequantize;
        Q5_1 => q5_1::BlockQ5_1, q5_1::dequantize;
        Q8_0 => q8_0::BlockQ8_0, q8_0::dequantize;
        Q8_1 => q8_1::BlockQ8_1, q8_1::dequantize;
        Q2_K => q2_k::BlockQ2_K, q2_k::dequantize;
        Q3_K => q3_k::BlockQ3_K, q3_k::dequantize;
        Q4_K => q4_k::BlockQ4_K, q4_k::dequantize;
        Q5_K => q5_k::BlockQ5_K, q5_k::dequantize;
        Q6_K => q6_k::BlockQ6_K, q6_k::dequantize;
        Q8_K => q8_k::BlockQ8_K, q8_k::dequantize;
        IQ4_NL => iq4_nl::BlockIQ4_NL, iq4_nl::dequantize;
        IQ4_XS => iq4_xs::BlockIQ4_XS, iq4_xs::dequantize;
        IQ2_XXS => iq2_xxs::BlockIq2Xxs, iq2_xxs::dequantize;
        IQ2_XS => iq2_xs::BlockIq2Xs, iq2_xs::dequantize;
        IQ2_S => iq2_s::BlockIq2S, iq2_s::dequantize;
        IQ3_XXS => iq3_xxs::BlockIq3Xxs, iq3_xxs::dequantize;
        IQ3_S => iq3_s::BlockIq3S, iq3_s::dequantize;
        IQ1_S => iq1_s::BlockIq1S, iq1_s::dequantize;
        IQ1_M => iq1_m::BlockIq1M, iq1_m::dequantize;
        TQ1_0 => tq1_0::BlockTq1_0, tq1_0::dequantize;
        TQ2_0 => tq2_0::BlockTq2_0, tq2_0::dequantize;
        MXFP4 => mxfp4::BlockMxfp4, mxfp4::dequantize;
        NVFP4 => nvfp4::BlockNvfp4, nvfp4::dequantize;
    )
}

fn quantizer(ty: GgmlType) -> Option<QuantFn> {
    match ty {
        GgmlType::F32 => return Some(float::quantize_f32),
        GgmlType::F16 => return Some(float::quantize_f16),
        GgmlType::BF16 => return Some(float::quantize_bf16),
        _ => {}
    }
    quant_table!(
        ty,
        Q4_0 => q4_0::BlockQ4_0, q4_0::quantize;
        Q4_1 => q4_1::BlockQ4_1, q4_1::quantize;
        Q5_0 => q5_0::BlockQ5_0, q5_0::quantize;
        Q5_1 => q5_1::BlockQ5_1, q5_1::quantize;
        Q8_0 => q8_0::BlockQ8_0, q8_0::quantize;
        Q8_1 => q8_1::BlockQ8_1, q8_1::quantize;
        Q2_K => q2_k::BlockQ2_K, q2_k::quantize;
        Q3_K => q3_k::BlockQ3_K, q3_k::quantize;
        Q4_K => q4_k::BlockQ4_K, q4_k::quantize;
        Q5_K => q5_k::BlockQ5_K, q5_k::quantize;
        Q6_K => q6_k::BlockQ6_K, q6_k::quantize;
        Q8_K => q8_k::BlockQ8_K, q8_k::quantize;
        IQ4_NL => iq4_nl::BlockIQ4_NL, iq4_nl::quantize;
        IQ4_XS => iq4_xs::BlockIQ4_XS, iq4_xs::quantize;
    )
}

fn check_lengths(ty: GgmlType, n_elems: usize, n_bytes: usize) -> Result<()> {
    let (be, bb) = ty.block().ok_or(Error::QuantUnsupported {
        ty: ty.name(),
        op: "reading",
    })?;
    if !n_elems.is_multiple_of(be) {
        return Err(Error::QuantShape {
            ty: ty.name(),
            reason: format!("{n_elems} elements is not a multiple of the block size {be}"),
        });
    }
    if n_elems / be * bb != n_bytes {
        return Err(Error::QuantShape {
            ty: ty.name(),
            reason: format!(
                "{n_bytes} bytes do not hold {n_elems} elements ({} blocks of {bb} bytes)",
                n_elems / be
            ),
        });
    }
    Ok(())
}

/// Dequantizes `src` (whole blocks of type `ty`) into `dst`, whose length is the element count.
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let f = dequantizer(ty).ok_or(Error::QuantUnsupported {
        ty: ty.name(),
        op: "dequantization",
    })?;
    check_lengths(ty, dst.len(), src.len())?;
    f(src, dst);
    Ok(())
}

/// Quantizes `src` into `dst` (whole blocks of type `ty`) with the reference quantizer.
pub fn quantize(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    let f = quantizer(ty).ok_or(Error::QuantUnsupported {
        ty: ty.name(),
        op: "quantization",
    })?;
    check_lengths(ty, src.len(), dst.len())?;
    f(src, dst);
    Ok(())
}

/// Convenience: dequantizes into a new vector.
pub fn dequantize_to_vec(ty: GgmlType, src: &[u8], n_elems: usize) -> Result<Vec<f32>> {
    let mut out = vec![0.0; n_elems];
    dequantize(ty, src, &mut out)?;
    Ok(out)
}

/// Convenience: quantizes into a new byte vector.
pub fn quantize_to_vec(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>> {
    let n = ty
        .bytes_for(src.len() as u64)
        .ok_or_else(|| Error::QuantShape {
            ty: ty.name(),
            reason: format!("{} elements is not a whole number of blocks", src.len()),
        })?;
    let mut out = vec![0u8; n as usize];
    quantize(ty, src, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_f16_conversion_is_exact() {
        for h in 0..=u16::MAX {
            let b = h.to_le_bytes();
            let (fast, reference) = (f16_to_f32_fast(b), f16_to_f32(b));
            if reference.is_nan() {
                assert!(fast.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(fast.to_bits(), reference.to_bits(), "{h:#06x}");
            }
        }
    }
}
