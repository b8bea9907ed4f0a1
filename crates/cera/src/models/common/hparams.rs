//! Hyperparameters every transformer GGUF carries, read through the central key table.

use crate::error::{Error, Result};
use crate::gguf::{GgufFile, Value};
use crate::keys::{arch as k, arch_key};

/// The common hyperparameters (`{arch}.*`).
#[derive(Clone, Debug)]
pub struct BaseHparams {
    pub arch: String,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_ff: usize,
    pub n_head: usize,
    /// Per layer (LFM2 stores 0 for convolution layers).
    pub n_head_kv: Vec<usize>,
    pub head_dim: usize,
    pub head_dim_v: usize,
    pub n_rot: usize,
    pub rms_eps: f32,
    pub rope_freq_base: f32,
}

impl BaseHparams {
    pub fn read(g: &GgufFile, arch: &str) -> Result<BaseHparams> {
        let key = |s: &str| arch_key(arch, s);
        let n_layer: usize = g.get_as(&key(k::BLOCK_COUNT))?;
        if n_layer == 0 || n_layer > 4096 {
            return Err(Error::Model(format!(
                "{}: {n_layer} layers is not plausible",
                key(k::BLOCK_COUNT)
            )));
        }
        let n_embd: usize = g.get_as(&key(k::EMBEDDING_LENGTH))?;
        let n_head: usize = g.get_as(&key(k::HEAD_COUNT))?;
        if n_head == 0 {
            return Err(Error::Model(format!("{} is 0", key(k::HEAD_COUNT))));
        }
        let n_head_kv = match g.get(&key(k::HEAD_COUNT_KV)) {
            Some(_) => g
                .get_per_layer_u32(&key(k::HEAD_COUNT_KV), n_layer)?
                .into_iter()
                .map(|x| x as usize)
                .collect(),
            None => vec![n_head; n_layer],
        };
        let head_dim: usize = g.get_opt(&key(k::KEY_LENGTH))?.unwrap_or(n_embd / n_head);
        let head_dim_v: usize = g.get_opt(&key(k::VALUE_LENGTH))?.unwrap_or(head_dim);
        let n_rot: usize = g
            .get_opt(&key(k::ROPE_DIMENSION_COUNT))?
            .unwrap_or(head_dim);
        let n_vocab = match g.get_opt::<usize>(&key(k::VOCAB_SIZE))? {
            Some(v) => v,
            None => g.get_array(crate::keys::tokenizer::TOKENS)?.len(),
        };
        let n_ff = match g.get(&key(k::FEED_FORWARD_LENGTH)) {
            Some(_) => *g
                .get_per_layer_u32(&key(k::FEED_FORWARD_LENGTH), n_layer)?
                .iter()
                .max()
                .expect("n_layer > 0") as usize,
            None => 0,
        };
        for &kv in &n_head_kv {
            if kv != 0 && !n_head.is_multiple_of(kv) {
                return Err(Error::Model(format!(
                    "{n_head} query heads do not divide into {kv} KV heads"
                )));
            }
        }
        if n_rot > head_dim || !n_rot.is_multiple_of(2) {
            return Err(Error::Model(format!(
                "rope dimension count {n_rot} does not fit head size {head_dim}"
            )));
        }
        Ok(BaseHparams {
            arch: arch.to_owned(),
            n_vocab,
            n_ctx_train: g.get_opt(&key(k::CONTEXT_LENGTH))?.unwrap_or(2048),
            n_embd,
            n_layer,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            n_rot,
            rms_eps: g.get_opt(&key(k::LAYER_NORM_RMS_EPS))?.unwrap_or(1e-5),
            rope_freq_base: g.get_opt(&key(k::ROPE_FREQ_BASE))?.unwrap_or(10000.0),
        })
    }
}

/// Which layers use sliding-window attention, as llama.cpp decides it: either one flag per layer
/// in `{arch}.attention.sliding_window_pattern`, or a period `p` (that key as an integer, else
/// the architecture's default) where every `p`-th layer is global and the others local
/// (`p == 0`: all local).
pub fn swa_layers(
    g: &GgufFile,
    arch: &str,
    n_layer: usize,
    default_period: u32,
) -> Result<Vec<bool>> {
    let key = arch_key(arch, k::SLIDING_WINDOW_PATTERN);
    if let Some(Value::Array(a)) = g.get(&key) {
        let flags = a.to_i64_vec().ok_or_else(|| Error::KeyType {
            key: key.clone(),
            expected: "integer or array of flags",
            found: format!("array[{}]", a.elem_type()),
        })?;
        if flags.len() != n_layer {
            return Err(Error::Model(format!(
                "{key} has {} entries for {n_layer} layers",
                flags.len()
            )));
        }
        return Ok(flags.into_iter().map(|f| f != 0).collect());
    }
    let p: u32 = g.get_opt(&key)?.unwrap_or(default_period);
    Ok((0..n_layer as u32)
        .map(|il| p == 0 || il % p < p - 1)
        .collect())
}
