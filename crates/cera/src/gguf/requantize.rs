//! GGUF to GGUF in another file type (`cera quantize`), as llama-quantize writes it.
//!
//! The file type (`Q4_K_M`, `Q8_0`, `F16`, ...) picks each tensor's type through llama.cpp's
//! rules ([`super::mix`]): matrices are quantized, norms, biases, routers and convolution
//! kernels are copied; a matrix whose rows are not whole blocks of its type falls back as
//! llama-quantize's does. Tensors go in llama.cpp's order (by layer, then name), the metadata
//! is the input's with `general.quantization_version` and `general.file_type` set last, and
//! the blocks come from the reference quantizers, so without an importance matrix the file is
//! byte for byte the one llama-quantize writes. The output is written one tensor at a time:
//! memory holds one tensor's values, not the model.

use std::path::Path;

use super::mix::{self, FileType, MixState, ModelShape};
use super::writer::{TensorSpec, write_streaming};
use super::{GgufFile, Value};
use crate::error::{Error, Result};
use crate::quant::{self, GgmlType};

/// What `cera quantize` can be asked besides the file type (llama-quantize's flags).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct QuantizeOptions {
    /// `--pure`: every quantizable matrix gets the base type (no mix rules).
    pub pure: bool,
    /// `--leave-output-tensor`: `output.weight` is copied as it is.
    pub leave_output: bool,
    /// `--output-tensor-type`.
    pub output_type: Option<GgmlType>,
    /// `--token-embedding-type`.
    pub token_embd_type: Option<GgmlType>,
    /// `--allow-requantize`: quantize tensors that are already quantized (through f32,
    /// losing precision twice). Refused without it, as llama-quantize refuses.
    pub allow_requantize: bool,
    /// Threads quantizing the rows of a tensor (0: all cores).
    pub threads: usize,
    /// How blocks are quantized.
    pub strategy: QuantStrategy,
}

/// How a block's scale is chosen (`--quant-strategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuantStrategy {
    /// ggml's reference quantizers: llama-quantize's bytes.
    #[default]
    Reference,
    /// Each block's scale (and minimum) searched for the least squared error
    /// ([`crate::quant::mse`]); for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (the K and IQ4 types
    /// search their scales already, and keep the reference's).
    FastMse,
}

impl QuantStrategy {
    pub fn from_name(name: &str) -> Option<QuantStrategy> {
        match name {
            "reference" | "ref" => Some(QuantStrategy::Reference),
            "fast-mse" => Some(QuantStrategy::FastMse),
            _ => None,
        }
    }
}

/// What a quantization did.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RequantReport {
    pub file_type: Option<FileType>,
    pub quantized: usize,
    pub copied: usize,
    /// (tensor, type used) where the rows did not fit the chosen type's blocks.
    pub fallbacks: Fallbacks,
    /// Tensors whose source was already quantized (precision lost twice).
    pub requantized: usize,
    /// How many tensors of each type the output holds.
    pub types: Vec<(GgmlType, usize)>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The largest tensor's f32 values: what the quantization holds in memory at most.
    pub peak_tensor_bytes: u64,
    /// Tensors quantized by the fast-mse search (the rest of the quantized ones, if it was
    /// asked for, by the reference).
    pub mse_tensors: usize,
}

/// (tensor, type used) of the matrices whose rows took a fallback type.
type Fallbacks = Vec<(String, GgmlType)>;

/// One tensor of the plan: where it comes from and what it becomes.
struct Planned {
    src: usize,
    ty: GgmlType,
}

fn meta_u64(g: &GgufFile, key: &str) -> u64 {
    match g.get(key) {
        Some(Value::Array(a)) => a.get(0).and_then(|v| v.as_int()).unwrap_or(0) as u64,
        Some(v) => v.as_int().unwrap_or(0) as u64,
        None => 0,
    }
}

