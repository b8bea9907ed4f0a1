//! Per-architecture facts of the conversion: which Hugging Face class maps to which GGUF
//! architecture, tensor names, the hyperparameter keys convert_hf_to_gguf.py writes, and the
//! tensor rewrites it applies (llama's Q/K row permutation for interleaved RoPE).

use serde_json::Value as Json;

use super::Kv;
use super::checkpoint::Checkpoint;
use super::checkpoint::bad;
use super::params::{lfm2_ff_dim, rope_parameters, text_params};
use crate::error::Result;
use crate::gguf::{Array, Value};
use crate::models::hf;

/// The model families the converter knows: the architectures Cera runs.
pub(super) use crate::models::Arch as Family;

#[derive(Clone, Copy, Debug)]
pub(super) struct Arch {
    pub family: Family,
    /// `general.architecture`.
    pub gguf: &'static str,
}

/// Hugging Face `architectures[0]` values we convert.
const TABLE: &[(&str, Family, &str)] = &[
    ("LlamaForCausalLM", Family::Llama, "llama"),
    ("LlamaModel", Family::Llama, "llama"),
    ("MistralForCausalLM", Family::Llama, "llama"),
    ("Qwen2ForCausalLM", Family::Qwen2, "qwen2"),
    ("Qwen2Model", Family::Qwen2, "qwen2"),
    ("Qwen3ForCausalLM", Family::Qwen3, "qwen3"),
    ("GraniteForCausalLM", Family::Granite, "granite"),
    ("Olmo2ForCausalLM", Family::Olmo2, "olmo2"),
    ("Lfm2ForCausalLM", Family::Lfm2, "lfm2"),
    ("LFM2ForCausalLM", Family::Lfm2, "lfm2"),
    ("Lfm2MoeForCausalLM", Family::Lfm2Moe, "lfm2moe"),
    ("Gemma2ForCausalLM", Family::Gemma2, "gemma2"),
    ("Gemma3ForCausalLM", Family::Gemma3, "gemma3"),
    ("Phi3ForCausalLM", Family::Phi3, "phi3"),
    ("BertModel", Family::Bert, "bert"),
    ("BertForMaskedLM", Family::Bert, "bert"),
];

pub(super) fn lookup(hf_arch: &str) -> Option<Arch> {
    TABLE
        .iter()
        .find(|(h, _, _)| *h == hf_arch)
        .map(|&(_, family, gguf)| Arch { family, gguf })
}

pub(super) fn supported() -> Vec<&'static str> {
    TABLE.iter().map(|t| t.0).collect()
}

/// Source tensors the converter drops.
pub(super) fn skipped(name: &str) -> bool {
    name.ends_with(".attention.masked_bias")
        || name.ends_with(".attention.bias")
        || name.ends_with(".rotary_emb.inv_freq")
}

/// BERT encoders (names after `encoder.layer.N.`, and the embeddings).
const BERT_LAYER: &[(&str, &str)] = &[
    ("attention.self.query", "attn_q"),
    ("attention.self.key", "attn_k"),
    ("attention.self.value", "attn_v"),
    ("attention.output.dense", "attn_output"),
    ("attention.output.LayerNorm", "attn_output_norm"),
    ("intermediate.dense", "ffn_up"),
    ("output.dense", "ffn_down"),
    ("output.LayerNorm", "layer_output_norm"),
];
const BERT_GLOBAL: &[(&str, &str)] = &[
    ("embeddings.word_embeddings", "token_embd"),
    ("embeddings.position_embeddings", "position_embd"),
    ("embeddings.token_type_embeddings", "token_types"),
    ("embeddings.LayerNorm", "token_embd_norm"),
];

