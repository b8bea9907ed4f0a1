//! LFM2-Audio's encoder on random weights at its layout: the CPU backend and the GPU against
//! the f64 reference backend, the front end's shapes, an mmproj with both halves, hostile
//! mmproj files and clips refused by name, and a clip entering a session. (Parity with
//! llama-mtmd-cli is `tests/audio_parity.rs`.)

use std::sync::Arc;

use cera::backend::reference::Reference;
use cera::backend::{Backend, Cpu};
use cera::gguf::GgufFile;
use cera::models::Mmproj;
use cera::models::audio::Conformer;
use cera::quant::GgmlType;

#[path = "common/audio_mmproj.rs"]
mod audio_mmproj;
#[path = "common/mmproj_model.rs"]
mod mmproj_model;
#[path = "common/models.rs"]
mod models;

fn load(bytes: Vec<u8>) -> cera::error::Result<Mmproj> {
    Mmproj::load(Arc::new(GgufFile::from_bytes(bytes)?))
}

/// 1.1 s of a two-tone chord with a gap, at 16 kHz.
fn clip() -> Vec<f32> {
    (0..17_600)
        .map(|i| {
            let t = i as f32 / 16_000.0;
            let on = if (6_000..8_000).contains(&i) {
                0.0
            } else {
                1.0
            };
            on * (0.3 * (2.0 * std::f32::consts::PI * 440.0 * t).sin()
                + 0.2 * (2.0 * std::f32::consts::PI * 1250.0 * t).sin())
        })
        .collect()
}

fn least_cosine(a: &[f32], b: &[f32], width: usize) -> f64 {
    a.chunks(width)
        .zip(b.chunks(width))
        .map(|(a, b)| {
            let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
            let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            dot / (na * nb)
        })
        .fold(1.0, f64::min)
}

fn encode<B: Backend>(m: &Conformer, be: &B, samples: &[f32]) -> (Vec<f32>, usize) {
    m.encode(be, &m.mel(samples).unwrap()).unwrap()
}

#[test]
fn the_cpu_encodes_as_the_reference_does() {
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0] {
        let m = load(audio_mmproj::build(
            "tiny",
            &audio_mmproj::TINY_AUDIO,
            ty,
            None,
            None,
        ))
        .unwrap();
        let a = m.audio.as_ref().unwrap();
        let (cpu, n) = encode(a, &Cpu::new(2), &clip());
        let (refr, n2) = encode(a, &Reference, &clip());
        // 110 frames of 10 ms (and one past the clip), 8x fewer positions
        assert_eq!((n, n2), (14, 14));
        assert_eq!(cpu.len(), n * m.n_embd_out());
        let floor = if ty == GgmlType::Q8_0 { 0.999 } else { 0.99999 };
        let c = least_cosine(&cpu, &refr, m.n_embd_out());
        assert!(c > floor, "{ty}: cosine {c}");
    }
}

/// The same on the GPU (wgpu; lavapipe in CI).
#[cfg(feature = "gpu")]
#[test]
fn the_gpu_encodes_as_the_reference_does() {
    let gpu = cera::backend::gpu::Gpu::new().expect("a wgpu adapter (lavapipe in CI)");
    for ty in [GgmlType::F16, GgmlType::Q8_0] {
        let m = load(audio_mmproj::build(
            "tiny",
            &audio_mmproj::TINY_AUDIO,
            ty,
            None,
            None,
        ))
        .unwrap();
        let a = m.audio.as_ref().unwrap();
        let (got, n) = encode(a, &gpu, &clip());
        let (refr, n2) = encode(a, &Reference, &clip());
        assert_eq!((n, got.len()), (n2, refr.len()));
        let floor = if ty == GgmlType::Q8_0 { 0.999 } else { 0.99999 };
        let c = least_cosine(&got, &refr, m.n_embd_out());
        assert!(c > floor, "gpu {ty}: cosine {c}");
    }
}

#[test]
fn one_mmproj_with_both_halves() {
    let v = mmproj_model::build("both", &mmproj_model::TINY, GgmlType::F16, None);
    let a = audio_mmproj::build("both", &audio_mmproj::TINY_AUDIO, GgmlType::F16, None, None);
    let m = load(audio_mmproj::combine(v, a)).unwrap();
    assert!(m.has_vision() && m.has_audio());
    let enc = m.encode_audio(&Cpu::new(1), &clip()).unwrap();
    assert_eq!(enc.n_embd_rows, 14);
    let img = cera::media::Rgb8::filled(64, 64, [30, 90, 200]);
    assert!(m.encode_image(&Cpu::new(1), &img).unwrap().n_embd_rows > 0);
    // a vision-only mmproj says it takes no audio, an audio-only one no images
    let vision = load(mmproj_model::build(
        "v",
        &mmproj_model::TINY,
        GgmlType::F16,
        None,
    ))
    .unwrap();
    let e = vision.encode_audio(&Cpu::new(1), &clip()).unwrap_err();
    assert!(e.to_string().contains("no audio encoder"), "{e}");
    let audio = load(audio_mmproj::build(
        "a",
        &audio_mmproj::TINY_AUDIO,
        GgmlType::F16,
        None,
        None,
    ))
    .unwrap();
    let e = audio.encode_image(&Cpu::new(1), &img).unwrap_err();
    assert!(e.to_string().contains("no vision encoder"), "{e}");
}

