//! Parity with llama.cpp's mtmd (the library behind llama-mtmd-cli, build 11434) at
//! LFM2-Audio-1.5B's shapes, on random weights: the mmproj (the FastConformer of 17 blocks of
//! 512 and the adapter to 2048, f16) and a language model as wide as LFM2-1.2B, both made by
//! our generators exactly as `scripts/gen-audio-fixtures.py` made them for llama.cpp (their
//! sha256 is checked). On llama.cpp's `test-2.mp3` (17.4 s of speech, mono 44.1 kHz MP3) and
//! two drawn WAV clips (2.5 s mono at 16 kHz; 1.3 s stereo at 44.1 kHz), each decoded and
//! resampled by us (mtmd: by miniaudio): every projected embedding row within cosine 0.9999 of
//! mtmd's, the prompt's tokens and audio positions as mtmd's chunks, the first step's top
//! logits, and the greedy tokens.

use std::sync::Arc;

use cera::backend::Cpu;
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::gguf::GgufFile;
use cera::media::audio::decode_audio;
use cera::models::Mmproj;
use cera::quant::GgmlType;
use cera::session::is_media_id;
use serde_json::Value;

#[path = "common/arch_models.rs"]
mod arch_models;
#[path = "common/audio_mmproj.rs"]
mod audio_mmproj;
#[path = "common/media_parity.rs"]
mod media_parity;
#[path = "common/models.rs"]
mod models;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/audio");
/// The least cosine of an embedding row against mtmd's (the bound).
const MIN_COSINE: f64 = 0.9999;

/// The drawn clip's 16-bit samples, interleaved (`drawn` in scripts/gen-audio-fixtures.py).
fn drawn(n: usize, channels: usize) -> Vec<i16> {
    let mut out = Vec::with_capacity(n * channels);
    let mut x: u32 = 12345;
    for i in 0..n as i64 {
        let saw = (i * 7) % 160 - 80;
        let sq = if (i / 9) % 2 == 0 { 50 } else { -50 };
        x = x.wrapping_mul(1103515245).wrapping_add(12345);
        let noise = ((x >> 16) & 0xFF) as i64 - 128;
        let on = if (i / 4000) % 3 == 2 { 0 } else { 1 };
        out.push(((saw * 100 + sq * 120 + noise * 20) * on) as i16);
        if channels == 2 {
            out.push(((saw * 100 - sq * 120 + noise * 20) * on) as i16);
        }
    }
    out
}

/// A 16-bit PCM WAV file.
fn wav(samples: &[i16], channels: u16, rate: u32) -> Vec<u8> {
    let data_len = (samples.len() * 2) as u32;
    let mut b = Vec::new();
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data_len).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    for v in [16u32.to_le_bytes().as_slice(), &1u16.to_le_bytes()] {
        b.extend_from_slice(v);
    }
    b.extend_from_slice(&channels.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
    b.extend_from_slice(&(channels * 2).to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&data_len.to_le_bytes());
    for s in samples {
        b.extend_from_slice(&s.to_le_bytes());
    }
    b
}

fn clip(name: &str) -> Vec<u8> {
    match name {
        "test-2.mp3" => {
            let data = cera::fetch::llama_cpp_data(&mut |_| {}).expect("llama.cpp's test data");
            std::fs::read(data.join("tools/mtmd/test-2.mp3")).unwrap()
        }
        "drawn-16k-mono.wav" => wav(&drawn(40_000, 1), 1, 16_000),
        "drawn-44k-stereo.wav" => wav(&drawn(57_330, 2), 2, 44_100),
        other => panic!("no clip {other}"),
    }
}

/// The GPU backend (wgpu; lavapipe in CI) against mtmd's rows on the drawn 16 kHz clip (the
/// conformer's ops are the backend's; its relative-position attention the host's default).
/// Named `gpu::…` as arch_parity's GPU list: the CI's GPU step runs it.
#[cfg(feature = "gpu")]
mod gpu {
    use super::*;

    #[test]
    fn lfm2_audio_encodes_as_mtmd() {
        let gpu = cera::backend::gpu::Gpu::new().expect("a wgpu adapter (lavapipe in CI)");
        let shape = audio_mmproj::AudioShape {
            n_embd_out: 2048,
            ..audio_mmproj::LFM2_AUDIO_1_5B
        };
        let mm = audio_mmproj::build("make_mmproj", &shape, GgmlType::F16, None, None);
        let mm = Mmproj::load(Arc::new(GgufFile::from_bytes(mm).unwrap())).unwrap();
        let name = "drawn-16k-mono.wav";
        let samples = decode_audio(&clip(name), 16_000).unwrap();
        let t0 = std::time::Instant::now();
        let enc = mm.encode_audio(&gpu, &samples).unwrap();
        let path = format!("{FIXTURES}/{name}.embd.f16");
        let worst = media_parity::least_cosine(&enc, &path, 2048);
        eprintln!(
            "gpu {name}: {} rows in {:.1} s, the least cosine {worst:.7}",
            enc.n_embd_rows,
            t0.elapsed().as_secs_f64()
        );
        assert!(worst >= MIN_COSINE, "gpu {name}: a row's cosine is {worst}");
    }
}

