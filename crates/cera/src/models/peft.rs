//! PEFT LoRA adapters read directly: `adapter_config.json` and `adapter_model.safetensors`
//! become the GGUF adapter llama.cpp's `convert_lora_to_gguf.py` would write for the same
//! base model (tensor names mapped to GGUF's, the llama Q/K row permutation applied to the B
//! matrices, `lora_alpha` as `adapter.lora.alpha`), so both forms load through one path.
//!
//! PEFT scales a delta by `lora_alpha / r` (`lora_alpha / sqrt(r)` with `use_rslora`); the GGUF
//! form stores one alpha that llama.cpp divides by each pair's rank, so an rsLoRA adapter is
//! written with `alpha · sqrt(r)`. What the GGUF form cannot express is refused: DoRA,
//! `modules_to_save` and trained biases (full-weight extras), per-module alphas, Conv1D-style
//! (`fan_in_fan_out`) weights. Embedding pairs (`lora_embedding_A/B`) and the per-expert pairs
//! of a MoE block (stacked into one 3-D pair per projection, as the converter stacks them) are
//! carried over.

use std::path::Path;

use crate::error::{Error, Result};
use crate::gguf::{GgufFile, GgufWriter};
use crate::keys::{self, arch as k, arch_key};
use crate::models::{Arch, hf};
use crate::quant::GgmlType;
use crate::safetensors::{Dtype, SafeTensors};

