//! Transcribes audio files with a Whisper GGUF on the CPU (greedy, no timestamps), printing
//! each file's text and its time: the core's `transcribe` without the CLI.
//!   transcribe WHISPER.gguf FILE...
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (model, files) = args
        .split_first()
        .ok_or("usage: transcribe WHISPER.gguf FILE...")?;
    let threads = std::env::var("CERA_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let w = cera::models::whisper::Whisper::load(Arc::new(cera::gguf::GgufFile::open(model)?))?;
    let cpu = cera::backend::Cpu::new(threads);
    for f in files {
        let samples = cera::media::audio::decode_audio(&std::fs::read(f)?, 16_000)?;
        let t0 = std::time::Instant::now();
        let t = cera::transcribe::transcribe(&w, &cpu, &samples, &Default::default())?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        for s in &t.segments {
            println!("[{:.2} -> {:.2}] tokens {:?}", s.start, s.end, s.tokens);
        }
        println!("{f}: {ms:.0} ms\n{}", t.text);
    }
    Ok(())
}
