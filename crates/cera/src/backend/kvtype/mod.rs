//! KV cache element types and how one row (one head's keys or values at one position) is
//! stored in each: floats, ggml's blocks (optionally after a Walsh–Hadamard rotation, as
//! llama.cpp rotates quantized caches) or TurboQuant codes (always rotated, with random signs).
//!
//! A rotated row is kept in the rotated space: attention rotates the query once instead of
//! every key, sums values in the rotated space and rotates the output back once. Rotation is
//! orthonormal, so scores and outputs are those of the unrotated vectors up to the
//! quantization error, which the rotation spreads evenly over the coordinates (outlier
//! channels no longer decide a whole block's scale).

use half::f16;

pub mod turbo;
use crate::quant::{self, GgmlType, q8_0};

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
#[allow(non_camel_case_types)]
pub enum KvType {
    F32,
    #[default]
    F16,
    BF16,
    /// ggml's blocks of 32 (8.5 bits per element); heads must be whole blocks, else the cache
    /// keeps f16 ([`KvType::for_head_dim`]). The same for the other block types.
    Q8_0,
    /// 4.5 bits per element.
    Q4_0,
    /// 5 bits per element.
    Q4_1,
    /// 5.5 bits per element.
    Q5_0,
    /// 6 bits per element.
    Q5_1,
    /// 4.5 bits per element, non-linear levels.
    IQ4_NL,
    /// TurboQuant, 3 bits per coordinate plus an f16 scale per rotation block (3.25 bits per
    /// element at head size 64); heads must be multiples of 16.
    TQ3,
    /// TurboQuant, 4 bits per coordinate (4.25 bits per element at head size 64).
    TQ4,
}

impl KvType {
    /// Every type, in the order `--help` lists them.
    pub const ALL: [KvType; 11] = [
        KvType::F32,
        KvType::F16,
        KvType::BF16,
        KvType::Q8_0,
        KvType::Q4_0,
        KvType::Q4_1,
        KvType::Q5_0,
        KvType::Q5_1,
        KvType::IQ4_NL,
        KvType::TQ3,
        KvType::TQ4,
    ];

    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::BF16 => "bf16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
            KvType::Q4_1 => "q4_1",
            KvType::Q5_0 => "q5_0",
            KvType::Q5_1 => "q5_1",
            KvType::IQ4_NL => "iq4_nl",
            KvType::TQ3 => "tq3",
            KvType::TQ4 => "tq4",
        }
    }

    /// The id checkpoints and snapshots store (stable across versions).
    pub(crate) fn id(self) -> u8 {
        match self {
            KvType::F32 => 0,
            KvType::F16 => 1,
            KvType::Q8_0 => 2,
            KvType::BF16 => 3,
            KvType::Q4_0 => 4,
            KvType::Q4_1 => 5,
            KvType::Q5_0 => 6,
            KvType::Q5_1 => 7,
            KvType::IQ4_NL => 8,
            KvType::TQ3 => 9,
            KvType::TQ4 => 10,
        }
    }

    pub(crate) fn from_id(id: u8) -> Option<KvType> {
        KvType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The ggml block type of a block-quantized cache.
    pub(crate) fn ggml_block(self) -> Option<GgmlType> {
        Some(match self {
            KvType::Q8_0 => GgmlType::Q8_0,
            KvType::Q4_0 => GgmlType::Q4_0,
            KvType::Q4_1 => GgmlType::Q4_1,
            KvType::Q5_0 => GgmlType::Q5_0,
            KvType::Q5_1 => GgmlType::Q5_1,
            KvType::IQ4_NL => GgmlType::IQ4_NL,
            _ => return None,
        })
    }

    /// TurboQuant bits per coordinate.
    pub(crate) fn turbo_bits(self) -> Option<u32> {
        match self {
            KvType::TQ3 => Some(3),
            KvType::TQ4 => Some(4),
            _ => None,
        }
    }

    /// Whether the type is quantized (ggml's blocks or TurboQuant), as opposed to a float.
    pub fn is_quantized(self) -> bool {
        self.ggml_block().is_some() || self.turbo_bits().is_some()
    }

    /// The type a cache with heads of `head_dim` actually uses: block types only when the
    /// heads are whole blocks of 32, TurboQuant only for multiples of 16, f16 otherwise.
    pub fn for_head_dim(self, head_dim: usize) -> KvType {
        let whole = match self {
            t if t.ggml_block().is_some() => head_dim.is_multiple_of(32),
            t if t.turbo_bits().is_some() => head_dim.is_multiple_of(turbo::GROUP),
            _ => true,
        };
        if whole { self } else { KvType::F16 }
    }

    /// Bytes of one row of `d` elements (`d` as [`KvType::for_head_dim`] allows).
    pub fn row_bytes(self, d: usize) -> usize {
        match self {
            KvType::F32 => 4 * d,
            KvType::F16 | KvType::BF16 => 2 * d,
            t => match (t.ggml_block(), t.turbo_bits()) {
                (Some(g), _) => g.bytes_for(d as u64).expect("whole blocks") as usize,
                (_, Some(bits)) => {
                    let b = turbo_block(d);
                    d / b * turbo::block_bytes(bits, b)
                }
                _ => unreachable!("every type is a float, a block type or TurboQuant"),
            },
        }
    }

    /// Bits per element at rows of `d` elements.
    pub fn bits_per_element(self, d: usize) -> f64 {
        self.row_bytes(d) as f64 * 8.0 / d as f64
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let l = s.to_ascii_lowercase();
        KvType::ALL
            .into_iter()
            .find(|t| t.name() == l)
            .ok_or_else(|| {
                let names: Vec<_> = KvType::ALL.iter().map(|t| t.name()).collect();
                format!(
                    "unsupported KV cache type '{s}' (supported: {})",
                    names.join(", ")
                )
            })
    }
}