/// Converts the PEFT adapter in `dir` for the model in `base` to a GGUF adapter image.
pub fn to_gguf(dir: &Path, base: &GgufFile) -> Result<Vec<u8>> {
    let name = dir.display().to_string();
    let err = |reason: String| Error::Lora {
        adapter: name.clone(),
        reason,
    };
    let cfg_path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| Error::io(&cfg_path, e))?;
    let cfg: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| err(format!("adapter_config.json is not JSON: {e}")))?;
    let get = |key: &str| cfg.get(key).filter(|v| !v.is_null());
    if let Some(t) = get("peft_type").and_then(|v| v.as_str())
        && t != "LORA"
    {
        return Err(err(format!(
            "peft_type is '{t}'; only LORA adapters are supported"
        )));
    }
    let truthy = |key: &str| get(key).and_then(|v| v.as_bool()).unwrap_or(false);
    if truthy("use_dora") {
        return Err(err(
            "DoRA adapters (use_dora) are not supported: their magnitude vectors rescale the \
             merged weight"
                .into(),
        ));
    }
    if truthy("fan_in_fan_out") {
        return Err(err(
            "fan_in_fan_out adapters (Conv1D weights) are not supported".into(),
        ));
    }
    if let Some(m) = get("modules_to_save").and_then(|v| v.as_array())
        && !m.is_empty()
    {
        return Err(err(format!(
            "modules_to_save ({}) holds full-weight copies, which are not supported",
            m.iter()
                .filter_map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if let Some(b) = get("bias").and_then(|v| v.as_str())
        && b != "none"
    {
        return Err(err(format!(
            "bias = '{b}' trains biases (full-weight extras), which are not supported"
        )));
    }
    if let Some(p) = get("alpha_pattern").and_then(|v| v.as_object())
        && !p.is_empty()
    {
        return Err(err(
            "alpha_pattern (a different alpha per module) is not supported".into(),
        ));
    }
    let r = get("r")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| err("adapter_config.json has no rank 'r'".into()))? as usize;
    let alpha = get("lora_alpha")
        .and_then(|v| v.as_f64())
        .ok_or_else(|| err("adapter_config.json has no 'lora_alpha'".into()))?
        as f32;
    let rslora = truthy("use_rslora");
    let has_rank_pattern = get("rank_pattern")
        .and_then(|v| v.as_object())
        .is_some_and(|p| !p.is_empty());
    if rslora && has_rank_pattern {
        return Err(err(
            "use_rslora with a rank_pattern cannot be expressed with one alpha".into(),
        ));
    }
    // llama.cpp divides alpha by each pair's rank; rsLoRA divides by its square root
    let gguf_alpha = if rslora {
        alpha * (r as f32).sqrt()
    } else {
        alpha
    };

    let st_path = dir.join("adapter_model.safetensors");
    if !st_path.exists() && dir.join("adapter_model.bin").exists() {
        return Err(err(
            "adapter_model.bin (a pickled PyTorch file) is not read; save the adapter with \
             safe_serialization (adapter_model.safetensors)"
                .into(),
        ));
    }
    let st = SafeTensors::open(&st_path)?;

    let arch_name = base.architecture()?.to_owned();
    let arch = Arch::from_name(&arch_name)?;
    let n_head: usize = base.get_as(&arch_key(&arch_name, k::HEAD_COUNT))?;
    let n_head_kv = head_count_kv(base, &arch_name, n_head)?;

    let mut w = GgufWriter::new();
    w.set(keys::GENERAL_ARCHITECTURE, arch_name.as_str());
    w.set(keys::GENERAL_TYPE, "adapter");
    w.set(keys::ADAPTER_TYPE, "lora");
    w.set(keys::ADAPTER_LORA_ALPHA, gguf_alpha);
    let mut n = 0;
    // MoE experts' halves, stacked per (GGUF name, half) in expert order as the converter does
    let mut experts: std::collections::BTreeMap<(String, bool), Vec<Option<Half>>> =
        Default::default();
    for (tname, t) in &st.tensors {
        let (module, is_a) = split_name(tname).ok_or_else(|| {
            err(format!(
                "'{tname}' is not a lora_A / lora_B weight (full-weight extras are not \
                 supported)"
            ))
        })?;
        let ty = match t.dtype {
            Dtype::F32 => GgmlType::F32,
            Dtype::F16 => GgmlType::F16,
            Dtype::BF16 => GgmlType::BF16,
        };
        if t.shape.len() != 2 {
            return Err(err(format!(
                "'{tname}' has shape {:?}, expected 2 dimensions",
                t.shape
            )));
        }
        let (rows, cols) = (t.shape[0], t.shape[1]);
        if module.ends_with("embed_tokens") {
            // PEFT's embedding pair: A [r, vocab], B [embd, r]; the GGUF form keeps B and
            // stores A transposed (a row of r values per token), as the converter does
            let mut data = st.data(t).to_vec();
            if is_a {
                data = transpose(&data, rows, cols, t.dtype.size());
            }
            let (suffix, shape) = if is_a {
                ("lora_a", [rows as u64, cols as u64])
            } else {
                ("lora_b", [cols as u64, rows as u64])
            };
            w.add_tensor_raw(
                format!("{}.weight.{suffix}", crate::models::names::TOKEN_EMBD),
                ty,
                &shape,
                data,
            )?;
            n += 1;
            continue;
        }
        if let Some((gguf, e)) = expert_name(arch, module) {
            let n_expert: usize = base.get_as(&arch_key(&arch_name, k::EXPERT_COUNT))?;
            if e >= n_expert {
                return Err(err(format!(
                    "'{tname}': expert {e}, the model has {n_expert}"
                )));
            }
            let list = experts.entry((gguf, is_a)).or_default();
            list.resize(n_expert, None);
            list[e] = Some((t.shape.clone(), t.dtype, st.data(t).to_vec()));
            continue;
        }
        let gguf_name = gguf_name(arch, module).ok_or_else(|| {
            err(format!(
                "'{tname}': module '{module}' has no GGUF counterpart in {arch_name}"
            ))
        })?;
        let mut data = st.data(t).to_vec();
        if !is_a && hf::permutes_qk(arch) {
            // the converter permutes llama's Q and K rows for its RoPE layout; B holds the rows
            let heads = if module.ends_with("self_attn.q_proj") {
                Some(n_head)
            } else if module.ends_with("self_attn.k_proj") {
                let layer = layer_of(module).unwrap_or(0);
                Some(n_head_kv.get(layer).copied().unwrap_or(n_head))
            } else {
                None
            };
            // rows that do not split into the heads are an adapter of other dimensions, which
            // resolving it against the model names
            if let Some(Ok(p)) =
                heads.map(|h| hf::permute_head_rows(&data, rows, cols * t.dtype.size(), h))
            {
                data = p;
            }
        }
        let suffix = if is_a { "lora_a" } else { "lora_b" };
        // safetensors [rows, cols] row-major is ggml [cols, rows]
        w.add_tensor_raw(
            format!("{gguf_name}.weight.{suffix}"),
            ty,
            &[cols as u64, rows as u64],
            data,
        )?;
        n += 1;
    }
    for ((gguf, is_a), list) in experts {
        let half = if is_a { "lora_A" } else { "lora_B" };
        let mut data = Vec::new();
        let mut first: Option<(Vec<usize>, Dtype)> = None;
        for (e, x) in list.into_iter().enumerate() {
            let Some((shape, dtype, bytes)) = x else {
                return Err(err(format!(
                    "'{gguf}': expert {e} has no {half} (every expert needs a pair)"
                )));
            };
            match &first {
                None => first = Some((shape, dtype)),
                Some((s0, d0)) if *s0 == shape && *d0 == dtype => {}
                Some(_) => {
                    return Err(err(format!(
                        "'{gguf}': the experts' {half} differ in shape or type"
                    )));
                }
            }
            data.extend_from_slice(&bytes);
        }
        let (shape, dtype) = first.expect("at least one expert");
        let ne = data.len() / (shape[0] * shape[1] * dtype.size());
        let ty = match dtype {
            Dtype::F32 => GgmlType::F32,
            Dtype::F16 => GgmlType::F16,
            Dtype::BF16 => GgmlType::BF16,
        };
        let suffix = if is_a { "lora_a" } else { "lora_b" };
        // torch [experts, rows, cols] is ggml [cols, rows, experts]
        w.add_tensor_raw(
            format!("{gguf}.weight.{suffix}"),
            ty,
            &[shape[1] as u64, shape[0] as u64, ne as u64],
            data,
        )?;
        n += 1;
    }
    if n == 0 {
        return Err(err("adapter_model.safetensors holds no tensors".into()));
    }
    w.to_bytes()
}

/// One expert's lora_A or lora_B: shape, type, bytes.
type Half = (Vec<usize>, Dtype, Vec<u8>);

/// `rows × cols` elements of `elem` bytes, transposed to `cols × rows`.
fn transpose(data: &[u8], rows: usize, cols: usize, elem: usize) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            let (src, dst) = ((r * cols + c) * elem, (c * rows + r) * elem);
            out[dst..dst + elem].copy_from_slice(&data[src..src + elem]);
        }
    }
    out
}

