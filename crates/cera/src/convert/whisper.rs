//! OpenAI Whisper from CTranslate2 (faster-whisper's folder: `model.bin`, `config.json`,
//! `tokenizer.json`, `vocabulary.txt`) to GGUF.
//!
//! The GGUF (`general.architecture` `whisper`; there is no llama.cpp scheme for it) keeps
//! whisper.cpp's tensor names, which are OpenAI's checkpoint names (`encoder.conv1.weight`,
//! `encoder.blocks.N.attn.query.weight`, `decoder.blocks.N.cross_attn.key.weight`,
//! `decoder.token_embedding.weight`…), so a file converts to whisper.cpp's own format name for
//! name. Hyperparameters under `whisper.encoder.*`, `whisper.decoder.*` (context length,
//! embedding length, head count, block count) and `whisper.audio.num_mel_bins`; the decoding
//! tables of CTranslate2's `config.json` as `whisper.suppress_tokens`,
//! `whisper.suppress_tokens_begin`, `whisper.lang_ids`, `whisper.alignment_heads`; the
//! byte-level BPE vocabulary in `tokenizer.ggml.*` (`gpt2`, pre-tokenizer `gpt-2`), every id of
//! `vocabulary.txt` including the timestamp tokens.
//!
//! CTranslate2 fuses projections that Whisper keeps apart: self-attention's query, key and
//! value (`linear_0`, `[3d, d]`) and cross-attention's key and value (`linear_1`, `[2d, d]`);
//! they are split here. Whisper's keys have no bias: CTranslate2 stores zeros for them, which
//! are checked and dropped (a non-zero one is an error: the model would be misread).

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::checkpoint::{bad, read_json};
use super::ct2::{Ct2Model, Var};
use super::{ConvertOptions, ConvertReport, Kv, OutType};
use crate::error::Result;
use crate::gguf::{Array, TensorSpec, Value, write_streaming};
use crate::quant::{self, GgmlType};

/// Whether `dir` holds a CTranslate2 Whisper model (its `model.bin` names the spec).
pub(super) fn is_ct2_whisper(dir: &Path) -> bool {
    let Ok(mut f) = std::fs::File::open(dir.join("model.bin")) else {
        return false;
    };
    let mut head = [0u8; 32];
    let n = std::io::Read::read(&mut f, &mut head).unwrap_or(0);
    head[..n].windows(11).any(|w| w == b"WhisperSpec")
}

/// Where a GGUF tensor's values come from: rows `rows` of a CTranslate2 variable (all of
/// them when `None`).
struct Planned {
    spec: TensorSpec,
    var: String,
    rows: Option<(usize, usize)>,
}

/// The hyperparameters of one side (encoder or decoder).
struct Side {
    n_ctx: usize,
    n_embd: usize,
    n_head: usize,
    n_layer: usize,
}

