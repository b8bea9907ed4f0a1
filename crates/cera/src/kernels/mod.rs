//! CPU compute kernels: quantized dot products the way ggml's CPU backend computes them, behind
//! one table chosen at run time.
//!
//! A matrix-vector product `W · x` with `W` in some weight format quantizes `x` once to the
//! format's *activation type* ([`KernelTable::vec_dot_type`]: Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL,
//! Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants and IQ4_XS, the format itself for F32/F16/BF16),
//! then takes the dot product of every weight row with that one activation row, in integers
//! where the formats allow.
//!
//! The per-format code lives beside each format in [`crate::quant`]: the scalar reference
//! `vec_dot_scalar` in `quant/<format>.rs`, SIMD versions in `quant/<format>/x86.rs`,
//! `quant/<format>/neon.rs` and `quant/<format>/wasm.rs`, built from the building blocks they share in `crate::simd` (the
//! layer below both `quant` and this module, so the imports run `kernels` → `quant` → `simd`
//! with no cycle). This module only detects the CPU ([`cpu`]), packs weights and activations for
//! the GEMMs ([`pack`], [`ActRows::pack`]) and fills one [`KernelTable`] of function pointers
//! per [`CpuTier`].
//!
//! # Activation quantization and rounding
//! Activations are quantized as ggml's CPU backend quantizes them (not as its `_ref`
//! functions, which quantize weights): Q8_0 and Q8_1 scale by `127 / amax` and round half to
//! even (`q8_0::quantize_act`); Q8_K is ggml's `quantize_row_q8_K_ref` (half to even through
//! `nearest_int`); F16 and BF16 round to nearest even. The SIMD quantizers write the same
//! bytes as the scalar ones. Matching ggml here is what keeps our logits on llama.cpp's. Activations are expected to be finite; NaN and infinities give
//! memory-safe but meaningless rows.
//!
//! # Accuracy
//! The integer part of every quantized dot product is exact. For the K-quants and IQ4_XS the
//! SIMD kernels reduce it per super-block and apply the scalar reference's float formula, so
//! every tier gives the same bits. For the 32-element formats and F32/F16/BF16 the x86 kernels
//! sum the per-block terms in vector lanes, in another order than the scalar loop; the results
//! differ by float rounding only (the tests bound it at `2e-5 · Σ|w·a|`). The NEON kernels of
//! the 32-element formats reduce each block to its integer sum and keep the scalar float
//! order, so they give the scalar bits too; their F32/F16/BF16 dot products sum in lanes.
//!
//! # The tiers' kernels
//! - `Scalar`: `quant::<format>::vec_dot_scalar`, which decode a block's codes into an `i8` array
//!   and take plain `i8·i8` dot products the compiler vectorizes for the baseline target.
//! - `Avx2`: `vpmaddubsw` (unsigned codes × signed activations, or `|w|·(a·sign w)` for signed
//!   weights) then `vpmaddwd`; F16C for the f16 scales and F16 rows.
//! - `Avx512`: the same data flow with AVX512-VNNI doing the multiply-adds (`vpdpbusd` for the
//!   32-element formats, `vpdpwssd` for the K-quants' scale step) and AVX512-BW masks where they
//!   save work (Q5_0/Q5_1's fifth bits). These kernels use **256-bit** vectors (the AVX512-VL
//!   encodings): on the Intel Xeon we measured, 512-bit versions of the same kernels were 10–30%
//!   slower than even the AVX2 ones (512-bit integer multiplies issue on one port, and any
//!   512-bit instruction in flight switches off another vector port), while the 256-bit VNNI
//!   ones are 5–20% faster than AVX2. Q8_0 (no unpacking) and F32/F16/BF16 do run on 512-bit
//!   vectors, where that measured faster; BF16 uses `vdpbf16ps` when the host has AVX512-BF16.
//!   On AMD Zen 4, which executes 512-bit instructions as two 256-bit halves, the same choice
//!   costs nothing.
//! - `Neon` and `NeonDotprod` (aarch64): each kernel is one generic body over the i8 dot step
//!   (`simd::neon::Dot`), instantiated with `smull`/`smull2` + `sadalp` (baseline ASIMD) and
//!   with `sdot` (dot product extension, written as inline assembly: its intrinsic is unstable).
//!   Codes are decoded to i8 vectors (nibble masks and shifts, `tbl` for the IQ4 tables), the
//!   integer sums reduced per block (or per 16/32-element sub-block for the K-quants) and
//!   weighted as the scalar code does. F16 conversions use `fcvtl`/`fcvtn`, also as assembly.
//!   The activation quantizers round with `fcvtns` (half to even) and saturate with `sqxtn`,
//!   which is the scalar `round_ties_even().clamp(-128, 127)`.
//! - `Simd128` (wasm32 built with `+simd128`): the NEON data flow on 128-bit WASM SIMD. simd128
//!   has no 8-bit dot product, so the step widens both operands to i16 and multiplies-adds pairs
//!   (`i32x4.dot_i16x8_s`, exact); unsigned codes widen with zero extension, and Q6_K and Q3_K
//!   take theirs unsigned and subtract the offset through the activation's sums of 16. The
//!   K-quants weight each sub-block's i32 lanes by its scale and reduce once per super-block;
//!   the 32-element formats reduce four blocks' lanes together and compute the four float
//!   terms in the lanes of one vector, the scalar operations per lane, then add them in block
//!   order: every quantized format gives the scalar bits. F32, F16 and BF16 keep the scalar
//!   kernels (they compile to vector code as fast as hand-written ones). No GEMM: prefill
//!   runs the GEMV per token.
//!
//! # GEMM
//! The AVX-512 tier also has GEMM kernels ([`KernelTable::gemm`]) for every format: Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS over weights repacked into
//! the x8 layout ([`pack`]): eight rows per vector, one per 32-bit lane, so `vpdpbusd` against a
//! broadcast activation dword yields eight rows' partial sums at once and the scales apply per
//! lane, with no horizontal sums. Up to four tokens share each unpacked weight block. The
//! 32-element formats read their activations interleaved per block ([`ActRows::pack`]). The
//! integer sums are exact; the K-quant kernels keep the scalar float formula and so give the
//! GEMV's bits. F32, F16 and BF16 have GEMMs over the plain rows: four rows × up to four tokens
//! of accumulators per step.
//!
//! The AVX2 tier runs the same x8 kernels (one body per format, generic over the four-byte
//! dot-accumulate `simd::x86::Dp`) with `vpmaddubsw` + `vpmaddwd` in place of `vpdpbusd`, and
//! byte compares in place of the AVX-512 mask registers (Q3_K's and Q5_K's high bits), for the
//! formats where that is exact: Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (codes
//! below 128, where a pair of products cannot saturate i16), and Q8_0, IQ4_NL and IQ4_XS as
//! signed values through the sign trick (`|w|` against `a·sign w`; the AVX-512 kernels' code
//! book biased by +128 would saturate). F32 and BF16 have GEMMs over the plain rows that keep
//! the AVX2 dot product's float order (two tokens per weight vector, four accumulators each),
//! so they give the GEMV's bits; F16 runs the GEMV per token (its GEMM measured no faster).
//!
//! The NEON tiers have GEMM kernels for every format that read plain weight rows and the
//! quantized activation rows (no packing: [`KernelTable::gemm_packs_weights`] and
//! [`KernelTable::gemm_reads_packed`] say false). On `Neon` and `NeonDotprod` each weight block
//! is decoded once and dotted with each token's block by the tier's i8 dot step; on `NeonI8mm`
//! `smmla` multiplies a pair of rows by a pair of tokens, 8 columns at a time. Either way each
//! (row, token) block sum is exact and weighted in the GEMV's float order, so the GEMM gives
//! the GEMV's bits for 1 to 4 tokens. F32, F16 and BF16 read each weight row once for up to
//! four tokens, each (row, token) pair accumulated as its dot product is: the GEMV's bits too.

