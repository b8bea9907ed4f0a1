//! The embeddings an image or an audio clip becomes through an mmproj, for comparing with
//! llama.cpp's mtmd (`scripts/llama-ref/mtmd_ref.cpp` writes the same rows from libmtmd):
//!   media_embd MMPROJ FILE OUT.f32  -> OUT.f32 (every part's rows, f32 LE, in order);
//!   prints the parts (marker text, or a part's row count) and the encode time (the towers'
//!   work on the prepared pixels or the spectrogram: as mtmd's mtmd_encode_chunk is timed, its
//!   resizes, normalization and log-mel done before, while tokenizing), of a second
//!   encode: the first, untimed as `cera bench`'s warm-up, packs the f16 weights (mtmd has
//!   its weights in place when its context is made)
use std::sync::Arc;

use cera::backend::Cpu;
use cera::models::Mmproj;
use cera::models::vision::{MediaPart, Piece};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mmproj, image, out] = args.as_slice() else {
        return Err("usage: media_embd MMPROJ FILE OUT.f32".into());
    };
    let m = Mmproj::load(Arc::new(cera::gguf::GgufFile::open(mmproj)?))?;
    let input = cera::media::MediaInput::decode(&std::fs::read(image)?)?;
    let cpu = Cpu::new(2);
    match &input {
        cera::media::MediaInput::Image(img) => drop(m.encode_image(&cpu, img)?),
        cera::media::MediaInput::Audio(s) => drop(m.encode_audio(&cpu, s)?),
    }
    let t0 = std::time::Instant::now();
    match &input {
        cera::media::MediaInput::Image(img) => {
            // the parts prepared and normalized first, untimed (mtmd does it while tokenizing)
            let v = m.vision.as_ref().ok_or("this mmproj has no vision tower")?;
            let hp = &v.hp;
            let pieces: Vec<_> = v
                .prepare(img)?
                .into_iter()
                .map(|p| match p {
                    Piece::Text(t) => Err(t),
                    Piece::Image(i) => {
                        Ok((i.normalized(hp.image_mean, hp.image_std), i.width, i.height))
                    }
                })
                .collect();
            let t1 = std::time::Instant::now();
            let mut parts = Vec::new();
            let mut n_embd_rows = 0;
            for p in pieces {
                parts.push(match p {
                    Err(t) => MediaPart::Text(t),
                    Ok((px, w, h)) => {
                        let (rows, n) = v.encode(&cpu, &px, w, h)?;
                        n_embd_rows += n;
                        MediaPart::Embeddings(rows)
                    }
                });
            }
            let ms = t1.elapsed().as_secs_f64() * 1e3;
            let enc = cera::models::vision::EncodedMedia { parts, n_embd_rows };
            write_parts(&m, &enc, ms, out)
        }
        cera::media::MediaInput::Audio(s) => {
            // the spectrogram first, untimed: mtmd computes it while tokenizing, before the
            // encode its time covers
            let a = m.audio.as_ref().ok_or("this mmproj has no audio encoder")?;
            let mel = a.mel(s)?;
            println!(
                "mel {} frames in {:.1} ms",
                mel.n_frames,
                t0.elapsed().as_secs_f64() * 1e3
            );
            let t1 = std::time::Instant::now();
            let (rows, n) = a.encode(&cpu, &mel)?;
            let ms = t1.elapsed().as_secs_f64() * 1e3;
            println!("embeddings {n} rows");
            println!("{n} rows in {ms:.1} ms");
            let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(out, bytes)?;
            Ok(())
        }
    }
}

/// Prints the parts and the time; writes every part's rows to `out`.
fn write_parts(
    m: &Mmproj,
    enc: &cera::models::vision::EncodedMedia,
    ms: f64,
    out: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut rows = Vec::new();
    for p in &enc.parts {
        match p {
            MediaPart::Text(t) => println!("text {t}"),
            MediaPart::Embeddings(r) => {
                println!("embeddings {} rows", r.len() / m.n_embd_out());
                rows.extend_from_slice(r);
            }
        }
    }
    println!("{} rows in {ms:.1} ms", enc.n_embd_rows);
    let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(out, bytes)?;
    Ok(())
}
