//! The geometry of the x8 layout: the sizes and offsets that `kernels::pack` writes weights by
//! and that the x8 GEMM kernels in `quant/<format>/x86.rs` read them by. The layout itself is
//! described in `kernels::pack`, which re-exports these items (`kernels::pack::superblock_bytes`
//! and so on are the public paths).
//!
//! This lives in `quant` rather than in `simd` (where the shared SIMD building blocks are)
//! because it is keyed by [`GgmlType`], and `simd` imports nothing from `quant`; and not in
//! `kernels`, because the format files read it and `quant` does not import `kernels`.

use crate::quant::GgmlType;

/// Rows per group.
pub const GROUP_ROWS: usize = 8;

/// Bytes of one super-block (eight rows × one 32-column block), or `None` for formats without
/// an x8 layout.
pub fn superblock_bytes(ty: GgmlType) -> Option<usize> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 | IQ4_NL => 128 + 16,
        Q4_1 => 128 + 32,
        Q5_0 => 128 + 32 + 16,
        Q5_1 => 128 + 32 + 32,
        Q8_0 => 256 + 16,
        Q4_K => 1024 + 64 + 64 + 32,
        Q5_K => 1024 + 64 + 64 + 32 + 256,
        IQ4_XS => 1024 + 64 + 16,
        Q2_K => 512 + 128 + 32,
        Q3_K => 512 + 256 + 128 + 16,
        Q6_K => 1024 + 512 + 128 + 16,
        _ => return None,
    })
}

/// Columns one super-block covers.
pub fn block_cols(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q2_K
        | GgmlType::Q3_K
        | GgmlType::Q4_K
        | GgmlType::Q5_K
        | GgmlType::Q6_K
        | GgmlType::IQ4_XS => 256,
        _ => 32,
    }
}

/// Offsets of the `d` and `m` arrays inside a super-block.
pub fn scale_offsets(ty: GgmlType) -> (usize, usize) {
    use GgmlType::*;
    let codes = match ty {
        Q8_0 => 256,
        Q5_0 | Q5_1 => 128 + 32,
        _ => 128,
    };
    (codes, codes + 16)
}

/// Bytes of a packed `rows` × `k` matrix.
pub fn packed_len(ty: GgmlType, rows: usize, k: usize) -> Option<usize> {
    let sb = superblock_bytes(ty)?;
    let bc = block_cols(ty);
    (k.is_multiple_of(bc)).then(|| rows.div_ceil(GROUP_ROWS) * (k / bc) * sb)
}
