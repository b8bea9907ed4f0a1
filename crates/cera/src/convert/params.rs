//! Hyperparameters convert_hf_to_gguf.py derives from `config.json`: the keys every text model
//! gets, RoPE settings (`rope_parameters` / `rope_scaling`), llama-3 frequency factors and
//! LFM2's adjusted feed-forward width.

use serde_json::Value as Json;

use super::Kv;
use super::checkpoint::Checkpoint;
use crate::error::Result;
use crate::gguf::Value;

/// LFM2's feed-forward width: `block_ff_dim` adjusted as the model does (2/3, a multiplier,
/// rounded up to `block_multiple_of`).
pub(super) fn lfm2_ff_dim(ck: &Checkpoint) -> Result<u64> {
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
pub(super) fn text_params(
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
