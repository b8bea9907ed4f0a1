//! Whisper from CTranslate2: faster-whisper's folder (`model.bin`, `config.json`,
//! `tokenizer.json`, `vocabulary.txt`).
//!
//! CTranslate2 fuses projections that Whisper keeps apart: self-attention's query, key and
//! value (`linear_0`, `[3d, d]`) and cross-attention's key and value (`linear_1`, `[2d, d]`);
//! they are split here. It stores zeros for the keys' biases, which are checked and dropped.

use std::path::{Path, PathBuf};

use super::{Dims, Side, Tables, check_side, json_ints, json_pairs, out_type, tensor_names, write};
use crate::convert::checkpoint::{bad, read_json};
use crate::convert::ct2::Ct2Model;
use crate::convert::{ConvertOptions, ConvertReport};
use crate::error::Result;

/// Whether `dir` holds a CTranslate2 Whisper model (its `model.bin` names the spec).
pub(in crate::convert) fn is_ct2_whisper(dir: &Path) -> bool {
    let Ok(mut f) = std::fs::File::open(dir.join("model.bin")) else {
        return false;
    };
    let mut head = [0u8; 32];
    let n = std::io::Read::read(&mut f, &mut head).unwrap_or(0);
    head[..n].windows(11).any(|w| w == b"WhisperSpec")
}

/// The CTranslate2 variable a GGUF tensor comes from, and its rows `(first, count)` where it
/// is a slice of a fused one. `d` is the side's width.
fn source(name: &str, d: usize) -> Option<(String, Option<(usize, usize)>)> {
    let norm = |v: &str, p: &str| -> Option<String> {
        Some(match p {
            "weight" => format!("{v}/gamma"),
            "bias" => format!("{v}/beta"),
            _ => return None,
        })
    };
    let whole = |v: String| Some((v, None));
    match name {
        "encoder.positional_embedding" => {
            return whole("encoder/position_encodings/encodings".into());
        }
        "decoder.positional_embedding" => {
            return whole("decoder/position_encodings/encodings".into());
        }
        "decoder.token_embedding.weight" => return whole("decoder/embeddings/weight".into()),
        _ => {}
    }
    if let Some(rest) = name.strip_prefix("encoder.conv") {
        return whole(format!("encoder/conv{}", rest.replace('.', "/")));
    }
    if let Some(p) = name.strip_prefix("encoder.ln_post.") {
        return whole(norm("encoder/layer_norm", p)?);
    }
    if let Some(p) = name.strip_prefix("decoder.ln.") {
        return whole(norm("decoder/layer_norm", p)?);
    }
    // `{side}.blocks.{l}.{module}.{param}`
    let (side, rest) = name.split_once(".blocks.")?;
    let (l, rest) = rest.split_once('.')?;
    let c = format!("{side}/layer_{l}");
    let (module, param) = rest.rsplit_once('.')?;
    let linear = |v: String, rows: Option<(usize, usize)>| Some((format!("{v}/{param}"), rows));
    let (sa, ca, ffn) = (
        format!("{c}/self_attention"),
        format!("{c}/attention"),
        format!("{c}/ffn"),
    );
    match module {
        "attn_ln" => whole(norm(&format!("{sa}/layer_norm"), param)?),
        "cross_attn_ln" => whole(norm(&format!("{ca}/layer_norm"), param)?),
        "mlp_ln" => whole(norm(&format!("{ffn}/layer_norm"), param)?),
        "attn.query" => linear(format!("{sa}/linear_0"), Some((0, d))),
        "attn.key" => linear(format!("{sa}/linear_0"), Some((d, d))),
        "attn.value" => linear(format!("{sa}/linear_0"), Some((2 * d, d))),
        "attn.out" => linear(format!("{sa}/linear_1"), None),
        "cross_attn.query" => linear(format!("{ca}/linear_0"), None),
        "cross_attn.key" => linear(format!("{ca}/linear_1"), Some((0, d))),
        "cross_attn.value" => linear(format!("{ca}/linear_1"), Some((d, d))),
        "cross_attn.out" => linear(format!("{ca}/linear_2"), None),
        "mlp.0" => linear(format!("{ffn}/linear_0"), None),
        "mlp.2" => linear(format!("{ffn}/linear_1"), None),
        _ => None,
    }
}

