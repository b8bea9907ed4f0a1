//! OpenAI Whisper to GGUF, from CTranslate2 (faster-whisper's folder: `model.bin`,
//! `config.json`, `tokenizer.json`, `vocabulary.txt`; `ct2.rs`) or from Hugging Face's
//! `openai/whisper-*` layout (`model.safetensors`, `config.json`, `generation_config.json`,
//! `tokenizer.json`; `hf.rs`). Both give the same file for the same weights.
//!
//! The GGUF (`general.architecture` `whisper`; there is no llama.cpp scheme for it) keeps
//! whisper.cpp's tensor names, which are OpenAI's checkpoint names (`encoder.conv1.weight`,
//! `encoder.blocks.N.attn.query.weight`, `decoder.blocks.N.cross_attn.key.weight`,
//! `decoder.token_embedding.weight`…), so a file converts to whisper.cpp's own format name for
//! name. Hyperparameters under `whisper.encoder.*`, `whisper.decoder.*` (context length,
//! embedding length, head count, block count) and `whisper.audio.num_mel_bins` (80, or 128 for
//! large-v3); the decoding tables as `whisper.suppress_tokens`, `whisper.suppress_tokens_begin`,
//! `whisper.lang_ids`, `whisper.alignment_heads`; the byte-level BPE vocabulary in
//! `tokenizer.ggml.*` (`gpt2`, pre-tokenizer `gpt-2`), every id including the timestamp tokens.
//! Whisper's keys have no bias: a source that stores one must store zeros (checked; a non-zero
//! one is an error, the model would be misread).

mod ct2;
mod hf;

use std::path::Path;

pub(super) use ct2::{convert as convert_ct2, is_ct2_whisper};
pub(super) use hf::{convert as convert_hf, is_hf_whisper};

use super::checkpoint::bad;
use super::{ConvertOptions, ConvertReport, Kv, OutType};
use crate::error::Result;
use crate::gguf::{Array, TensorSpec, Value, write_streaming};
use crate::quant::{self, GgmlType};

/// The hyperparameters of one side (encoder or decoder).
struct Side {
    n_ctx: usize,
    n_embd: usize,
    n_head: usize,
    n_layer: usize,
}

/// The model's shape, as read from either source.
struct Dims {
    enc: Side,
    dec: Side,
    n_mels: usize,
    n_vocab: usize,
}

/// What the GGUF's metadata holds besides the shape: the decoding tables and the vocabulary.
struct Tables {
    suppress: Vec<i32>,
    suppress_begin: Vec<i32>,
    lang_ids: Vec<i32>,
    /// `(layer, head)` pairs, flattened.
    alignment_heads: Vec<i32>,
    /// Every id's text, timestamps included.
    tokens: Vec<String>,
    merges: Vec<String>,
}

/// `--outtype` for Whisper: the float types and q8_0 (other quantizations go through
/// `cera quantize`, which keeps the convolutions as whisper.cpp does).
fn out_type(dir: &Path, opts: &ConvertOptions) -> Result<GgmlType> {
    Ok(match &opts.outtype {
        OutType::F32 => GgmlType::F32,
        OutType::F16 | OutType::Auto => GgmlType::F16,
        OutType::Bf16 => GgmlType::BF16,
        OutType::Q8_0 => GgmlType::Q8_0,
        OutType::Quantized(t) => {
            return Err(bad(
                dir,
                format!("--outtype {t}: convert Whisper to f16, then `cera quantize` the GGUF"),
            ));
        }
    })
}

/// The tensors in whisper.cpp's order (the encoder's, then the decoder's) with their PyTorch
/// (row-major) shapes.
fn tensor_names(d: &Dims) -> Vec<(String, Vec<usize>)> {
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    let mut add = |name: String, shape: Vec<usize>| out.push((name, shape));
    let e = d.enc.n_embd;
    add("encoder.positional_embedding".into(), vec![d.enc.n_ctx, e]);
    for (i, k_in) in [(1, d.n_mels), (2, e)] {
        add(format!("encoder.conv{i}.weight"), vec![e, k_in, 3]);
        add(format!("encoder.conv{i}.bias"), vec![e]);
    }
    for l in 0..d.enc.n_layer {
        block(&mut add, &format!("encoder.blocks.{l}"), e, false);
    }
    add("encoder.ln_post.weight".into(), vec![e]);
    add("encoder.ln_post.bias".into(), vec![e]);
    let e = d.dec.n_embd;
    add("decoder.positional_embedding".into(), vec![d.dec.n_ctx, e]);
    add("decoder.token_embedding.weight".into(), vec![d.n_vocab, e]);
    for l in 0..d.dec.n_layer {
        block(&mut add, &format!("decoder.blocks.{l}"), e, true);
    }
    add("decoder.ln.weight".into(), vec![e]);
    add("decoder.ln.bias".into(), vec![e]);
    out
}