/// The KV cache a session asks for: the keys' and values' types and whether quantized
/// (ggml block) types are stored after a Hadamard rotation. TurboQuant is always rotated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvSpec {
    pub k: KvType,
    pub v: KvType,
    /// Rotate quantized keys and values (llama.cpp's default since 2026, where the head size
    /// is a multiple of 64).
    pub rotate: bool,
}

impl KvSpec {
    /// Keys of `k`, values of `v`, rotated where that helps.
    pub fn new(k: KvType, v: KvType) -> KvSpec {
        KvSpec { k, v, rotate: true }.normalized()
    }

    /// Keys and values of one type.
    pub fn same(ty: KvType) -> KvSpec {
        KvSpec::new(ty, ty)
    }

    /// With the rotation switched on or off (it only applies to block types).
    pub fn with_rotation(self, rotate: bool) -> KvSpec {
        KvSpec { rotate, ..self }.normalized()
    }

    /// `rotate` only when a block type can use it, so specs that store the same bytes compare
    /// equal (an f16 cache is the same with or without `--kv-rotate`).
    fn normalized(self) -> KvSpec {
        let any = self.k.ggml_block().is_some() || self.v.ggml_block().is_some();
        KvSpec {
            rotate: self.rotate && any,
            ..self
        }
    }

    /// The types a layer with heads of `head_dim` / `head_dim_v` uses.
    pub fn for_dims(self, head_dim: usize, head_dim_v: usize) -> KvSpec {
        KvSpec {
            k: self.k.for_head_dim(head_dim),
            v: self.v.for_head_dim(head_dim_v),
            rotate: self.rotate,
        }
        .normalized()
    }
}

impl Default for KvSpec {
    fn default() -> Self {
        KvSpec::same(KvType::F16)
    }
}

impl std::fmt::Display for KvSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "K {} / V {}", self.k, self.v)?;
        if self.rotate {
            f.write_str(" (rotated)")?;
        }
        Ok(())
    }
}

/// TurboQuant's rotation block for rows of `d`: the largest power of two dividing `d`, capped
/// at 256 (`d` a multiple of 16).
fn turbo_block(d: usize) -> usize {
    let p = 1usize << d.trailing_zeros();
    p.min(256)
}

/// How one side (keys or values) of a layer rotates its rows: Walsh–Hadamard blocks of `n`
/// (0: none), after multiplying by `signs` (TurboQuant's random diagonal).
#[derive(Clone, Copy, Debug, Default)]
pub struct Rotation {
    pub n: usize,
    pub signs: Option<&'static [f32]>,
}

impl Rotation {
    /// The rotation of a side of type `ty` with rows of `d`: TurboQuant always; block types
    /// when asked and `d` is a multiple of 64, as llama.cpp does (keys: the largest power of two
    /// dividing `d`; values: blocks of 64, which llama.cpp found better for them).
    pub fn for_side(ty: KvType, d: usize, rotate: bool, keys: bool) -> Rotation {
        if ty.turbo_bits().is_some() {
            let n = turbo_block(d);
            return Rotation {
                n,
                signs: Some(turbo::signs(n)),
            };
        }
        if !(rotate && ty.ggml_block().is_some() && d.is_multiple_of(64)) {
            return Rotation::default();
        }
        let n = if keys {
            (1usize << d.trailing_zeros()).min(d)
        } else {
            64
        };
        Rotation { n, signs: None }
    }