/// A MoE expert's projection (`model.layers.N.feed_forward.experts.E.w1`): the stacked GGUF
/// tensor's base name and the expert.
fn expert_name(arch: Arch, module: &str) -> Option<(String, usize)> {
    use crate::models::names as n;
    if !matches!(arch, Arch::Lfm2Moe) {
        return None;
    }
    let il = layer_of(module)?;
    let tail = module
        .split(&format!("layers.{il}."))
        .nth(1)?
        .strip_prefix("feed_forward.experts.")?;
    let (e, proj) = tail.split_once('.')?;
    let g = match proj {
        "w1" => n::FFN_GATE_EXPS,
        "w3" => n::FFN_UP_EXPS,
        "w2" => n::FFN_DOWN_EXPS,
        _ => return None,
    };
    Some((format!("blk.{il}.{g}"), e.parse().ok()?))
}

/// `{arch}.attention.head_count_kv`: one value or one per layer (default: `n_head`).
fn head_count_kv(base: &GgufFile, arch: &str, n_head: usize) -> Result<Vec<usize>> {
    let key = arch_key(arch, k::HEAD_COUNT_KV);
    let n_layer: usize = base.get_as(&arch_key(arch, k::BLOCK_COUNT))?;
    Ok(match base.get(&key) {
        None => vec![n_head; n_layer],
        Some(_) => base
            .get_per_layer_u32(&key, n_layer)?
            .into_iter()
            .map(|x| x as usize)
            .collect(),
    })
}

/// `base_model.model.<module>.lora_{A,B}.weight` → (`<module>`, is A).
fn split_name(name: &str) -> Option<(&str, bool)> {
    let name = name.strip_prefix("base_model.model.").unwrap_or(name);
    // an embedding's pair is saved as parameters, without `.weight`
    if let Some(m) = name
        .strip_suffix(".lora_A.weight")
        .or_else(|| name.strip_suffix(".lora_embedding_A"))
    {
        Some((m, true))
    } else {
        name.strip_suffix(".lora_B.weight")
            .or_else(|| name.strip_suffix(".lora_embedding_B"))
            .map(|m| (m, false))
    }
}

/// The layer index of `model.layers.N.…`.
fn layer_of(module: &str) -> Option<usize> {
    let rest = module.split("layers.").nth(1)?;
    rest.split('.').next()?.parse().ok()
}

/// The GGUF base name (without `.weight`) of a Hugging Face module path.
fn gguf_name(arch: Arch, module: &str) -> Option<String> {
    if module == "lm_head" {
        return Some(crate::models::names::OUTPUT.to_owned());
    }
    let il = layer_of(module)?;
    let tail = module.split(&format!("layers.{il}.")).nth(1)?;
    Some(format!("blk.{il}.{}", hf::layer_name(arch, tail)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_gguf() {
        assert_eq!(
            split_name("base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight"),
            Some(("model.layers.3.self_attn.q_proj", true))
        );
        assert_eq!(
            gguf_name(Arch::Llama, "model.layers.3.self_attn.q_proj").as_deref(),
            Some("blk.3.attn_q")
        );
        assert_eq!(
            gguf_name(Arch::Lfm2, "model.layers.0.conv.in_proj").as_deref(),
            Some("blk.0.shortconv.in_proj")
        );
        assert_eq!(gguf_name(Arch::Llama, "model.layers.0.conv.in_proj"), None);
        assert_eq!(gguf_name(Arch::Qwen2, "lm_head").as_deref(), Some("output"));
        assert_eq!(
            split_name("base_model.model.model.embed_tokens.lora_embedding_B"),
            Some(("model.embed_tokens", false))
        );
        assert_eq!(
            expert_name(Arch::Lfm2Moe, "model.layers.4.feed_forward.experts.17.w2"),
            Some(("blk.4.ffn_down_exps".to_owned(), 17))
        );
        assert_eq!(
            expert_name(Arch::Lfm2, "model.layers.4.feed_forward.experts.17.w2"),
            None
        );
    }

    #[test]
    fn transpose_swaps_rows_and_columns() {
        // 2 x 3 of 2-byte elements
        let data: Vec<u8> = (0..12).collect();
        assert_eq!(
            transpose(&data, 2, 3, 2),
            vec![0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11]
        );
    }
}