/// One block's tensors: self-attention (the key without a bias), cross-attention for the
/// decoder, the MLP.
fn block(add: &mut impl FnMut(String, Vec<usize>), g: &str, d: usize, cross: bool) {
    let mut attention = |a: &str| {
        add(format!("{g}.{a}_ln.weight"), vec![d]);
        add(format!("{g}.{a}_ln.bias"), vec![d]);
        for p in ["query", "key", "value", "out"] {
            add(format!("{g}.{a}.{p}.weight"), vec![d, d]);
            if p != "key" {
                add(format!("{g}.{a}.{p}.bias"), vec![d]);
            }
        }
    };
    attention("attn");
    if cross {
        attention("cross_attn");
    }
    add(format!("{g}.mlp_ln.weight"), vec![d]);
    add(format!("{g}.mlp_ln.bias"), vec![d]);
    add(format!("{g}.mlp.0.weight"), vec![4 * d, d]);
    add(format!("{g}.mlp.0.bias"), vec![4 * d]);
    add(format!("{g}.mlp.2.weight"), vec![d, 4 * d]);
    add(format!("{g}.mlp.2.bias"), vec![d]);
}

/// A tensor's GGUF spec: matrices in the output type (f16 where a row does not fit its
/// blocks), the convolutions f16 unless the output is f32, the rest f32 (positions too, as
/// whisper.cpp's converter keeps them).
fn spec(name: &str, shape: &[usize], out: GgmlType) -> TensorSpec {
    let ty = if shape.len() == 2 && !name.contains("positional_embedding") {
        if out
            .block_elems()
            .is_some_and(|b| !shape[1].is_multiple_of(b))
        {
            GgmlType::F16
        } else {
            out
        }
    } else if name.contains("conv") && shape.len() == 3 && out != GgmlType::F32 {
        GgmlType::F16
    } else {
        GgmlType::F32
    };
    TensorSpec {
        name: name.to_owned(),
        ty,
        shape: shape.iter().rev().map(|&d| d as u64).collect(),
    }
}

/// Checks a side's shape (heads divide the width).
fn check_side(dir: &Path, what: &str, s: &Side) -> Result<()> {
    if s.n_head == 0 || !s.n_embd.is_multiple_of(s.n_head) || s.n_ctx == 0 || s.n_layer == 0 {
        return Err(bad(
            dir,
            format!(
                "{what}: {} heads for a width of {}, {} positions, {} layers",
                s.n_head, s.n_embd, s.n_ctx, s.n_layer
            ),
        ));
    }
    Ok(())
}