#[test]
fn lfm2_audio_1_5b_matches_mtmd() {
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURES}/index.json")).unwrap())
            .unwrap();
    // the pair, as the fixture generator made it
    let model = arch_models::build(
        &arch_models::variant("lfm2_2048w_q4_0"),
        models::tokenizer(),
    );
    assert_eq!(
        arch_models::sha256_hex(&model),
        index["model_sha256"].as_str().unwrap(),
        "the language model's generator changed: run scripts/gen-audio-fixtures.py"
    );
    let shape = audio_mmproj::AudioShape {
        n_embd_out: 2048,
        ..audio_mmproj::LFM2_AUDIO_1_5B
    };
    let mm = audio_mmproj::build("make_mmproj", &shape, GgmlType::F16, None, None);
    assert_eq!(
        arch_models::sha256_hex(&mm),
        index["mmproj_sha256"].as_str().unwrap(),
        "the mmproj generator changed: run scripts/gen-audio-fixtures.py"
    );
    let mm = Mmproj::load(Arc::new(GgufFile::from_bytes(mm).unwrap())).unwrap();
    let mut o = EngineOptions::default();
    o.n_threads = Some(2);
    let engine = Engine::from_bytes(model, o).unwrap();
    let cpu = Cpu::new(2);
    let prompt = index["prompt"].as_str().unwrap();

    for (name, want) in index["clips"].as_object().unwrap() {
        let samples = decode_audio(&clip(name), 16_000).unwrap();
        let t0 = std::time::Instant::now();
        let enc = mm.encode_audio(&cpu, &samples).unwrap();
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let cos = media_parity::row_cosines(&enc, &format!("{FIXTURES}/{name}.embd.f16"), 2048);
        let worst = cos.iter().copied().fold(1f64, f64::min);
        let mean = cos.iter().sum::<f64>() / cos.len() as f64;
        eprintln!(
            "{name}: {} samples, {} rows in {ms:.0} ms, the least cosine {worst:.7} (mean \
             {mean:.7})",
            samples.len(),
            cos.len()
        );
        assert!(
            worst >= MIN_COSINE,
            "{name}: an embedding row's cosine is {worst}"
        );

        // the prompt: tokens as mtmd's text chunks, audio rows where its media chunk is
        let mut so = SessionOptions::default();
        so.n_ctx = 1024;
        let mut s = engine.session(so);
        s.append_with_media(prompt, &[enc]).unwrap();
        let mut want_ids = Vec::new();
        for c in want["chunks"].as_array().unwrap() {
            match c["type"].as_str().unwrap() {
                "text" => want_ids.extend(
                    c["tokens"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| Some(t.as_u64().unwrap() as u32)),
                ),
                _ => want_ids.extend(std::iter::repeat_n(
                    None,
                    c["n_tokens"].as_u64().unwrap() as usize,
                )),
            }
        }
        let got_ids: Vec<Option<u32>> = s
            .tokens()
            .iter()
            .map(|&t| (!is_media_id(t)).then_some(t))
            .collect();
        assert_eq!(
            got_ids, want_ids,
            "{name}: the prompt's tokens and audio positions"
        );

        // the first step's largest logits, then the greedy tokens (equal but at near-ties)
        let logits = s.logits().to_vec();
        for pair in want["top"].as_array().unwrap() {
            let (id, v) = (
                pair[0].as_u64().unwrap() as usize,
                pair[1].as_f64().unwrap(),
            );
            assert!(
                (logits[id] as f64 - v).abs() < 0.05 * v.abs().max(1.0),
                "{name}: logit of {id} is {} (mtmd {v})",
                logits[id]
            );
        }
        for (i, step) in want["steps"].as_array().unwrap().iter().enumerate() {
            let l = s.logits();
            let argmax = (0..l.len()).fold(0, |b, j| if l[j] > l[b] { j } else { b });
            let tok = step["token"].as_u64().unwrap() as usize;
            let gap = step["top1"].as_f64().unwrap() - step["top2"].as_f64().unwrap();
            if argmax != tok {
                assert!(
                    gap < 0.1,
                    "{name}: step {i} took {argmax}, mtmd {tok} (gap {gap})"
                );
                break; // parted at a near-tie: the rest follow other tokens
            }
            s.append_tokens(&[tok as u32]).unwrap();
        }
    }
}
