//! Whisper against whisper.cpp 1.9.1 on the same weights (tests/fixtures/whisper/{tiny.en,
//! base}.json, made by scripts/gen-whisper-fixtures.py): the catalog's whisper-tiny.en and
//! whisper-base (faster-whisper's CTranslate2 files converted by `cera convert`, fetched once)
//! on whisper.cpp's jfk.wav, llama.cpp's test-2.mp3 and the five LibriVox clips of Debian's
//! pocketsphinx-testdata.
//!
//! - greedy without timestamps: the token ids equal whisper.cpp's, clip for clip, both models
//!   (base in English, whisper-cli's default);
//! - greedy with timestamps: the same segments (text, and times within 200 ms: the timestamp
//!   tokens are where near-ties sit), tiny.en;
//! - base: the language detected (English, confidently) and the one forced;
//! - the default decoding (beam search of 5, temperature fallback): a word error rate on the
//!   LibriVox clips no worse than whisper.cpp's greedy one, both models;
//! - 8 kHz telephone audio; a Q8_0 file from `cera quantize`;
//! - hostile input: no samples, a blip shorter than Whisper reads, minutes of silence.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cera::backend::Cpu;
use cera::kernels::{CpuTier, KernelTable};
use cera::models::whisper::Whisper;
use cera::transcribe::{TranscribeOptions, transcribe};

const LIBRIVOX: &str = "/usr/share/pocketsphinx/test/data/librivox";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/whisper")
}

fn load(name: &str) -> Whisper {
    let entry = cera::fetch::lookup(name).expect("in the catalog");
    let path = cera::fetch::ensure(entry, &mut |_| {}).expect("fetching the model");
    let file = cera::gguf::GgufFile::open(&path).expect("opening the model");
    Whisper::load(Arc::new(file)).expect("loading the model")
}

fn model() -> &'static Whisper {
    static M: OnceLock<Whisper> = OnceLock::new();
    M.get_or_init(|| load("whisper-tiny.en"))
}

fn base() -> &'static Whisper {
    static M: OnceLock<Whisper> = OnceLock::new();
    M.get_or_init(|| load("whisper-base"))
}

fn reference() -> serde_json::Value {
    fixture("tiny.en.json")
}

fn fixture(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join(name)).expect("the fixtures");
    serde_json::from_str(&text).expect("fixtures JSON")
}

/// The clip's 16 kHz samples (a missing clip fails loudly, saying where it comes from).
fn samples(name: &str) -> Vec<f32> {
    let path = if name == "jfk.wav" {
        fixtures().join(name)
    } else if name == "test-2.mp3" {
        let data = cera::fetch::llama_cpp_data(&mut |_| {}).expect("llama.cpp's test data");
        data.join("tools/mtmd/test-2.mp3")
    } else {
        PathBuf::from(LIBRIVOX).join(name)
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the LibriVox clips come from Debian's pocketsphinx-testdata: \
             apt install pocketsphinx-testdata)",
            path.display()
        )
    });
    cera::media::audio::decode_audio(&bytes, 16_000).expect("decoding the clip")
}

fn cpu() -> Cpu {
    Cpu::new(2)
}

