//! LoRA adapters, applied unmerged: each adapted projection `y = W·x` of the model becomes
//! `y = W·x + s·B(A·x)` for the sequences that attached the adapter, with `W` left as it is
//! (quantized, shared by every session) and `s = scale · alpha / rank` as llama.cpp scales it
//! (`scale` alone when the adapter has no alpha).
//!
//! Adapters come as llama.cpp GGUF adapters (`general.type = adapter`, `adapter.type = lora`,
//! tensors `<base>.lora_a` `[in, r]` and `<base>.lora_b` `[r, out]` in ggml order) or as PEFT
//! directories (`adapter_config.json` + `adapter_model.safetensors`), which `models::peft` turns
//! into the same in-memory GGUF adapter the converter would have written. Loading resolves the
//! adapter against the model it will run on: every pair must name a projection the model
//! computes, with matching dimensions, or loading fails naming the tensor.
//!
//! Which sequences use which adapters is per session ([`LoraSet`]); the model stays stateless
//! and a batched step can mix sessions with different adapters (the deltas are computed per
//! group of rows that share a set).

use std::collections::HashMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::backend::{LowRank, Weight};
use crate::gguf::Fingerprint;

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
    pub(crate) pairs: HashMap<String, LoraPair>,
    /// The token embeddings' pair (A holds a row per token: [`LowRank::embedding`]).
    pub(crate) embd: Option<LoraPair>,
    /// Pairs as the file names them (for reporting).
    pub(crate) n_tensors: usize,
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

impl Fingerprint {
    /// The fingerprint of this model with the adapters `lora` applied (itself without any):
    /// state computed with adapters is only restored where the same ones, at the same scales,
    /// are attached.
    pub fn with_adapters(self, lora: &LoraSet) -> Fingerprint {
        if lora.is_empty() {
            return self;
        }
        let mut h = Sha256::new();
        h.update(b"cera-fingerprint-lora-v1\0");
        h.update(self.0);
        for a in lora.iter() {
            h.update(a.adapter.fingerprint.0);
            h.update(a.scale.to_le_bytes());
        }
        let d = h.finalize();
        let mut out = [0u8; 16];
        out.copy_from_slice(&d[..16]);
        Fingerprint(out)
    }
}
