//! LoRA adapters, applied unmerged: each adapted projection `y = W·x` of the model becomes
//! `y = W·x + s·B(A·x)` for the sequences that attached the adapter, with `W` left as it is
//! (quantized, shared by every session) and `s = scale · alpha / rank` as llama.cpp scales it
//! (`scale` alone when the adapter has no alpha).
//!
//! Adapters come as llama.cpp GGUF adapters (`general.type = adapter`, `adapter.type = lora`,
//! tensors `<base>.lora_a` `[in, r]` and `<base>.lora_b` `[r, out]` in ggml order) or as PEFT
//! directories (`adapter_config.json` + `adapter_model.safetensors`), which [`peft`] turns
//! into the same in-memory GGUF adapter the converter would have written. Loading resolves the
//! adapter against the model it will run on: every pair must name a projection the model
//! computes, with matching dimensions, or loading fails naming the tensor.
//!
//! Which sequences use which adapters is per session ([`LoraSet`]); the model stays stateless
//! and a batched step can mix sessions with different adapters (the deltas are computed per
//! group of rows that share a set).

pub mod peft;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::backend::{LowRank, Weight};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::keys;
use crate::models::Model;
use crate::state::Fingerprint;

/// One adapted projection: `delta = B · (A · x)`, in the form the backends apply.
pub type LoraPair = LowRank;

/// A loaded adapter, resolved against one model.
pub struct LoraAdapter {
    /// Where it came from (a path), for messages and listings.
    pub name: String,
    /// `adapter.lora.alpha` (0: none, the user's scale is used as it is).
    pub alpha: f32,
    /// By the model's weight name (a fused projection's parts and a MoE block's experts by
    /// their part names).
    pairs: HashMap<String, LoraPair>,
    /// The token embeddings' pair (A holds a row per token: [`LowRank::embedding`]).
    embd: Option<LoraPair>,
    /// Pairs as the file names them (for reporting).
    n_tensors: usize,
    /// The adapter's own fingerprint (saved state made with it is keyed by it).
    pub fingerprint: Fingerprint,
    /// The model it was resolved against.
    pub(crate) model: Fingerprint,
}

impl std::fmt::Debug for LoraAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LoraAdapter({}, alpha {}, {} projections)",
            self.name,
            self.alpha,
            self.pairs.len()
        )
    }
}

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

    /// The pair adapting the model weight `w`, if any.
    pub fn pair(&self, w: &Weight) -> Option<&LoraPair> {
        if self.pairs.is_empty() {
            return None;
        }
        self.pairs.get(&w.name)
    }

    /// The token embeddings' pair, if the adapter has one.
    pub fn embedding_pair(&self) -> Option<&LoraPair> {
        self.embd.as_ref()
    }

    /// The multiplier of a pair's delta for a user scale (llama.cpp's rule).
    pub fn scale(&self, pair: &LoraPair, scale: f32) -> f32 {
        if self.alpha != 0.0 {
            scale * self.alpha / pair.rank as f32
        } else {
            scale
        }
    }

    /// Projections the adapter changes (the token embeddings counted as one).
    pub fn n_projections(&self) -> usize {
        self.pairs.len() + usize::from(self.embd.is_some())
    }

    /// Tensors in the adapter file.
    pub fn n_tensors(&self) -> usize {
        self.n_tensors
    }

    /// Largest rank among the pairs.
    pub fn max_rank(&self) -> usize {
        self.pairs
            .values()
            .chain(self.embd.as_ref())
            .map(|p| p.rank)
            .max()
            .unwrap_or(0)
    }
}

/// One attached adapter and its scale.
#[derive(Clone, Debug)]
pub struct Attached {
    pub adapter: Arc<LoraAdapter>,
    pub scale: f32,
}

/// The adapters a session applies, in order (a cheap clone: steps take one per sequence).
#[derive(Clone, Debug, Default)]
pub struct LoraSet {
    list: Option<Arc<Vec<Attached>>>,
}

impl LoraSet {
    /// No adapters.
    pub const NONE: LoraSet = LoraSet { list: None };

    /// No adapters, or only adapters at scale 0 (which change nothing and cost nothing).
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The attached adapters with a non-zero scale, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Attached> {
        self.list
            .iter()
            .flat_map(|l| l.iter())
            .filter(|a| a.scale != 0.0)
    }

    /// Every attached adapter, scale 0 included.
    pub fn attached(&self) -> &[Attached] {
        self.list.as_deref().map_or(&[], |l| l.as_slice())
    }

    /// Attaches `adapter` at `scale`; attaching one already attached sets its scale.
    pub fn attach(&mut self, adapter: Arc<LoraAdapter>, scale: f32) {
        let l = Arc::make_mut(self.list.get_or_insert_with(Default::default));
        match l.iter_mut().find(|a| Arc::ptr_eq(&a.adapter, &adapter)) {
            Some(a) => a.scale = scale,
            None => l.push(Attached { adapter, scale }),
        }
    }

    /// Detaches `adapter`; false when it was not attached.
    pub fn detach(&mut self, adapter: &Arc<LoraAdapter>) -> bool {
        let Some(l) = self.list.as_mut() else {
            return false;
        };
        let before = l.len();
        Arc::make_mut(l).retain(|a| !Arc::ptr_eq(&a.adapter, adapter));
        let removed = l.len() != before;
        if l.is_empty() {
            self.list = None;
        }
        removed
    }

    /// Detaches everything.
    pub fn clear(&mut self) {
        self.list = None;
    }

    /// Whether two sets apply the same adapters at the same scales (so their rows can share
    /// one delta computation).
    pub fn same_as(&self, other: &LoraSet) -> bool {
        match (&self.list, &other.list) {
            (Some(a), Some(b)) if Arc::ptr_eq(a, b) => true,
            _ => self
                .iter()
                .map(|a| (Arc::as_ptr(&a.adapter), a.scale.to_bits()))
                .eq(other
                    .iter()
                    .map(|a| (Arc::as_ptr(&a.adapter), a.scale.to_bits()))),
        }
    }

    /// A key for saved state: which adapters (by name) at which scales. Empty without any.
    pub fn describe(&self) -> String {
        self.iter()
            .map(|a| format!("{}@{}", a.adapter.name, a.scale))
            .collect::<Vec<_>>()
            .join(",")
    }
}
