//! Per-architecture facts of the conversion: which Hugging Face class maps to which GGUF
//! architecture, tensor names, the hyperparameter keys convert_hf_to_gguf.py writes, and the
//! tensor rewrites it applies (llama's Q/K row permutation for interleaved RoPE).

use serde_json::Value as Json;

use super::Kv;
use super::checkpoint::Checkpoint;
use super::checkpoint::bad;
use crate::error::Result;
use crate::gguf::{Array, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Family {
    Llama,
    Granite,
    Qwen2,
    Qwen3,
    Olmo2,
    Lfm2,
    Lfm2Moe,
}

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

/// Per-layer names (after `model.layers.N.`, without `.weight`/`.bias`).
const LAYER: &[(&str, &str)] = &[
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "ffn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// OLMo 2's norms sit after the attention and the FFN.
const OLMO2: &[(&str, &str)] = &[
    ("post_attention_layernorm", "post_attention_norm"),
    ("post_feedforward_layernorm", "post_ffw_norm"),
];

/// LFM2: short-convolution blocks and attention blocks with their own names.
const LFM2: &[(&str, &str)] = &[
    ("operator_norm", "attn_norm"),
    ("ffn_norm", "ffn_norm"),
    ("self_attn.out_proj", "attn_output"),
    ("self_attn.q_layernorm", "attn_q_norm"),
    ("self_attn.k_layernorm", "attn_k_norm"),
    ("conv.in_proj", "shortconv.in_proj"),
    ("conv.out_proj", "shortconv.out_proj"),
    ("conv.conv", "shortconv.conv"),
    ("feed_forward.w1", "ffn_gate"),
    ("feed_forward.w3", "ffn_up"),
    ("feed_forward.w2", "ffn_down"),
    ("feed_forward.gate", "ffn_gate_inp"),
    ("feed_forward.expert_bias", "exp_probs_b"),
    ("feed_forward.experts.w1", "ffn_gate_exps"),
    ("feed_forward.experts.w3", "ffn_up_exps"),
    ("feed_forward.experts.w2", "ffn_down_exps"),
];

const GLOBAL: &[(&str, &str)] = &[
    ("model.embed_tokens", "token_embd"),
    ("model.norm", "output_norm"),
    ("model.embedding_norm", "token_embd_norm"),
    ("lm_head", "output"),
];

impl Arch {
    /// The GGUF name of a checkpoint tensor; `None` when it has none (an error upstream, as
    /// the converter's "Can not map tensor").
    pub fn map_name(&self, name: &str) -> Option<String> {
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
        if let Some(&(_, g)) = GLOBAL.iter().find(|(h, _)| *h == base) {
            return Some(format!("{g}{suffix}"));
        }
        let rest = base.strip_prefix("model.layers.")?;
        let (bid, part) = rest.split_once('.')?;
        let bid: u32 = bid.parse().ok()?;
        let table: &[&[(&str, &str)]] = match self.family {
            Family::Olmo2 => &[OLMO2, LAYER],
            Family::Lfm2 | Family::Lfm2Moe => &[LFM2, LAYER],
            _ => &[LAYER],
        };
        let g = table
            .iter()
            .find_map(|t| t.iter().find(|(h, _)| *h == part).map(|&(_, g)| g))?;
        let qk_norm = matches!(
            self.family,
            Family::Qwen3 | Family::Olmo2 | Family::Lfm2 | Family::Lfm2Moe
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
        if matches!(self.family, Family::Llama | Family::Granite) {
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
                permute_rows(v, shape, h)
                    .map_err(|r| super::checkpoint::bad(&ck.dir, format!("{hf_name}: {r}")))?;
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
            Family::Qwen2 | Family::Qwen3 => {}
        }
        Ok(())
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
        if matches!(self.family, Family::Llama | Family::Granite)
            && let Some(tc) = super::checkpoint::read_json(&ck.dir, "tokenizer_config.json")?
            && let Some(Json::Bool(p)) = tc.get("add_prefix_space")
        {
            kv.set("tokenizer.ggml.add_space_prefix", *p);
        }
        let pre = super::vocab::gpt2(&ck.dir, &ck.config, kv)?;
        if matches!(self.family, Family::Llama | Family::Granite)
            && ck.hparam_u64(&["vocab_size"]) == Some(49152)
        {
            kv.set("tokenizer.ggml.add_bos_token", false);
        }
        Ok(pre)
    }
}

/// llama's permutation: within each head, rows `[r0 r1 .. | r_h/2 ..]` (NeoX halves) become
/// interleaved pairs, `reshape(h, 2, d/2, ...).swapaxes(1, 2)`.
fn permute_rows(v: &mut [f32], shape: &[usize], heads: usize) -> std::result::Result<(), String> {
    let rows = shape[0];
    let cols: usize = shape[1..].iter().product();
    if heads == 0 || !rows.is_multiple_of(heads * 2) {
        return Err(format!(
            "{rows} rows do not split into {heads} heads of pairs"
        ));
    }
    let half = rows / heads / 2;
    let src = v.to_vec();
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                // out[h][i][j] = in[h][j][i]
                let out_row = h * 2 * half + i * 2 + j;
                let in_row = h * 2 * half + j * half + i;
                v[out_row * cols..(out_row + 1) * cols]
                    .copy_from_slice(&src[in_row * cols..(in_row + 1) * cols]);
            }
        }
    }
    Ok(())
}