pub(super) fn convert(dir: &Path, output: &Path, opts: &ConvertOptions) -> Result<ConvertReport> {
    let m = Ct2Model::open(&dir.join("model.bin"))?;
    if m.spec != "WhisperSpec" {
        return Err(bad(
            dir,
            format!("model.bin holds a {}, not a WhisperSpec", m.spec),
        ));
    }
    let out_ty = match &opts.outtype {
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
    };
    let var = |name: &str| {
        m.var(name)
            .ok_or_else(|| bad(dir, format!("model.bin has no {name}")))
    };
    let dims = |name: &str| -> Result<Vec<usize>> { Ok(var(name)?.dims.clone()) };
    let count = |prefix: &str| {
        (0..)
            .take_while(|i| {
                m.var(&format!("{prefix}/layer_{i}/ffn/linear_0/weight"))
                    .is_some()
            })
            .count()
    };
    let side = |prefix: &str| -> Result<Side> {
        let pos = dims(&format!("{prefix}/position_encodings/encodings"))?;
        let n_head = m.int(&format!("{prefix}/num_heads")).unwrap_or(0) as usize;
        let (n_ctx, n_embd) = match pos[..] {
            [a, b] => (a, b),
            _ => return Err(bad(dir, format!("{prefix}: position encodings of {pos:?}"))),
        };
        if n_head == 0 || !n_embd.is_multiple_of(n_head) {
            return Err(bad(
                dir,
                format!("{prefix}: {n_head} heads for a width of {n_embd}"),
            ));
        }
        Ok(Side {
            n_ctx,
            n_embd,
            n_head,
            n_layer: count(prefix),
        })
    };
    let enc = side("encoder")?;
    let dec = side("decoder")?;
    let conv1 = dims("encoder/conv1/weight")?;
    let n_mels = match conv1[..] {
        [out, mels, 3] if out == enc.n_embd => mels,
        _ => return Err(bad(dir, format!("encoder/conv1/weight is {conv1:?}"))),
    };
    if m.int("decoder/activation").is_some_and(|a| a != 3) || m.int("decoder/pre_norm") == Some(0) {
        // (CTranslate2's Whisper spec is always GELU and pre-norm: anything else is not one)
        return Err(bad(
            dir,
            "a decoder that is not pre-norm GELU is not Whisper's",
        ));
    }

    // --- the tensors, in whisper.cpp's order: the encoder's, then the decoder's
    let mut plan: Vec<Planned> = Vec::new();
    let mut add = |name: String, var: &str, rows: Option<(usize, usize)>, shape: Vec<usize>| {
        // torch order in, ggml order out; matrices in the output type, the rest f32 (the
        // convolutions and position embeddings too, as whisper.cpp's converter keeps them)
        let is_matrix = shape.len() == 2 && !name.contains("positional_embedding");
        let ty = if is_matrix {
            pick_type(out_ty, shape[1])
        } else if name.contains("conv") && shape.len() == 3 && out_ty != GgmlType::F32 {
            GgmlType::F16
        } else {
            GgmlType::F32
        };
        plan.push(Planned {
            spec: TensorSpec {
                name,
                ty,
                shape: shape.iter().rev().map(|&d| d as u64).collect(),
            },
            var: var.to_owned(),
            rows,
        });
    };
    let d = enc.n_embd;
    add(
        "encoder.positional_embedding".into(),
        "encoder/position_encodings/encodings",
        None,
        vec![enc.n_ctx, d],
    );
    for (i, k_in) in [(1, n_mels), (2, d)] {
        add(
            format!("encoder.conv{i}.weight"),
            &format!("encoder/conv{i}/weight"),
            None,
            vec![d, k_in, 3],
        );
        add(
            format!("encoder.conv{i}.bias"),
            &format!("encoder/conv{i}/bias"),
            None,
            vec![d],
        );
    }
    for l in 0..enc.n_layer {
        let (g, c) = (format!("encoder.blocks.{l}"), format!("encoder/layer_{l}"));
        block(&mut add, &g, &c, d, false);
    }
    add(
        "encoder.ln_post.weight".into(),
        "encoder/layer_norm/gamma",
        None,
        vec![d],
    );
    add(
        "encoder.ln_post.bias".into(),
        "encoder/layer_norm/beta",
        None,
        vec![d],
    );
    let d = dec.n_embd;
    let n_vocab = var("decoder/embeddings/weight")?.dims[0];
    add(
        "decoder.positional_embedding".into(),
        "decoder/position_encodings/encodings",
        None,
        vec![dec.n_ctx, d],
    );
    add(
        "decoder.token_embedding.weight".into(),
        "decoder/embeddings/weight",
        None,
        vec![n_vocab, d],
    );
    for l in 0..dec.n_layer {
        let (g, c) = (format!("decoder.blocks.{l}"), format!("decoder/layer_{l}"));
        block(&mut add, &g, &c, d, true);
    }
    add(
        "decoder.ln.weight".into(),
        "decoder/layer_norm/gamma",
        None,
        vec![d],
    );
    add(
        "decoder.ln.bias".into(),
        "decoder/layer_norm/beta",
        None,
        vec![d],
    );

    // every variable of a plan exists, with the rows and width it asks for; the dropped key
    // biases are zeros
    for p in &plan {
        let v = var(&p.var)?;
        let want_rows = p.rows.map_or(v.dims.first().copied().unwrap_or(1), |r| r.1);
        let want: usize = p.spec.shape.iter().product::<u64>() as usize;
        let have = v.numel() / v.dims.first().copied().unwrap_or(1).max(1) * want_rows;
        if have != want || p.rows.is_some_and(|(r0, n)| r0 + n > v.dims[0]) {
            return Err(bad(
                dir,
                format!(
                    "{}: {:?}, where {} needs {:?}",
                    p.var, v.dims, p.spec.name, p.spec.shape
                ),
            ));
        }
    }
    for (prefix, n_layer, d) in [
        ("encoder", enc.n_layer, enc.n_embd),
        ("decoder", dec.n_layer, dec.n_embd),
    ] {
        for l in 0..n_layer {
            zero_rows(
                &m,
                dir,
                &format!("{prefix}/layer_{l}/self_attention/linear_0/bias"),
                d,
                d,
            )?;
            if prefix == "decoder" {
                zero_rows(
                    &m,
                    dir,
                    &format!("decoder/layer_{l}/attention/linear_1/bias"),
                    0,
                    d,
                )?;
            }
        }
    }

    // --- metadata
    let mut kv = Kv::default();
    kv.set("general.architecture", "whisper");
    kv.set("general.type", "model");
    let name = opts.model_name.clone().unwrap_or_else(|| {
        dir.file_name()
            .map_or_else(|| "whisper".into(), |n| n.to_string_lossy().into_owned())
    });
    kv.set("general.name", name.as_str());
    let file_type = match out_ty {
        GgmlType::F32 => 0u32,
        GgmlType::F16 => 1,
        GgmlType::Q8_0 => 7,
        _ => 32,
    };
    kv.set("general.file_type", file_type);
    for (s, side) in [("encoder", &enc), ("decoder", &dec)] {
        kv.set(format!("whisper.{s}.context_length"), side.n_ctx as u32);
        kv.set(format!("whisper.{s}.embedding_length"), side.n_embd as u32);
        kv.set(
            format!("whisper.{s}.attention.head_count"),
            side.n_head as u32,
        );
        kv.set(format!("whisper.{s}.block_count"), side.n_layer as u32);
    }
    kv.set("whisper.audio.num_mel_bins", n_mels as u32);
    let config = read_json(dir, "config.json")?
        .ok_or_else(|| bad(dir, "no config.json (CTranslate2's Whisper config)"))?;
    let ints = |k: &str| -> Vec<i32> {
        config
            .get(k)
            .and_then(Json::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_i64())
                    .map(|v| v as i32)
                    .collect()
            })
            .unwrap_or_default()
    };
    kv.set(
        "whisper.suppress_tokens",
        Value::Array(Array::I32(ints("suppress_ids"))),
    );
    kv.set(
        "whisper.suppress_tokens_begin",
        Value::Array(Array::I32(ints("suppress_ids_begin"))),
    );
    kv.set(
        "whisper.lang_ids",
        Value::Array(Array::I32(ints("lang_ids"))),
    );
    let heads: Vec<i32> = config
        .get("alignment_heads")
        .and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Json::as_array)
                .flat_map(|p| p.iter().filter_map(|v| v.as_i64()).map(|v| v as i32))
                .collect()
        })
        .unwrap_or_default();
    kv.set("whisper.alignment_heads", Value::Array(Array::I32(heads)));
    tokenizer(dir, n_vocab, &mut kv)?;

    // --- the file, a tensor at a time
    let specs: Vec<TensorSpec> = plan.iter().map(|p| p.spec.clone()).collect();
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
        let p = &plan[i];
        let v = m.var(&p.var).expect("checked above");
        let mut x = m.f32s(v)?;
        if let Some((r0, n)) = p.rows {
            let w = v.numel() / v.dims[0];
            x = x[r0 * w..(r0 + n) * w].to_vec();
        }
        peak = peak.max((x.len() * 4) as u64);
        quant::quantize_to_vec(p.spec.ty, &x)
    })?;
    let n_params = plan
        .iter()
        .map(|p| p.spec.shape.iter().product::<u64>())
        .sum();
    Ok(ConvertReport {
        output,
        architecture: "whisper".into(),
        pre_tokenizer: "gpt-2".into(),
        n_tokens: n_vocab,
        n_tensors: plan.len(),
        n_params,
        file_type: out_ty.name().to_ascii_uppercase(),
        bytes_out,
        peak_tensor_bytes: peak,
    })
}