fn model_shape(g: &GgufFile) -> ModelShape {
    let arch = match g.get(crate::keys::GENERAL_ARCHITECTURE) {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let k = |s: &str| crate::keys::arch_key(&arch, s);
    ModelShape {
        n_layer: meta_u64(g, &k("block_count")) as usize,
        n_head: meta_u64(g, &k("attention.head_count")),
        n_head_kv: meta_u64(g, &k("attention.head_count_kv")),
        n_expert: meta_u64(g, &k("expert_count")),
        arch,
    }
}

fn type_name_error(name: &str) -> Error {
    let names: Vec<&str> = FileType::names().collect();
    Error::Model(format!(
        "cannot quantize to '{name}' (types: {})",
        names.join(", ")
    ))
}

/// The file type a name asks for (llama-quantize's names, case-insensitive).
pub fn parse_file_type(name: &str) -> Result<FileType> {
    FileType::from_name(name).ok_or_else(|| type_name_error(name))
}

/// Decides every tensor's type, in output order.
fn plan(src: &GgufFile, ft: FileType, opts: &QuantizeOptions) -> Result<(Vec<Planned>, Fallbacks)> {
    let mut order: Vec<usize> = (0..src.tensors.len()).collect();
    order.sort_by(|&a, &b| {
        mix::order_key(&src.tensors[a].name).cmp(&mix::order_key(&src.tensors[b].name))
    });
    let shape = model_shape(src);
    let mut state = MixState::new(
        &shape,
        ft,
        order.iter().map(|&i| src.tensors[i].name.as_str()),
    );
    let base = ft.base();
    let mut fallbacks = Vec::new();
    let mut out = Vec::with_capacity(order.len());
    for &i in &order {
        let t = &src.tensors[i];
        let cols = t.shape[0];
        let cat = mix::Category::of(&t.name);
        let ty = if !mix::allows_quantization(&t.name, &t.shape, !opts.leave_output) {
            t.ty
        } else if let (Some(e), mix::Category::TokenEmbd) = (opts.token_embd_type, cat) {
            e
        } else if let (Some(o), mix::Category::Output) = (opts.output_type, cat) {
            o
        } else if !is_block_type(base) {
            base
        } else {
            let chosen = if opts.pure {
                base
            } else {
                let mut c = state.choose(&t.name, cols);
                // A tied embedding under `--output-tensor-type` takes the output's type.
                if state.tied && cat == mix::Category::TokenEmbd {
                    c = opts.output_type.unwrap_or(c);
                }
                c
            };
            let ty = mix::fallback(chosen, cols).ok_or_else(|| Error::GgufTensor {
                tensor: t.name.clone(),
                reason: format!("rows of {cols} are not whole {chosen} blocks, and {chosen} has no fallback type"),
            })?;
            if ty != chosen {
                fallbacks.push((t.name.clone(), ty));
            }
            ty
        };
        if ty != t.ty && mix::needs_imatrix(&t.name, ty, ft) {
            return Err(Error::Model(format!(
                "{} would be {ty}, which llama-quantize writes only with an importance matrix (--imatrix); cera quantize has none: pick a type of 3 bits or more",
                t.name
            )));
        }
        if ty != t.ty && !ty.can_quantize() {
            return Err(Error::QuantUnsupported {
                ty: ty.name(),
                op: "quantization (the reference quantizer for this type is not written yet)",
            });
        }
        out.push(Planned { src: i, ty });
    }
    Ok((out, fallbacks))
}

/// Quantizes `values` (rows of `cols`) to `ty`, rows split across `threads` threads. Every
/// row is quantized alone, so the split does not change a byte.
fn quantize_rows(
    ty: GgmlType,
    values: &[f32],
    cols: usize,
    threads: usize,
    mse: bool,
) -> Result<Vec<u8>> {
    let quantize = move |v: &[f32], o: &mut [u8]| -> Result<()> {
        if mse && quant::mse::quantize(ty, v, o) {
            Ok(())
        } else {
            quant::quantize(ty, v, o)
        }
    };
    let row_bytes = ty.bytes_for(cols as u64).expect("checked by the plan") as usize;
    let rows = values.len() / cols;
    let mut out = vec![0u8; rows * row_bytes];
    let threads = threads.clamp(1, rows.max(1));
    if threads == 1 || values.len() < 1 << 16 {
        quantize(values, &mut out)?;
        return Ok(out);
    }
    let per = rows.div_ceil(threads);
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = values
            .chunks(per * cols)
            .zip(out.chunks_mut(per * row_bytes))
            .map(|(v, o)| s.spawn(move || quantize(v, o)))
            .collect();
        for h in handles {
            h.join().expect("a quantizing thread panicked")?;
        }
        Ok(())
    })?;
    Ok(out)
}