/// LFM2's feed-forward width: `block_ff_dim` adjusted as the model does (2/3, a multiplier,
/// rounded up to `block_multiple_of`).
fn lfm2_ff_dim(ck: &Checkpoint) -> Result<u64> {
    let mut ff = ck.need_u64(&["block_ff_dim", "intermediate_size"])? as f64;
    if ck
        .config
        .get("block_auto_adjust_ff_dim")
        .and_then(Json::as_bool)
        == Some(true)
    {
        ff = (2.0 * ff / 3.0).trunc();
        if let Some(m) = ck
            .config
            .get("block_ffn_dim_multiplier")
            .and_then(Json::as_f64)
        {
            ff = (m * ff).trunc();
        }
        let multiple = ck.need_u64(&["block_multiple_of"])? as f64;
        ff = multiple * ((ff + multiple - 1.0) / multiple).floor();
    }
    Ok(ff as u64)
}

/// TextModel.set_gguf_parameters: the keys every text model gets.
fn text_params(
    ck: &Checkpoint,
    kv: &mut Kv,
    a: &str,
    file_type: u32,
    head_dim: Option<u64>,
    kv_heads: Option<Value>,
) -> Result<()> {
    let u32v = |n: u64| Value::U32(n as u32);
    let f32v = |x: f64| Value::F32(x as f32);
    kv.set(
        format!("{a}.block_count"),
        u32v(ck.need_u64(&["n_layers", "num_hidden_layers", "n_layer", "num_layers"])?),
    );
    let keys: [(&str, &[&str]); 5] = [
        (
            "context_length",
            &[
                "max_position_embeddings",
                "n_ctx",
                "n_positions",
                "max_length",
                "max_sequence_length",
                "model_max_length",
            ],
        ),
        ("embedding_length", &["hidden_size", "n_embd", "dim"]),
        (
            "feed_forward_length",
            &[
                "prefix_dense_intermediate_size",
                "dense_intermediate_size",
                "intermediate_size",
                "n_inner",
                "hidden_dim",
            ],
        ),
        (
            "attention.head_count",
            &["num_attention_heads", "n_head", "n_heads"],
        ),
        (
            "attention.head_count_kv",
            &["num_key_value_heads", "n_kv_heads"],
        ),
    ];
    for (k, names) in keys {
        if k == "attention.head_count_kv"
            && let Some(v) = &kv_heads
        {
            kv.set(format!("{a}.{k}"), v.clone());
        } else if let Some(v) = ck.hparam_u64(names) {
            kv.set(format!("{a}.{k}"), u32v(v));
        }
    }
    if ck.config.get("is_causal") == Some(&Json::Bool(false)) {
        kv.set(format!("{a}.attention.causal"), false);
    }
    let rope = rope_parameters(ck);
    let full = rope
        .get("full_attention")
        .and_then(Json::as_object)
        .unwrap_or(&rope);
    if let Some(t) = full.get("rope_type").and_then(Json::as_str) {
        let factor = full.get("factor").and_then(Json::as_f64);
        match (t, factor) {
            ("linear", Some(f)) => {
                kv.set(format!("{a}.rope.scaling.type"), "linear");
                kv.set(format!("{a}.rope.scaling.factor"), f32v(f));
            }
            ("yarn", Some(f)) => {
                kv.set(format!("{a}.rope.scaling.type"), "yarn");
                kv.set(format!("{a}.rope.scaling.factor"), f32v(f));
                let orig = full
                    .get("original_max_position_embeddings")
                    .and_then(Json::as_u64)
                    .ok_or_else(|| {
                        super::checkpoint::bad(
                            &ck.dir,
                            "yarn rope scaling without original_max_position_embeddings",
                        )
                    })?;
                kv.set(
                    format!("{a}.rope.scaling.original_context_length"),
                    u32v(orig),
                );
                for (key, src) in [
                    (
                        "rope.scaling.yarn_ext_factor",
                        &["extrapolation_factor"][..],
                    ),
                    (
                        "rope.scaling.yarn_attn_factor",
                        &["attention_factor", "attn_factor"][..],
                    ),
                    ("rope.scaling.yarn_beta_fast", &["beta_fast"][..]),
                    ("rope.scaling.yarn_beta_slow", &["beta_slow"][..]),
                ] {
                    if let Some(x) = src.iter().find_map(|k| full.get(*k)).and_then(Json::as_f64) {
                        kv.set(format!("{a}.{key}"), f32v(x));
                    }
                }
            }
            ("su" | "longrope", _) => kv.set(format!("{a}.rope.scaling.type"), "longrope"),
            _ => {}
        }
    }
    if let Some(theta) = full.get("rope_theta").and_then(Json::as_f64) {
        kv.set(format!("{a}.rope.freq_base"), f32v(theta));
    }
    if let Some(theta) = rope
        .get("sliding_attention")
        .and_then(|s| s.get("rope_theta"))
        .and_then(Json::as_f64)
    {
        kv.set(format!("{a}.rope.freq_base_swa"), f32v(theta));
    }
    if let Some(e) = ck.hparam_f64(&["rms_norm_eps", "norm_eps"]) {
        kv.set(format!("{a}.attention.layer_norm_rms_epsilon"), f32v(e));
    }
    if let Some(e) = ck.hparam_f64(&["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"]) {
        kv.set(format!("{a}.attention.layer_norm_epsilon"), f32v(e));
    }
    if let Some(n) = ck.hparam_u64(&["num_local_experts", "num_experts", "n_routed_experts"]) {
        kv.set(format!("{a}.expert_count"), u32v(n));
    }
    if let Some(n) = ck.hparam_u64(&[
        "num_experts_per_tok",
        "num_experts_per_token",
        "top_k_experts",
    ]) {
        kv.set(format!("{a}.expert_used_count"), u32v(n));
    }
    if let Some(d) = head_dim {
        kv.set(format!("{a}.attention.key_length"), u32v(d));
        kv.set(format!("{a}.attention.value_length"), u32v(d));
    }
    kv.set("general.file_type", Value::U32(file_type));
    Ok(())
}