impl Arch {
    /// The GGUF name of a checkpoint tensor; `None` when it has none (an error upstream, as
    /// the converter's "Can not map tensor").
    pub fn map_name(&self, name: &str) -> Option<String> {
        if self.family == Family::Bert {
            return bert_name(name);
        }
        let name = match self.family {
            // headless checkpoints (Qwen2Model, LlamaModel) lack the "model." prefix
            _ if !name.starts_with("model.") && name != "lm_head.weight" => format!("model.{name}"),
            _ => name.to_owned(),
        };
        // LFM2-MoE's routing bias is stored without a suffix; the converter names it a bias
        let name = match name.strip_suffix(".expert_bias") {
            Some(b) if self.family == Family::Lfm2Moe => format!("{b}.expert_bias.bias"),
            _ => name,
        };
        let (base, suffix) = name
            .strip_suffix(".weight")
            .map(|b| (b, ".weight"))
            .or_else(|| name.strip_suffix(".bias").map(|b| (b, ".bias")))?;
        if let Some(&(_, g)) = hf::GLOBAL.iter().find(|(h, _)| *h == base) {
            return Some(format!("{g}{suffix}"));
        }
        let rest = base.strip_prefix("model.layers.")?;
        let (bid, part) = rest.split_once('.')?;
        let bid: u32 = bid.parse().ok()?;
        let g = hf::layer_name(self.family, part)?;
        let qk_norm = matches!(
            self.family,
            Family::Qwen3 | Family::Olmo2 | Family::Lfm2 | Family::Lfm2Moe | Family::Gemma3
        );
        if matches!(g, "attn_q_norm" | "attn_k_norm") && !qk_norm {
            return None;
        }
        Some(format!("blk.{bid}.{g}{suffix}"))
    }

    /// Rewrites a tensor's values (row-major, `shape` in PyTorch order) as the converter does.
    pub fn transform(
        &self,
        ck: &Checkpoint,
        hf_name: &str,
        shape: &[usize],
        v: &mut [f32],
    ) -> Result<()> {
        if matches!(self.family, Family::Gemma2 | Family::Gemma3)
            && hf_name.ends_with("norm.weight")
        {
            // Gemma's RMSNorm scales by (1 + w); GGUF stores the factor
            for x in v.iter_mut() {
                *x += 1.0;
            }
        }
        if hf::permutes_qk(self.family) {
            let n_head = ck.need_u64(&["n_heads", "num_attention_heads"])? as usize;
            let n_kv = ck
                .hparam_u64(&["n_kv_heads", "num_key_value_heads"])
                .map_or(n_head, |n| n as usize);
            let heads = if hf_name.ends_with("q_proj.weight") || hf_name.ends_with("q_proj.bias") {
                Some(n_head)
            } else if hf_name.ends_with("k_proj.weight") || hf_name.ends_with("k_proj.bias") {
                Some(n_kv)
            } else {
                None
            };
            if let Some(h) = heads {
                let cols: usize = shape[1..].iter().product();
                let out = hf::permute_head_rows(v, shape[0], cols, h)
                    .map_err(|r| super::checkpoint::bad(&ck.dir, format!("{hf_name}: {r}")))?;
                v.copy_from_slice(&out);
            }
        }
        Ok(())
    }

