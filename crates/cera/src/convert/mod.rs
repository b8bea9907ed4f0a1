//! Hugging Face checkpoints (safetensors + config + tokenizer) to GGUF, as llama.cpp's
//! `convert_hf_to_gguf.py` writes them (`cera convert`).
//!
//! The float output types (`f32`, `f16`, `bf16`, `q8_0`, `auto`) are the converter's own: the
//! same metadata keys, values and order, tensor names, order, types and bytes. Other types
//! (`q4_k_m`, `q4_0`, ...) are the converter's lossless output (`auto`) quantized by
//! [`crate::gguf::requantize`], i.e. what `convert_hf_to_gguf.py` followed by `llama-quantize`
//! gives. Tensors are read, rewritten and written one at a time: memory holds one tensor.
//!
//! ```text
//! checkpoint.rs  the folder: config.json, safetensors shards in the converter's order
//! arch.rs        per architecture: names, hyperparameter keys, tensor rewrites
//! vocab.rs       tokenizer.json → tokenizer.ggml.* (pre-tokenizer by fingerprint)
//! meta.rs        general.* (name heuristics, size label, sampling defaults)
//! ```

mod arch;
mod checkpoint;
mod ct2;
mod meta;
mod params;
mod pre_hashes;
mod sentencepiece;
mod vocab;
mod whisper;

use std::path::{Path, PathBuf};

use checkpoint::{Checkpoint, bad};

use crate::error::{Error, Result};
use crate::gguf::requantize::{QuantizeOptions, parse_file_type, requantize};
use crate::gguf::{TensorSpec, Value, write_streaming};
use crate::quant::{self, GgmlType};
use crate::safetensors::Dtype;

/// Metadata being built, in insertion order; setting a key again replaces its value in place
/// (gguf-py's writer keeps a dict).
#[derive(Default)]
pub(crate) struct Kv(pub Vec<(String, Value)>);

impl Kv {
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = value,
            None => self.0.push((key, value)),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// `--outtype`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutType {
    /// The checkpoint's own float type (bf16 or f16; f16 when it has neither).
    Auto,
    F32,
    F16,
    Bf16,
    Q8_0,
    /// A llama-quantize file type (`Q4_K_M`, `Q4_0`, ...), reached through `Auto`.
    Quantized(String),
}

impl OutType {
    pub fn parse(name: &str) -> Result<OutType> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "auto" => OutType::Auto,
            "f32" => OutType::F32,
            "f16" => OutType::F16,
            "bf16" => OutType::Bf16,
            "q8_0" => OutType::Q8_0,
            _ => {
                parse_file_type(name)?;
                OutType::Quantized(name.to_owned())
            }
        })
    }
}

#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConvertOptions {
    pub outtype: OutType,
    /// `general.name` instead of the one derived from the folder name.
    pub model_name: Option<String>,
    /// The Hub id (`org/repo`) the checkpoint came from: names are read from it before the
    /// folder's (a Hub snapshot folder is named by its commit).
    pub model_id: Option<String>,
    /// For quantized output types.
    pub quantize: QuantizeOptions,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            outtype: OutType::F16,
            model_name: None,
            model_id: None,
            quantize: QuantizeOptions::default(),
        }
    }
}

#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ConvertReport {
    /// The file written (the default name when the output was a folder).
    pub output: PathBuf,
    pub architecture: String,
    /// `tokenizer.ggml.pre`.
    pub pre_tokenizer: String,
    pub n_tokens: usize,
    pub n_tensors: usize,
    pub n_params: u64,
    /// The output type's name (`F16`, `BF16`, `Q4_K_M`, ...).
    pub file_type: String,
    pub bytes_out: u64,
    /// The most bytes of tensor values held at once.
    pub peak_tensor_bytes: u64,
}