/// `rope_parameters` / `rope_scaling` with the top-level rope keys mirrored in, as the
/// converter's TextModel does.
pub(super) fn rope_parameters(ck: &Checkpoint) -> serde_json::Map<String, Json> {
    let mut rope = ck
        .config
        .get("rope_parameters")
        .or_else(|| ck.config.get("rope_scaling"))
        .and_then(Json::as_object)
        .cloned()
        .unwrap_or_default();
    if rope.contains_key("full_attention") || rope.contains_key("sliding_attention") {
        return rope;
    }
    let find = |keys: &[&str]| keys.iter().find_map(|k| ck.config.get(*k)).cloned();
    if let Some(local) = find(&[
        "local_rope_theta",
        "rope_local_theta",
        "rope_theta_local",
        "swa_rope_theta",
        "rope_local_base_freq",
    ]) {
        rope.insert(
            "sliding_attention".into(),
            serde_json::json!({ "rope_theta": local }),
        );
    }
    if !rope.contains_key("rope_theta")
        && let Some(t) = find(&[
            "global_rope_theta",
            "rope_global_theta",
            "rope_theta_global",
            "rope_theta",
            "rotary_emb_base",
        ])
    {
        rope.insert("rope_theta".into(), t);
    }
    if !rope.contains_key("rope_type")
        && let Some(t) = rope.get("type").cloned()
    {
        rope.insert("rope_type".into(), t);
    }
    if !rope.contains_key("partial_rotary_factor")
        && let Some(p) = find(&["partial_rotary_factor", "rope_pct", "rope_percent"])
    {
        rope.insert("partial_rotary_factor".into(), p);
    }
    if !rope.contains_key("original_max_position_embeddings")
        && let Some(o) = find(&["original_max_position_embeddings"])
    {
        rope.insert("original_max_position_embeddings".into(), o);
    }
    rope
}

