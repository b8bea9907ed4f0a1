//! The activation rows a GEMM kernel reads: [`ActRows`] (raw bytes, as the kernel table passes
//! them) and [`GemmActs`] (the same rows typed, for the K-quant kernels).
//!
//! Only the types and the packed layout's sizes are here. What reads or writes the blocks of a
//! format lives above: `ActRows::pack` (which reads Q8_0/Q8_1 blocks) and `GemmActs::new`
//! (which views the rows as blocks) are inherent methods defined in `kernels`, since this layer
//! imports nothing from `quant`.

/// Up to four activation rows for a GEMM kernel: the quantized rows (the K-quant kernels read
/// these) and, for Q8_0 and Q8_1, the same tokens packed per block ([`ActRows::pack`]), which is
/// what the 32-element kernels read.
#[derive(Clone, Copy)]
pub struct ActRows<'a> {
    pub n: usize,
    pub rows: [&'a [u8]; 4],
    pub packed: &'a [u8],
}

/// Bytes per token and 32-block in [`ActRows::pack`]'s layout: 32 codes, `d`, and `Σa` or `s`.
pub const PACKED_BLOCK_BYTES: usize = 40;

impl ActRows<'_> {
    /// Bytes [`ActRows::pack`] writes for `n` tokens of `nb` blocks (with 16 bytes of padding, so
    /// the kernels may load four `s` values at once).
    pub fn packed_len(n: usize, nb: usize) -> usize {
        n * nb * PACKED_BLOCK_BYTES + 16
    }
}

/// The typed rows of an [`ActRows`], for the K-quant kernels.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct GemmActs<'a, A> {
    pub n: usize,
    pub blocks: [&'a [A]; 4],
}
