//! The central table of GGUF metadata keys. Architecture-specific keys are written once here as
//! suffixes and rendered as `"{arch}.{suffix}"` by [`arch_key`].

pub const GENERAL_ARCHITECTURE: &str = "general.architecture";
pub const GENERAL_NAME: &str = "general.name";
pub const GENERAL_TYPE: &str = "general.type";
pub const ADAPTER_TYPE: &str = "adapter.type";
pub const ADAPTER_LORA_ALPHA: &str = "adapter.lora.alpha";
pub const ADAPTER_ALORA_INVOCATION_TOKENS: &str = "adapter.alora.invocation_tokens";
pub const GENERAL_ALIGNMENT: &str = "general.alignment";
pub const GENERAL_FILE_TYPE: &str = "general.file_type";
pub const GENERAL_QUANTIZATION_VERSION: &str = "general.quantization_version";

/// Suffixes of per-architecture keys.
pub mod arch {
    pub const CONTEXT_LENGTH: &str = "context_length";
    pub const EMBEDDING_LENGTH: &str = "embedding_length";
    pub const BLOCK_COUNT: &str = "block_count";
    pub const FEED_FORWARD_LENGTH: &str = "feed_forward_length";
    pub const HEAD_COUNT: &str = "attention.head_count";
    pub const HEAD_COUNT_KV: &str = "attention.head_count_kv";
    pub const KEY_LENGTH: &str = "attention.key_length";
    pub const VALUE_LENGTH: &str = "attention.value_length";
    pub const LAYER_NORM_RMS_EPS: &str = "attention.layer_norm_rms_epsilon";
    pub const LAYER_NORM_EPS: &str = "attention.layer_norm_epsilon";
    pub const CAUSAL: &str = "attention.causal";
    pub const POOLING_TYPE: &str = "pooling_type";
    pub const ROPE_FREQ_BASE: &str = "rope.freq_base";
    pub const ROPE_DIMENSION_COUNT: &str = "rope.dimension_count";
    pub const VOCAB_SIZE: &str = "vocab_size";

    // multipliers and soft-capping (granite, gemma2/3)
    pub const EMBEDDING_SCALE: &str = "embedding_scale";
    pub const RESIDUAL_SCALE: &str = "residual_scale";
    pub const LOGIT_SCALE: &str = "logit_scale";
    pub const ATTENTION_SCALE: &str = "attention.scale";
    pub const ATTN_LOGIT_SOFTCAPPING: &str = "attn_logit_softcapping";
    pub const FINAL_LOGIT_SOFTCAPPING: &str = "final_logit_softcapping";

    // sliding-window attention (gemma2/3, olmo2)
    pub const SLIDING_WINDOW: &str = "attention.sliding_window";
    /// A period (`u32`: every n-th layer is global) or one bool per layer.
    pub const SLIDING_WINDOW_PATTERN: &str = "attention.sliding_window_pattern";
    /// RoPE base of the sliding-window layers.
    pub const ROPE_FREQ_BASE_SWA: &str = "rope.freq_base_swa";

    // RoPE scaling
    pub const ROPE_SCALING_TYPE: &str = "rope.scaling.type";
    pub const ROPE_SCALING_FACTOR: &str = "rope.scaling.factor";
    /// Older name of the linear scaling factor.
    pub const ROPE_SCALE_LINEAR: &str = "rope.scale_linear";
    pub const ROPE_SCALING_ATTN_FACTOR: &str = "rope.scaling.attn_factor";
    pub const ROPE_SCALING_ORIG_CTX_LEN: &str = "rope.scaling.original_context_length";
    /// Granite: false means no RoPE at all.
    pub const ROPE_SCALING_FINETUNED: &str = "rope.scaling.finetuned";

    // LFM2 short convolution: the kernel length (taps per channel)
    pub const SHORTCONV_L_CACHE: &str = "shortconv.l_cache";

    // mixture of experts (lfm2moe)
    pub const EXPERT_COUNT: &str = "expert_count";
    pub const EXPERT_USED_COUNT: &str = "expert_used_count";
    pub const EXPERT_FEED_FORWARD_LENGTH: &str = "expert_feed_forward_length";
    /// Dense FFN blocks before the first routed one.
    pub const LEADING_DENSE_BLOCK_COUNT: &str = "leading_dense_block_count";
    /// llama.cpp's numbering: 1 softmax, 2 sigmoid.
    pub const EXPERT_GATING_FUNC: &str = "expert_gating_func";
}

/// Renders an architecture key: `arch_key("llama", arch::BLOCK_COUNT)` is `llama.block_count`.
pub fn arch_key(arch: &str, suffix: &str) -> String {
    format!("{arch}.{suffix}")
}

pub mod tokenizer {
    pub const MODEL: &str = "tokenizer.ggml.model";
    pub const PRE: &str = "tokenizer.ggml.pre";
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    pub const SCORES: &str = "tokenizer.ggml.scores";
    pub const MERGES: &str = "tokenizer.ggml.merges";
    pub const BOS_ID: &str = "tokenizer.ggml.bos_token_id";
    pub const EOS_ID: &str = "tokenizer.ggml.eos_token_id";
    pub const EOT_ID: &str = "tokenizer.ggml.eot_token_id";
    pub const EOM_ID: &str = "tokenizer.ggml.eom_token_id";
    pub const UNK_ID: &str = "tokenizer.ggml.unknown_token_id";
    /// Spelled this way in GGUF files.
    pub const SEP_ID: &str = "tokenizer.ggml.seperator_token_id";
    pub const PAD_ID: &str = "tokenizer.ggml.padding_token_id";
    pub const MASK_ID: &str = "tokenizer.ggml.mask_token_id";
    pub const FIM_PRE_ID: &str = "tokenizer.ggml.fim_pre_token_id";
    pub const FIM_SUF_ID: &str = "tokenizer.ggml.fim_suf_token_id";
    pub const FIM_MID_ID: &str = "tokenizer.ggml.fim_mid_token_id";
    pub const FIM_PAD_ID: &str = "tokenizer.ggml.fim_pad_token_id";
    pub const FIM_REP_ID: &str = "tokenizer.ggml.fim_rep_token_id";
    pub const FIM_SEP_ID: &str = "tokenizer.ggml.fim_sep_token_id";
    /// Older names of the FIM prefix/suffix/middle ids.
    pub const PREFIX_ID: &str = "tokenizer.ggml.prefix_token_id";
    pub const SUFFIX_ID: &str = "tokenizer.ggml.suffix_token_id";
    pub const MIDDLE_ID: &str = "tokenizer.ggml.middle_token_id";
    pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
    pub const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
    pub const ADD_SEP: &str = "tokenizer.ggml.add_sep_token";
    pub const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
    pub const NORMALIZER_LOWERCASE: &str = "tokenizer.ggml.normalizer.lowercase";
    pub const NORMALIZER_STRIP_ACCENTS: &str = "tokenizer.ggml.normalizer.strip_accents";
    pub const CHAT_TEMPLATE: &str = "tokenizer.chat_template";
}
