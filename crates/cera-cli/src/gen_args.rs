//! Flags shared by the generating commands, named as llama.cpp names them.

use cera::backend::KvType;
use cera::engine::{EngineOptions, SessionOptions};
use cera::sample::SamplerConfig;

#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model file or catalog name; the default model (fetched on first use) when omitted.
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// Context size in tokens (0: the model's, capped at 4096).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    pub ctx_size: usize,
    /// Compute threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Where the model runs: cpu, gpu (wgpu: Vulkan, Metal, DX12) or auto (a usable GPU, else
    /// the CPU, saying why).
    #[arg(long = "device", default_value = "cpu")]
    pub device: cera::engine::DeviceKind,
    /// Prompt-processing batch size.
    #[arg(
        long = "ubatch-size",
        visible_alias = "ub",
        short = 'b',
        default_value_t = 512
    )]
    pub ubatch: usize,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub lora: LoraArgs,
    /// When the context fills, drop half of the tokens after the first --keep ones and go on
    /// (llama.cpp's --context-shift); without it a full context is an error or the end.
    #[arg(long = "context-shift")]
    pub context_shift: bool,
    /// Tokens the context shift keeps at the start (after BOS).
    #[arg(long = "keep", default_value_t = 0, requires = "context_shift")]
    pub keep: usize,
    /// Print more diagnostics on stderr.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

impl ModelArgs {
    pub fn engine_options(&self) -> EngineOptions {
        let mut o = EngineOptions::default();
        o.n_threads = self.threads;
        o.device = self.device;
        o
    }

    pub fn session_options(&self) -> SessionOptions {
        let mut o = SessionOptions::default();
        o.n_ctx = self.ctx_size;
        o.n_ubatch = self.ubatch;
        let kv = self.kv.spec();
        o.kv_type = kv.k;
        o.kv_type_v = Some(kv.v);
        o.kv_rotate = kv.rotate;
        o.context_shift = self.context_shift;
        o.n_keep = self.keep;
        o
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature (0: greedy).
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temp: f32,
    /// Top-k sampling (0: off).
    #[arg(long = "top-k", default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (nucleus) sampling (1.0: off).
    #[arg(long = "top-p", default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p sampling (0.0: off).
    #[arg(long = "min-p", default_value_t = 0.05)]
    pub min_p: f32,
    /// Locally typical sampling (1.0: off).
    #[arg(long = "typical", default_value_t = 1.0)]
    pub typical: f32,
    /// Penalise repeated tokens (1.0: off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over.
    #[arg(long = "repeat-last-n", default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Frequency penalty (0.0: off).
    #[arg(long = "frequency-penalty", default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Presence penalty (0.0: off).
    #[arg(long = "presence-penalty", default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Random seed (default: random).
    #[arg(short = 's', long = "seed")]
    pub seed: Option<u64>,
    /// Token bias, e.g. `--logit-bias 15043+1` or `--logit-bias 15043-inf` (repeatable).
    #[arg(short = 'l', long = "logit-bias", value_parser = parse_bias)]
    pub logit_bias: Vec<(u32, f32)>,
}

fn parse_bias(s: &str) -> Result<(u32, f32), String> {
    let at = s
        .find(['+', '-'])
        .ok_or_else(|| format!("'{s}': expected TOKEN_ID+BIAS or TOKEN_ID-BIAS"))?;
    let id: u32 = s[..at]
        .parse()
        .map_err(|_| format!("'{s}': bad token id"))?;
    let bias: f32 = s[at..].parse().map_err(|_| format!("'{s}': bad bias"))?;
    Ok((id, bias))
}

impl SamplingArgs {
    /// The sampler's options, or an error naming the flag out of range (`--top-p must be
    /// within [0, 1] (got 5)`), before the model loads.
    pub fn config(&self) -> anyhow::Result<SamplerConfig> {
        let mut c = SamplerConfig::default();
        c.temperature = self.temp;
        c.top_k = self.top_k;
        c.top_p = self.top_p;
        c.min_p = self.min_p;
        c.typical_p = self.typical;
        c.repeat_penalty = self.repeat_penalty;
        c.repeat_last_n = self.repeat_last_n;
        c.frequency_penalty = self.frequency_penalty;
        c.presence_penalty = self.presence_penalty;
        c.logit_bias = self.logit_bias.clone();
        c.seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
        c.check().map_err(|b| {
            let flag = match b.field {
                "temperature" => "temp".to_string(),
                "typical_p" => "typical".to_string(),
                f => f.replace('_', "-"),
            };
            anyhow::anyhow!("--{flag} {}", b.reason)
        })?;
        Ok(c)
    }
}

/// `on` / `off` (also `true`/`false`, `1`/`0`).
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("expected on or off, not '{s}'")),
    }
}