pub(crate) mod act;
pub mod cpu;
pub mod pack;

use std::sync::OnceLock;

pub use cpu::CpuTier;

use crate::quant::{
    self, GgmlType, as_blocks, float, iq4_nl, iq4_xs, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1,
    q5_k, q6_k, q8_0, q8_1, q8_k,
};
use crate::simd::GemmActs;
#[cfg(target_arch = "aarch64")]
pub(crate) use crate::simd::neon;
pub use crate::simd::{ActRows, PACKED_BLOCK_BYTES};

/// `Σ w·a` over `n` elements of a weight row and an activation row, both as raw bytes.
type DotFn = fn(usize, &[u8], &[u8]) -> f32;

/// f32 activations to a row of the activation type.
type QuantRowFn = fn(&[f32], &mut [u8]);

/// Matrix × up to four activation rows: `out[t * ldo + r] = Σ w_r · a_t` for the `n_rows` rows
/// of `w` (`k` elements each; x8-packed for the 32-element formats).
type GemmFn = fn(usize, usize, &[u8], &ActRows<'_>, &mut [f32], usize);

// `ActRows` and `GemmActs` are defined in `simd` (the per-format kernels in `quant` take them);
// the methods that read the formats' blocks are defined here, above `quant`.
impl ActRows<'_> {
    /// Interleaves up to four quantized Q8_0 or Q8_1 rows per 32-block: for each block, the
    /// `n` tokens' 32 codes, then their scales `d` (f32), then per token either the integer
    /// `Σa` (i32, Q8_0: the zero-point formats take `z·Σa` off in integers) or Q8_1's stored
    /// `s = d·Σa` (f32, rounded to f16 as ggml keeps it). The kernels then walk one stream.
    pub fn pack(act_ty: GgmlType, rows: &[&[u8]], nb: usize, out: &mut [u8]) {
        let n = rows.len();
        assert!((1..=4).contains(&n) && out.len() >= Self::packed_len(n, nb));
        let stride = n * PACKED_BLOCK_BYTES;
        let put =
            |out: &mut [u8], at: usize, v: f32| out[at..at + 4].copy_from_slice(&v.to_le_bytes());
        for (t, row) in rows.iter().enumerate() {
            for b in 0..nb {
                let base = b * stride;
                let (qs, d, s) = match act_ty {
                    GgmlType::Q8_0 => {
                        let blk = &quant::as_blocks::<q8_0::BlockQ8_0>(row)[b];
                        let sum: i32 = blk.qs.iter().map(|&x| x as i8 as i32).sum();
                        (&blk.qs, quant::f16_to_f32(blk.d), sum.to_le_bytes())
                    }
                    GgmlType::Q8_1 => {
                        let blk = &quant::as_blocks::<q8_1::BlockQ8_1>(row)[b];
                        let s = quant::f16_to_f32(blk.s);
                        (&blk.qs, quant::f16_to_f32(blk.d), s.to_le_bytes())
                    }
                    _ => panic!("{act_ty} rows are not packed"),
                };
                out[base + 32 * t..base + 32 * t + 32].copy_from_slice(qs);
                put(out, base + 32 * n + 4 * t, d);
                out[base + 36 * n + 4 * t..base + 36 * n + 4 * t + 4].copy_from_slice(&s);
            }
        }
    }
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl<'a, A: quant::Block> GemmActs<'a, A> {
    pub(crate) fn new(a: &ActRows<'a>) -> Self {
        GemmActs {
            n: a.n,
            blocks: a.rows.map(|r| quant::as_blocks::<A>(r)),
        }
    }
}

#[derive(Clone, Copy)]
struct DotKernel {
    act: GgmlType,
    dot: DotFn,
}

/// One slot per GGML type id.
const N_TYPES: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < GgmlType::ALL.len() {
        let id = GgmlType::ALL[i].id() as usize;
        if id >= n {
            n = id + 1;
        }
        i += 1;
    }
    n
};