/// Llama 3's per-frequency RoPE factors (`rope_freqs.weight`), when `rope_type` is `llama3`.
pub(super) fn llama3_rope_factors(ck: &Checkpoint) -> Result<Option<Vec<f32>>> {
    let rope = rope_parameters(ck);
    let p = rope
        .get("full_attention")
        .and_then(Json::as_object)
        .unwrap_or(&rope);
    if !p
        .get("rope_type")
        .and_then(Json::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case("llama3"))
    {
        return Ok(None);
    }
    let f = |k: &str, d: f64| p.get(k).and_then(Json::as_f64).unwrap_or(d);
    let base = f("rope_theta", 10000.0) as f32;
    let dim = match ck.hparam_u64(&["head_dim"]) {
        Some(d) => d,
        None => ck.need_u64(&["hidden_size"])? / ck.need_u64(&["num_attention_heads"])?,
    } as usize;
    let factor = f("factor", 8.0);
    let low = f("low_freq_factor", 1.0);
    let high = f("high_freq_factor", 4.0);
    let old_ctx = f("original_max_position_embeddings", 8192.0);
    let low_wavelen = old_ctx / low;
    let high_wavelen = old_ctx / high;
    let mut out = Vec::with_capacity(dim / 2);
    for i in (0..dim).step_by(2) {
        // torch: 1 / base ** (arange(0, dim, 2, f32) / dim), in f32
        let freq = 1.0f32 / base.powf(i as f32 / dim as f32);
        let wavelen = 2.0 * std::f64::consts::PI / freq as f64;
        let r = if wavelen < high_wavelen {
            1.0
        } else if wavelen > low_wavelen {
            factor
        } else {
            let smooth = (old_ctx / wavelen - low) / (high - low);
            1.0 / ((1.0 - smooth) / factor + smooth)
        };
        out.push(r as f32);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_interleaves_each_heads_halves() {
        // 2 heads of 4 rows, one column: [a0 a1 b0 b1] per head -> [a0 b0 a1 b1]
        let mut v: Vec<f32> = (0..8).map(|x| x as f32).collect();
        permute_rows(&mut v, &[8, 1], 2).unwrap();
        assert_eq!(v, [0., 2., 1., 3., 4., 6., 5., 7.]);
        assert!(permute_rows(&mut v, &[8, 1], 3).is_err());
    }

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
