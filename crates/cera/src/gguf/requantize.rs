//! GGUF to GGUF in another weight type (`cera quantize`), with the reference quantizers.
//!
//! Matrices (tensors named `*.weight` with two or more dimensions) become the target type;
//! everything else (norms, biases, 1-D tensors) is copied as it is. A matrix whose rows are not
//! whole blocks of the target falls back the way llama-quantize's does (a K type to a
//! 32-element type of about its size: Q2_K and Q3_K → Q4_0, Q4_K → Q5_0, Q5_K → Q5_1,
//! Q6_K → Q8_0), and to F16 when not even that fits. Metadata is copied and
//! `general.file_type` set to llama.cpp's id for the type. Requantizing an already quantized
//! file works (values go through f32) but loses precision: the report says how many tensors
//! it did that to.
//!
//! llama-quantize's mixes (`Q4_K_M`, `Q3_K_S`, ...) are accepted as names and give every
//! matrix the base type (no per-tensor mix yet); the report says so.

use std::path::Path;

use super::{GgufFile, GgufWriter, Value};
use crate::error::{Error, Result};
use crate::quant::{self, GgmlType};

/// What a requantization did.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RequantReport {
    pub target: Option<GgmlType>,
    pub quantized: usize,
    pub copied: usize,
    /// (tensor, type used) where the rows did not fit the target's blocks.
    pub fallbacks: Vec<(String, GgmlType)>,
    /// Tensors whose source was already quantized (precision lost twice).
    pub requantized: usize,
    /// The name asked for was a llama-quantize mix, given the base type everywhere.
    pub mix_as_base: bool,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// The type a name asks for (`q4_0`, `Q4_K_M`, `f16`), and whether it was a mix name.
pub fn parse_target(name: &str) -> Result<(GgmlType, bool)> {
    let up = name.to_ascii_uppercase();
    let (base, mix) = match up
        .strip_suffix("_M")
        .or_else(|| up.strip_suffix("_S"))
        .or_else(|| up.strip_suffix("_L"))
    {
        Some(b) if b.ends_with("_K") => (b.to_owned(), true),
        _ => (up.clone(), false),
    };
    let ty = GgmlType::from_name(&base).filter(|t| t.can_quantize()).ok_or_else(|| {
        let known: Vec<&str> = GgmlType::ALL
            .iter()
            .filter(|t| t.can_quantize())
            .map(|t| t.name())
            .collect();
        Error::Model(format!(
            "cannot quantize to '{name}' (types: {}, and the K mixes Q2_K_S, Q3_K_M, Q4_K_M, Q5_K_M, ...)",
            known.join(", ")
        ))
    })?;
    Ok((ty, mix))
}

/// llama.cpp's `general.file_type` for a type.
fn file_type(t: GgmlType) -> Option<u32> {
    Some(match t {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        GgmlType::Q5_0 => 8,
        GgmlType::Q5_1 => 9,
        GgmlType::Q2_K => 10,
        GgmlType::Q3_K => 12,
        GgmlType::Q4_K => 15,
        GgmlType::Q5_K => 17,
        GgmlType::Q6_K => 18,
        GgmlType::BF16 => 32,
        _ => return None,
    })
}

/// The type a matrix with rows of `cols` gets when `target` is asked for.
fn fitting(target: GgmlType, cols: u64) -> GgmlType {
    let fits = |t: GgmlType| {
        t.block_elems()
            .is_some_and(|b| cols.is_multiple_of(b as u64))
    };
    if fits(target) {
        return target;
    }
    let fallback = match target {
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        _ => GgmlType::F16,
    };
    if fits(fallback) {
        fallback
    } else {
        GgmlType::F16
    }
}

/// Writes `input` with its matrices in `target` to `output` (atomically).
pub fn requantize(input: &Path, output: &Path, target: &str) -> Result<RequantReport> {
    let (ty, mix) = parse_target(target)?;
    let src = GgufFile::open(input)?;
    let mut w = GgufWriter::new();
    let mut rep = RequantReport {
        target: Some(ty),
        mix_as_base: mix,
        bytes_in: src.file_size(),
        ..Default::default()
    };
    for (k, v) in &src.metadata {
        if k == "general.file_type" {
            continue;
        }
        w.set(k.clone(), v.clone());
    }
    if let Some(ft) = file_type(ty) {
        w.set("general.file_type", Value::U32(ft));
    }
    for t in &src.tensors {
        let data = src.tensor_data(t);
        let is_matrix = t.name.ends_with(".weight") && t.shape.len() >= 2 && t.shape[1] > 1;
        if !is_matrix || t.ty == ty {
            w.add_tensor_raw(t.name.clone(), t.ty, &t.shape, data.to_vec())?;
            rep.copied += 1;
            continue;
        }
        if !t.ty.can_dequantize() {
            return Err(Error::QuantUnsupported {
                ty: t.ty,
                op: "dequantization (to requantize this tensor)",
            });
        }
        let n = t.n_elements() as usize;
        let values = quant::dequantize_to_vec(t.ty, data, n)?;
        let out_ty = fitting(ty, t.shape[0]);
        if out_ty != ty {
            rep.fallbacks.push((t.name.clone(), out_ty));
        }
        if !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            rep.requantized += 1;
        }
        w.add_tensor_f32(t.name.clone(), out_ty, &t.shape, &values)?;
        rep.quantized += 1;
    }
    let bytes = w.to_bytes()?;
    rep.bytes_out = bytes.len() as u64;
    crate::state::atomic_write(output, &bytes)?;
    Ok(rep)
}