/// Where a written tensor's values come from.
enum Source {
    /// One checkpoint tensor (its index).
    One(usize),
    /// Checkpoint tensors stacked along a new first dimension (MoE experts, in expert order).
    Stack(Vec<usize>),
    /// Values computed from the config (RoPE factors).
    Values(Vec<f32>),
}

struct Planned {
    src: Source,
    hf_name: String,
    spec: TensorSpec,
}

/// Converts the checkpoint folder `input` to the GGUF `output` (a file, or a folder to name
/// the file in as the converter does).
pub fn convert(input: &Path, output: &Path, opts: &ConvertOptions) -> Result<ConvertReport> {
    if whisper::is_ct2_whisper(input) {
        return whisper::convert_ct2(input, output, opts);
    }
    let ck = Checkpoint::open(input)?;
    if whisper::is_hf_whisper(&ck) {
        return whisper::convert_hf(&ck, output, opts);
    }
    let hf_arch = ck
        .config
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(|a| a.as_str())
        .ok_or_else(|| bad(input, "config.json has no architectures[0]"))?
        .to_owned();
    let arch = arch::lookup(&hf_arch).ok_or_else(|| {
        bad(
            input,
            format!(
                "architecture {hf_arch} is not one cera converts (supported: {})",
                arch::supported().join(", ")
            ),
        )
    })?;
    if let OutType::Quantized(target) = &opts.outtype {
        return convert_quantized(&ck, arch, output, target, opts);
    }
    convert_float(&ck, arch, output, opts)
}

/// Through a lossless temporary file, then llama-quantize's rules.
fn convert_quantized(
    ck: &Checkpoint,
    arch: arch::Arch,
    output: &Path,
    target: &str,
    opts: &ConvertOptions,
) -> Result<ConvertReport> {
    let ft = parse_file_type(target)?;
    let dir = if output.is_dir() {
        output.to_path_buf()
    } else {
        output
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    };
    let tmp = dir.join(format!(".cera-convert-{}.gguf", std::process::id()));
    let float_opts = ConvertOptions {
        outtype: OutType::Auto,
        ..opts.clone()
    };
    let mut rep = convert_float(ck, arch, &tmp, &float_opts)?;
    let out = if output.is_dir() {
        let g = crate::gguf::GgufFile::open(&tmp)?;
        let kv = Kv(g.metadata.clone());
        output.join(meta::default_file_name(&kv, ft.name()))
    } else {
        output.to_path_buf()
    };
    let q = requantize(&tmp, &out, ft.name(), &opts.quantize);
    let _ = std::fs::remove_file(&tmp);
    let q = q?;
    rep.output = out;
    rep.file_type = ft.name().to_owned();
    rep.bytes_out = q.bytes_out;
    rep.peak_tensor_bytes = rep.peak_tensor_bytes.max(q.peak_tensor_bytes);
    Ok(rep)
}

