//! Random-weight PEFT LoRA adapters for a GGUF base model, written exactly as PEFT saves them
//! (`adapter_config.json` + `adapter_model.safetensors`, Hugging Face module names, lora_A
//! `[r, in]` and lora_B `[out, r]`), so that llama.cpp's `convert_lora_to_gguf.py` converts
//! them and Cera reads them directly. Deterministic in the seed: the LoRA test rebuilds the
//! adapter the fixtures were made from and checks its hash. Also writes the base model's
//! Hugging Face `config.json` the converter reads.
#![allow(dead_code)]

use std::collections::BTreeMap;

use cera::gguf::GgufFile;

/// What to generate.
#[derive(Clone, Debug)]
pub struct LoraGen {
    pub rank: usize,
    pub alpha: f32,
    pub seed: u64,
    /// Scale of A's and B's uniform values (before dividing by sqrt of their input width).
    pub amplitude: f32,
    /// Also adapt the token embeddings (PEFT `lora_embedding_A/B` on `embed_tokens`).
    pub embed: bool,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in [-1, 1), exactly representable in f32.
fn uniform(state: &mut u64) -> f32 {
    ((splitmix(state) >> 40) as f32 / (1u64 << 23) as f32) - 1.0
}

/// (Hugging Face module path, input width, output width) of every linear projection of
/// `base`, a MoE block's router and each of its experts' projections included.
pub fn modules(base: &GgufFile) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for (hf, gguf) in projections(base) {
        let info = base.tensor(&gguf).unwrap();
        let (cols, rows) = (info.shape[0] as usize, info.shape[1] as usize);
        if info.shape.len() == 3 {
            // experts stacked in the model, one module each in Hugging Face
            let (stem, w) = hf.rsplit_once('.').unwrap();
            for e in 0..info.shape[2] {
                out.push((format!("{stem}.experts.{e}.{w}"), cols, rows));
            }
        } else {
            out.push((hf, cols, rows));
        }
    }
    out
}

/// (Hugging Face module path, GGUF tensor name) of every linear projection of `base` (MoE
/// experts as one entry per stacked tensor, `…feed_forward.w1` for `ffn_gate_exps`).
fn projections(base: &GgufFile) -> Vec<(String, String)> {
    let arch = base.architecture().unwrap().to_owned();
    let lfm2 = arch.starts_with("lfm2");
    let mut out = Vec::new();
    for t in &base.tensors {
        let Some(rest) = t.name.strip_prefix("blk.") else {
            continue;
        };
        let (il, name) = rest.split_once('.').unwrap();
        let hf = match (name, lfm2) {
            ("attn_q.weight", _) => "self_attn.q_proj",
            ("attn_k.weight", _) => "self_attn.k_proj",
            ("attn_v.weight", _) => "self_attn.v_proj",
            ("attn_output.weight", false) => "self_attn.o_proj",
            ("attn_output.weight", true) => "self_attn.out_proj",
            ("ffn_gate.weight", false) => "mlp.gate_proj",
            ("ffn_up.weight", false) => "mlp.up_proj",
            ("ffn_down.weight", false) => "mlp.down_proj",
            ("ffn_gate.weight", true) => "feed_forward.w1",
            ("ffn_up.weight", true) => "feed_forward.w3",
            ("ffn_down.weight", true) => "feed_forward.w2",
            ("shortconv.in_proj.weight", true) => "conv.in_proj",
            ("shortconv.out_proj.weight", true) => "conv.out_proj",
            ("ffn_gate_inp.weight", true) => "feed_forward.gate",
            ("ffn_gate_exps.weight", true) => "feed_forward.w1",
            ("ffn_up_exps.weight", true) => "feed_forward.w3",
            ("ffn_down_exps.weight", true) => "feed_forward.w2",
            _ => continue,
        };
        out.push((format!("model.layers.{il}.{hf}"), t.name.clone()));
    }
    out
}

/// `adapter_config.json` and `adapter_model.safetensors` (f32) for `base`.
pub fn peft_adapter(base: &GgufFile, g: &LoraGen) -> (String, Vec<u8>) {
    let mut state = g.seed;
    let mut tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)> = BTreeMap::new();
    let mut targets = std::collections::BTreeSet::new();
    for (hf, cols, rows) in modules(base) {
        let a_amp = g.amplitude / (cols as f32).sqrt();
        let b_amp = g.amplitude / (g.rank as f32).sqrt();
        let a: Vec<f32> = (0..g.rank * cols)
            .map(|_| uniform(&mut state) * a_amp)
            .collect();
        let b: Vec<f32> = (0..rows * g.rank)
            .map(|_| uniform(&mut state) * b_amp)
            .collect();
        tensors.insert(
            format!("base_model.model.{hf}.lora_A.weight"),
            (vec![g.rank, cols], a),
        );
        tensors.insert(
            format!("base_model.model.{hf}.lora_B.weight"),
            (vec![rows, g.rank], b),
        );
        targets.insert(hf.rsplit('.').next().unwrap().to_owned());
    }
    if g.embed {
        // PEFT's embedding pair: A [r, vocab], B [embd, r], saved without `.weight`
        let info = base.tensor("token_embd.weight").unwrap();
        let (d, vocab) = (info.shape[0] as usize, info.shape[1] as usize);
        let a: Vec<f32> = (0..g.rank * vocab)
            .map(|_| uniform(&mut state) * g.amplitude)
            .collect();
        let b_amp = g.amplitude / (g.rank as f32).sqrt();
        let b: Vec<f32> = (0..d * g.rank)
            .map(|_| uniform(&mut state) * b_amp)
            .collect();
        let m = "base_model.model.model.embed_tokens";
        tensors.insert(format!("{m}.lora_embedding_A"), (vec![g.rank, vocab], a));
        tensors.insert(format!("{m}.lora_embedding_B"), (vec![d, g.rank], b));
        targets.insert("embed_tokens".to_owned());
    }
    let targets: Vec<String> = targets.into_iter().collect();
    let config = serde_json::json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": "cera-test-base",
        "r": g.rank,
        "lora_alpha": g.alpha,
        "lora_dropout": 0.0,
        "target_modules": targets,
        "bias": "none",
        "use_rslora": false,
        "use_dora": false,
        "fan_in_fan_out": false,
        "modules_to_save": null,
        "inference_mode": true,
    });
    (
        serde_json::to_string_pretty(&config).unwrap(),
        safetensors(&tensors),
    )
}