/// One block's tensors: self-attention (query, key, value split from CTranslate2's fused
/// `linear_0`; the key without a bias), cross-attention for the decoder (query, then key and
/// value split from `linear_1`), the MLP.
fn block(
    add: &mut impl FnMut(String, &str, Option<(usize, usize)>, Vec<usize>),
    g: &str,
    c: &str,
    d: usize,
    cross: bool,
) {
    let sa = format!("{c}/self_attention");
    add(
        format!("{g}.attn_ln.weight"),
        &format!("{sa}/layer_norm/gamma"),
        None,
        vec![d],
    );
    add(
        format!("{g}.attn_ln.bias"),
        &format!("{sa}/layer_norm/beta"),
        None,
        vec![d],
    );
    let (qkv_w, qkv_b) = (
        format!("{sa}/linear_0/weight"),
        format!("{sa}/linear_0/bias"),
    );
    add(
        format!("{g}.attn.query.weight"),
        &qkv_w,
        Some((0, d)),
        vec![d, d],
    );
    add(
        format!("{g}.attn.query.bias"),
        &qkv_b,
        Some((0, d)),
        vec![d],
    );
    add(
        format!("{g}.attn.key.weight"),
        &qkv_w,
        Some((d, d)),
        vec![d, d],
    );
    add(
        format!("{g}.attn.value.weight"),
        &qkv_w,
        Some((2 * d, d)),
        vec![d, d],
    );
    add(
        format!("{g}.attn.value.bias"),
        &qkv_b,
        Some((2 * d, d)),
        vec![d],
    );
    add(
        format!("{g}.attn.out.weight"),
        &format!("{sa}/linear_1/weight"),
        None,
        vec![d, d],
    );
    add(
        format!("{g}.attn.out.bias"),
        &format!("{sa}/linear_1/bias"),
        None,
        vec![d],
    );
    if cross {
        let ca = format!("{c}/attention");
        add(
            format!("{g}.cross_attn_ln.weight"),
            &format!("{ca}/layer_norm/gamma"),
            None,
            vec![d],
        );
        add(
            format!("{g}.cross_attn_ln.bias"),
            &format!("{ca}/layer_norm/beta"),
            None,
            vec![d],
        );
        add(
            format!("{g}.cross_attn.query.weight"),
            &format!("{ca}/linear_0/weight"),
            None,
            vec![d, d],
        );
        add(
            format!("{g}.cross_attn.query.bias"),
            &format!("{ca}/linear_0/bias"),
            None,
            vec![d],
        );
        let (kv_w, kv_b) = (
            format!("{ca}/linear_1/weight"),
            format!("{ca}/linear_1/bias"),
        );
        add(
            format!("{g}.cross_attn.key.weight"),
            &kv_w,
            Some((0, d)),
            vec![d, d],
        );
        add(
            format!("{g}.cross_attn.value.weight"),
            &kv_w,
            Some((d, d)),
            vec![d, d],
        );
        add(
            format!("{g}.cross_attn.value.bias"),
            &kv_b,
            Some((d, d)),
            vec![d],
        );
        add(
            format!("{g}.cross_attn.out.weight"),
            &format!("{ca}/linear_2/weight"),
            None,
            vec![d, d],
        );
        add(
            format!("{g}.cross_attn.out.bias"),
            &format!("{ca}/linear_2/bias"),
            None,
            vec![d],
        );
    }
    let ffn = format!("{c}/ffn");
    add(
        format!("{g}.mlp_ln.weight"),
        &format!("{ffn}/layer_norm/gamma"),
        None,
        vec![d],
    );
    add(
        format!("{g}.mlp_ln.bias"),
        &format!("{ffn}/layer_norm/beta"),
        None,
        vec![d],
    );
    let n_ff = 4 * d;
    add(
        format!("{g}.mlp.0.weight"),
        &format!("{ffn}/linear_0/weight"),
        None,
        vec![n_ff, d],
    );
    add(
        format!("{g}.mlp.0.bias"),
        &format!("{ffn}/linear_0/bias"),
        None,
        vec![n_ff],
    );
    add(
        format!("{g}.mlp.2.weight"),
        &format!("{ffn}/linear_1/weight"),
        None,
        vec![d, n_ff],
    );
    add(
        format!("{g}.mlp.2.bias"),
        &format!("{ffn}/linear_1/bias"),
        None,
        vec![d],
    );
}