    pub fn is_some(&self) -> bool {
        self.n > 0
    }

    /// `x ← R x`, per block.
    pub fn forward(&self, x: &mut [f32]) {
        if self.n == 0 {
            return;
        }
        for blk in x.chunks_exact_mut(self.n) {
            if let Some(s) = self.signs {
                for (v, s) in blk.iter_mut().zip(s) {
                    *v *= s;
                }
            }
            turbo::fwht(blk);
        }
    }

    /// `x ← Rᵀ x`, per block.
    pub fn inverse(&self, x: &mut [f32]) {
        if self.n == 0 {
            return;
        }
        for blk in x.chunks_exact_mut(self.n) {
            turbo::fwht(blk);
            if let Some(s) = self.signs {
                for (v, s) in blk.iter_mut().zip(s) {
                    *v *= s;
                }
            }
        }
    }
}

/// Encodes one row `x` of type `ty` (a packed type: bf16, ggml blocks or TurboQuant) into
/// `out` ([`KvType::row_bytes`]), rotating it first by `rot`.
pub fn encode_row(ty: KvType, rot: &Rotation, x: &[f32], out: &mut [u8]) {
    let mut buf = [0f32; super::MAX_HEAD_DIM];
    let y = &mut buf[..x.len()];
    y.copy_from_slice(x);
    rot.forward(y);
    match ty {
        KvType::BF16 => quant::quantize(GgmlType::BF16, y, out).expect("bf16 row"),
        // quantized as ggml's CPU quantizes Q8_0 activations (and its KV rows)
        KvType::Q8_0 => q8_0::quantize_act(y, quant::as_blocks_mut(out)),
        // and IQ4_NL KV rows without the scale search llama-quantize does for weights
        KvType::IQ4_NL => quant::iq4_nl::quantize_row_ref(y, quant::as_blocks_mut(out)),
        KvType::TQ3 | KvType::TQ4 => {
            let bits = ty.turbo_bits().expect("turbo");
            let bb = turbo::block_bytes(bits, rot.n);
            for (blk, o) in y.chunks_exact(rot.n).zip(out.chunks_exact_mut(bb)) {
                turbo::encode_block(bits, blk, o);
            }
        }
        t => {
            let g = t.ggml_block().expect("a packed KV type");
            quant::quantize(g, y, out).expect("KV rows are whole blocks");
        }
    }
}

/// Decodes `dst.len() / d` rows of `d` from `src` into the rotated space they are stored in
/// (what attention reads).
pub fn decode_rows(ty: KvType, rot_n: usize, d: usize, src: &[u8], dst: &mut [f32]) {
    let lut16 = |c: &[u8; 16], lut: &[f32; 16], o: &mut [f32]| {
        for (o, &c) in o.iter_mut().zip(c) {
            *o = lut[c as usize];
        }
    };
    decode_rows_with(ty, rot_n, d, src, dst, turbo::decode_group_scalar, lut16)
}