    /// The hyperparameter keys (`set_gguf_parameters`), `general.file_type` included.
    pub fn params(&self, ck: &Checkpoint, kv: &mut Kv, file_type: u32) -> Result<()> {
        let a = self.gguf;
        let u32v = |n: u64| Value::U32(n as u32);
        let f32v = |x: f64| Value::F32(x as f32);
        // Granite ignores head_dim
        let head_dim = match self.family {
            Family::Granite => None,
            _ => ck.config.get("head_dim").and_then(Json::as_u64),
        };
        // LFM2: a KV head count per layer, 0 for convolution layers
        let kv_heads = match self.family {
            Family::Lfm2 | Family::Lfm2Moe => {
                let n = ck.need_u64(&["num_key_value_heads"])? as i32;
                let types = ck
                    .config
                    .get("layer_types")
                    .and_then(Json::as_array)
                    .ok_or_else(|| bad(&ck.dir, "config.json has no layer_types"))?;
                let per_layer: Vec<i32> = types
                    .iter()
                    .map(|t| {
                        let t = t.as_str().unwrap_or("");
                        let attn = match self.family {
                            Family::Lfm2 => t != "conv",
                            _ => t == "full_attention",
                        };
                        if attn { n } else { 0 }
                    })
                    .collect();
                Some(Value::Array(Array::I32(per_layer)))
            }
            _ => None,
        };
        if self.own_params(ck, kv, file_type)? {
            return Ok(());
        }
        text_params(ck, kv, a, file_type, head_dim, kv_heads)?;
        match self.family {
            Family::Llama | Family::Granite => {
                kv.set(
                    format!("{a}.vocab_size"),
                    u32v(ck.need_u64(&["vocab_size"])?),
                );
                let rope_dim = match head_dim {
                    Some(d) => d,
                    None => {
                        ck.need_u64(&["hidden_size"])? / ck.need_u64(&["num_attention_heads"])?
                    }
                };
                kv.set(format!("{a}.rope.dimension_count"), u32v(rope_dim));
                if self.family == Family::Granite {
                    for (src, key) in [
                        ("attention_multiplier", "attention.scale"),
                        ("embedding_multiplier", "embedding_scale"),
                        ("residual_multiplier", "residual_scale"),
                        ("logits_scaling", "logit_scale"),
                    ] {
                        if let Some(x) = ck
                            .config
                            .get(src)
                            .and_then(Json::as_f64)
                            .filter(|&x| x != 0.0)
                        {
                            kv.set(format!("{a}.{key}"), f32v(x));
                        }
                    }
                }
            }
            Family::Olmo2 => {
                if let Some(w) = ck.config.get("sliding_window").and_then(Json::as_u64) {
                    kv.set(format!("{a}.attention.sliding_window"), u32v(w));
                    let pattern: Vec<bool> =
                        match ck.config.get("layer_types").and_then(Json::as_array) {
                            Some(t) => t
                                .iter()
                                .map(|t| t.as_str() == Some("sliding_attention"))
                                .collect(),
                            None => (0..ck.need_u64(&["num_hidden_layers"])?)
                                .map(|i| (i + 1) % 4 != 0)
                                .collect(),
                        };
                    kv.set(
                        format!("{a}.attention.sliding_window_pattern"),
                        Value::Array(Array::Bool(pattern)),
                    );
                }
            }
            Family::Lfm2 => {
                kv.set(
                    format!("{a}.vocab_size"),
                    u32v(ck.need_u64(&["vocab_size"])?),
                );
                kv.set(
                    format!("{a}.shortconv.l_cache"),
                    u32v(ck.need_u64(&["conv_L_cache"])?),
                );
                if let Some(e) = ck.hparam_f64(&["norm_eps"]) {
                    kv.set(format!("{a}.attention.layer_norm_rms_epsilon"), f32v(e));
                }
                kv.set(format!("{a}.feed_forward_length"), u32v(lfm2_ff_dim(ck)?));
            }
            Family::Lfm2Moe => {
                kv.set(
                    format!("{a}.expert_feed_forward_length"),
                    u32v(ck.need_u64(&["moe_intermediate_size"])?),
                );
                kv.set(
                    format!("{a}.leading_dense_block_count"),
                    u32v(ck.need_u64(&["num_dense_layers"])?),
                );
                kv.set(format!("{a}.expert_gating_func"), u32v(2)); // sigmoid
                kv.set(
                    format!("{a}.vocab_size"),
                    u32v(ck.need_u64(&["vocab_size"])?),
                );
                kv.set(
                    format!("{a}.shortconv.l_cache"),
                    u32v(ck.need_u64(&["conv_L_cache"])?),
                );
            }
            Family::Gemma3 => {
                let c = &ck.config;
                let u = |k: &str, d: u64| c.get(k).and_then(Json::as_u64).unwrap_or(d);
                kv.set(
                    format!("{a}.context_length"),
                    u32v(u("max_position_embeddings", 131072)),
                );
                kv.set(
                    format!("{a}.attention.head_count"),
                    u32v(u("num_attention_heads", 8)),
                );
                let eps = c.get("rms_norm_eps").and_then(Json::as_f64).unwrap_or(1e-6);
                kv.set(format!("{a}.attention.layer_norm_rms_epsilon"), f32v(eps));
                kv.set(
                    format!("{a}.attention.key_length"),
                    u32v(u("head_dim", 256)),
                );
                kv.set(
                    format!("{a}.attention.value_length"),
                    u32v(u("head_dim", 256)),
                );
                let rope = rope_parameters(ck);
                let full = rope
                    .get("full_attention")
                    .and_then(Json::as_object)
                    .unwrap_or(&rope);
                let theta = full
                    .get("rope_theta")
                    .and_then(Json::as_f64)
                    .unwrap_or(1_000_000.0);
                kv.set(format!("{a}.rope.freq_base"), f32v(theta));
                if c.get("attn_logit_softcapping")
                    .is_some_and(|v| !v.is_null())
                {
                    return Err(bad(
                        &ck.dir,
                        "Gemma 3 has no attention logit softcapping (attn_logit_softcapping is set)",
                    ));
                }
                if let Some(cap) = c
                    .get("final_logit_softcapping")
                    .and_then(Json::as_f64)
                    .filter(|&x| x != 0.0)
                {
                    kv.set(format!("{a}.final_logit_softcapping"), f32v(cap));
                }
                if c.get("sliding_window_pattern").and_then(Json::as_u64) != Some(1) {
                    kv.set(
                        format!("{a}.attention.sliding_window"),
                        u32v(ck.need_u64(&["sliding_window"])?),
                    );
                }
                kv.set(
                    format!("{a}.attention.head_count_kv"),
                    u32v(u("num_key_value_heads", 4)),
                );
            }
            Family::Bert => {
                kv.set(format!("{a}.attention.causal"), false);
                if let Some(p) = pooling_type(ck)? {
                    kv.set(format!("{a}.pooling_type"), u32v(p as u64));
                }
            }
            Family::Qwen2 | Family::Qwen3 => {
                if let Some(p) = pooling_type(ck)? {
                    kv.set(format!("{a}.pooling_type"), u32v(p as u64));
                }
            }
            Family::Gemma2 | Family::Phi3 => {}
        }
        Ok(())
    }

