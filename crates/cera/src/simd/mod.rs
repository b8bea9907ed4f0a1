//! Shared SIMD primitives: the layer below both `quant` and `kernels`.
//!
//! The SIMD kernels of each format live beside the format (`quant/<format>/x86.rs`,
//! `quant/<format>/neon.rs`, `quant/<format>/wasm.rs`), and `kernels` builds its run-time
//! table out of them, so `kernels` imports `quant`. What those per-format kernels have in
//! common is here: the x86, NEON and WASM SIMD building blocks (`x86`, `neon`, `wasm`: loads,
//! horizontal sums, dot product steps, the block loop drivers, the x8 GEMM driver) and the activation rows a GEMM kernel is handed ([`ActRows`],
//! [`GemmActs`]). With them below both, the imports run one way, `kernels` → `quant` → `simd`,
//! and this module imports nothing else from the crate. `tests/layering.rs` fails if a file
//! under `quant/` names `kernels` or one under `simd/` names anything above it, so the old
//! `quant` ↔ `kernels` cycle cannot come back.
//!
//! Code that needs the format types stays above this layer: the x8 layout's sizes
//! (`quant::x8_layout`, keyed by `GgmlType`), the `NeonI8mm` GEMM drivers (`quant::i8mm`,
//! generic over `quant::Block`), and `ActRows::pack` and `GemmActs::new` (inherent methods
//! defined in `kernels`).
//!
//! The public API is unchanged: `kernels` re-exports [`ActRows`] and [`PACKED_BLOCK_BYTES`],
//! and on aarch64 `neon` (the attention code uses its f16 conversion).

mod acts;
pub(crate) mod math;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod wasm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

pub(crate) use acts::GemmActs;
pub use acts::{ActRows, PACKED_BLOCK_BYTES};
