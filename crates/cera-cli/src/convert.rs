//! `cera convert HF_DIR|--hf ORG/REPO -o OUT.gguf --outtype TYPE`: a Hugging Face checkpoint
//! (config.json, safetensors, tokenizer.json) as a GGUF, with the metadata, tensor names and
//! bytes llama.cpp's convert_hf_to_gguf.py writes; quantized types as llama-quantize then
//! makes them. A Whisper folder, faster-whisper's (CTranslate2) or Hugging Face's, converts to
//! the GGUF `cera transcribe` reads (whisper.cpp's tensor names).

use std::path::PathBuf;

use anyhow::Context;
use cera::convert::{ConvertOptions, OutType, convert};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The checkpoint folder (config.json, *.safetensors, tokenizer.json). With --hf, leave it
    /// out: the repo is fetched into the Hugging Face cache first.
    pub input: Option<PathBuf>,
    /// Output GGUF file, or a folder to write it in under the converter's default name
    /// (Basename-Size-Finetune-TYPE.gguf). Default: that name in the current folder.
    #[arg(short = 'o', long = "outfile", visible_alias = "output")]
    pub output: Option<PathBuf>,
    /// f32, f16, bf16, q8_0 (the converter's own types), auto (the checkpoint's float type),
    /// or a llama-quantize file type (q4_k_m, q4_0, q5_k_m, q6_k, ...).
    #[arg(long, default_value = "f16")]
    pub outtype: String,
    /// general.name to write instead of the one read from the folder name.
    #[arg(long)]
    pub model_name: Option<String>,
    /// Threads for quantized types (default: every core).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let outtype = OutType::parse(&a.outtype).with_context(|| {
        format!(
            "--outtype {}: f32, f16, bf16, q8_0, auto, or a quantized file type",
            a.outtype
        )
    })?;
    let mut model_id = None;
    let input = match (a.input, crate::common::hub_flags_given()) {
        (Some(p), true) => {
            anyhow::bail!("{} and --hf both name a checkpoint: give one", p.display())
        }
        (Some(p), false) => p,
        (None, true) => {
            let (dir, repo) =
                crate::common::hub_checkpoint()?.context("--hf did not name a checkpoint")?;
            model_id = Some(repo);
            dir
        }
        (None, false) => anyhow::bail!("give the checkpoint folder to convert, or --hf ORG/REPO"),
    };
    let output = a.output.unwrap_or_else(|| PathBuf::from("."));
    let mut opts = ConvertOptions::default();
    opts.outtype = outtype;
    opts.model_name = a.model_name;
    opts.model_id = model_id;
    opts.quantize.threads = a.threads;
    let t0 = std::time::Instant::now();
    let rep = convert(&input, &output, &opts)
        .with_context(|| format!("converting {}", input.display()))?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "cera: wrote {} ({}, {} tensors, {} parameters, {:.1} MiB) in {:.1} s; tokenizer {} tokens, pre-tokenizer '{}'; at most {:.1} MiB of values in memory",
        rep.output.display(),
        rep.file_type,
        rep.n_tensors,
        crate::common::human_count(rep.n_params),
        mib(rep.bytes_out),
        t0.elapsed().as_secs_f64(),
        rep.n_tokens,
        rep.pre_tokenizer,
        mib(rep.peak_tensor_bytes),
    );
    println!("{}", rep.output.display());
    Ok(())
}
