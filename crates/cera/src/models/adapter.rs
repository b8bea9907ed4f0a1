//! Loading a LoRA adapter for a model: a llama.cpp GGUF adapter, or a PEFT directory turned
//! into the same in-memory GGUF adapter ([`super::peft`]), resolved against the model it will
//! run on (every pair must name a projection the model computes, with matching dimensions).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::{Model, peft};
use crate::backend::{LowRank, Weight};
use crate::error::{Error, Result};
use crate::gguf::{Fingerprint, GgufFile};
use crate::keys;
use crate::lora::LoraAdapter;

impl LoraAdapter {
    /// Loads an adapter for `model` (whose file is `base`): a `.gguf` adapter, a PEFT
    /// directory, or a PEFT `adapter_model.safetensors` / `adapter_config.json` in one.
    pub fn open(path: impl AsRef<Path>, model: &Model, base: &GgufFile) -> Result<LoraAdapter> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let err = |reason: String| Error::Lora {
            adapter: name.clone(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        let is_peft = meta.is_dir()
            || path
                .extension()
                .is_some_and(|e| e == "safetensors" || e == "json");
        let file = if is_peft {
            let dir = if meta.is_dir() {
                path
            } else {
                path.parent().unwrap_or(Path::new("."))
            };
            let bytes = peft::to_gguf(dir, base).map_err(|e| match e {
                Error::Lora { reason, .. } => err(reason),
                other => err(other.to_string()),
            })?;
            GgufFile::from_bytes(bytes)?
        } else {
            GgufFile::open(path).map_err(|e| err(e.to_string()))?
        };
        Self::from_gguf(Arc::new(file), &name, model, base)
    }

    /// An adapter from a parsed GGUF adapter file, checked against `model` / `base`.
    pub fn from_gguf(
        file: Arc<GgufFile>,
        name: &str,
        model: &Model,
        base: &GgufFile,
    ) -> Result<LoraAdapter> {
        let err = |reason: String| Error::Lora {
            adapter: name.to_owned(),
            reason,
        };
        let ty: Option<String> = file.get_opt(keys::GENERAL_TYPE)?;
        if ty.as_deref() != Some("adapter") {
            return Err(err(format!(
                "general.type is {}, expected 'adapter' (is this a model rather than an adapter?)",
                ty.map_or("missing".into(), |t| format!("'{t}'"))
            )));
        }
        let aty: Option<String> = file.get_opt(keys::ADAPTER_TYPE)?;
        if aty.as_deref() != Some("lora") {
            return Err(err(format!(
                "adapter.type is {}, expected 'lora'",
                aty.map_or("missing".into(), |t| format!("'{t}'"))
            )));
        }
        let arch = file.architecture().map_err(|e| err(e.to_string()))?;
        let base_arch = base.architecture()?;
        if arch != base_arch {
            return Err(err(format!(
                "made for architecture '{arch}', the model is '{base_arch}'"
            )));
        }
        if file.get(keys::ADAPTER_ALORA_INVOCATION_TOKENS).is_some() {
            return Err(err(
                "activated LoRA (adapter.alora.invocation_tokens) is not supported".into(),
            ));
        }
        let alpha: f32 = file.get_opt(keys::ADAPTER_LORA_ALPHA)?.unwrap_or(0.0);
        if !alpha.is_finite() {
            return Err(err(format!("adapter.lora.alpha is {alpha}")));
        }
        // pair `<base>.lora_a` with `<base>.lora_b`
        let mut halves: HashMap<&str, (Option<Weight>, Option<Weight>)> = HashMap::new();
        // experts per stacked (3-D) pair
        let mut n_stacked: HashMap<&str, usize> = HashMap::new();
        for t in &file.tensors {
            let (base_name, is_a) = if let Some(b) = t.name.strip_suffix(".lora_a") {
                (b, true)
            } else if let Some(b) = t.name.strip_suffix(".lora_b") {
                (b, false)
            } else if t.name.ends_with("_norm.weight") {
                return Err(err(format!(
                    "tensor '{}' replaces a norm weight: adapters with full-weight tensors \
                     are not supported",
                    t.name
                )));
            } else {
                return Err(err(format!(
                    "tensor '{}' is neither a lora_a nor a lora_b",
                    t.name
                )));
            };
            // MoE experts' pairs are stacked per expert, as their weights are
            let stacked = base_name.ends_with("_exps.weight");
            if t.shape.len() != 2 && !(stacked && t.shape.len() == 3) {
                return Err(err(format!(
                    "tensor '{}' has {} dimensions, expected {}",
                    t.name,
                    t.shape.len(),
                    if stacked {
                        "3 (one pair per expert)"
                    } else {
                        "2"
                    }
                )));
            }
            if t.shape.len() == 3 {
                let n = t.shape[2] as usize;
                if *n_stacked.entry(base_name).or_insert(n) != n {
                    return Err(err(format!(
                        "'{base_name}': lora_a and lora_b stack different numbers of experts"
                    )));
                }
            }
            if crate::kernels::KernelTable::vec_dot_type(t.ty).is_none()
                || t.ty.bytes_for(t.shape[0]).is_none()
            {
                return Err(err(format!(
                    "tensor '{}' of type {} cannot be multiplied",
                    t.name, t.ty
                )));
            }
            let w = Weight::new(&file, t);
            let e = halves.entry(base_name).or_default();
            if is_a { e.0 = Some(w) } else { e.1 = Some(w) }
        }
        if halves.is_empty() {
            return Err(err("holds no lora_a / lora_b tensors".into()));
        }
        let targets = model.lora_targets();
        let mut by_name: HashMap<&str, Vec<&Weight>> = HashMap::new();
        for w in &targets {
            by_name.entry(w.lora_key()).or_default().push(w);
        }
        let mut pairs = HashMap::new();
        let mut embd = None;
        let mut names: Vec<&str> = halves.keys().copied().collect();
        names.sort_unstable();
        let token_embd = model.token_embd();
        for base_name in names {
            let (a, b) = halves.remove(base_name).expect("listed");
            let (Some(a), Some(b)) = (a, b) else {
                return Err(err(format!(
                    "'{base_name}' has only one of lora_a and lora_b"
                )));
            };
            if base_name == token_embd.name {
                // llama.cpp's layout for embeddings: A [r, n_vocab] (a row per token) and
                // B [r, n_embd]; the delta of token t is B · A[t]
                let (vocab, d) = (token_embd.rows, token_embd.cols);
                if a.rows != vocab || b.rows != d || a.cols != b.cols || a.cols == 0 {
                    return Err(err(format!(
                        "'{base_name}' is {vocab} tokens of {d} in the model, the adapter's \
                         pair is A [{} x {}] and B [{} x {}] (expected A [rank x {vocab}] and \
                         B [rank x {d}])",
                        a.cols, a.rows, b.cols, b.rows
                    )));
                }
                embd = Some(
                    LowRank::embedding(a, &b).map_err(|e| err(format!("'{base_name}': {e}")))?,
                );
                continue;
            }
            let Some(ws) = by_name.get(base_name) else {
                let why = if base.tensor(base_name).is_some() {
                    "is not a projection LoRA can adapt here"
                } else {
                    "does not exist in the model (an adapter for another model?)"
                };
                return Err(err(format!("'{base_name}' {why}")));
            };
            let full_rows: usize = ws
                .iter()
                .map(|w| w.lora_part().map_or(w.rows, |(s, _)| s + w.rows))
                .max()
                .unwrap_or(0);
            let cols = ws[0].cols;
            // a stacked pair holds one A and one B per expert, the model one part per expert
            let n_exp = n_stacked.get(base_name).copied().unwrap_or(1);
            let stacked = base_name.ends_with("_exps.weight");
            if stacked && n_exp != ws.len() {
                return Err(err(format!(
                    "'{base_name}': the model has {} experts, the adapter's pair {}",
                    ws.len(),
                    if n_exp == 1 {
                        "is not stacked per expert".to_owned()
                    } else {
                        format!("stacks {n_exp}")
                    }
                )));
            }
            let rank = a.rows / n_exp;
            if a.cols != cols || b.rows != full_rows || a.rows != b.cols * n_exp {
                return Err(err(format!(
                    "'{base_name}' is [{cols} -> {full_rows}] in the model, the adapter's pair is \
                     A [{} -> {}] and B [{} -> {}]",
                    a.cols, a.rows, b.cols, b.rows
                )));
            }
            if rank == 0 {
                return Err(err(format!("'{base_name}' has rank 0")));
            }
            for w in ws {
                let start = w.lora_part().map_or(0, |(s, _)| s);
                let a = if stacked {
                    let e = start / w.rows;
                    a.slice_rows(e * rank, rank, &format!("{}[{e}]", a.name))
                } else {
                    a.clone()
                };
                let pair = LowRank::new(a, &b, start, w.rows)
                    .map_err(|e| err(format!("'{base_name}': {e}")))?;
                pairs.insert(w.name.clone(), pair);
            }
        }
        Ok(LoraAdapter {
            name: name.to_owned(),
            alpha,
            n_tensors: file.tensors.len(),
            pairs,
            embd,
            fingerprint: Fingerprint::of(&file),
            model: Fingerprint::of(base),
        })
    }
}