/// The kernels of one [`CpuTier`]: a dot product per supported weight type and a row quantizer
/// per activation type, as function pointers resolved once when the table is built.
pub struct KernelTable {
    tier: CpuTier,
    dot: [Option<DotKernel>; N_TYPES],
    quant: [Option<QuantRowFn>; N_TYPES],
    gemm: [Option<GemmFn>; N_TYPES],
    /// The GEMM kernels take x8-packed weights and packed activations (the AVX-512 ones); the
    /// NEON ones read plain rows.
    gemm_x8: bool,
    /// Whether a single token takes the GEMV even where a GEMM exists: where every GEMM gives
    /// its GEMV's bits (the NEON tiers), so decode still computes what prefill computes.
    gemv_decodes: bool,
}

impl std::fmt::Debug for KernelTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let weights: Vec<_> = GgmlType::ALL
            .iter()
            .filter(|t| self.dot[t.id() as usize].is_some())
            .map(|t| t.name())
            .collect();
        f.debug_struct("KernelTable")
            .field("tier", &self.tier)
            .field("weights", &weights)
            .finish()
    }
}

/// A typed safe dot product (the scalar ones, and the `simd128` ones, which need no feature
/// check) as a [`DotFn`].
macro_rules! scalar_dot {
    ($wb:ty, $ab:ty, $f:path) => {{
        fn dot(n: usize, w: &[u8], a: &[u8]) -> f32 {
            $f(n, as_blocks::<$wb>(w), as_blocks::<$ab>(a))
        }
        dot as DotFn
    }};
}

/// A typed `#[target_feature]` dot product as a [`DotFn`]. Only used while building the table of
/// a tier that [`CpuTier::is_supported`] confirmed, which is what makes the call sound.
/// (The `Neon` tier's kernels need only baseline features, hence `unused_unsafe`.)
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! simd_dot {
    ($wb:ty, $ab:ty, $f:path) => {{
        #[allow(unused_unsafe)]
        fn dot(n: usize, w: &[u8], a: &[u8]) -> f32 {
            // SAFETY: reachable only through a `KernelTable` built for a tier whose features
            // the host has (see `KernelTable::for_tier`).
            unsafe { $f(n, as_blocks::<$wb>(w), as_blocks::<$ab>(a)) }
        }
        dot as DotFn
    }};
    (raw $f:path) => {{
        #[allow(unused_unsafe)]
        fn dot(n: usize, w: &[u8], a: &[u8]) -> f32 {
            // SAFETY: as above.
            unsafe { $f(n, w, a) }
        }
        dot as DotFn
    }};
}

/// The quantized formats every tier's table has, each as `TYPE: fmt::Block x act::Block,
/// family;` (its weight block, its activation format's block, and its x86 GEMM family: `x8`
/// for 32-element blocks, `kx8` for 256-element ones against Q8_K): the one list the tiers'
/// fills walk, passed to their macro `$m` after `$arg, …;`.
macro_rules! quant_formats {
    ($m:ident $(, $arg:ident)*) => {
        $m! { $($arg,)* ;
            Q4_0: q4_0::BlockQ4_0 x q8_0::BlockQ8_0, x8;
            Q4_1: q4_1::BlockQ4_1 x q8_1::BlockQ8_1, x8;
            Q5_0: q5_0::BlockQ5_0 x q8_0::BlockQ8_0, x8;
            Q5_1: q5_1::BlockQ5_1 x q8_1::BlockQ8_1, x8;
            Q8_0: q8_0::BlockQ8_0 x q8_0::BlockQ8_0, x8;
            IQ4_NL: iq4_nl::BlockIQ4_NL x q8_0::BlockQ8_0, x8;
            Q2_K: q2_k::BlockQ2_K x q8_k::BlockQ8_K, kx8;
            Q3_K: q3_k::BlockQ3_K x q8_k::BlockQ8_K, kx8;
            Q4_K: q4_k::BlockQ4_K x q8_k::BlockQ8_K, kx8;
            Q5_K: q5_k::BlockQ5_K x q8_k::BlockQ8_K, kx8;
            Q6_K: q6_k::BlockQ6_K x q8_k::BlockQ8_K, kx8;
            IQ4_XS: iq4_xs::BlockIQ4_XS x q8_k::BlockQ8_K, kx8;
        }
    };
}