#[test]
fn hostile_mmproj_files_and_clips_are_refused_by_name() {
    let t = &audio_mmproj::TINY_AUDIO;
    let f = GgmlType::F32;
    for missing in ["a.blk.1.pos_bias_v", "mm.a.mlp.3.weight", "a.conv1d.5.bias"] {
        let e = load(audio_mmproj::build("h", t, f, Some(missing), None))
            .err()
            .expect("refused");
        assert!(e.to_string().contains(missing), "{missing}: {e}");
    }
    // a tensor nothing reads
    let e = load(audio_mmproj::build(
        "h",
        t,
        f,
        None,
        Some("a.blk.0.attn_extra.weight"),
    ))
    .err()
    .expect("refused");
    assert!(e.to_string().contains("a.blk.0.attn_extra.weight"), "{e}");
    // a projector this build does not run
    let mut bytes = audio_mmproj::build("h", t, f, None, None);
    let pos = bytes.windows(5).position(|w| w == b"lfm2a").unwrap();
    bytes[pos..pos + 5].copy_from_slice(b"qw2aa");
    let e = load(bytes).err().expect("refused");
    assert!(e.to_string().contains("qw2aa"), "{e}");
    // clips: too short to normalize, not finite
    let m = load(audio_mmproj::build("h", t, f, None, None)).unwrap();
    let e = m.encode_audio(&Cpu::new(1), &[0.1; 200]).unwrap_err();
    assert!(e.to_string().contains("200 samples"), "{e}");
    let e = m.encode_audio(&Cpu::new(1), &[]).unwrap_err();
    assert!(e.to_string().contains("0 samples"), "{e}");
}