/// Writes `input` in file type `target` to `output` (atomically).
pub fn requantize(
    input: &Path,
    output: &Path,
    target: &str,
    opts: &QuantizeOptions,
) -> Result<RequantReport> {
    let ft = parse_file_type(target)?;
    let src = GgufFile::open(input)?;
    let (plan, fallbacks) = plan(&src, ft, opts)?;
    let mut rep = RequantReport {
        file_type: Some(ft),
        fallbacks,
        bytes_in: src.file_size(),
        ..Default::default()
    };
    for p in &plan {
        let t = &src.tensors[p.src];
        if p.ty == t.ty {
            continue;
        }
        if is_block_type(t.ty) {
            if !opts.allow_requantize {
                return Err(Error::Model(format!(
                    "{} is already {}: requantizing loses precision twice, so it needs --allow-requantize (or start from an F32/F16/BF16 file)",
                    t.name, t.ty
                )));
            }
            rep.requantized += 1;
        }
        if !t.ty.can_dequantize() {
            return Err(Error::QuantUnsupported {
                ty: t.ty.name(),
                op: "dequantization (to quantize this tensor again)",
            });
        }
    }
    // llama-quantize's metadata: the input's, without the split keys, then the two keys it
    // sets (moved to the end, as gguf's setters do).
    const SET: [&str; 2] = ["general.quantization_version", "general.file_type"];
    let mut meta: Vec<(String, Value)> = src
        .metadata
        .iter()
        .filter(|(k, _)| !SET.contains(&k.as_str()) && !k.starts_with("split."))
        .cloned()
        .collect();
    meta.push((SET[0].into(), Value::U32(2)));
    meta.push((SET[1].into(), Value::U32(ft.id())));
    let specs: Vec<TensorSpec> = plan
        .iter()
        .map(|p| {
            let t = &src.tensors[p.src];
            TensorSpec {
                name: t.name.clone(),
                ty: p.ty,
                shape: t.shape.clone(),
            }
        })
        .collect();
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let mut counts: Vec<(GgmlType, usize)> = Vec::new();
    rep.bytes_out = write_streaming(output, &meta, &specs, |i| {
        let p = &plan[i];
        let t = &src.tensors[p.src];
        let data = src.tensor_data(t);
        match counts.iter_mut().find(|c| c.0 == p.ty) {
            Some(c) => c.1 += 1,
            None => counts.push((p.ty, 1)),
        }
        if p.ty == t.ty {
            rep.copied += 1;
            return Ok(data.to_vec());
        }
        let n = t.n_elements() as usize;
        rep.peak_tensor_bytes = rep.peak_tensor_bytes.max(4 * n as u64);
        let values = quant::dequantize_to_vec(t.ty, data, n)?;
        rep.quantized += 1;
        let mse = opts.strategy == QuantStrategy::FastMse && quant::mse::supports(p.ty);
        rep.mse_tensors += mse as usize;
        quantize_rows(p.ty, &values, t.shape[0] as usize, threads, mse)
    })?;
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    rep.types = counts;
    Ok(rep)
}

/// A block-quantized type (not F32, F16 or BF16).
fn is_block_type(t: GgmlType) -> bool {
    !matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}