/// Writes the GGUF: metadata from `dims` and `tables`, each tensor's f32 values from `load`
/// (called in order, one tensor held at a time).
fn write(
    dir: &Path,
    output: &Path,
    opts: &ConvertOptions,
    out_ty: GgmlType,
    dims: &Dims,
    tables: Tables,
    mut load: impl FnMut(&str) -> Result<Vec<f32>>,
) -> Result<ConvertReport> {
    let mut kv = Kv::default();
    kv.set("general.architecture", "whisper");
    kv.set("general.type", "model");
    // the name given, else the Hub id's (a Hub snapshot folder is named by its commit), else
    // the folder's
    let name = opts.model_name.clone().unwrap_or_else(|| {
        opts.model_id
            .as_deref()
            .and_then(|id| id.rsplit('/').next())
            .map(str::to_owned)
            .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "whisper".into())
    });
    kv.set("general.name", name.as_str());
    let file_type = match out_ty {
        GgmlType::F32 => 0u32,
        GgmlType::F16 => 1,
        GgmlType::Q8_0 => 7,
        _ => 32,
    };
    kv.set("general.file_type", file_type);
    for (s, side) in [("encoder", &dims.enc), ("decoder", &dims.dec)] {
        kv.set(format!("whisper.{s}.context_length"), side.n_ctx as u32);
        kv.set(format!("whisper.{s}.embedding_length"), side.n_embd as u32);
        kv.set(
            format!("whisper.{s}.attention.head_count"),
            side.n_head as u32,
        );
        kv.set(format!("whisper.{s}.block_count"), side.n_layer as u32);
    }
    kv.set("whisper.audio.num_mel_bins", dims.n_mels as u32);
    let i32s = |v: Vec<i32>| Value::Array(Array::I32(v));
    kv.set("whisper.suppress_tokens", i32s(tables.suppress));
    kv.set("whisper.suppress_tokens_begin", i32s(tables.suppress_begin));
    kv.set("whisper.lang_ids", i32s(tables.lang_ids));
    kv.set("whisper.alignment_heads", i32s(tables.alignment_heads));
    vocabulary(dir, dims.n_vocab, tables.tokens, tables.merges, &mut kv)?;

    let specs: Vec<TensorSpec> = tensor_names(dims)
        .iter()
        .map(|(n, s)| spec(n, s, out_ty))
        .collect();
    let output = if output.is_dir() {
        output.join(format!(
            "{name}-{}.gguf",
            out_ty.name().to_ascii_uppercase()
        ))
    } else {
        output.to_path_buf()
    };
    let mut peak = 0u64;
    let bytes_out = write_streaming(&output, &kv.0, &specs, |i| {
        let s = &specs[i];
        let x = load(&s.name)?;
        let want = s.shape.iter().product::<u64>() as usize;
        if x.len() != want {
            // (the sources check shapes first; this guards the plumbing)
            return Err(bad(
                dir,
                format!("{}: {} values, {want} expected", s.name, x.len()),
            ));
        }
        peak = peak.max((x.len() * 4) as u64);
        quant::quantize_to_vec(s.ty, &x)
    })?;
    Ok(ConvertReport {
        output,
        architecture: "whisper".into(),
        pre_tokenizer: "gpt-2".into(),
        n_tokens: dims.n_vocab,
        n_tensors: specs.len(),
        n_params: specs.iter().map(|s| s.shape.iter().product::<u64>()).sum(),
        file_type: out_ty.name().to_ascii_uppercase(),
        bytes_out,
        peak_tensor_bytes: peak,
    })
}

/// `tokenizer.ggml.*`: the byte-level BPE with GPT-2's pre-tokenizer; ids from
/// `<|endoftext|>` on are control tokens.
fn vocabulary(
    dir: &Path,
    n_vocab: usize,
    tokens: Vec<String>,
    merges: Vec<String>,
    kv: &mut Kv,
) -> Result<()> {
    if tokens.len() != n_vocab {
        return Err(bad(
            dir,
            format!(
                "the vocabulary has {} tokens, the embeddings {n_vocab}",
                tokens.len()
            ),
        ));
    }
    let find = |t: &str| {
        tokens
            .iter()
            .position(|x| x == t)
            .ok_or_else(|| bad(dir, format!("the vocabulary has no {t}")))
    };
    let eot = find("<|endoftext|>")?;
    let sot = find("<|startoftranscript|>")?;
    if merges.is_empty() {
        return Err(bad(dir, "tokenizer.json has no merges"));
    }
    let types: Vec<i32> = (0..n_vocab).map(|i| if i >= eot { 3 } else { 1 }).collect();
    kv.set("tokenizer.ggml.model", "gpt2");
    kv.set("tokenizer.ggml.pre", "gpt-2");
    kv.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    kv.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    kv.set("tokenizer.ggml.merges", Value::Array(Array::String(merges)));
    kv.set("tokenizer.ggml.bos_token_id", sot as u32);
    kv.set("tokenizer.ggml.eos_token_id", eot as u32);
    kv.set("tokenizer.ggml.add_bos_token", false);
    Ok(())
}

/// A JSON array of integers (a token list), empty when absent.
fn json_ints(v: Option<&serde_json::Value>) -> Vec<i32> {
    v.and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_i64)
                .map(|v| v as i32)
                .collect()
        })
        .unwrap_or_default()
}

/// A JSON array of `[layer, head]` pairs (the alignment heads), flattened.
fn json_pairs(v: Option<&serde_json::Value>) -> Vec<i32> {
    v.and_then(serde_json::Value::as_array)
        .map(|a| a.iter().flat_map(|p| json_ints(Some(p))).collect())
        .unwrap_or_default()
}

/// `tokenizer.json`'s merges (`model.merges`).
fn merges(dir: &Path) -> Result<Vec<String>> {
    let tok = super::checkpoint::read_json(dir, "tokenizer.json")?
        .ok_or_else(|| bad(dir, "no tokenizer.json (its merges)"))?;
    super::vocab::merges(dir, tok.get("model").unwrap_or(&serde_json::Value::Null))
}
