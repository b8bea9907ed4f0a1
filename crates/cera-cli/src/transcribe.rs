//! `cera transcribe`: speech to text with a Whisper GGUF (`cera convert` of faster-whisper's
//! folder), whisper-cli's way: each file decoded (WAV, MP3, FLAC, Ogg Vorbis) and resampled to
//! 16 kHz, its text on stdout (`-o json`: the segments with their times as data).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use cera::transcribe::{TranscribeOptions, transcribe};

#[derive(clap::Args)]
pub struct Args {
    /// The Whisper model (a GGUF).
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    /// The audio files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The spoken language's code (en, de, fr…); multilingual models only.
    #[arg(short = 'l', long = "language")]
    language: Option<String>,
    /// Translate to English (multilingual models).
    #[arg(long = "translate")]
    translate: bool,
    /// txt (the text) or json (the segments, their times and tokens).
    #[arg(short = 'o', long = "output", default_value = "txt")]
    output: String,
    /// Compute threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// Timing on stderr.
    #[arg(short = 'v', long)]
    verbose: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !["txt", "json"].contains(&a.output.as_str()) {
        bail!("-o {}: the outputs are txt and json", a.output);
    }
    let file = cera::gguf::GgufFile::open(&a.model)
        .with_context(|| format!("loading {}", a.model.display()))?;
    let model = cera::models::whisper::Whisper::load(Arc::new(file))
        .with_context(|| format!("loading {}", a.model.display()))?;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let cpu = cera::backend::Cpu::new(threads);
    let mut opts = TranscribeOptions::default();
    opts.language = a.language.clone();
    opts.translate = a.translate;
    let mut all = Vec::new();
    for f in &a.files {
        let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let samples = cera::media::audio::decode_audio(&bytes, 16_000)
            .with_context(|| format!("{}", f.display()))?;
        let t0 = std::time::Instant::now();
        let t = transcribe(&model, &cpu, &samples, &opts)
            .with_context(|| format!("transcribing {}", f.display()))?;
        if a.verbose {
            eprintln!(
                "cera: {}: {:.1} s of audio in {:.0} ms",
                f.display(),
                samples.len() as f64 / 16_000.0,
                t0.elapsed().as_secs_f64() * 1e3
            );
        }
        match a.output.as_str() {
            "json" => all.push(serde_json::json!({
                "file": f.display().to_string(),
                "language": t.language,
                "text": t.text,
                "segments": t.segments.iter().map(|s| serde_json::json!({
                    "start": s.start,
                    "end": s.end,
                    "text": s.text,
                    "tokens": s.tokens,
                })).collect::<Vec<_>>(),
            })),
            _ => println!("{}", t.text.trim()),
        }
    }
    if a.output == "json" {
        let v = if all.len() == 1 {
            all.pop().unwrap_or_default()
        } else {
            serde_json::Value::Array(all)
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}