/// The x86 GEMM entries of [`quant_formats`]: each format's `x8` or `kx8` kernel (`$x8`,
/// `$kx8`), one entry at a time.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_gemms {
    ($t:ident, $x8:ident, $kx8:ident, ;) => {};
    ($t:ident, $x8:ident, $kx8:ident, ;
     $ty:ident: $fmt:ident::$wb:ident x $act:ident::$ab:ident, x8; $($rest:tt)*) => {
        x8_gemms! { $t, $x8; $ty: $fmt; }
        x86_gemms! { $t, $x8, $kx8, ; $($rest)* }
    };
    ($t:ident, $x8:ident, $kx8:ident, ;
     $ty:ident: $fmt:ident::$wb:ident x $act:ident::$ab:ident, kx8; $($rest:tt)*) => {
        kx8_gemms! { $t, $kx8; $ty: $fmt; }
        x86_gemms! { $t, $x8, $kx8, ; $($rest)* }
    };
}

/// GEMM table entries for the 32-element x8 kernels, `$fmt::x86::$f::<NT>(nb, n_rows, w,
/// packed_acts, out, ldo)`, one per weight type. Only used while building the table of a tier
/// that [`CpuTier::is_supported`] confirmed.
#[cfg(target_arch = "x86_64")]
macro_rules! x8_gemms {
    ($table:ident, $f:ident; $($ty:ident: $fmt:ident;)*) => {$({
        fn g(k: usize, n: usize, w: &[u8], a: &ActRows<'_>, out: &mut [f32], ldo: usize) {
            let p = a.packed;
            // SAFETY: as for `simd_dot`.
            unsafe {
                match a.n {
                    1 => $fmt::x86::$f::<1>(k / 32, n, w, p, out, ldo),
                    2 => $fmt::x86::$f::<2>(k / 32, n, w, p, out, ldo),
                    3 => $fmt::x86::$f::<3>(k / 32, n, w, p, out, ldo),
                    _ => $fmt::x86::$f::<4>(k / 32, n, w, p, out, ldo),
                }
            }
        }
        $table.gemm[$ty.id() as usize] = Some(g as GemmFn);
    })*};
}

/// GEMM table entries for the Q8_K-activation x8 kernels, `$fmt::x86::$f::<NT>(k, n_rows, w,
/// acts, out, ldo)`.
#[cfg(target_arch = "x86_64")]
macro_rules! kx8_gemms {
    ($table:ident, $f:ident; $($ty:ident: $fmt:ident;)*) => {$({
        fn g(k: usize, n: usize, w: &[u8], a: &ActRows<'_>, out: &mut [f32], ldo: usize) {
            let acts = GemmActs::<q8_k::BlockQ8_K>::new(a);
            // SAFETY: as for `simd_dot`.
            unsafe {
                match acts.n {
                    1 => $fmt::x86::$f::<1>(k, n, w, &acts, out, ldo),
                    2 => $fmt::x86::$f::<2>(k, n, w, &acts, out, ldo),
                    3 => $fmt::x86::$f::<3>(k, n, w, &acts, out, ldo),
                    _ => $fmt::x86::$f::<4>(k, n, w, &acts, out, ldo),
                }
            }
        }
        $table.gemm[$ty.id() as usize] = Some(g as GemmFn);
    })*};
}

/// GEMM table entries for the F32/F16/BF16 kernels over plain rows, `float::x86::$f::<NT>(k,
/// n_rows, w, acts, out, ldo)`.
#[cfg(target_arch = "x86_64")]
macro_rules! float_gemms {
    ($table:ident; $($ty:ident: $f:ident;)*) => {$({
        fn g(k: usize, n: usize, w: &[u8], a: &ActRows<'_>, out: &mut [f32], ldo: usize) {
            // SAFETY: as for `simd_dot`.
            unsafe {
                match a.n {
                    1 => float::x86::$f::<1>(k, n, w, a, out, ldo),
                    2 => float::x86::$f::<2>(k, n, w, a, out, ldo),
                    3 => float::x86::$f::<3>(k, n, w, a, out, ldo),
                    _ => float::x86::$f::<4>(k, n, w, a, out, ldo),
                }
            }
        }
        $table.gemm[$ty.id() as usize] = Some(g as GemmFn);
    })*};
}

/// A typed `#[target_feature]` activation quantizer as a [`QuantRowFn`].
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! simd_quant {
    ($ab:ty, $f:path) => {{
        #[allow(unused_unsafe)]
        fn quant(x: &[f32], out: &mut [u8]) {
            // SAFETY: as for `simd_dot`.
            unsafe { $f(x, quant::as_blocks_mut::<$ab>(out)) }
        }
        quant as QuantRowFn
    }};
    (raw $f:path) => {{
        #[allow(unused_unsafe)]
        fn quant(x: &[f32], out: &mut [u8]) {
            // SAFETY: as for `simd_dot`.
            unsafe { $f(x, out) }
        }
        quant as QuantRowFn
    }};
}