/// [`decode_rows`], inlined into the caller so the per-format loops compile with its target
/// features (the attention tiles are instantiated per CPU tier), with `group` expanding one
/// TurboQuant group of 16 codes (the tier's vector version).
#[inline(always)]
pub(super) fn decode_rows_with(
    ty: KvType,
    rot_n: usize,
    d: usize,
    src: &[u8],
    dst: &mut [f32],
    group: impl Fn(u32, &[u8], &[f32; 16], &mut [f32]),
    lut16: impl Fn(&[u8; 16], &[f32; 16], &mut [f32]),
) {
    use crate::quant::{as_blocks, iq4_nl, q4_0, q4_1, q5_0, q5_1};
    debug_assert_eq!(dst.len() % d, 0);
    match ty {
        KvType::BF16 => {
            for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            }
        }
        KvType::Q8_0 => q8_0::dequantize(as_blocks(src), dst),
        KvType::Q4_0 => q4_0::dequantize(as_blocks(src), dst),
        KvType::Q4_1 => q4_1::dequantize(as_blocks(src), dst),
        // the fifth bits gathered into whole codes first, so the loops vectorize (the same values
        // as the formats' scalar dequantizers)
        KvType::Q5_0 => {
            let blocks: &[q5_0::BlockQ5_0] = as_blocks(src);
            for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(32)) {
                let c = q5_codes(&b.qs, u32::from_le_bytes(b.qh));
                let d = crate::quant::f16_to_f32(b.d);
                for (o, &q) in y.iter_mut().zip(&c) {
                    *o = d * (q - 16) as f32;
                }
            }
        }
        KvType::Q5_1 => {
            let blocks: &[q5_1::BlockQ5_1] = as_blocks(src);
            for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(32)) {
                let c = q5_codes(&b.qs, u32::from_le_bytes(b.qh));
                let (d, m) = (crate::quant::f16_to_f32(b.d), crate::quant::f16_to_f32(b.m));
                for (o, &q) in y.iter_mut().zip(&c) {
                    *o = d * q as f32 + m;
                }
            }
        }
        KvType::IQ4_NL => {
            let blocks: &[iq4_nl::BlockIQ4_NL] = as_blocks(src);
            for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(32)) {
                let d = crate::quant::f16_to_f32(b.d);
                let mut lut = [0f32; 16];
                for (l, &k) in lut.iter_mut().zip(&iq4_nl::KVALUES_IQ4NL) {
                    *l = d * k as f32;
                }
                let (mut lo, mut hi) = ([0u8; 16], [0u8; 16]);
                for ((l, h), &q) in lo.iter_mut().zip(&mut hi).zip(&b.qs) {
                    *l = q & 0x0F;
                    *h = q >> 4;
                }
                let (y0, y1) = y.split_at_mut(16);
                lut16(&lo, &lut, y0);
                lut16(&hi, &lut, y1);
            }
        }
        KvType::TQ3 | KvType::TQ4 => {
            let bits = ty.turbo_bits().expect("turbo");
            let bb = turbo::block_bytes(bits, rot_n);
            let cb = turbo::codebook(bits, rot_n);
            let gb = 2 * bits as usize;
            for (o, s) in dst.chunks_exact_mut(rot_n).zip(src.chunks_exact(bb)) {
                let scale = crate::quant::f16_to_f32([s[0], s[1]]);
                let mut lut = [0f32; 16];
                for (l, c) in lut.iter_mut().zip(&cb.centroids) {
                    *l = c * scale;
                }
                for (og, sg) in o
                    .chunks_exact_mut(turbo::GROUP)
                    .zip(s[2..].chunks_exact(gb))
                {
                    group(bits, sg, &lut, og);
                }
            }
        }
        KvType::F32 | KvType::F16 => unreachable!("float caches are not packed"),
    }
}

/// The 32 five-bit codes of a Q5_0/Q5_1 block: nibbles (element `j` low, `j + 16` high) and
/// bit `j` of `qh` as each element's fifth bit.
#[inline(always)]
fn q5_codes(qs: &[u8; 16], qh: u32) -> [i32; 32] {
    let mut c = [0i32; 32];
    for j in 0..16 {
        c[j] = (qs[j] & 0x0F) as i32 | (((qh >> j) & 1) << 4) as i32;
        c[j + 16] = (qs[j] >> 4) as i32 | (((qh >> (j + 16)) & 1) << 4) as i32;
    }
    c
}