/// A safetensors image of f32 tensors (names sorted, data in that order).
pub fn safetensors(tensors: &BTreeMap<String, (Vec<usize>, Vec<f32>)>) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut at = 0usize;
    for (name, (shape, data)) in tensors {
        let n = data.len() * 4;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [at, at + n]}),
        );
        at += n;
    }
    header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut h = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + at);
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    for (_, data) in tensors.values() {
        for v in data {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// The Hugging Face `config.json` of `base`, as much as the converter reads.
pub fn hf_config(base: &GgufFile) -> String {
    let arch = base.architecture().unwrap().to_owned();
    let key = |k: &str| format!("{arch}.{k}");
    let u = |k: &str| base.get(&key(k)).and_then(|v| v.as_int()).map(|v| v as u64);
    let f = |k: &str| base.get(&key(k)).and_then(|v| v.as_f64());
    let n_layer = u("block_count").unwrap();
    let n_vocab = base.get_array("tokenizer.ggml.tokens").unwrap().len();
    let tied = base.tensor("output.weight").is_none();
    let mut c = serde_json::json!({
        "hidden_size": u("embedding_length"),
        "num_hidden_layers": n_layer,
        "num_attention_heads": u("attention.head_count"),
        "vocab_size": n_vocab,
        "max_position_embeddings": u("context_length"),
        "rope_theta": f("rope.freq_base").unwrap_or(10000.0),
        "rms_norm_eps": f("attention.layer_norm_rms_epsilon"),
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
    });
    let o = c.as_object_mut().unwrap();
    match arch.as_str() {
        "llama" => {
            o.insert(
                "architectures".into(),
                serde_json::json!(["LlamaForCausalLM"]),
            );
            o.insert("model_type".into(), "llama".into());
            o.insert("intermediate_size".into(), u("feed_forward_length").into());
            o.insert(
                "num_key_value_heads".into(),
                u("attention.head_count_kv").into(),
            );
        }
        "qwen2" => {
            o.insert(
                "architectures".into(),
                serde_json::json!(["Qwen2ForCausalLM"]),
            );
            o.insert("model_type".into(), "qwen2".into());
            o.insert("intermediate_size".into(), u("feed_forward_length").into());
            o.insert(
                "num_key_value_heads".into(),
                u("attention.head_count_kv").into(),
            );
        }
        "lfm2" | "lfm2moe" => {
            if arch == "lfm2" {
                o.insert(
                    "architectures".into(),
                    serde_json::json!(["Lfm2ForCausalLM"]),
                );
                o.insert("model_type".into(), "lfm2".into());
            } else {
                o.insert(
                    "architectures".into(),
                    serde_json::json!(["Lfm2MoeForCausalLM"]),
                );
                o.insert("model_type".into(), "lfm2_moe".into());
                o.insert("num_experts".into(), u("expert_count").into());
                o.insert("num_experts_per_tok".into(), u("expert_used_count").into());
                o.insert(
                    "moe_intermediate_size".into(),
                    u("expert_feed_forward_length").into(),
                );
                o.insert(
                    "num_dense_layers".into(),
                    u("leading_dense_block_count").into(),
                );
                o.insert("norm_topk_prob".into(), true.into());
                o.insert("use_expert_bias".into(), true.into());
            }
            let kv = base
                .get(&key("attention.head_count_kv"))
                .unwrap()
                .as_array()
                .unwrap()
                .to_i64_vec()
                .unwrap();
            let n_kv = kv.iter().copied().max().unwrap();
            let types: Vec<&str> = kv
                .iter()
                .map(|&k| if k > 0 { "full_attention" } else { "conv" })
                .collect();
            o.insert("num_key_value_heads".into(), n_kv.into());
            o.insert("layer_types".into(), serde_json::json!(types));
            o.insert("conv_L_cache".into(), u("shortconv.l_cache").into());
            o.insert("intermediate_size".into(), u("feed_forward_length").into());
            o.insert("block_ff_dim".into(), u("feed_forward_length").into());
            o.insert("block_auto_adjust_ff_dim".into(), false.into());
            o.insert(
                "norm_eps".into(),
                f("attention.layer_norm_rms_epsilon").into(),
            );
        }
        other => panic!("no Hugging Face config for {other}"),
    }
    serde_json::to_string_pretty(&c).unwrap()
}
