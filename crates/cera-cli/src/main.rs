//! `cera`: run GGUF models locally.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod batched_bench;
mod bench;
mod bench_media;
mod bench_spec;
mod chat;
mod common;
mod convert;
mod embed;
mod gen_args;
mod info;
mod inspect;
mod models;
mod perplexity;
mod progress;
mod quantize;
mod rerank;
mod run;
mod serve;
mod spec_args;
mod split;
mod structured;
mod tokenize;
mod transcribe;

#[derive(Parser)]
#[command(
    name = "cera",
    version,
    about = "Run GGUF language models locally",
    propagate_version = true
)]
struct Cli {
    /// A model on the Hugging Face Hub, llama.cpp's `-hf` form: the GGUF of QUANT (default
    /// Q4_K_M, then Q8_0, then the first) is fetched into the Hub's cache ($HF_HOME/hub) and
    /// used as -m. Also `-m hf://ORG/REPO/FILE.gguf`. HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE=1.
    #[arg(
        long = "hf",
        alias = "hf-repo",
        global = true,
        value_name = "ORG/REPO[@REV][:QUANT]"
    )]
    hf: Option<String>,
    /// With --hf: this file of the repo instead of the one a quant tag picks.
    #[arg(long = "hf-file", global = true, value_name = "PATH")]
    hf_file: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a reply to one prompt (chat template applied unless --raw).
    Run(run::Args),
    /// Interactive multi-turn chat (one message per line when stdin is a pipe).
    Chat(chat::Args),
    /// Prompt and generation throughput, with llama-bench's flags and output.
    Bench(bench::Args),
    /// Throughput of several sequences decoded together (llama-batched-bench's flags and table).
    BatchedBench(batched_bench::Args),
    /// The CPU kernel tier in use and where models are cached.
    Info(info::Args),
    /// Perplexity of a text file, computed as llama-perplexity does.
    Perplexity(perplexity::Args),
    /// Show a GGUF file's metadata, tensors, types and size.
    Inspect(inspect::Args),
    /// Fetch a model into the cache: a catalog name, or `hf://ORG/REPO[:QUANT]` /
    /// `hf://ORG/REPO/FILE.gguf` (or --hf) from the Hugging Face Hub.
    Pull(models::PullArgs),
    /// List cached models and the catalog.
    Models(models::ListArgs),
    /// Print the token ids of a text (as `llama-tokenize --ids`).
    Tokenize(tokenize::Args),
    /// An OpenAI- and Ollama-compatible HTTP server with continuous batching.
    Serve(serve::Args),
    /// Quantize a GGUF as llama-quantize does: its file types, mixes, flags and bytes.
    Quantize(quantize::Args),
    /// Convert a Hugging Face checkpoint (safetensors) to GGUF, as convert_hf_to_gguf.py does.
    Convert(convert::Args),
    /// Write a GGUF as a split GGUF of several files (llama-gguf-split's layout).
    Split(split::Args),
    /// Embeddings of texts (llama-embedding's flags and output formats).
    Embed(embed::Args),
    /// Relevance scores of documents for a query, with a reranker model.
    Rerank(rerank::Args),
    /// Speech to text with a Whisper model (whisper-cli's way).
    Transcribe(transcribe::Args),
}

/// llama.cpp spells some long options with one dash (`-ctk q8_0`); clap would read `-ctk` as
/// `-c tk`, so those are rewritten to their `--` form first.
fn llama_style_args() -> Vec<std::ffi::OsString> {
    const ONE_DASH: [&str; 12] = [
        "-ctk", "-ctv", "-npp", "-ntg", "-npl", "-pps", "-tgs", "-ub", "-np", "-md", "-hf", "-hff",
    ];
    std::env::args_os()
        .map(|a| match a.to_str() {
            Some(s) if ONE_DASH.contains(&s) => format!("-{s}").into(),
            _ => a,
        })
        .collect()
}

/// Pins glibc's mmap threshold at its documented default (128 KiB). Left alone, glibc raises
/// it to the size of each large block freed (up to 32 MiB), so after the tokenizer's and the
/// loader's temporaries (a 2 MiB table, the vocabulary's arrays) later buffers of a few MiB
/// come from the heap, and the heap keeps their pages after they are freed: a cold
/// `cera run -n 1` on SmolLM2-135M peaked at 145 MB with the sliding threshold and 136.5 MB
/// pinned (llama-simple: 126 MB), with no change in `cera bench`'s speed (measured).
fn settle_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's settings; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

fn main() -> ExitCode {
    settle_malloc();
    let cli = Cli::parse_from(llama_style_args());
    common::set_hub_args(common::HubArgs {
        repo: cli.hf,
        file: cli.hf_file,
    });
    let result = match cli.command {
        Command::Run(a) => run::run(a),
        Command::Chat(a) => chat::run(a),
        Command::Bench(a) => bench::run(a),
        Command::BatchedBench(a) => batched_bench::run(a),
        Command::Info(a) => info::run(a),
        Command::Perplexity(a) => perplexity::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Pull(a) => models::pull(a),
        Command::Models(a) => models::list(a),
        Command::Tokenize(a) => tokenize::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Quantize(a) => quantize::run(a),
        Command::Split(a) => split::run(a),
        Command::Convert(a) => convert::run(a),
        Command::Embed(a) => embed::run(a),
        Command::Transcribe(a) => transcribe::run(a),
        Command::Rerank(a) => rerank::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
