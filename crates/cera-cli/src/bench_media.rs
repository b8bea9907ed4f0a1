//! `cera bench --mmproj F --image X --audio Y`: the time an mmproj takes to encode each image
//! (preparation and encoder, per image) and each audio clip (front end and encoder, per clip
//! and per second of audio), after one untimed warm-up, on the engine's backend.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use cera::engine::Engine;
use cera::media::MediaInput;

/// One file's timings.
pub struct MediaResult {
    pub file: String,
    pub audio_seconds: Option<f64>,
    pub n_tokens: usize,
    pub n_threads: usize,
    pub samples_ms: Vec<f64>,
}

/// The mmproj and the media, read before any model loads (a bad file fails at once).
pub fn load(
    mmproj: &std::path::Path,
    files: &[PathBuf],
) -> anyhow::Result<(cera::models::Mmproj, Vec<(String, MediaInput)>)> {
    let file = cera::gguf::GgufFile::open(mmproj)
        .with_context(|| format!("reading {}", mmproj.display()))?;
    let m = cera::models::Mmproj::load(std::sync::Arc::new(file))
        .with_context(|| format!("loading the mmproj {}", mmproj.display()))?;
    let media = files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            let name = f
                .file_name()
                .map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into());
            Ok((
                name,
                MediaInput::decode(&bytes).with_context(|| f.display().to_string())?,
            ))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((m, media))
}

/// `reps` timed encodes of each input after one warm-up.
pub fn run(
    engine: &Engine,
    mmproj: &cera::models::Mmproj,
    media: &[(String, MediaInput)],
    reps: usize,
    n_threads: usize,
) -> anyhow::Result<Vec<MediaResult>> {
    let mut out = Vec::new();
    for (file, input) in media {
        let warm = engine.encode_media(mmproj, input)?;
        let mut samples_ms = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = Instant::now();
            engine.encode_media(mmproj, input)?;
            samples_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        out.push(MediaResult {
            file: file.clone(),
            audio_seconds: match input {
                MediaInput::Audio(s) => Some(s.len() as f64 / 16_000.0),
                MediaInput::Image(_) => None,
            },
            n_tokens: warm.n_embd_rows,
            n_threads,
            samples_ms,
        });
    }
    Ok(out)
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64
    } else {
        0.0
    };
    (m, var.sqrt())
}

pub fn print_md(results: &[MediaResult]) {
    println!();
    println!("| media | kind | tokens | threads | encode ms | ms per s of audio |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for r in results {
        let (m, sd) = mean_std(&r.samples_ms);
        let (kind, per_s) = match r.audio_seconds {
            Some(secs) => (
                format!("audio {secs:.2} s"),
                format!("{:.1} ± {:.1}", m / secs, sd / secs),
            ),
            None => ("image".to_owned(), "-".to_owned()),
        };
        println!(
            "| {} | {kind} | {} | {} | {m:.1} ± {sd:.1} | {per_s} |",
            r.file, r.n_tokens, r.n_threads
        );
    }
}

pub fn records(results: &[MediaResult]) -> Vec<serde_json::Value> {
    results
        .iter()
        .map(|r| {
            let (m, sd) = mean_std(&r.samples_ms);
            serde_json::json!({
                "media": r.file,
                "kind": if r.audio_seconds.is_some() { "audio" } else { "image" },
                "audio_seconds": r.audio_seconds,
                "n_tokens": r.n_tokens,
                "n_threads": r.n_threads,
                "avg_ms": m,
                "stddev_ms": sd,
                "ms_per_audio_second": r.audio_seconds.map(|s| m / s),
                "samples_ms": r.samples_ms,
            })
        })
        .collect()
}