impl KernelTable {
    /// The process-wide table: the best tier the host supports, or the lower one that
    /// `CERA_CPU_TIER` asks for. Built on first use.
    pub fn get() -> &'static KernelTable {
        static TABLE: OnceLock<KernelTable> = OnceLock::new();
        TABLE.get_or_init(|| {
            let tier = cpu::tier_from_env();
            KernelTable::for_tier(tier).expect("the selected tier is supported")
        })
    }

    /// The table of one tier, or `None` when this host cannot run it (for tests and
    /// benchmarks that compare tiers).
    pub fn for_tier(tier: CpuTier) -> Option<KernelTable> {
        tier.is_supported().then(|| Self::build(tier))
    }

    /// The tier whose kernels this table holds.
    pub fn tier(&self) -> CpuTier {
        self.tier
    }

    /// The activation type a weight type's dot product takes (ggml's `vec_dot_type`), or
    /// `None` when there is no kernel for the weight type.
    pub fn vec_dot_type(w: GgmlType) -> Option<GgmlType> {
        use GgmlType::*;
        Some(match w {
            F32 => F32,
            F16 => F16,
            BF16 => BF16,
            Q4_0 | Q5_0 | Q8_0 | IQ4_NL => Q8_0,
            Q4_1 | Q5_1 => Q8_1,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS => Q8_K,
            _ => return None,
        })
    }

    /// Whether this table has a dot product for the weight type.
    pub fn supports(&self, w: GgmlType) -> bool {
        self.dot[w.id() as usize].is_some()
    }

    /// Bytes of the activation row that [`KernelTable::quantize_row`] writes for a `k`-element
    /// row multiplied by weights of type `w` (`None`: no kernel, or `k` not a whole number of
    /// blocks of either type).
    pub fn act_row_bytes(w: GgmlType, k: usize) -> Option<usize> {
        w.bytes_for(k as u64)?;
        let act = Self::vec_dot_type(w)?;
        act.bytes_for(k as u64).map(|b| b as usize)
    }

    /// Quantizes `x` to a row of `act_ty` in `out` (exactly `act_ty.bytes_for(x.len())` bytes).
    ///
    /// # Panics
    /// If `act_ty` is not an activation type (F32, F16, BF16, Q8_0, Q8_1, Q8_K), `x.len()` is not
    /// a multiple of its block size or `out` has the wrong length.
    pub fn quantize_row(&self, act_ty: GgmlType, x: &[f32], out: &mut [u8]) {
        let f = self.quant[act_ty.id() as usize]
            .unwrap_or_else(|| panic!("{act_ty} is not an activation type"));
        let bytes = act_ty.bytes_for(x.len() as u64).unwrap_or_else(|| {
            panic!(
                "{} elements is not a whole number of {act_ty} blocks",
                x.len()
            )
        });
        assert_eq!(
            out.len() as u64,
            bytes,
            "{act_ty} row of {} elements",
            x.len()
        );
        f(x, out);
    }

    fn kernel(&self, w_ty: GgmlType) -> DotKernel {
        self.dot[w_ty.id() as usize]
            .unwrap_or_else(|| panic!("no dot product kernel for {w_ty} weights"))
    }

    /// `Σ w·a` over the first `n` elements of a weight row of type `w_ty` and an activation
    /// row of type `vec_dot_type(w_ty)` (as [`KernelTable::quantize_row`] wrote it).
    ///
    /// # Panics
    /// If there is no kernel for `w_ty`, `n` is not a whole number of blocks, or a row is
    /// shorter than `n` elements.
    pub fn vec_dot(&self, w_ty: GgmlType, n: usize, w_row: &[u8], act_row: &[u8]) -> f32 {
        let k = self.kernel(w_ty);
        let (wb, ab) = row_bytes(w_ty, k.act, n);
        (k.dot)(n, &w_row[..wb], &act_row[..ab])
    }

    /// Matrix-vector product over a chunk of rows: `out[r] = Σ w_r·a` for `r` in
    /// `0..out.len()`, where `w` holds `out.len()` consecutive rows of `k` elements of type
    /// `w_ty` and `act_row` is one activation row of `k` elements. The threaded matmul calls
    /// this on row ranges.
    ///
    /// # Panics
    /// As [`KernelTable::vec_dot`], and if `w` does not hold exactly `out.len()` rows.
    pub fn gemv(&self, w_ty: GgmlType, k: usize, w: &[u8], act_row: &[u8], out: &mut [f32]) {
        let kern = self.kernel(w_ty);
        let (wb, ab) = row_bytes(w_ty, kern.act, k);
        assert_eq!(
            w.len(),
            wb * out.len(),
            "{w_ty} weights for {} rows of {k}",
            out.len()
        );
        let act = &act_row[..ab];
        if wb == 0 {
            out.fill(0.0);
            return;
        }
        for (o, row) in out.iter_mut().zip(w.chunks_exact(wb)) {
            *o = (kern.dot)(k, row, act);
        }
    }

    /// Whether [`KernelTable::gemm`] has a kernel for the weight type (otherwise the matmul
    /// runs [`KernelTable::gemv`] per token).
    pub fn has_gemm(&self, w_ty: GgmlType) -> bool {
        self.gemm[w_ty.id() as usize].is_some()
    }

    /// Whether some GEMM kernel reads activations of `act_ty` packed ([`ActRows::pack`]).
    pub fn gemm_reads_packed(&self, act_ty: GgmlType) -> bool {
        self.gemm_x8
            && matches!(act_ty, GgmlType::Q8_0 | GgmlType::Q8_1)
            && GgmlType::ALL
                .iter()
                .any(|&w| self.has_gemm(w) && Self::vec_dot_type(w) == Some(act_ty))
    }

    /// Whether a product with one token runs the GEMM for `w_ty` (otherwise the GEMV). Packed
    /// weights always do (the original rows are released); so do the x86 tiers' plain-row
    /// GEMMs, whose float order (AVX-512's F32/F16/BF16) is not the GEMV's, so that decode
    /// computes what prefill computes. The NEON tiers' GEMMs give the GEMV's bits (tested), and
    /// a lone token there takes the GEMV, the kernel written for it.
    pub fn gemm_decodes(&self, w_ty: GgmlType) -> bool {
        self.has_gemm(w_ty) && (!self.gemv_decodes || self.gemm_packs_weights(w_ty))
    }

    /// Whether the GEMM kernel for `w_ty` takes its weights in the x8 layout ([`pack`]).
    pub fn gemm_packs_weights(&self, w_ty: GgmlType) -> bool {
        self.gemm_x8 && self.has_gemm(w_ty) && pack::superblock_bytes(w_ty).is_some()
    }

    /// Matrix × up to four activation rows: `out[t * ldo + r] = Σ w_r · a_t` for the `n_rows`
    /// rows of `w` (`k` elements each) and the `acts.n` tokens. `w` is x8-packed when
    /// [`KernelTable::gemm_packs_weights`] says so, plain rows otherwise; the activation rows are
    /// of type `vec_dot_type(w_ty)`, also packed ([`ActRows::pack`]) for the 32-element formats
    /// when [`KernelTable::gemm_reads_packed`] says so.
    ///
    /// # Panics
    /// If there is no GEMM kernel for `w_ty` ([`KernelTable::has_gemm`]), or a size is wrong.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        w_ty: GgmlType,
        k: usize,
        n_rows: usize,
        w: &[u8],
        acts: &ActRows,
        out: &mut [f32],
        ldo: usize,
    ) {
        let f = self.gemm[w_ty.id() as usize]
            .unwrap_or_else(|| panic!("no GEMM kernel for {w_ty} weights"));
        let kern = self.kernel(w_ty);
        let (wb, ab) = row_bytes(w_ty, kern.act, k);
        assert!(wb > 0 && (1..=4).contains(&acts.n));
        if self.gemm_packs_weights(w_ty) {
            assert!(w.len() >= pack::packed_len(w_ty, n_rows, k).unwrap());
        } else {
            assert_eq!(w.len(), n_rows * wb, "{w_ty} weights of {n_rows} x {k}");
        }
        if self.gemm_reads_packed(kern.act) {
            assert!(acts.packed.len() >= ActRows::packed_len(acts.n, k / 32));
        } else {
            for t in 0..acts.n {
                assert!(acts.rows[t].len() >= ab);
            }
        }
        assert!(out.len() >= (acts.n - 1) * ldo + n_rows);
        f(k, n_rows, w, acts, out, ldo);
    }

    fn build(tier: CpuTier) -> KernelTable {
        use GgmlType::*;
        let mut t = KernelTable {
            tier,
            dot: [None; N_TYPES],
            quant: [None; N_TYPES],
            gemm: [None; N_TYPES],
            gemm_x8: false,
            gemv_decodes: false,
        };

        // Scalar tier: every target.
        t.set_quant(F32, float::quantize_f32);
        t.set_quant(F16, float::quantize_f16);
        t.set_quant(BF16, float::quantize_bf16);
        t.set_quant(Q8_0, |x, o| q8_0::quantize_act(x, quant::as_blocks_mut(o)));
        t.set_quant(Q8_1, |x, o| q8_1::quantize_act(x, quant::as_blocks_mut(o)));
        t.set_quant(Q8_K, |x, o| q8_k::quantize(x, quant::as_blocks_mut(o)));

        t.set_dot(F32, float::vec_dot_f32_scalar);
        t.set_dot(F16, float::vec_dot_f16_scalar);
        t.set_dot(BF16, float::vec_dot_bf16_scalar);
        macro_rules! set {
            (; $($ty:ident: $fmt:ident::$wb:ident x $act:ident::$ab:ident, $fam:ident;)*) => {$(
                t.set_dot($ty, scalar_dot!($fmt::$wb, $act::$ab, $fmt::vec_dot_scalar));
            )*};
        }
        quant_formats!(set);

        #[cfg(target_arch = "x86_64")]
        if tier.includes(CpuTier::Avx2) {
            t.fill_avx2();
        }
        #[cfg(target_arch = "x86_64")]
        if tier.includes(CpuTier::Avx512) {
            t.fill_avx512();
        }
        #[cfg(target_arch = "aarch64")]
        if tier.includes(CpuTier::Neon) {
            t.fill_neon(tier.includes(CpuTier::NeonDotprod));
        }
        #[cfg(target_arch = "aarch64")]
        if tier.includes(CpuTier::NeonI8mm) {
            t.fill_neon_i8mm();
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        if tier.includes(CpuTier::Simd128) {
            t.fill_simd128();
        }
        t
    }

    fn set_dot(&mut self, w: GgmlType, dot: DotFn) {
        let act = Self::vec_dot_type(w).expect("a paired activation type");
        self.dot[w.id() as usize] = Some(DotKernel { act, dot });
    }

    fn set_quant(&mut self, act: GgmlType, f: QuantRowFn) {
        self.quant[act.id() as usize] = Some(f);
    }

    /// The `Neon` and `NeonDotprod` tiers: the same kernel bodies, with the i8 dot product step
    /// emulated (`smull` + `sadalp`) or as `sdot` (see [`neon`]), and GEMMs over plain rows for
    /// every format, each (row, token) sum computed as the GEMV computes it.
    #[cfg(target_arch = "aarch64")]
    fn fill_neon(&mut self, dotprod: bool) {
        use GgmlType::*;
        self.gemv_decodes = true;
        self.set_quant(F16, simd_quant!(raw float::neon::quantize_f16_neon));
        self.set_quant(BF16, simd_quant!(raw float::neon::quantize_bf16_neon));
        self.set_quant(
            Q8_0,
            simd_quant!(q8_0::BlockQ8_0, q8_0::neon::quantize_neon),
        );
        self.set_quant(
            Q8_1,
            simd_quant!(q8_1::BlockQ8_1, q8_1::neon::quantize_neon),
        );
        self.set_quant(
            Q8_K,
            simd_quant!(q8_k::BlockQ8_K, q8_k::neon::quantize_neon),
        );

        self.set_dot(F32, simd_dot!(raw float::neon::vec_dot_f32_neon));
        self.set_dot(F16, simd_dot!(raw float::neon::vec_dot_f16_neon));
        self.set_dot(BF16, simd_dot!(raw float::neon::vec_dot_bf16_neon));
        macro_rules! set {
            (; $($ty:ident: $fmt:ident::$wb:ident x $act:ident::$ab:ident, $fam:ident;)*) => {$(
                self.set_dot($ty, if dotprod {
                    simd_dot!($fmt::$wb, $act::$ab, $fmt::neon::vec_dot_dotprod)
                } else {
                    simd_dot!($fmt::$wb, $act::$ab, $fmt::neon::vec_dot_neon)
                });
            )*};
        }
        quant_formats!(set);
        // the GEMMs over plain rows (`quant::neon_gemm`): the same two instantiations
        macro_rules! gemm {
            (; $($ty:ident: $fmt:ident::$wb:ident x $act:ident::$ab:ident, $fam:ident;)*) => {$({
                #[allow(unused_unsafe)]
                fn g(k: usize, n: usize, w: &[u8], a: &ActRows<'_>, out: &mut [f32], ldo: usize) {
                    // SAFETY: as for `simd_dot`.
                    unsafe { $fmt::neon::gemm_neon(k, n, w, a, out, ldo) }
                }
                fn gd(k: usize, n: usize, w: &[u8], a: &ActRows<'_>, out: &mut [f32], ldo: usize) {
                    // SAFETY: as for `simd_dot` (only chosen when the tier includes `dotprod`).
                    unsafe { $fmt::neon::gemm_dotprod(k, n, w, a, out, ldo) }
                }
                let f = if dotprod { gd as GemmFn } else { g as GemmFn };
                self.gemm[$ty.id() as usize] = Some(f);
            })*};
        }
        quant_formats!(gemm);
        macro_rules! gemm_float {
            ($($ty:ident: $f:ident;)*) => {$({
                #[allow(unused_unsafe)]
                fn g(k: usize, n: usize, w: &[u8], a: &ActRows<'_>, out: &mut [f32], ldo: usize) {
                    // SAFETY: as for `simd_dot`.
                    unsafe {
                        match a.n {
                            1 => float::neon::$f::<1>(k, n, w, a, out, ldo),
                            2 => float::neon::$f::<2>(k, n, w, a, out, ldo),
                            3 => float::neon::$f::<3>(k, n, w, a, out, ldo),
                            _ => float::neon::$f::<4>(k, n, w, a, out, ldo),
                        }
                    }
                }
                self.gemm[$ty.id() as usize] = Some(g as GemmFn);
            })*};
        }
        gemm_float! {
            F32: gemm_f32_neon;
            F16: gemm_f16_neon;
            BF16: gemm_bf16_neon;
        }
    }

    /// The `NeonI8mm` tier: the `NeonDotprod` kernels, with `smmla` GEMM kernels in place of
    /// the quantized formats' `sdot` ones, over plain weight rows and the quantized activation
    /// rows (a 2×2 tile of rows × tokens per instruction; each weight block is decoded once per
    /// four tokens). Every (row, token) sum is exact in integers and weighted in the GEMV's float
    /// order, so the GEMM gives the GEMV's bits for any token count: decode equals prefill.
    #[cfg(target_arch = "aarch64")]
    fn fill_neon_i8mm(&mut self) {
        use GgmlType::*;
        macro_rules! gemm {
            (; $($ty:ident: $fmt:ident::$wb:ident x $act:ident::$ab:ident, $fam:ident;)*) => {$({
                fn g(k: usize, n: usize, w: &[u8], a: &ActRows<'_>, out: &mut [f32], ldo: usize) {
                    // SAFETY: as for `simd_dot`.
                    unsafe { $fmt::neon::gemm_i8mm(k, n, w, a, out, ldo) }
                }
                self.gemm[$ty.id() as usize] = Some(g as GemmFn);
            })*};
        }
        quant_formats!(gemm);
    }

    /// The `Simd128` tier (wasm32): the 8-bit activation quantizers and the dot products of the
    /// quantized formats. These kernels need no run-time check (see [`cpu`]), so they are safe
    /// functions and enter the table as the scalar ones do. F32, F16 and BF16 keep the scalar
    /// kernels: built with `simd128`, their eight-lane loops compile to vector code that
    /// measured as fast as hand-written `f32x4` versions (F16 faster: V8 ran the compiler's
    /// widening better than ours), and their activation converters take a few microseconds a
    /// row.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn fill_simd128(&mut self) {
        use GgmlType::*;
        self.set_quant(Q8_0, |x, o| {
            q8_0::wasm::quantize(x, quant::as_blocks_mut(o))
        });
        self.set_quant(Q8_1, |x, o| {
            q8_1::wasm::quantize(x, quant::as_blocks_mut(o))
        });
        self.set_quant(Q8_K, |x, o| {
            q8_k::wasm::quantize(x, quant::as_blocks_mut(o))
        });

        macro_rules! set {
            (; $($ty:ident: $fmt:ident::$wb:ident x $act:ident::$ab:ident, $fam:ident;)*) => {$(
                self.set_dot($ty, scalar_dot!($fmt::$wb, $act::$ab, $fmt::wasm::vec_dot));
            )*};
        }
        quant_formats!(set);
    }

    #[cfg(target_arch = "x86_64")]
    fn fill_avx2(&mut self) {
        use GgmlType::*;
        self.set_quant(F16, simd_quant!(raw float::x86::quantize_f16_avx2));
        self.set_quant(BF16, simd_quant!(raw float::x86::quantize_bf16_avx2));
        self.set_quant(Q8_0, simd_quant!(q8_0::BlockQ8_0, q8_0::x86::quantize_avx2));
        self.set_quant(Q8_1, simd_quant!(q8_1::BlockQ8_1, q8_1::x86::quantize_avx2));
        self.set_quant(Q8_K, simd_quant!(q8_k::BlockQ8_K, q8_k::x86::quantize_avx2));

        self.set_dot(F32, simd_dot!(raw float::x86::vec_dot_f32_avx2));
        self.set_dot(F16, simd_dot!(raw float::x86::vec_dot_f16_avx2));
        self.set_dot(BF16, simd_dot!(raw float::x86::vec_dot_bf16_avx2));
        macro_rules! set {
            (; $($ty:ident: $fmt:ident::$wb:ident x $act:ident::$ab:ident, $fam:ident;)*) => {$(
                self.set_dot($ty, simd_dot!($fmt::$wb, $act::$ab, $fmt::x86::vec_dot_avx2));
            )*};
        }
        quant_formats!(set);
        // GEMMs over x8-packed weights where `vpmaddubsw` is exact: codes below 128, or signed
        // values with the sign trick (Q8_0, IQ4_NL, IQ4_XS); F32 and BF16 over plain rows (F16
        // keeps the per-token GEMV: a GEMM measured no faster, see `float::x86`)
        self.gemm_x8 = true;
        float_gemms! { self;
            F32: gemm_f32_avx2;
            BF16: gemm_bf16_avx2;
        }
        quant_formats!(x86_gemms, self, gemm_avx2, gemm_x8_avx2);
    }

    /// The AVX-512 tier keeps the AVX2 activation quantizers (they are a small part of a
    /// matrix-vector product) and replaces every dot product (see the module docs for why most
    /// of them work on 256-bit vectors).
    #[cfg(target_arch = "x86_64")]
    fn fill_avx512(&mut self) {
        use GgmlType::*;
        self.gemm_x8 = true;
        self.set_dot(F32, simd_dot!(raw float::x86::vec_dot_f32_avx512));
        self.set_dot(F16, simd_dot!(raw float::x86::vec_dot_f16_avx512));
        if cpu::has_avx512_bf16() {
            self.set_dot(BF16, simd_dot!(raw float::x86::vec_dot_bf16_avx512bf16));
        } else {
            self.set_dot(BF16, simd_dot!(raw float::x86::vec_dot_bf16_avx512));
        }
        macro_rules! set {
            (; $($ty:ident: $fmt:ident::$wb:ident x $act:ident::$ab:ident, $fam:ident;)*) => {$(
                self.set_dot($ty, simd_dot!($fmt::$wb, $act::$ab, $fmt::x86::vec_dot_avx512));
            )*};
        }
        quant_formats!(set);
        float_gemms! { self;
            F32: gemm_f32_avx512;
            F16: gemm_f16_avx512;
            BF16: gemm_bf16_avx512;
        }
        quant_formats!(x86_gemms, self, gemm_avx512, gemm_x8_avx512);
    }
}

