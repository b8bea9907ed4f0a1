//! `cera quantize IN OUT TYPE`: a GGUF with its matrices in another type (llama-quantize's
//! type names), e.g. a Q4_0 or Q2_K draft of a target, or an F16 copy.

use anyhow::Context;

use crate::common::resolve_model;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input GGUF (a path or a catalog name).
    pub input: String,
    /// Output GGUF path.
    pub output: std::path::PathBuf,
    /// Target type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K,
    /// Q6_K, ... (mixes such as Q4_K_M give every matrix the base type).
    pub ty: String,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let input = resolve_model(Some(&a.input))?;
    let t0 = std::time::Instant::now();
    let rep = cera::gguf::requantize::requantize(&input, &a.output, &a.ty)
        .with_context(|| format!("quantizing {} to {}", input.display(), a.ty))?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "cera: wrote {} ({:.1} MiB, from {:.1} MiB) in {:.1} s: {} matrices quantized, {} tensors copied",
        a.output.display(),
        mib(rep.bytes_out),
        mib(rep.bytes_in),
        t0.elapsed().as_secs_f64(),
        rep.quantized,
        rep.copied
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
    if rep.requantized > 0 {
        eprintln!(
            "cera: warning: {} matrices were already quantized; quantizing them again loses precision",
            rep.requantized
        );
    }
    if rep.mix_as_base {
        eprintln!(
            "cera: note: {} is a mix in llama-quantize; here every matrix gets its base type",
            a.ty
        );
    }
    Ok(())
}