fn clips(r: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    r["clips"]
        .as_object()
        .expect("clips")
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn greedy_tokens_equal_whisper_cpp() {
    same_tokens(model(), &reference(), TranscribeOptions::greedy());
}

#[test]
fn base_greedy_tokens_equal_whisper_cpp() {
    let mut o = TranscribeOptions::greedy();
    o.language = Some("en".into());
    same_tokens(base(), &fixture("base.json"), o);
}

#[test]
fn base_detects_and_takes_languages() {
    let m = base();
    let cpu = cpu();
    let jfk = samples("jfk.wav");
    let p = cera::transcribe::detect_language(m, &cpu, &jfk).unwrap();
    assert_eq!(p[0].0, "en", "{:?}", &p[..3]);
    assert!(p[0].1 > 0.9, "{:?}", &p[..3]);
    assert_eq!(p.len(), 99);
    // no language given: detected, and the text is English
    let t = transcribe(m, &cpu, &jfk, &TranscribeOptions::greedy()).unwrap();
    assert_eq!(t.language, "en");
    assert!(t.text.contains("ask not what your country"), "{}", t.text);
    // a language forced: its task token, and text that is no longer the English one
    let mut o = TranscribeOptions::greedy();
    o.language = Some("fr".into());
    let fr = transcribe(m, &cpu, &jfk, &o).unwrap();
    assert_eq!(fr.language, "fr");
    assert!(!fr.text.contains("ask not what"), "{}", fr.text);
    o.language = Some("xx".into());
    let e = transcribe(m, &cpu, &jfk, &o).unwrap_err().to_string();
    assert!(e.contains("'xx'"), "{e}");
}

fn same_tokens(m: &Whisper, r: &serde_json::Value, opts: TranscribeOptions) {
    let cpu = cpu();
    for (name, want) in clips(r) {
        let t = transcribe(m, &cpu, &samples(&name), &opts).unwrap();
        let got: Vec<u64> = t
            .segments
            .iter()
            .flat_map(|s| s.tokens.iter().map(|&x| x as u64))
            .collect();
        let want: Vec<u64> = want["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(got, want, "{name}: {:?}", t.text);
    }
}

#[test]
fn greedy_segments_as_whisper_cpp() {
    let r = reference();
    let m = model();
    let cpu = cpu();
    let mut opts = TranscribeOptions::greedy();
    opts.timestamps = true;
    for (name, want) in clips(&r) {
        let t = transcribe(m, &cpu, &samples(&name), &opts).unwrap();
        let want = want["segments"].as_array().unwrap();
        let texts: Vec<&str> = t.segments.iter().map(|s| s.text.as_str()).collect();
        let want_texts: Vec<&str> = want.iter().map(|s| s[2].as_str().unwrap()).collect();
        assert_eq!(texts, want_texts, "{name}");
        for (s, w) in t.segments.iter().zip(want) {
            let (from, to) = (w[0].as_f64().unwrap(), w[1].as_f64().unwrap());
            // within 10 timestamp steps (200 ms): a near-tie between timestamp tokens moves a
            // boundary; a wrong window offset or step moves it by seconds
            assert!(
                (s.start as f64 * 1e3 - from).abs() <= 200.0
                    && (s.end as f64 * 1e3 - to).abs() <= 200.0,
                "{name}: [{} → {}] against [{from} → {to}] ms",
                s.start,
                s.end
            );
            // (a last timestamp may reach a little past the samples, as whisper.cpp's does)
            assert!(
                s.start <= s.end && s.end <= t.duration + 1.0,
                "{name}: {s:?}"
            );
        }
    }
}

/// Lowercase words without punctuation; hyphens split words (`ill-disposed`).
fn words(s: &str) -> Vec<String> {
    s.to_lowercase()
        .replace(['-', '—'], " ")
        .split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric() || *c == '\'')
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Word edits (substitutions, insertions, deletions) from `want` to `got`.
fn edits(want: &[String], got: &[String]) -> usize {
    let mut prev: Vec<usize> = (0..=got.len()).collect();
    for (i, w) in want.iter().enumerate() {
        let mut cur = vec![i + 1; got.len() + 1];
        for (j, g) in got.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(w != g))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[got.len()]
}

#[test]
fn default_decoding_wer_at_most_whisper_cpp_greedy() {
    wer_at_most_peer(model(), &reference(), None);
    wer_at_most_peer(base(), &fixture("base.json"), Some("en"));
}

fn wer_at_most_peer(m: &Whisper, r: &serde_json::Value, language: Option<&str>) {
    let cpu = cpu();
    let mut o = TranscribeOptions::default();
    o.language = language.map(str::to_owned);
    let (mut ours, mut peer, mut n) = (0, 0, 0);
    for (name, want) in clips(r) {
        let Some(truth) = want["reference"].as_str() else {
            continue;
        };
        let truth = words(truth);
        let t = transcribe(m, &cpu, &samples(&name), &o).unwrap();
        ours += edits(&truth, &words(&t.text));
        peer += edits(&truth, &words(want["text"].as_str().unwrap()));
        n += truth.len();
    }
    assert!(n > 60, "the five LibriVox clips: {n} words");
    eprintln!(
        "WER {}: ours (beam 5) {ours}/{n}, whisper.cpp greedy {peer}/{n}",
        r["model"]
    );
    assert!(
        ours <= peer,
        "WER {}: ours {ours}/{n}, whisper.cpp's {peer}/{n}",
        r["model"]
    );
}

#[test]
fn hostile_audio() {
    let m = model();
    let cpu = cpu();
    let o = TranscribeOptions::greedy();
    let e = transcribe(m, &cpu, &[], &o).unwrap_err().to_string();
    assert!(e.contains("no audio"), "{e}");
    // a blip shorter than the 100 ms whisper.cpp reads: no window, no text
    let t = transcribe(m, &cpu, &[0.1; 800], &o).unwrap();
    assert!(t.segments.is_empty() && t.text.is_empty(), "{t:?}");
    // not a number in the samples
    let mut bad = vec![0.0f32; 16_000];
    bad[100] = f32::NAN;
    let e = transcribe(m, &cpu, &bad, &o).unwrap_err().to_string();
    assert!(e.contains("not a number"), "{e}");
    // a minute of silence: two windows and a stretch, each decoded to little or nothing, no
    // loop
    let t = transcribe(
        m,
        &cpu,
        &vec![0.0; 16_000 * 61],
        &TranscribeOptions::default(),
    )
    .unwrap();
    assert!(t.text.len() < 200, "{:?}", t.text);
    assert!((t.duration - 61.0).abs() < 1e-3);
    // options out of range
    let mut o = TranscribeOptions::default();
    o.beam_size = 0;
    let e = transcribe(m, &cpu, &[0.0; 16_000], &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("beam size 0"), "{e}");
    let mut o = TranscribeOptions::default();
    o.translate = true;
    let e = transcribe(m, &cpu, &[0.0; 16_000], &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("English-only"), "{e}");
}

/// 16-bit PCM WAV bytes of `samples` at `rate`.
fn wav(samples: &[f32], rate: u32) -> Vec<u8> {
    let data = (samples.len() * 2) as u32;
    let mut b = Vec::with_capacity(44 + data as usize);
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes()); // PCM
    b.extend_from_slice(&1u16.to_le_bytes()); // mono
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate * 2).to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&data.to_le_bytes());
    for &s in samples {
        b.extend_from_slice(&((s.clamp(-1.0, 1.0) * 32767.0) as i16).to_le_bytes());
    }
    b
}

