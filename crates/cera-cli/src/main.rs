//! `cera`: run GGUF models locally.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod common;
mod inspect;
mod models;
mod tokenize;

#[derive(Parser)]
#[command(
    name = "cera",
    version,
    about = "Run GGUF language models locally",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a GGUF file's metadata, tensors, types and size.
    Inspect(inspect::Args),
    /// Fetch a model from the catalog into the cache.
    Pull(models::PullArgs),
    /// List cached models and the catalog.
    Models(models::ListArgs),
    /// Print the token ids of a text (as `llama-tokenize --ids`).
    Tokenize(tokenize::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(a) => inspect::run(a),
        Command::Pull(a) => models::pull(a),
        Command::Models(a) => models::list(a),
        Command::Tokenize(a) => tokenize::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
