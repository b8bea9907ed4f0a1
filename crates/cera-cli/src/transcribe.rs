//! `cera transcribe`: speech to text with a Whisper GGUF (`cera convert` of faster-whisper's
//! folder), whisper-cli's way: each file decoded (WAV, MP3, FLAC, Ogg Vorbis) and resampled to
//! 16 kHz, then transcribed in 30-second windows (beam search of 5 with temperature fallback,
//! timestamps, by default); its text on stdout, or as SRT, WebVTT or OpenAI's verbose JSON.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use cera::transcribe::format::{Format, render};
use cera::transcribe::{TranscribeOptions, detect_language, transcribe};

#[derive(clap::Args)]
pub struct Args {
    /// The Whisper model: a GGUF, or a catalog name (`whisper-tiny.en`, fetched once).
    #[arg(short = 'm', long = "model")]
    model: String,
    /// The audio files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The spoken language's code (en, de, fr…; default: detected); multilingual models only.
    #[arg(short = 'l', long = "language")]
    language: Option<String>,
    /// Translate to English (multilingual models).
    #[arg(long = "translate")]
    translate: bool,
    /// Print the likeliest languages of each file's first 30 s and stop.
    #[arg(long = "detect-language")]
    detect_language: bool,
    /// txt, srt, vtt or json (OpenAI's verbose_json: segments, times, tokens).
    #[arg(short = 'o', long = "output", default_value = "txt")]
    output: String,
    /// Write each file's transcript to DIR/STEM.EXT instead of stdout.
    #[arg(long = "output-dir", value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// With txt: each segment on its own line after its times.
    #[arg(long = "timestamps")]
    timestamps: bool,
    /// Decode without timestamp tokens (one segment a window; whisper-cli's -nt).
    #[arg(long = "no-timestamps", conflicts_with = "timestamps")]
    no_timestamps: bool,
    /// Beams of the beam search (1: greedy).
    #[arg(short = 'b', long = "beam-size", default_value_t = 5)]
    beam_size: usize,
    /// Candidates sampled at each fallback temperature.
    #[arg(long = "best-of", default_value_t = 5)]
    best_of: usize,
    /// The first temperature.
    #[arg(long = "temperature", default_value_t = 0.0)]
    temperature: f32,
    /// No temperature fallback (whisper-cli's -nf).
    #[arg(long = "no-fallback")]
    no_fallback: bool,
    /// Do not decode a window after the previous windows' text.
    #[arg(long = "no-context")]
    no_context: bool,
    /// Windows encoded at once when there are no timestamps (then each window starts where the
    /// last one ended); 0: the device's choice (1 on the CPU, 4 on a GPU).
    #[arg(long = "encoder-batch", value_name = "N", default_value_t = 0)]
    encoder_batch: usize,
    /// Text before the first window (names, spelling, style).
    #[arg(long = "prompt")]
    prompt: Option<String>,
    /// Compute threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// Where the model runs: cpu, or gpu (wgpu: Vulkan, Metal, DX12).
    #[arg(long = "device", default_value = "cpu")]
    device: String,
    /// Timing on stderr.
    #[arg(short = 'v', long)]
    verbose: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let format = match a.output.as_str() {
        "json" => Format::VerboseJson,
        "txt" | "srt" | "vtt" => Format::parse(&a.output)?,
        o => bail!("-o {o}: the outputs are txt, srt, vtt and json"),
    };
    if a.no_timestamps && matches!(format, Format::Srt | Format::Vtt) {
        bail!("-o {} needs timestamps (drop --no-timestamps)", a.output);
    }
    if let Some(d) = &a.output_dir
        && !d.is_dir()
    {
        bail!("--output-dir {}: not a directory", d.display());
    }
    let path = crate::common::resolve_model(Some(&a.model))?;
    let file =
        cera::gguf::GgufFile::open(&path).with_context(|| format!("loading {}", path.display()))?;
    let model = cera::models::whisper::Whisper::load(Arc::new(file))
        .with_context(|| format!("loading {}", path.display()))?;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut opts = TranscribeOptions::default()
        .with_task(a.language.clone(), a.translate, !a.no_timestamps)
        .with_search(a.beam_size, a.best_of)
        .with_temperature(a.temperature, !a.no_fallback)
        .with_prompt(a.prompt.clone());
    opts.condition_on_previous_text = !a.no_context;
    opts.encoder_batch = a.encoder_batch;
    match a.device.as_str() {
        "cpu" => go(&a, &model, &cera::backend::Cpu::new(threads), &opts, format),
        "gpu" => {
            let gpu = cera::backend::gpu::Gpu::new().context("--device gpu")?;
            if a.verbose {
                eprintln!("cera: device {}", gpu.info().name);
            }
            go(&a, &model, &gpu, &opts, format)
        }
        d => bail!("--device {d}: the devices are cpu and gpu"),
    }
}

/// Each file through `be`.
fn go<B: cera::backend::Backend>(
    a: &Args,
    model: &cera::models::whisper::Whisper,
    be: &B,
    opts: &TranscribeOptions,
    format: Format,
) -> anyhow::Result<()> {
    let mut all = Vec::new();
    for f in &a.files {
        let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let samples = cera::media::audio::decode_audio(&bytes, 16_000)
            .with_context(|| format!("{}", f.display()))?;
        if a.detect_language {
            let probs =
                detect_language(model, be, &samples).with_context(|| format!("{}", f.display()))?;
            let top: Vec<String> = probs
                .iter()
                .take(5)
                .map(|(c, p)| format!("{c} {p:.3}"))
                .collect();
            println!("{}: {}", f.display(), top.join(", "));
            continue;
        }
        let t0 = std::time::Instant::now();
        let t = transcribe(model, be, &samples, opts)
            .with_context(|| format!("transcribing {}", f.display()))?;
        if a.verbose {
            eprintln!(
                "cera: {}: {:.1} s of audio in {:.0} ms ({} segments, language {})",
                f.display(),
                samples.len() as f64 / 16_000.0,
                t0.elapsed().as_secs_f64() * 1e3,
                t.segments.len(),
                t.language
            );
        }
        let text = if format == Format::Text && a.timestamps {
            t.segments
                .iter()
                .map(|s| {
                    format!(
                        "[{} --> {}] {}\n",
                        clock(s.start),
                        clock(s.end),
                        s.text.trim()
                    )
                })
                .collect()
        } else {
            render(&t, format)
        };
        if let Some(dir) = &a.output_dir {
            let stem = f.file_stem().unwrap_or_default();
            let ext = if format == Format::VerboseJson {
                "json"
            } else {
                a.output.as_str()
            };
            let out = dir.join(stem).with_extension(ext);
            std::fs::write(&out, &text).with_context(|| format!("writing {}", out.display()))?;
        } else if format == Format::VerboseJson {
            let mut v: serde_json::Value = serde_json::from_str(&text)?;
            v["file"] = f.display().to_string().into();
            all.push(v);
        } else {
            print!("{text}");
        }
    }
    if !all.is_empty() {
        let v = if all.len() == 1 {
            all.pop().unwrap_or_default()
        } else {
            serde_json::Value::Array(all)
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}

/// `hh:mm:ss.mmm`, whisper-cli's times.
fn clock(secs: f32) -> String {
    let ms = (secs.max(0.0) as f64 * 1000.0).round() as u64;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}