/// `x` as a cache of `ty` holds it, in the original (unrotated) space: what the reference
/// backend keeps, and the round trip the error bounds are stated for.
pub fn round_trip(ty: KvType, rot: &Rotation, x: &[f32]) -> Vec<f32> {
    match ty {
        KvType::F32 => x.to_vec(),
        KvType::F16 => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
        t => {
            let d = x.len();
            let mut bytes = vec![0u8; t.row_bytes(d)];
            encode_row(t, rot, x, &mut bytes);
            let mut y = vec![0f32; d];
            decode_rows(t, rot.n, d, &bytes, &mut y);
            rot.inverse(&mut y);
            y
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(seed: &mut u32, n: usize, d: usize) -> Vec<Vec<f32>> {
        (0..n)
            .map(|_| {
                (0..d)
                    .map(|i| {
                        *seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                        let u = (*seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                        // an outlier channel, as real keys have
                        if i == 3 { 8.0 * u } else { u }
                    })
                    .collect()
            })
            .collect()
    }

    /// Relative squared error of each type's round trip on rows with an outlier channel, with
    /// and without rotation: within the bound each format's step size implies, and the
    /// rotation never worse than none for the 4-bit block types.
    #[test]
    fn round_trip_error_bounds_per_type() {
        let bounds = [
            (KvType::F32, 0.0),
            (KvType::F16, 1e-6),
            (KvType::BF16, 3e-5),
            (KvType::Q8_0, 2e-4),
            (KvType::Q5_0, 4e-3),
            (KvType::Q5_1, 3e-3),
            (KvType::Q4_0, 1.5e-2),
            (KvType::Q4_1, 1.2e-2),
            (KvType::IQ4_NL, 1.2e-2),
            (KvType::TQ4, 1.3e-2),
            (KvType::TQ3, 4.5e-2),
        ];
        for d in [64, 128] {
            for (ty, bound) in bounds {
                let mut errs = Vec::new();
                for rotate in [false, true] {
                    let rot = Rotation::for_side(ty, d, rotate, true);
                    let mut seed = 5u32;
                    let (mut e, mut t) = (0f64, 0f64);
                    for x in rows(&mut seed, 300, d) {
                        let y = round_trip(ty, &rot, &x);
                        e += x
                            .iter()
                            .zip(&y)
                            .map(|(a, b)| ((a - b) as f64).powi(2))
                            .sum::<f64>();
                        t += x.iter().map(|a| (*a as f64).powi(2)).sum::<f64>();
                    }
                    errs.push(e / t);
                }
                let best = errs[0].min(errs[1]);
                assert!(
                    best <= bound,
                    "{ty} d={d}: relative error {errs:?} > {bound}"
                );
                if matches!(ty, KvType::Q4_0 | KvType::Q4_1 | KvType::IQ4_NL) {
                    assert!(errs[1] < errs[0], "{ty} d={d}: rotation {errs:?}");
                }
            }
        }
    }

    /// The attention tiles' decoders give the formats' own dequantized values, bit for bit.
    #[test]
    fn tile_decoders_equal_the_format_dequantizers() {
        let mut seed = 9u32;
        let x: Vec<f32> = rows(&mut seed, 8, 64).concat();
        for ty in KvType::ALL.into_iter().filter(|t| t.ggml_block().is_some()) {
            let g = ty.ggml_block().unwrap();
            let bytes = quant::quantize_to_vec(g, &x).unwrap();
            let want = quant::dequantize_to_vec(g, &bytes, x.len()).unwrap();
            let mut got = vec![0f32; x.len()];
            decode_rows(ty, 0, 64, &bytes, &mut got);
            assert_eq!(got, want, "{ty}");
        }
        let mut got = vec![0f32; x.len()];
        let bf: Vec<u8> = quant::quantize_to_vec(GgmlType::BF16, &x).unwrap();
        decode_rows(KvType::BF16, 0, 64, &bf, &mut got);
        assert_eq!(
            got,
            quant::dequantize_to_vec(GgmlType::BF16, &bf, x.len()).unwrap()
        );
    }

    #[test]
    fn rotations_are_orthonormal_and_inverted() {
        for (ty, d, keys) in [
            (KvType::Q4_0, 128, true),
            (KvType::Q4_0, 128, false),
            (KvType::TQ3, 96, true),
            (KvType::TQ4, 64, false),
        ] {
            let rot = Rotation::for_side(ty, d, true, keys);
            assert!(rot.is_some());
            let x: Vec<f32> = (0..d).map(|i| (i as f32 * 0.7).sin()).collect();
            let mut y = x.clone();
            rot.forward(&mut y);
            let (n0, n1): (f32, f32) =
                (x.iter().map(|v| v * v).sum(), y.iter().map(|v| v * v).sum());
            assert!((n0 - n1).abs() < 1e-4 * n0, "{ty} {d}");
            rot.inverse(&mut y);
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() < 1e-5, "{ty} {d}");
            }
        }
        // llama.cpp's rule: blocks of 64 for values, the largest power of two for keys
        assert_eq!(Rotation::for_side(KvType::Q8_0, 128, true, true).n, 128);
        assert_eq!(Rotation::for_side(KvType::Q8_0, 128, true, false).n, 64);
        assert_eq!(Rotation::for_side(KvType::Q8_0, 96, true, true).n, 0);
        assert_eq!(Rotation::for_side(KvType::F16, 128, true, true).n, 0);
        assert_eq!(Rotation::for_side(KvType::Q4_0, 128, false, true).n, 0);
    }

    #[test]
    fn names_parse_and_ids_are_stable() {
        for t in KvType::ALL {
            assert_eq!(t.name().parse::<KvType>().unwrap(), t);
            assert_eq!(KvType::from_id(t.id()), Some(t));
        }
        let e = "q3_k".parse::<KvType>().unwrap_err();
        assert!(e.contains("q3_k") && e.contains("tq3"), "{e}");
        assert_eq!(KvType::TQ3.row_bytes(64), 26);
        assert!((KvType::TQ3.bits_per_element(128) - 3.125).abs() < 1e-9);
        assert_eq!(KvType::Q4_0.for_head_dim(80), KvType::F16);
        assert_eq!(KvType::TQ3.for_head_dim(80), KvType::TQ3);
        assert_eq!(
            KvSpec::same(KvType::F16).with_rotation(true),
            KvSpec::same(KvType::F16)
        );
    }
}
