//! `cera quantize IN OUT TYPE`: a GGUF in another file type, as llama-quantize writes it
//! (its type names and mixes, its per-tensor choices, byte for byte without an importance
//! matrix), e.g. a Q4_K_M of an F16 model, or a Q4_0 draft of a target.

use anyhow::Context;
use cera::gguf::requantize::{QuantStrategy, QuantizeOptions};
use cera::quant::GgmlType;

use crate::common::resolve_model;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input GGUF (a path or a catalog name).
    pub input: String,
    /// Output GGUF path.
    pub output: std::path::PathBuf,
    /// File type, llama-quantize's names: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q2_K, Q2_K_S, Q3_K_S, Q3_K_M (Q3_K), Q3_K_L, Q4_K_S, Q4_K_M (Q4_K), Q5_K_S, Q5_K_M
    /// (Q5_K), Q6_K, IQ4_NL, IQ4_XS. A mix gives some tensors more bits as llama-quantize does.
    pub ty: String,
    /// Every quantizable matrix gets the base type (no mix rules).
    #[arg(long)]
    pub pure: bool,
    /// Copy output.weight as it is.
    #[arg(long)]
    pub leave_output_tensor: bool,
    /// The type of output.weight (and of a tied token embedding).
    #[arg(long, value_parser = parse_type)]
    pub output_tensor_type: Option<GgmlType>,
    /// The type of token_embd.weight.
    #[arg(long, value_parser = parse_type)]
    pub token_embedding_type: Option<GgmlType>,
    /// Allow quantizing tensors that are already quantized (through f32: precision is lost
    /// twice).
    #[arg(long)]
    pub allow_requantize: bool,
    /// How block scales are chosen: `reference` (ggml's quantizers: llama-quantize's bytes) or
    /// `fast-mse` (each block's scale searched for the least x²-weighted squared error; Q4_0,
    /// Q4_1, Q5_0, Q5_1, Q8_0).
    #[arg(long, default_value = "reference", value_parser = parse_strategy)]
    pub quant_strategy: QuantStrategy,
    /// Threads (default: every core).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
}

fn parse_strategy(s: &str) -> Result<QuantStrategy, String> {
    QuantStrategy::from_name(s)
        .ok_or_else(|| format!("'{s}' is not a strategy (reference, fast-mse)"))
}

fn parse_type(s: &str) -> Result<GgmlType, String> {
    GgmlType::from_name(&s.to_ascii_uppercase())
        .or_else(|| GgmlType::from_name(s))
        .filter(|t| t.can_quantize())
        .ok_or_else(|| format!("'{s}' is not a tensor type cera can write (e.g. q8_0, q6_k, f16)"))
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let input = resolve_model(Some(&a.input))?;
    let t0 = std::time::Instant::now();
    let mut opts = QuantizeOptions::default();
    opts.pure = a.pure;
    opts.leave_output = a.leave_output_tensor;
    opts.output_type = a.output_tensor_type;
    opts.token_embd_type = a.token_embedding_type;
    opts.allow_requantize = a.allow_requantize;
    opts.threads = a.threads;
    opts.strategy = a.quant_strategy;
    let rep = cera::gguf::requantize::requantize(&input, &a.output, &a.ty, &opts)
        .with_context(|| format!("quantizing {} to {}", input.display(), a.ty))?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let types: Vec<String> = rep.types.iter().map(|(t, n)| format!("{n} {t}")).collect();
    eprintln!(
        "cera: wrote {} ({:.1} MiB, from {:.1} MiB) in {:.1} s: {} matrices quantized, {} tensors copied ({}); at most {:.1} MiB of values in memory",
        a.output.display(),
        mib(rep.bytes_out),
        mib(rep.bytes_in),
        t0.elapsed().as_secs_f64(),
        rep.quantized,
        rep.copied,
        types.join(", "),
        mib(rep.peak_tensor_bytes),
    );
    if !rep.fallbacks.is_empty() {
        let list: Vec<String> = rep
            .fallbacks
            .iter()
            .take(8)
            .map(|(n, t)| format!("{n} → {t}"))
            .collect();
        eprintln!(
            "cera: {} matrices with rows that are not whole blocks took another type: {}{}",
            rep.fallbacks.len(),
            list.join(", "),
            if rep.fallbacks.len() > 8 { ", ..." } else { "" }
        );
    }
    if a.quant_strategy == QuantStrategy::FastMse {
        eprintln!(
            "cera: fast-mse: {} of {} quantized matrices searched (the others' types keep the reference quantizer)",
            rep.mse_tensors, rep.quantized
        );
    }
    if rep.requantized > 0 {
        eprintln!(
            "cera: warning: {} matrices were already quantized; quantizing them again loses precision",
            rep.requantized
        );
    }
    Ok(())
}