#[cfg(feature = "media")]
#[test]
fn hostile_audio_files_are_named() {
    use cera::media::audio::decode_audio;
    let e = |b: &[u8]| decode_audio(b, 16_000).unwrap_err().to_string();
    // a zero-length WAV (a header that says no samples)
    let mut wav = b"RIFF".to_vec();
    wav.extend_from_slice(&36u32.to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    for v in [16u32, 0x0001_0001, 16_000, 32_000, 0x0010_0002] {
        wav.extend_from_slice(&v.to_le_bytes());
    }
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&0u32.to_le_bytes());
    assert!(e(&wav).contains("no audio samples"), "{}", e(&wav));
    // a WAV header claiming 4 GB of samples with a few bytes behind it: what is there
    let mut lying = wav.clone();
    let n = lying.len();
    lying[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    lying.extend_from_slice(&[1, 0, 2, 0, 3, 0]);
    match decode_audio(&lying, 16_000) {
        Ok(s) => assert!(s.len() <= 3, "{} samples from 6 bytes", s.len()),
        Err(err) => assert!(err.to_string().starts_with("audio:"), "{err}"),
    }
    // an MP3 whose frame header lies about the data behind it
    let mut mp3 = vec![0xFF, 0xFB, 0x90, 0x64];
    mp3.extend(std::iter::repeat_n(0x55, 600));
    match decode_audio(&mp3, 16_000) {
        Ok(s) => assert!(s.len() < 10_000, "{} samples from 604 bytes", s.len()),
        Err(err) => assert!(err.to_string().starts_with("audio:"), "{err}"),
    }
    assert!(e(b"").contains("empty"));
    assert!(e(b"GIF89a not audio").contains("not an audio file"));
}

/// A clip enters a session after its prompt text and the model generates after it; the
/// same clip gives the same context, another clip other ids.
#[test]
fn a_clip_enters_a_session() {
    use cera::engine::{Engine, EngineOptions, SessionOptions};
    use cera::session::{Control, GenerateOptions};
    let mut o = EngineOptions::default();
    o.n_threads = Some(2);
    let eng = Engine::load(models::real_model("smollm2"), o).unwrap();
    let shape = audio_mmproj::AudioShape {
        n_embd_out: eng.n_embd(),
        ..audio_mmproj::TINY_AUDIO
    };
    let m = load(audio_mmproj::build(
        "smol",
        &shape,
        GgmlType::F16,
        None,
        None,
    ))
    .unwrap();
    let mut so = SessionOptions::default();
    so.n_ctx = 256;
    let mut greedy = GenerateOptions::default();
    greedy.max_tokens = 6;
    greedy.sampler.temperature = 0.0;
    let run = |samples: &[f32]| {
        let mut s = eng.session(so.clone());
        s.append_text("Transcribe:", false).unwrap();
        let n = s.append_audio(&m, samples).unwrap();
        s.append_text(" It says", false).unwrap();
        let ids = s.tokens().to_vec();
        let g = s
            .generate(&greedy, &mut |_: u32, _: &str| Control::Continue)
            .unwrap();
        (n, ids, g.text)
    };
    let (n, ids, text) = run(&clip());
    assert_eq!(n, 14);
    assert!(!text.is_empty());
    assert_eq!(run(&clip()), (n, ids.clone(), text));
    let quiet: Vec<f32> = clip().iter().map(|v| v * 0.5 + 0.01).collect();
    assert_ne!(run(&quiet).1, ids);
}

/// The media cache answers a repeated clip or image without encoding it again, keeps what
/// fits its budget, and tells inputs apart by their values.
#[test]
fn the_media_cache_encodes_a_repeat_once() {
    use cera::engine::{Engine, EngineOptions};
    use cera::media::MediaInput;
    use cera::session::MediaCache;
    let mut o = EngineOptions::default();
    o.n_threads = Some(1);
    let eng = Engine::load(models::real_model("smollm2"), o).unwrap();
    let ty = GgmlType::F16;
    let m = Arc::new(
        load(audio_mmproj::combine(
            mmproj_model::build(
                "c",
                &mmproj_model::VisionShape {
                    n_embd_out: eng.n_embd(),
                    ..mmproj_model::TINY
                },
                ty,
                None,
            ),
            audio_mmproj::build(
                "c",
                &audio_mmproj::AudioShape {
                    n_embd_out: eng.n_embd(),
                    ..audio_mmproj::TINY_AUDIO
                },
                ty,
                None,
                None,
            ),
        ))
        .unwrap(),
    );
    let cache = MediaCache::new(1 << 20);
    let clip_a = MediaInput::Audio(clip());
    let a1 = cache.encode(&eng, &m, &clip_a).unwrap();
    let a2 = cache.encode(&eng, &m, &clip_a).unwrap();
    assert!(Arc::ptr_eq(&a1, &a2));
    assert_eq!(cache.hits(), 1);
    let mut other = clip();
    other[100] += 1e-3;
    let b = cache.encode(&eng, &m, &MediaInput::Audio(other)).unwrap();
    assert!(!Arc::ptr_eq(&a1, &b) && cache.hits() == 1);
    let img = MediaInput::Image(cera::media::Rgb8::filled(64, 64, [1, 2, 3]));
    let i1 = cache.encode(&eng, &m, &img).unwrap();
    assert!(Arc::ptr_eq(&i1, &cache.encode(&eng, &m, &img).unwrap()));
    assert_eq!(cache.hits(), 2);
    // a budget smaller than one encoding keeps nothing
    let tiny = MediaCache::new(16);
    let t1 = tiny.encode(&eng, &m, &clip_a).unwrap();
    let t2 = tiny.encode(&eng, &m, &clip_a).unwrap();
    assert!(!Arc::ptr_eq(&t1, &t2) && tiny.hits() == 0 && *t1 == *t2);
}

/// A clip longer than the whole context is refused by its length before it is encoded.
#[test]
fn a_clip_over_the_context_is_refused_before_encoding() {
    use cera::engine::{Engine, EngineOptions, SessionOptions};
    let eng = Engine::load(models::real_model("smollm2"), EngineOptions::default()).unwrap();
    let shape = audio_mmproj::AudioShape {
        n_embd_out: eng.n_embd(),
        ..audio_mmproj::TINY_AUDIO
    };
    let m = load(audio_mmproj::build("o", &shape, GgmlType::F16, None, None)).unwrap();
    let a = m.audio.as_ref().unwrap();
    // the count before encoding is the encoder's
    for n in [400usize, 17_600, 40_000, 279_035] {
        let want = Conformer::n_tokens(a.mel(&vec![0.1; n]).unwrap().n_frames);
        assert_eq!(a.n_tokens_for(n), want, "{n} samples");
    }
    let mut so = SessionOptions::default();
    so.n_ctx = 64;
    let mut s = eng.session(so);
    // 60 s: 751 positions, in a context of 64
    let t0 = std::time::Instant::now();
    let e = s.append_audio(&m, &vec![0.01; 960_000]).unwrap_err();
    assert!(e.to_string().contains("64"), "{e}");
    assert!(
        t0.elapsed().as_secs_f64() < 1.0,
        "refused before the encoder ran"
    );
    assert!(s.tokens().is_empty());
}