/// Fails unless values `r0..r0 + n` of the bias `name` are zero (a key's, which Whisper does
/// not have and the GGUF drops).
fn zero_rows(m: &Ct2Model, dir: &Path, name: &str, r0: usize, n: usize) -> Result<()> {
    let v: &Var = m
        .var(name)
        .ok_or_else(|| bad(dir, format!("model.bin has no {name}")))?;
    let x = m.f32s(v)?;
    if x.get(r0..r0 + n)
        .is_none_or(|k| k.iter().any(|&b| b != 0.0))
    {
        return Err(bad(
            dir,
            format!("{name}: the key's part is not zero (Whisper's keys have no bias)"),
        ));
    }
    Ok(())
}

/// The matrices' type: `out` where a row of `cols` fits its blocks, else f16.
fn pick_type(out: GgmlType, cols: usize) -> GgmlType {
    if out.block_elems().is_some_and(|b| !cols.is_multiple_of(b)) {
        GgmlType::F16
    } else {
        out
    }
}

/// `tokenizer.ggml.*` from `vocabulary.txt` (every id, timestamps included) and
/// `tokenizer.json`'s merges: the byte-level BPE with GPT-2's pre-tokenizer; ids from
/// `<|endoftext|>` on are control tokens.
fn tokenizer(dir: &Path, n_vocab: usize, kv: &mut Kv) -> Result<()> {
    let path: PathBuf = dir.join("vocabulary.txt");
    let text = std::fs::read_to_string(&path).map_err(|e| crate::error::Error::io(&path, e))?;
    let tokens: Vec<String> = text.lines().map(str::to_owned).collect();
    if tokens.len() != n_vocab {
        return Err(bad(
            dir,
            format!(
                "vocabulary.txt has {} tokens, the embeddings {n_vocab}",
                tokens.len()
            ),
        ));
    }
    let eot = tokens
        .iter()
        .position(|t| t == "<|endoftext|>")
        .ok_or_else(|| bad(dir, "vocabulary.txt has no <|endoftext|>"))?;
    let sot = tokens
        .iter()
        .position(|t| t == "<|startoftranscript|>")
        .ok_or_else(|| bad(dir, "vocabulary.txt has no <|startoftranscript|>"))?;
    let tok = read_json(dir, "tokenizer.json")?
        .ok_or_else(|| bad(dir, "no tokenizer.json (its merges)"))?;
    let merges = super::vocab::merges(dir, tok.get("model").unwrap_or(&Json::Null))?;
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