#[test]
fn telephone_audio_at_8_khz() {
    // jfk.wav brought down to 8 kHz (pairs averaged), written as a WAV, read back through the
    // decoder's resampler to 16 kHz
    let jfk = samples("jfk.wav");
    let low: Vec<f32> = jfk.chunks_exact(2).map(|p| (p[0] + p[1]) * 0.5).collect();
    let back = cera::media::audio::decode_audio(&wav(&low, 8_000), 16_000).unwrap();
    assert!(
        (back.len() as i64 - jfk.len() as i64).abs() <= 2,
        "{}",
        back.len()
    );
    let t = transcribe(model(), &cpu(), &back, &TranscribeOptions::greedy()).unwrap();
    let w = words(&t.text);
    for must in [
        "ask", "not", "what", "your", "country", "can", "do", "for", "you",
    ] {
        assert!(w.iter().any(|x| x == must), "{must}: {}", t.text);
    }
}

#[test]
fn quantized_q8_0_transcribes_as_f16() {
    // `cera quantize`'s rules on a Whisper file: the matrices Q8_0, the convolutions and
    // positions kept; the words on every clip those of the F16 model (greedy)
    let entry = cera::fetch::lookup("whisper-tiny.en").unwrap();
    let src = cera::fetch::ensure(entry, &mut |_| {}).unwrap();
    let dir = std::env::temp_dir().join(format!("cera-whisper-q8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dst = dir.join("tiny.en-q8_0.gguf");
    let opts = cera::gguf::requantize::QuantizeOptions::default();
    cera::gguf::requantize::requantize(&src, &dst, "q8_0", &opts).unwrap();
    let file = cera::gguf::GgufFile::open(&dst).unwrap();
    let conv = file
        .tensors
        .iter()
        .find(|t| t.name == "encoder.conv1.weight")
        .unwrap();
    assert_eq!(conv.ty, cera::quant::GgmlType::F16);
    let q = Whisper::load(Arc::new(file)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let cpu = cpu();
    // (four of the seven clips: CI's time)
    for (name, _) in clips(&reference()).into_iter().take(4) {
        let s = samples(&name);
        let a = transcribe(model(), &cpu, &s, &TranscribeOptions::greedy()).unwrap();
        let b = transcribe(&q, &cpu, &s, &TranscribeOptions::greedy()).unwrap();
        let (wa, wb) = (words(&a.text), words(&b.text));
        // (at most one word in twenty apart: 8-bit weights move near-ties)
        assert!(
            edits(&wa, &wb) * 20 <= wa.len(),
            "{name}:\n{}\n{}",
            a.text,
            b.text
        );
    }
}

/// Named `gpu::…` as the other GPU parity tests: the workspace's test run skips them, the CI's
/// GPU step runs them on lavapipe (`cargo test --test whisper -- gpu::`).
#[cfg(feature = "gpu")]
mod gpu {
    use super::*;

    /// The same model through the wgpu kernels: jfk.wav's greedy tokens as whisper.cpp's (the
    /// same text at least: the GPU's sums run in another order, and a near-tie may part).
    #[test]
    fn tiny_en_transcribes_as_whisper_cpp() {
        let gpu = cera::backend::gpu::Gpu::new().expect("a wgpu adapter (lavapipe in CI)");
        let r = reference();
        let want = &r["clips"]["jfk.wav"];
        let t0 = std::time::Instant::now();
        let t = transcribe(
            model(),
            &gpu,
            &samples("jfk.wav"),
            &TranscribeOptions::greedy(),
        )
        .unwrap();
        eprintln!(
            "gpu jfk.wav: {:.1} s on {}",
            t0.elapsed().as_secs_f64(),
            gpu.info().name
        );
        let got: Vec<u64> = t
            .segments
            .iter()
            .flat_map(|s| s.tokens.iter().map(|&x| x as u64))
            .collect();
        let want_ids: Vec<u64> = want["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        if got != want_ids {
            let (a, b) = (words(&t.text), words(want["text"].as_str().unwrap()));
            assert!(edits(&a, &b) <= 1, "{}\n{}", t.text, want["text"]);
        }
    }
}

/// Windows encoded together (`Encoder::encode_windows`, what a GPU does without timestamps)
/// give each window's rows exactly as encoded alone, and a transcription of three windows so
/// made has the same tokens as one window at a time.
#[test]
fn windows_encoded_together_as_alone() {
    use cera::backend::Backend;
    use cera::media::whisper_mel::WhisperFrontEnd;
    // the five LibriVox clips end to end (25 s), twice: two windows
    let mut clip = Vec::new();
    for (name, _) in clips(&reference())
        .iter()
        .filter(|(n, _)| n.contains("austen"))
    {
        clip.extend(samples(name));
    }
    let audio: Vec<f32> = clip.iter().chain(&clip).copied().collect();
    assert!(audio.len() > 16_000 * 30, "{} samples", audio.len());
    let m = model();
    // rows exactly as alone on a tier whose products sum each row the same way in any block
    // of rows (AVX-512's encoder products sum a block of 12 rows and its remainder in other
    // orders, and the windows' rows fall on other blocks together than alone)
    let tier = CpuTier::supported()
        .into_iter()
        .find(|&t| t != CpuTier::Scalar && t != CpuTier::Avx512)
        .unwrap_or(CpuTier::Scalar);
    let exact = Cpu::with_table(2, Box::leak(Box::new(KernelTable::for_tier(tier).unwrap())));
    let mel = WhisperFrontEnd::new(m.hp.n_mels)
        .unwrap()
        .compute(&audio)
        .unwrap();
    let (w0, w1) = (mel.window(0), mel.window(3000));
    let mut cx = Default::default();
    let both = m
        .encoder
        .encode_windows(&exact, &mut cx, &[&w0, &w1])
        .unwrap();
    let mut all = Vec::new();
    exact.download(&mut cx, &both, &mut all);
    for (i, w) in [&w0, &w1].into_iter().enumerate() {
        let alone = m.encoder.encode(&exact, &mut cx, w).unwrap();
        let mut one = Vec::new();
        exact.download(&mut cx, &alone, &mut one);
        assert!(
            one == all[i * one.len()..(i + 1) * one.len()],
            "window {i} ({tier})"
        );
    }
    // and the same tokens from three windows encoded at once as one at a time, on this host's
    // best tier
    let cpu = cpu();
    // three times: three windows
    let audio3: Vec<f32> = audio.iter().chain(&clip).copied().collect();
    let tokens = |batch: usize| {
        let mut o = TranscribeOptions::greedy();
        o.encoder_batch = batch;
        let t = transcribe(m, &cpu, &audio3, &o).unwrap();
        assert!(t.segments.len() >= 2, "{t:?}");
        t.segments
            .into_iter()
            .flat_map(|s| s.tokens)
            .collect::<Vec<_>>()
    };
    assert_eq!(tokens(3), tokens(1));
}
