//! A Hugging Face checkpoint folder: `config.json` and the weights in `model.safetensors` or
//! shards (`model-0000k-of-0000n.safetensors`, listed by `model.safetensors.index.json`).
//! Tensors keep the converter's order: shards by name, each shard's tensors as its header
//! lists them.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::error::{Error, Result};
use crate::quant;
use crate::safetensors::{Dtype, SafeTensors};

pub(super) struct Checkpoint {
    pub dir: PathBuf,
    /// `config.json`, with a `text_config` section merged into the top level (as the converter
    /// reads multimodal configs).
    pub config: serde_json::Map<String, Json>,
    parts: Vec<SafeTensors>,
    /// (name, part) in conversion order.
    pub tensors: Vec<(String, usize)>,
}

pub(super) fn bad(dir: &Path, reason: impl Into<String>) -> Error {
    Error::Convert {
        path: dir.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads a JSON file of the checkpoint, `None` when it is absent.
pub(super) fn read_json(dir: &Path, name: &str) -> Result<Option<Json>> {
    let path = dir.join(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| bad(dir, format!("{name} is not valid JSON: {e}")))
}

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        if !dir.is_dir() {
            return Err(bad(
                dir,
                "not a folder (a Hugging Face checkpoint is a folder with config.json and *.safetensors)",
            ));
        }
        let config = match read_json(dir, "config.json")? {
            Some(Json::Object(m)) => m,
            Some(_) => return Err(bad(dir, "config.json is not a JSON object")),
            None => return Err(bad(dir, "no config.json")),
        };
        let config = match config.get("text_config") {
            Some(Json::Object(t)) => {
                let mut merged = config.clone();
                merged.extend(t.clone());
                merged
            }
            _ => config,
        };
        let (part_names, index) = part_names(dir)?;
        let mut parts = Vec::new();
        let mut tensors = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, name) in part_names.iter().enumerate() {
            let st = SafeTensors::open(dir.join(name))?;
            for t in &st.order {
                if !seen.insert(t.clone()) {
                    return Err(bad(dir, format!("tensor '{t}' is in more than one shard")));
                }
                tensors.push((t.clone(), i));
            }
            parts.push(st);
        }
        if let Some(index) = index {
            let missing: Vec<&String> = index.iter().filter(|n| !seen.contains(*n)).collect();
            let extra: Vec<&String> = tensors
                .iter()
                .map(|t| &t.0)
                .filter(|n| !index.contains(n))
                .collect();
            if !missing.is_empty() || !extra.is_empty() {
                return Err(bad(
                    dir,
                    format!(
                        "model.safetensors.index.json does not match the shards: missing {missing:?}, not listed {extra:?}"
                    ),
                ));
            }
        }
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            config,
            parts,
            tensors,
        })
    }

    pub fn dtype(&self, i: usize) -> Dtype {
        let (name, p) = &self.tensors[i];
        self.parts[*p].tensors[name].dtype
    }

    /// Row-major (PyTorch) shape.
    pub fn shape(&self, i: usize) -> &[usize] {
        let (name, p) = &self.tensors[i];
        &self.parts[*p].tensors[name].shape
    }

    /// The tensor's values widened to f32 (exact for every dtype we read).
    pub fn values(&self, i: usize) -> Result<Vec<f32>> {
        let (name, p) = &self.tensors[i];
        let st = &self.parts[*p];
        let e = &st.tensors[name];
        let data = st.data(e);
        let ty = match e.dtype {
            Dtype::F32 => quant::GgmlType::F32,
            Dtype::F16 => quant::GgmlType::F16,
            Dtype::BF16 => quant::GgmlType::BF16,
        };
        quant::dequantize_to_vec(ty, data, data.len() / e.dtype.size())
    }

    pub fn hparam(&self, keys: &[&str]) -> Option<&Json> {
        keys.iter().find_map(|k| self.config.get(*k))
    }

    pub fn hparam_u64(&self, keys: &[&str]) -> Option<u64> {
        self.hparam(keys).and_then(|v| v.as_u64())
    }

    pub fn hparam_f64(&self, keys: &[&str]) -> Option<f64> {
        self.hparam(keys).and_then(|v| v.as_f64())
    }

    /// A required integer hyperparameter: an error naming the keys tried when absent.
    pub fn need_u64(&self, keys: &[&str]) -> Result<u64> {
        self.hparam_u64(keys).ok_or_else(|| {
            bad(
                &self.dir,
                format!("config.json has no integer {}", keys.join(" / ")),
            )
        })
    }
}

/// The safetensors files to read, sorted, and the tensor names the index lists (if any).
fn part_names(dir: &Path) -> Result<(Vec<String>, Option<Vec<String>>)> {
    if let Some(index) = read_json(dir, "model.safetensors.index.json")? {
        let map = index
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| bad(dir, "model.safetensors.index.json has no weight_map"))?;
        let mut parts: Vec<String> = Vec::new();
        let mut names = Vec::new();
        for (tensor, file) in map {
            let file = file
                .as_str()
                .ok_or_else(|| bad(dir, format!("weight_map['{tensor}'] is not a file name")))?;
            if file.contains('/') || file.contains('\\') || file.starts_with('.') {
                return Err(bad(
                    dir,
                    format!("weight_map names '{file}' outside the folder"),
                ));
            }
            if !parts.iter().any(|p| p == file) {
                parts.push(file.to_owned());
            }
            names.push(tensor.clone());
        }
        for p in &parts {
            if !dir.join(p).is_file() {
                return Err(bad(
                    dir,
                    format!("shard {p} (listed by the index) is missing"),
                ));
            }
        }
        parts.sort();
        return Ok((parts, Some(names)));
    }
    let mut parts: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("model") && n.ends_with(".safetensors"))
        .collect();
    parts.sort();
    if parts.is_empty() {
        let bin = dir.join("pytorch_model.bin").is_file();
        return Err(bad(
            dir,
            if bin {
                "only pytorch_model.bin: PyTorch pickles are not read (they can run code); save the model as safetensors"
            } else {
                "no model.safetensors or model-*.safetensors"
            },
        ));
    }
    Ok((parts, None))
}