    /// Families whose converter writes its own hyperparameter keys instead of TextModel's.
    fn own_params(&self, ck: &Checkpoint, kv: &mut Kv, file_type: u32) -> Result<bool> {
        let a = self.gguf;
        let u32v = |n: u64| Value::U32(n as u32);
        let f32v = |x: f64| Value::F32(x as f32);
        let c = &ck.config;
        match self.family {
            Family::Gemma2 => {
                let need = |k: &str| ck.need_u64(&[k]);
                kv.set(
                    format!("{a}.context_length"),
                    u32v(need("max_position_embeddings")?),
                );
                kv.set(format!("{a}.embedding_length"), u32v(need("hidden_size")?));
                kv.set(format!("{a}.block_count"), u32v(need("num_hidden_layers")?));
                kv.set(
                    format!("{a}.feed_forward_length"),
                    u32v(need("intermediate_size")?),
                );
                let heads = need("num_attention_heads")?;
                kv.set(format!("{a}.attention.head_count"), u32v(heads));
                let kv_heads = c
                    .get("num_key_value_heads")
                    .and_then(Json::as_u64)
                    .unwrap_or(heads);
                kv.set(format!("{a}.attention.head_count_kv"), u32v(kv_heads));
                let eps = ck
                    .hparam_f64(&["rms_norm_eps"])
                    .ok_or_else(|| bad(&ck.dir, "config.json has no rms_norm_eps"))?;
                kv.set(format!("{a}.attention.layer_norm_rms_epsilon"), f32v(eps));
                kv.set(format!("{a}.attention.key_length"), u32v(need("head_dim")?));
                kv.set(
                    format!("{a}.attention.value_length"),
                    u32v(need("head_dim")?),
                );
                kv.set("general.file_type", u32v(file_type as u64));
                for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
                    let x = ck
                        .hparam_f64(&[key])
                        .ok_or_else(|| bad(&ck.dir, format!("config.json has no {key}")))?;
                    kv.set(format!("{a}.{key}"), f32v(x));
                }
                kv.set(
                    format!("{a}.attention.sliding_window"),
                    u32v(need("sliding_window")?),
                );
                Ok(true)
            }
            Family::Phi3 => {
                let n_embd = ck.need_u64(&["hidden_size", "n_embd"])?;
                let n_head = ck.need_u64(&["num_attention_heads", "n_head"])?;
                let n_head_kv = ck.need_u64(&["num_key_value_heads", "n_head_kv"])?;
                let eps = ck
                    .hparam_f64(&["rms_norm_eps"])
                    .ok_or_else(|| bad(&ck.dir, "config.json has no rms_norm_eps"))?;
                let max_pos = ck.need_u64(&["n_positions", "max_position_embeddings"])?;
                let rope = rope_parameters(ck);
                let orig = rope
                    .get("original_max_position_embeddings")
                    .and_then(Json::as_u64)
                    .ok_or_else(|| {
                        bad(
                            &ck.dir,
                            "config.json has no original_max_position_embeddings",
                        )
                    })?;
                let rot = rope
                    .get("partial_rotary_factor")
                    .and_then(Json::as_f64)
                    .unwrap_or(1.0);
                let rope_dims = (rot * n_embd as f64) as u64 / n_head;
                kv.set(format!("{a}.context_length"), u32v(max_pos));
                kv.set(
                    format!("{a}.rope.scaling.original_context_length"),
                    u32v(orig),
                );
                kv.set(format!("{a}.embedding_length"), u32v(n_embd));
                kv.set(
                    format!("{a}.feed_forward_length"),
                    u32v(ck.need_u64(&["intermediate_size"])?),
                );
                kv.set(
                    format!("{a}.block_count"),
                    u32v(ck.need_u64(&[
                        "num_hidden_layers",
                        "n_layers",
                        "n_layer",
                        "num_layers",
                    ])?),
                );
                kv.set(format!("{a}.attention.head_count"), u32v(n_head));
                kv.set(format!("{a}.attention.head_count_kv"), u32v(n_head_kv));
                kv.set(format!("{a}.attention.layer_norm_rms_epsilon"), f32v(eps));
                kv.set(format!("{a}.rope.dimension_count"), u32v(rope_dims));
                let theta = rope
                    .get("full_attention")
                    .and_then(|f| f.get("rope_theta"))
                    .or_else(|| rope.get("rope_theta"))
                    .and_then(Json::as_f64)
                    .ok_or_else(|| bad(&ck.dir, "config.json has no rope_theta"))?;
                kv.set(format!("{a}.rope.freq_base"), f32v(theta));
                kv.set("general.file_type", u32v(file_type as u64));
                let window = c.get("sliding_window").and_then(Json::as_u64).unwrap_or(0);
                kv.set(format!("{a}.attention.sliding_window"), u32v(window));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Phi-3's long-context RoPE factors (`rope_factors_long`/`_short`), with the attention
    /// factor key they come with.
    pub fn phi3_rope_factors(
        &self,
        ck: &Checkpoint,
        kv: &mut Kv,
    ) -> Result<Option<(Vec<f32>, Vec<f32>)>> {
        if self.family != Family::Phi3 {
            return Ok(None);
        }
        let rope = rope_parameters(ck);
        let list = |k: &str| -> Option<Vec<f32>> {
            rope.get(k)?
                .as_array()?
                .iter()
                .map(|x| x.as_f64().map(|x| x as f32))
                .collect()
        };
        let Some(long) = list("long_factor").filter(|l| !l.is_empty()) else {
            return Ok(None);
        };
        let short = list("short_factor")
            .ok_or_else(|| bad(&ck.dir, "rope_scaling has long_factor but no short_factor"))?;
        let max_pos = ck.need_u64(&["n_positions", "max_position_embeddings"])? as f64;
        let orig = rope
            .get("original_max_position_embeddings")
            .and_then(Json::as_f64)
            .ok_or_else(|| {
                bad(
                    &ck.dir,
                    "config.json has no original_max_position_embeddings",
                )
            })?;
        let scale = max_pos / orig;
        let ty = rope
            .get("rope_type")
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_ascii_lowercase();
        let attn = match ty.as_str() {
            "su" | "longrope" if scale > 1.0 => (1.0 + scale.ln() / orig.ln()).sqrt(),
            "yarn" if scale > 1.0 => 0.1 * scale.ln() + 1.0,
            "su" | "longrope" | "yarn" => 1.0,
            "" => return Err(bad(&ck.dir, "rope_scaling has no type")),
            t => {
                return Err(bad(
                    &ck.dir,
                    format!("rope scaling type {t} is not supported"),
                ));
            }
        };
        kv.set(
            format!("{}.rope.scaling.attn_factor", self.gguf),
            Value::F32(attn as f32),
        );
        let n_embd = ck.need_u64(&["hidden_size", "n_embd"])? as f64;
        let n_head = ck.need_u64(&["num_attention_heads", "n_head"])? as f64;
        let rot = rope
            .get("partial_rotary_factor")
            .and_then(Json::as_f64)
            .unwrap_or(1.0);
        let half = ((rot * n_embd) as u64 / n_head as u64) as usize / 2;
        if long.len() != short.len() || long.len() != half {
            return Err(bad(
                &ck.dir,
                format!("rope long/short factors must have {half} values each"),
            ));
        }
        Ok(Some((long, short)))
    }

    /// Gemma 3 drops token embedding rows past the vocabulary.
    pub fn embedding_rows(&self, ck: &Checkpoint, hf_name: &str) -> Option<usize> {
        (self.family == Family::Gemma3 && hf_name.contains("embed_tokens.weight"))
            .then(|| ck.hparam_u64(&["vocab_size"]).map(|n| n as usize))
            .flatten()
    }

    /// Tensors this family's converter drops (Gemma 2: an `lm_head` some exports carry; BERT:
    /// the pooler and the pre-training heads).
    pub fn drops(&self, name: &str) -> bool {
        if self.family == Family::Bert {
            let n = name.strip_prefix("bert.").unwrap_or(name);
            return matches!(
                n,
                "embeddings.position_ids" | "pooler.dense.weight" | "pooler.dense.bias"
            ) || n.starts_with("cls.predictions")
                || n.starts_with("cls.seq_relationship");
        }
        skipped(name) || (self.family == Family::Gemma2 && name == "lm_head.weight")
    }

    /// LFM2's convolution kernels lose their middle dimension of 1 (`[d, 1, L]` → `[d, L]`).
    pub fn squeezes(&self, name: &str) -> bool {
        matches!(self.family, Family::Lfm2 | Family::Lfm2Moe) && name.contains("conv.conv")
    }

    /// Tensors stacked into one (MoE experts): the merged name of a per-expert source name,
    /// and the expert index. LFM2-MoE's `feed_forward.experts.{x}.w1` → `feed_forward.experts.w1`.
    pub fn expert_part(&self, name: &str) -> Option<(String, usize)> {
        if self.family != Family::Lfm2Moe {
            return None;
        }
        let (head, tail) = name.split_once(".feed_forward.experts.")?;
        let (x, w) = tail.split_once('.')?;
        let x: usize = x.parse().ok()?;
        let w = w.strip_suffix(".weight").unwrap_or(w);
        Some((format!("{head}.feed_forward.experts.{w}"), x))
    }

    /// Tokenizer keys before the vocabulary proper (llama: `add_space_prefix` from
    /// tokenizer_config.json) and after it (llama: the granite-small BOS rule).
    pub fn vocab(&self, ck: &Checkpoint, kv: &mut Kv) -> Result<String> {
        let has_model = ck.dir.join("tokenizer.model").is_file();
        if self.family == Family::Bert {
            let types = ck
                .config
                .get("type_vocab_size")
                .and_then(Json::as_u64)
                .unwrap_or(1);
            return super::vocab::wordpiece(&ck.dir, &ck.config, kv, types);
        }
        match self.family {
            Family::Gemma2 | Family::Gemma3 if has_model || self.family == Family::Gemma2 => {
                super::sentencepiece::write(&ck.dir, &ck.config, kv, false)?;
                kv.set("tokenizer.ggml.add_space_prefix", false);
                return Ok("default".into());
            }
            Family::Phi3 => {
                let gpt2 = super::checkpoint::read_json(&ck.dir, "tokenizer_config.json")?
                    .and_then(|t| {
                        t.get("tokenizer_class")
                            .and_then(Json::as_str)
                            .map(|c| c == "GPT2Tokenizer")
                    })
                    .unwrap_or(false);
                if !gpt2 {
                    if !has_model {
                        return Err(bad(
                            &ck.dir,
                            "no tokenizer.model (Phi-3's SentencePiece vocabulary)",
                        ));
                    }
                    super::sentencepiece::write(&ck.dir, &ck.config, kv, true)?;
                    return Ok("default".into());
                }
            }
            _ => {}
        }
        if matches!(self.family, Family::Llama | Family::Granite)
            && let Some(tc) = super::checkpoint::read_json(&ck.dir, "tokenizer_config.json")?
            && let Some(Json::Bool(p)) = tc.get("add_prefix_space")
        {
            kv.set("tokenizer.ggml.add_space_prefix", *p);
        }
        let llama = matches!(self.family, Family::Llama | Family::Granite);
        let pre = if llama && has_model {
            super::sentencepiece::write(&ck.dir, &ck.config, kv, false)?;
            "default".into()
        } else {
            super::vocab::gpt2(&ck.dir, &ck.config, kv)?
        };
        if matches!(self.family, Family::Llama | Family::Granite)
            && ck.hparam_u64(&["vocab_size"]) == Some(49152)
        {
            kv.set("tokenizer.ggml.add_bos_token", false);
        }
        Ok(pre)
    }
}

/// A BERT checkpoint name (`bert.` prefix and `gamma`/`beta` norms allowed) in GGUF.
fn bert_name(name: &str) -> Option<String> {
    let n = name.strip_prefix("bert.").unwrap_or(name);
    let n = match (n.strip_suffix(".gamma"), n.strip_suffix(".beta")) {
        (Some(b), _) => format!("{b}.weight"),
        (_, Some(b)) => format!("{b}.bias"),
        _ => n.to_owned(),
    };
    let (base, suffix) = n
        .strip_suffix(".weight")
        .map(|b| (b, ".weight"))
        .or_else(|| n.strip_suffix(".bias").map(|b| (b, ".bias")))?;
    if let Some(&(_, g)) = BERT_GLOBAL.iter().find(|(h, _)| *h == base) {
        return Some(format!("{g}{suffix}"));
    }
    let (bid, part) = base.strip_prefix("encoder.layer.")?.split_once('.')?;
    let bid: u32 = bid.parse().ok()?;
    let &(_, g) = BERT_LAYER.iter().find(|(h, _)| *h == part)?;
    Some(format!("blk.{bid}.{g}{suffix}"))
}

/// The sentence-transformers pooling (`modules.json` → its Pooling module's config), as
/// `{arch}.pooling_type`: 1 mean, 2 CLS, 3 last.
fn pooling_type(ck: &Checkpoint) -> Result<Option<u32>> {
    let Some(modules) = super::checkpoint::read_json(&ck.dir, "modules.json")? else {
        return Ok(None);
    };
    let path = modules.as_array().into_iter().flatten().find_map(|m| {
        m.get("type")?
            .as_str()?
            .ends_with("Pooling")
            .then(|| m.get("path")?.as_str().map(str::to_owned))?
    });
    let Some(path) = path else {
        return Ok(None);
    };
    let cfg = super::checkpoint::read_json(&ck.dir, &format!("{path}/config.json"))?.ok_or_else(
        || {
            bad(
                &ck.dir,
                format!("modules.json names {path}, which has no config.json"),
            )
        },
    )?;
    let on = |k: &str| cfg.get(k).and_then(Json::as_bool) == Some(true);
    Ok(Some(if on("pooling_mode_mean_tokens") {
        1
    } else if on("pooling_mode_cls_token") {
        2
    } else if on("pooling_mode_lasttoken") {
        3
    } else {
        match cfg.get("pooling_mode").and_then(Json::as_str) {
            Some("mean") => 1,
            Some("cls") => 2,
            Some("lasttoken") => 3,
            _ => {
                return Err(bad(
                    &ck.dir,
                    "only mean, CLS and last-token pooling are supported",
                ));
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_gguf() {
        let a = lookup("LlamaForCausalLM").unwrap();
        assert_eq!(
            a.map_name("model.layers.3.self_attn.q_proj.weight")
                .as_deref(),
            Some("blk.3.attn_q.weight")
        );
        assert_eq!(
            a.map_name("model.embed_tokens.weight").as_deref(),
            Some("token_embd.weight")
        );
        assert_eq!(
            a.map_name("lm_head.weight").as_deref(),
            Some("output.weight")
        );
        assert_eq!(a.map_name("model.layers.0.self_attn.q_norm.weight"), None);
        let q = lookup("Qwen2Model").unwrap();
        assert_eq!(
            q.map_name("layers.1.self_attn.k_proj.bias").as_deref(),
            Some("blk.1.attn_k.bias")
        );
        let q3 = lookup("Qwen3ForCausalLM").unwrap();
        assert_eq!(
            q3.map_name("model.layers.0.self_attn.q_norm.weight")
                .as_deref(),
            Some("blk.0.attn_q_norm.weight")
        );
    }
}
