//! The embeddings an image becomes through an mmproj, for comparing with llama.cpp's mtmd
//! (`scripts/llama-ref/mtmd_ref.cpp` writes the same rows from libmtmd):
//!   media_embd MMPROJ IMAGE OUT.f32  -> OUT.f32 (every image part's rows, f32 LE, in order);
//!   prints the parts (marker text, or a part's row count) and the encode time
use std::sync::Arc;

use cera::backend::Cpu;
use cera::models::Mmproj;
use cera::models::vision::MediaPart;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mmproj, image, out] = args.as_slice() else {
        return Err("usage: media_embd MMPROJ IMAGE OUT.f32".into());
    };
    let m = Mmproj::load(Arc::new(cera::gguf::GgufFile::open(mmproj)?))?;
    let img = cera::media::Rgb8::decode(&std::fs::read(image)?)?;
    let t0 = std::time::Instant::now();
    let enc = m.encode_image(&Cpu::new(2), &img)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
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