/// LoRA adapters applied to the command's sessions (llama.cpp's flags).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LoraArgs {
    /// A LoRA adapter applied at scale 1: a llama.cpp GGUF adapter or a PEFT directory
    /// (adapter_config.json + adapter_model.safetensors). Repeatable.
    #[arg(long = "lora", value_name = "FILE")]
    pub lora: Vec<std::path::PathBuf>,
    /// A LoRA adapter at a scale, FILE:SCALE (e.g. `--lora-scaled style.gguf:0.5`). Repeatable.
    #[arg(long = "lora-scaled", value_name = "FILE:SCALE", value_parser = parse_lora_scaled)]
    pub lora_scaled: Vec<(std::path::PathBuf, f32)>,
}

fn parse_lora_scaled(s: &str) -> Result<(std::path::PathBuf, f32), String> {
    let (file, scale) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("'{s}': expected FILE:SCALE"))?;
    let scale: f32 = scale
        .parse()
        .ok()
        .filter(|v: &f32| v.is_finite())
        .ok_or_else(|| format!("'{s}': '{scale}' is not a scale"))?;
    if file.is_empty() {
        return Err(format!("'{s}': no file before the scale"));
    }
    Ok((file.into(), scale))
}

/// Loaded adapters and their scales, attached to each session a command opens.
pub type Adapters = Vec<(std::sync::Arc<cera::lora::LoraAdapter>, f32)>;

impl LoraArgs {
    /// Loads every adapter named, in the order given (`--lora` ones first).
    pub fn load(&self, engine: &cera::engine::Engine, verbose: bool) -> anyhow::Result<Adapters> {
        let all = self
            .lora
            .iter()
            .map(|p| (p.clone(), 1.0))
            .chain(self.lora_scaled.iter().cloned());
        let mut out = Vec::new();
        for (path, scale) in all {
            let a = engine.load_lora(&path)?;
            if verbose {
                eprintln!(
                    "cera: LoRA {} (alpha {}, rank up to {}, {} projections) at scale {scale}",
                    path.display(),
                    a.alpha,
                    a.max_rank(),
                    a.n_projections()
                );
            }
            out.push((a, scale));
        }
        Ok(out)
    }
}

/// Attaches `adapters` to `session`.
pub fn attach(session: &mut cera::session::Session, adapters: &Adapters) -> anyhow::Result<()> {
    for (a, s) in adapters {
        session.attach_lora(a, *s)?;
    }
    Ok(())
}

/// The KV cache flags of every command that runs a session (`run`, `chat`, `perplexity`,
/// `serve`'s slots).
#[derive(clap::Args, Debug, Clone)]
pub struct KvArgs {
    /// KV cache element type of the keys: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
    /// iq4_nl, or TurboQuant tq3 / tq4.
    #[arg(long = "cache-type-k", visible_alias = "ctk", default_value = "f16")]
    pub cache_type: KvType,
    /// KV cache element type of the values (the same choices as for the keys).
    #[arg(long = "cache-type-v", visible_alias = "ctv", default_value = "f16")]
    pub cache_type_v: KvType,
    /// Walsh-Hadamard rotation of quantized (block-type) keys and values, as llama.cpp does
    /// where the head size is a multiple of 64; TurboQuant types always rotate.
    #[arg(long = "kv-rotate", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub kv_rotate: bool,
}

impl KvArgs {
    pub fn spec(&self) -> cera::backend::KvSpec {
        cera::backend::KvSpec::new(self.cache_type, self.cache_type_v).with_rotation(self.kv_rotate)
    }
}