fn convert_float(
    ck: &Checkpoint,
    arch: arch::Arch,
    output: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport> {
    let out_ty = match &opts.outtype {
        OutType::F32 => GgmlType::F32,
        OutType::F16 => GgmlType::F16,
        OutType::Bf16 => GgmlType::BF16,
        OutType::Q8_0 => GgmlType::Q8_0,
        OutType::Auto | OutType::Quantized(_) => {
            // the first matrix's dtype decides (the config's torch_dtype can lie)
            let first = (0..ck.tensors.len()).find(|&i| ck.shape(i).len() >= 2);
            match first.map(|i| ck.dtype(i)) {
                Some(Dtype::BF16) => GgmlType::BF16,
                _ => GgmlType::F16,
            }
        }
    };
    let (file_type, type_name) = match out_ty {
        GgmlType::F32 => (0, "F32"),
        GgmlType::F16 => (1, "F16"),
        GgmlType::Q8_0 => (7, "Q8_0"),
        _ => (32, "BF16"),
    };

    // the writer starts with the architecture; keys set while tensors are prepared follow it
    let mut kv = Kv::default();
    kv.set("general.architecture", arch.gguf);

    // --- tensors: names, types, shapes
    let mut plan = Vec::new();
    if crate::models::hf::permutes_qk(arch.family)
        && let Some(f) = params::llama3_rope_factors(ck)?
    {
        plan.push(Planned {
            hf_name: "rope_freqs".into(),
            spec: TensorSpec {
                name: "rope_freqs.weight".into(),
                ty: GgmlType::F32,
                shape: vec![f.len() as u64],
            },
            src: Source::Values(f),
        });
    }
    // Phi-3's long-context factors go first too (their attention-factor key with them)
    if let Some((long, short)) = arch.phi3_rope_factors(ck, &mut kv)? {
        for (name, f) in [("rope_factors_long", long), ("rope_factors_short", short)] {
            plan.push(Planned {
                hf_name: name.into(),
                spec: TensorSpec {
                    name: format!("{name}.weight"),
                    ty: GgmlType::F32,
                    shape: vec![f.len() as u64],
                },
                src: Source::Values(f),
            });
        }
    }
    // MoE experts per merged name: (expert index, tensor index)
    let mut experts: std::collections::BTreeMap<String, Vec<(usize, usize)>> = Default::default();
    let n_experts = ck
        .hparam_u64(&["num_local_experts", "num_experts"])
        .unwrap_or(0) as usize;
    for (i, (name, _)) in ck.tensors.iter().enumerate() {
        if arch.drops(name) {
            continue;
        }
        let map = |name: &str| {
            arch.map_name(name).ok_or_else(|| {
                bad(
                    &ck.dir,
                    format!(
                        "cannot map tensor '{name}' to a GGUF name for {}",
                        arch.gguf
                    ),
                )
            })
        };
        if let Some((merged, x)) = arch.expert_part(name) {
            // buffered until the layer has every expert's three matrices, as the converter
            // does; then written gate, down, up (w1, w2, w3)
            let layer = merged
                .rsplit_once('.')
                .map_or(merged.clone(), |(l, _)| l.to_owned());
            experts.entry(merged).or_default().push((x, i));
            let prefix = format!("{layer}.");
            let have: usize = experts
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix))
                .map(|(_, v)| v.len())
                .sum();
            if have < n_experts * 3 {
                continue;
            }
            for w in ["w1", "w2", "w3"] {
                let key = format!("{layer}.{w}");
                let mut parts = experts.remove(&key).unwrap_or_default();
                parts.sort();
                if parts.len() != n_experts || parts.iter().enumerate().any(|(k, p)| p.0 != k) {
                    return Err(bad(
                        &ck.dir,
                        format!("{key}: experts missing (of {n_experts})"),
                    ));
                }
                let first = parts[0].1;
                let idx: Vec<usize> = parts.into_iter().map(|p| p.1).collect();
                let hf_name = format!("{key}.weight");
                let gguf_name = map(&hf_name)?;
                let mut shape: Vec<u64> = ck.shape(first).iter().rev().map(|&d| d as u64).collect();
                shape.push(idx.len() as u64);
                let torch: Vec<usize> = shape.iter().rev().map(|&d| d as usize).collect();
                let ty = tensor_type(&gguf_name, &torch, out_ty);
                plan.push(Planned {
                    src: Source::Stack(idx),
                    hf_name,
                    spec: TensorSpec {
                        name: gguf_name,
                        ty,
                        shape,
                    },
                });
            }
            continue;
        }
        let gguf_name = map(name)?;
        let mut torch: Vec<usize> = ck.shape(i).to_vec();
        if arch.squeezes(name) && torch.len() > 2 && torch[1] == 1 {
            torch.remove(1);
        }
        if let Some(rows) = arch.embedding_rows(ck, name)
            && torch.first().is_some_and(|&r| r > rows)
        {
            torch[0] = rows;
        }
        let ty = tensor_type(&gguf_name, &torch, out_ty);
        plan.push(Planned {
            src: Source::One(i),
            hf_name: name.clone(),
            spec: TensorSpec {
                name: gguf_name,
                ty,
                shape: torch.iter().rev().map(|&d| d as u64).collect(),
            },
        });
    }
    if let Some(k) = experts.keys().next() {
        return Err(bad(
            &ck.dir,
            format!("{k}: experts missing (of {n_experts})"),
        ));
    }
    let mut params = meta::ParamCount::default();
    for p in &plan {
        let torch: Vec<u64> = p.spec.shape.iter().rev().copied().collect();
        params.add(&p.spec.name, &torch);
    }

    // --- metadata, in the converter's order
    kv.set("general.type", "model");
    let dir_name = ck
        .dir
        .canonicalize()
        .unwrap_or_else(|_| ck.dir.clone())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let gen_config = checkpoint::read_json(&ck.dir, "generation_config.json").unwrap_or(None);
    meta::general(
        &mut kv,
        &dir_name,
        &ck.config,
        gen_config.as_ref(),
        &params,
        opts.model_id.as_deref(),
        opts.model_name.as_deref(),
    );
    arch.params(ck, &mut kv, file_type)?;
    kv.set("general.quantization_version", Value::U32(2));
    let pre = arch.vocab(ck, &mut kv)?;
    let n_tokens = match kv.get("tokenizer.ggml.tokens") {
        Some(Value::Array(crate::gguf::Array::String(t))) => t.len(),
        _ => 0,
    };

    let output = if output.is_dir() {
        output.join(meta::default_file_name(&kv, type_name))
    } else {
        output.to_path_buf()
    };
    let specs: Vec<TensorSpec> = plan.iter().map(|p| p.spec.clone()).collect();
    let mut peak = 0u64;
    let bytes_out = write_streaming(&output, &kv.0, &specs, |i| {
        let p = &plan[i];
        let values = match &p.src {
            Source::One(src) => {
                let mut v = ck.values(*src)?;
                let n: u64 = p.spec.shape.iter().product();
                v.truncate(n as usize); // Gemma 3's embedding rows past the vocabulary
                arch.transform(ck, &p.hf_name, ck.shape(*src), &mut v)?;
                v
            }
            Source::Stack(parts) => {
                let mut v = Vec::new();
                for &src in parts {
                    v.extend(ck.values(src)?);
                }
                v
            }
            Source::Values(v) => v.clone(),
        };
        peak = peak.max(4 * values.len() as u64);
        quant::quantize_to_vec(p.spec.ty, &values).map_err(|e| Error::GgufTensor {
            tensor: p.spec.name.clone(),
            reason: e.to_string(),
        })
    })?;
    Ok(ConvertReport {
        output,
        architecture: arch.gguf.to_owned(),
        pre_tokenizer: pre,
        n_tokens,
        n_tensors: plan.len(),
        n_params: params.total,
        file_type: type_name.to_owned(),
        bytes_out,
        peak_tensor_bytes: peak,
    })
}

/// The converter's per-tensor type: vectors, norms, biases and a few small kinds stay F32;
/// Q8_0 falls back to F16 where rows are not whole blocks.
fn tensor_type(name: &str, torch_shape: &[usize], out: GgmlType) -> GgmlType {
    const F32_KINDS: &[&str] = &[
        ".ffn_gate_inp.",
        ".ffn_gate_inp_shexp.",
        "position_embd.",
        "token_types.",
        ".ssm_conv1d.",
        ".shortconv.conv.",
    ];
    let n_dims = torch_shape.len();
    if n_dims <= 1
        || name.ends_with("_norm.weight")
        || !name.ends_with(".weight")
        || F32_KINDS
            .iter()
            .any(|k| name.contains(k) || name.starts_with(&k[1..]))
    {
        return GgmlType::F32;
    }
    if out == GgmlType::Q8_0 && torch_shape.last().is_some_and(|&r| r % 32 != 0) {
        return GgmlType::F16;
    }
    out
}