/// Byte lengths of an `n`-element weight row and activation row.
fn row_bytes(w_ty: GgmlType, act: GgmlType, n: usize) -> (usize, usize) {
    let bytes = |t: GgmlType| {
        t.bytes_for(n as u64)
            .unwrap_or_else(|| panic!("{n} elements is not a whole number of {t} blocks"))
            as usize
    };
    (bytes(w_ty), bytes(act))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairing_matches_ggml() {
        use GgmlType::*;
        for (w, a) in [
            (F32, F32),
            (F16, F16),
            (BF16, BF16),
            (Q4_0, Q8_0),
            (Q5_0, Q8_0),
            (Q8_0, Q8_0),
            (IQ4_NL, Q8_0),
            (Q4_1, Q8_1),
            (Q5_1, Q8_1),
            (Q2_K, Q8_K),
            (Q3_K, Q8_K),
            (Q4_K, Q8_K),
            (Q5_K, Q8_K),
            (Q6_K, Q8_K),
            (IQ4_XS, Q8_K),
        ] {
            assert_eq!(KernelTable::vec_dot_type(w), Some(a), "{w}");
        }
        assert_eq!(KernelTable::vec_dot_type(IQ2_XXS), None);
        assert_eq!(KernelTable::vec_dot_type(Q8_K), None);
    }

    #[test]
    fn every_tier_has_every_kernel() {
        for tier in CpuTier::supported() {
            let t = KernelTable::for_tier(tier).unwrap();
            assert_eq!(t.tier(), tier);
            for &ty in GgmlType::ALL {
                assert_eq!(
                    t.supports(ty),
                    KernelTable::vec_dot_type(ty).is_some(),
                    "{tier} {ty}"
                );
            }
        }
        assert!(KernelTable::get().tier().is_supported());
    }

    #[test]
    fn act_row_bytes() {
        use GgmlType::*;
        assert_eq!(KernelTable::act_row_bytes(Q4_K, 512), Some(2 * 292));
        assert_eq!(KernelTable::act_row_bytes(Q4_0, 64), Some(2 * 34));
        assert_eq!(KernelTable::act_row_bytes(F16, 3), Some(6));
        assert_eq!(KernelTable::act_row_bytes(Q4_0, 33), None);
        assert_eq!(KernelTable::act_row_bytes(IQ2_XXS, 256), None);
    }
}