pub(in crate::convert) fn convert(
    dir: &Path,
    output: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport> {
    let m = Ct2Model::open(&dir.join("model.bin"))?;
    if m.spec != "WhisperSpec" {
        return Err(bad(
            dir,
            format!("model.bin holds a {}, not a WhisperSpec", m.spec),
        ));
    }
    let out_ty = out_type(dir, opts)?;
    let dims_of = |name: &str| -> Result<Vec<usize>> {
        m.var(name)
            .map(|v| v.dims.clone())
            .ok_or_else(|| bad(dir, format!("model.bin has no {name}")))
    };
    let side = |prefix: &str| -> Result<Side> {
        let pos = dims_of(&format!("{prefix}/position_encodings/encodings"))?;
        let (n_ctx, n_embd) = match pos[..] {
            [a, b] => (a, b),
            _ => return Err(bad(dir, format!("{prefix}: position encodings of {pos:?}"))),
        };
        let s = Side {
            n_ctx,
            n_embd,
            n_head: m.int(&format!("{prefix}/num_heads")).unwrap_or(0) as usize,
            n_layer: (0..)
                .take_while(|i| {
                    m.var(&format!("{prefix}/layer_{i}/ffn/linear_0/weight"))
                        .is_some()
                })
                .count(),
        };
        check_side(dir, prefix, &s)?;
        Ok(s)
    };
    let (enc, dec) = (side("encoder")?, side("decoder")?);
    let conv1 = dims_of("encoder/conv1/weight")?;
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
    let n_vocab = dims_of("decoder/embeddings/weight")?[0];
    let dims = Dims {
        enc,
        dec,
        n_mels,
        n_vocab,
    };

    // every tensor's variable exists, with the rows and width it asks for
    let width = |name: &str| {
        if name.starts_with("encoder") {
            dims.enc.n_embd
        } else {
            dims.dec.n_embd
        }
    };
    for (name, shape) in tensor_names(&dims) {
        let (var, rows) = source(&name, width(&name))
            .ok_or_else(|| bad(dir, format!("{name}: no CTranslate2 variable maps to it")))?;
        let v = m
            .var(&var)
            .ok_or_else(|| bad(dir, format!("model.bin has no {var}")))?;
        let v_rows = v.dims.first().copied().unwrap_or(1).max(1);
        let want_rows = rows.map_or(v_rows, |r| r.1);
        let want: usize = shape.iter().product();
        if v.numel() / v_rows * want_rows != want || rows.is_some_and(|(r0, n)| r0 + n > v_rows) {
            return Err(bad(
                dir,
                format!("{var}: {:?}, where {name} needs {shape:?}", v.dims),
            ));
        }
    }
    // the dropped key biases are zeros
    for (prefix, n_layer, d) in [
        ("encoder", dims.enc.n_layer, dims.enc.n_embd),
        ("decoder", dims.dec.n_layer, dims.dec.n_embd),
    ] {
        for l in 0..n_layer {
            let sa = format!("{prefix}/layer_{l}/self_attention/linear_0/bias");
            zero_rows(&m, dir, &sa, d, d)?;
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

    let config = read_json(dir, "config.json")?
        .ok_or_else(|| bad(dir, "no config.json (CTranslate2's Whisper config)"))?;
    let ints = |k: &str| json_ints(config.get(k));
    let alignment_heads = json_pairs(config.get("alignment_heads"));
    let path: PathBuf = dir.join("vocabulary.txt");
    let text = std::fs::read_to_string(&path).map_err(|e| crate::error::Error::io(&path, e))?;
    let tables = Tables {
        suppress: ints("suppress_ids"),
        suppress_begin: ints("suppress_ids_begin"),
        lang_ids: ints("lang_ids"),
        alignment_heads,
        tokens: text.lines().map(str::to_owned).collect(),
        merges: super::merges(dir)?,
    };
    write(dir, output, opts, out_ty, &dims, tables, |name| {
        let (var, rows) = source(name, width(name)).expect("checked above");
        let v = m.var(&var).expect("checked above");
        let x = m.f32s(v)?;
        Ok(match rows {
            Some((r0, n)) => {
                let w = v.numel() / v.dims[0];
                x[r0 * w..(r0 + n) * w].to_vec()
            }
            None => x,
        })
    })
}

/// Fails unless values `r0..r0 + n` of the bias `name` are zero (a key's, which Whisper does
/// not have and the GGUF drops).
fn zero_rows(m: &Ct2Model, dir: &Path, name: &str, r0: usize, n: usize) -> Result<()> {
    let v = m
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
