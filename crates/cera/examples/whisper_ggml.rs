//! Writes a Whisper GGUF (`cera convert` of faster-whisper's folder) in whisper.cpp's own model
//! format, so the peer runs exactly the weights Cera runs (the parity fixtures and benchmarks
//! of speech recognition):
//!   whisper_ggml IN.gguf OUT.bin [f32]
//!
//! whisper.cpp's format (its `models/convert-pt-to-ggml.py` writes it): the magic `ggml`, the
//! hyperparameters (`n_vocab`, the audio side's context, width, heads, layers, the text
//! side's, `n_mels`, the type: 1 for f16 matrices), the mel filterbank (`[n_mels, 201]` f32:
//! ours, the Slaney bank OpenAI's `mel_filters.npz` holds), the base vocabulary as byte
//! strings (ids below `<|endoftext|>`: whisper.cpp names the special tokens itself), then
//! each tensor: rank, name length, type, dimensions innermost first, name, values.
use std::io::Write;
use std::sync::Arc;

use cera::gguf::GgufFile;
use cera::media::whisper_mel::WhisperFrontEnd;
use cera::models::whisper::Whisper;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (input, output) = match &args[..] {
        [i, o] | [i, o, _] => (i, o),
        _ => return Err("usage: whisper_ggml IN.gguf OUT.bin [f32]".into()),
    };
    let f32_only = args.get(2).map(String::as_str) == Some("f32");
    let file = Arc::new(GgufFile::open(input)?);
    let w = Whisper::load(Arc::clone(&file))?;
    let hp = &w.hp;
    let mut out = std::io::BufWriter::new(std::fs::File::create(output)?);
    let i32s = |out: &mut std::io::BufWriter<std::fs::File>, v: &[i64]| -> std::io::Result<()> {
        for &x in v {
            out.write_all(&(x as i32).to_le_bytes())?;
        }
        Ok(())
    };
    i32s(
        &mut out,
        &[
            0x6767_6d6c,
            hp.n_vocab as i64,
            hp.encoder.n_ctx as i64,
            hp.encoder.n_embd as i64,
            hp.encoder.n_head as i64,
            hp.encoder.n_layer as i64,
            hp.decoder.n_ctx as i64,
            hp.decoder.n_embd as i64,
            hp.decoder.n_head as i64,
            hp.decoder.n_layer as i64,
            hp.n_mels as i64,
            i64::from(!f32_only),
        ],
    )?;
    let fe = WhisperFrontEnd::new(hp.n_mels)?;
    let filters = fe.filters();
    i32s(
        &mut out,
        &[hp.n_mels as i64, (filters.len() / hp.n_mels) as i64],
    )?;
    for v in filters {
        out.write_all(&v.to_le_bytes())?;
    }
    let n_base = w.special.eot as usize;
    i32s(&mut out, &[n_base as i64])?;
    for id in 0..n_base as u32 {
        let b = w.tokenizer.token_bytes(id);
        i32s(&mut out, &[b.len() as i64])?;
        out.write_all(b)?;
    }
    for t in &file.tensors {
        let name = t.name.as_str();
        let mut x = file.tensor_f32(name)?;
        let mut dims: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
        if name == "encoder.conv1.bias" || name == "encoder.conv2.bias" {
            // [n] as [n, 1] in torch order: innermost 1
            dims = vec![1, dims[0]];
        }
        let f16 = !f32_only
            && dims.len() >= 2
            && !name.contains("positional_embedding")
            && !name.contains("bias");
        i32s(
            &mut out,
            &[dims.len() as i64, name.len() as i64, i64::from(f16)],
        )?;
        i32s(&mut out, &dims)?;
        out.write_all(name.as_bytes())?;
        if f16 {
            for v in x.drain(..) {
                out.write_all(&half::f16::from_f32(v).to_le_bytes())?;
            }
        } else {
            for v in x.drain(..) {
                out.write_all(&v.to_le_bytes())?;
            }
        }
    }
    out.flush()?;
    println!("{output}: {} tensors", file.tensors.len());
    Ok(())
}
