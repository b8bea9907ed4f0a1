//! The vision tower and the projectors on random weights at LFM2-VL's and Idefics3's layouts:
//! the CPU backend against the f64 reference backend (every op in plain scalar code), the image
//! tokens' count and width, NaFlex's resized position embeddings, and hostile mmproj files
//! refused by name. (Parity with llama-mtmd-cli is `tests/vision_parity.rs`.)

use std::sync::Arc;

use cera::backend::Cpu;
use cera::backend::reference::Reference;
use cera::gguf::GgufFile;
use cera::models::Mmproj;
use cera::models::vision::VisionTower;
use cera::models::vision::siglip::resize_positions;
use cera::quant::GgmlType;

#[path = "common/mmproj_model.rs"]
mod mmproj_model;

fn load_mmproj(bytes: Vec<u8>) -> cera::error::Result<Mmproj> {
    Mmproj::load(Arc::new(GgufFile::from_bytes(bytes)?))
}

/// The vision tower of an mmproj file.
fn load(bytes: Vec<u8>) -> cera::error::Result<VisionTower> {
    Ok(load_mmproj(bytes)?.vision.expect("a vision tower"))
}

/// A smooth image with some texture, normalized as the mmproj asks.
fn pixels(w: usize, h: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            for c in 0..3 {
                let t = ((x * 7 + y * 3 + c * 11) % 23) as f32 / 23.0;
                v.push((t - 0.5) / 0.5);
            }
        }
    }
    v
}

/// A layout's name, its shape and the image sizes it is encoded at.
type Case = (
    &'static str,
    mmproj_model::VisionShape,
    &'static [(usize, usize)],
);

/// The layouts and image sizes: LFM2-VL's at the trained 64 x 64 grid and a 96 x 64 one whose
/// positions are resized; Idefics3's at its one size.
fn cases() -> [Case; 2] {
    [
        ("tiny", mmproj_model::TINY, &[(64, 64), (96, 64)]),
        ("tiny-idefics3", mmproj_model::TINY_IDEFICS3, &[(64, 64)]),
    ]
}

#[test]
fn the_cpu_encodes_as_the_reference_does() {
    for ((name, shape, sizes), ty) in cases()
        .into_iter()
        .flat_map(|c| [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0].map(|t| (c.clone(), t)))
    {
        let m = load(mmproj_model::build(name, &shape, ty, None)).unwrap();
        for &(w, h) in sizes {
            let px = pixels(w, h);
            let (cpu, n) = m.encode(&Cpu::new(2), &px, w, h).unwrap();
            let (refr, n2) = m.encode(&Reference, &px, w, h).unwrap();
            assert_eq!(n, (w / 32) * (h / 32));
            assert_eq!((n, cpu.len()), (n2, n * m.n_embd_out()));
            let width = m.n_embd_out();
            for (r, (a, b)) in cpu.chunks(width).zip(refr.chunks(width)).enumerate() {
                let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
                let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
                let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
                let cos = dot / (na * nb);
                // quantized activations on the CPU (Q8_0 weights) part from f64 a little more
                let floor = if ty == GgmlType::Q8_0 { 0.999 } else { 0.99999 };
                assert!(cos > floor, "{name} {ty} {w}x{h} row {r}: cosine {cos}");
            }
        }
    }
}

/// The same on the GPU (wgpu; lavapipe in CI): its matrix products keep f32 activations
/// (f16 ones for Q8_0 weights' dot products do not arise: it dequantizes), so every format
/// agrees with the f64 reference as closely as the CPU's floats do.
#[cfg(feature = "gpu")]
#[test]
fn the_gpu_encodes_as_the_reference_does() {
    let gpu = cera::backend::gpu::Gpu::new().expect("a wgpu adapter (lavapipe in CI)");
    for ((name, shape, sizes), ty) in cases()
        .into_iter()
        .flat_map(|c| [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0].map(|t| (c.clone(), t)))
    {
        let m = load(mmproj_model::build(name, &shape, ty, None)).unwrap();
        for &(w, h) in sizes {
            let px = pixels(w, h);
            let (got, n) = m.encode(&gpu, &px, w, h).unwrap();
            let (refr, n2) = m.encode(&Reference, &px, w, h).unwrap();
            assert_eq!((n, got.len()), (n2, refr.len()));
            let width = m.n_embd_out();
            for (r, (a, b)) in got.chunks(width).zip(refr.chunks(width)).enumerate() {
                let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
                let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
                let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
                let cos = dot / (na * nb);
                let floor = if ty == GgmlType::Q8_0 { 0.999 } else { 0.99999 };
                assert!(cos > floor, "gpu {name} {ty} {w}x{h} row {r}: cosine {cos}");
            }
        }
    }
}

#[test]
fn position_embeddings_resize_by_area() {
    // a 2 x 2 grid of one channel: growing to 4 x 4 interpolates, the corners keep theirs
    let pos = [0.0f32, 1.0, 2.0, 3.0];
    let same = resize_positions(&pos, 1, 2, 2, 2);
    assert_eq!(same, pos);
    let up = resize_positions(&pos, 1, 2, 4, 4);
    assert_eq!(up.len(), 16);
    assert_eq!(up[0], 0.0);
    assert_eq!(up[15], 3.0);
    assert!(up.windows(2).take(3).all(|w| w[0] <= w[1]));
    // shrinking averages: one output is the mean of all four
    let down = resize_positions(&pos, 1, 2, 1, 1);
    assert!((down[0] - 1.5).abs() < 1e-6, "{down:?}");
}

#[test]
fn hostile_mmproj_files_are_refused_by_name() {
    let tiny = &mmproj_model::TINY;
    let e = load(mmproj_model::build(
        "h",
        tiny,
        GgmlType::F32,
        Some("mm.2.weight"),
    ))
    .err();
    assert!(e.unwrap().to_string().contains("mm.2.weight"));
    let e = load(mmproj_model::build(
        "h",
        tiny,
        GgmlType::F32,
        Some("v.blk.1.ffn_up"),
    ))
    .err();
    assert!(e.unwrap().to_string().contains("v.blk.1.ffn_up"));
    // an image that does not fit the tower
    let m = load(mmproj_model::build("h", tiny, GgmlType::F32, None)).unwrap();
    let e = m.encode(&Cpu::new(1), &pixels(48, 64), 48, 64).unwrap_err();
    assert!(e.to_string().contains("multiples of 32"), "{e}");
    let e = m
        .encode(&Cpu::new(1), &pixels(64, 64)[..10], 64, 64)
        .unwrap_err();
    assert!(e.to_string().contains("pixel values"), "{e}");
    // Idefics3's: its projector, its longest edge, its one slice size
    let idf = &mmproj_model::TINY_IDEFICS3;
    let e = load(mmproj_model::build(
        "h",
        idf,
        GgmlType::F32,
        Some("mm.model.fc"),
    ))
    .err()
    .unwrap();
    assert!(e.to_string().contains("mm.model.fc.weight"), "{e}");
    let no_edge = mmproj_model::VisionShape {
        longest_edge: 0,
        ..idf.clone()
    };
    let e = load(mmproj_model::build("h", &no_edge, GgmlType::F32, None))
        .err()
        .unwrap();
    assert!(e.to_string().contains("preproc_image_size"), "{e}");
    let m = load(mmproj_model::build("h", idf, GgmlType::F32, None)).unwrap();
    let e = m.encode(&Cpu::new(1), &pixels(96, 64), 96, 64).unwrap_err();
    assert!(e.to_string().contains("64 x 64 slices"), "{e}");
    // a vision tensor the tower does not read (here: a third block past block_count 2)
    let base = GgufFile::from_bytes(mmproj_model::build("h", tiny, GgmlType::F32, None)).unwrap();
    let mut w = cera::gguf::GgufWriter::new();
    for (k, v) in &base.metadata {
        w.set(k.clone(), v.clone());
    }
    for t in &base.tensors {
        let dims: Vec<u64> = t.shape.clone();
        w.add_tensor_f32(
            &t.name,
            GgmlType::F32,
            &dims,
            &base.tensor_f32(&t.name).unwrap(),
        )
        .unwrap();
    }
    w.add_tensor_f32("v.blk.2.ln1.weight", GgmlType::F32, &[32], &[1.0; 32])
        .unwrap();
    let e = load(w.to_bytes().unwrap()).err().unwrap();
    assert!(e.to_string().contains("v.blk.2.ln1.weight"), "{e}");
    // a text model is not an mmproj
    let mut w = cera::gguf::GgufWriter::new();
    w.set("general.architecture", "llama");
    let e = load(w.to_bytes().unwrap()).err().unwrap();
    assert!(e.to_string().contains("clip"), "{e}");
}

#[path = "common/models.rs"]
mod models;

/// SmolLM2 (two threads) and a tiny random mmproj as wide as its embeddings.
fn smollm2_pair() -> (cera::engine::Engine, Mmproj) {
    let mut o = cera::engine::EngineOptions::default();
    o.n_threads = Some(2);
    let eng = cera::engine::Engine::load(models::real_model("smollm2"), o).unwrap();
    let shape = mmproj_model::VisionShape {
        n_embd_out: eng.n_embd(),
        ..mmproj_model::TINY
    };
    let m = load_mmproj(mmproj_model::build("smol", &shape, GgmlType::F16, None)).unwrap();
    (eng, m)
}

/// An image enters a session between its markers and the model generates after it; the same
/// image gives the same context, another image other ids; a pair of mismatched widths is named.
#[test]
fn an_image_enters_a_session() {
    use cera::engine::SessionOptions;
    use cera::media::Rgb8;
    use cera::session::{Control, GenerateOptions};
    let (eng, m) = smollm2_pair();
    let mut img = Rgb8::filled(80, 60, [200, 120, 40]);
    for (i, b) in img.data.iter_mut().enumerate() {
        *b = b.wrapping_add((i % 97) as u8);
    }
    let mut sopts = SessionOptions::default();
    sopts.n_ctx = 512;
    let mut greedy = GenerateOptions::default();
    greedy.max_tokens = 6;
    greedy.sampler.temperature = 0.0;
    let run = |img: &Rgb8| {
        let mut s = eng.session(sopts.clone());
        s.append_text("Describe:", false).unwrap();
        let n = s.append_image(&m, img).unwrap();
        s.append_text(" It shows", false).unwrap();
        let ids = s.tokens().to_vec();
        let g = s
            .generate(&greedy, &mut |_: u32, _: &str| Control::Continue)
            .unwrap();
        (n, ids, g.text)
    };
    let (n, ids, text) = run(&img);
    // 80 x 60 grows to the 64-token floor: 64 rows of embeddings plus the two markers' tokens
    assert!(n > 64, "{n}");
    assert!(!text.is_empty());
    assert_eq!(run(&img), (n, ids.clone(), text));
    let other = Rgb8::filled(80, 60, [10, 10, 10]);
    let (_, ids2, _) = run(&other);
    assert_ne!(ids, ids2);
    let narrow = load_mmproj(mmproj_model::build(
        "narrow",
        &mmproj_model::TINY,
        GgmlType::F16,
        None,
    ))
    .unwrap();
    let e = eng.session(sopts).append_image(&narrow, &img).unwrap_err();
    assert!(e.to_string().contains("wide"), "{e}");
}

/// A chat whose messages carry an image checkpoints with it: restored in a new chat (no mmproj
/// at hand) it continues as the saved one does; a cut checkpoint is an error naming it (the
/// media section's own checks: `chat::media_state`'s tests).
#[test]
fn a_chat_with_an_image_checkpoints_and_restores() {
    use cera::chat::{Message, TurnOptions};
    use cera::engine::SessionOptions;
    use cera::media::Rgb8;
    use cera::sample::SamplerConfig;
    use cera::session::GenerateOptions;
    let (eng, m) = smollm2_pair();
    let img = Rgb8::filled(70, 50, [30, 160, 90]);
    let mut sopts = SessionOptions::default();
    sopts.n_ctx = 1024;
    let greedy = |n: usize| {
        let mut g = GenerateOptions::default();
        g.max_tokens = n;
        let mut s = SamplerConfig::default();
        s.temperature = 0.0;
        g.sampler = s;
        TurnOptions::new(g)
    };
    let mut a = eng.session(sopts.clone()).into_chat().unwrap();
    let enc = eng.encode_image(&m, &img).unwrap();
    a.ingest_with_media(Message::user("What is in the picture?"), vec![enc])
        .unwrap();
    a.complete(&greedy(5)).unwrap();
    let saved = a.checkpoint().unwrap();
    a.ingest(Message::user("And its colour?")).unwrap();
    let want = a.complete(&greedy(6)).unwrap().text;

    let mut b = eng.session(sopts.clone()).into_chat().unwrap();
    b.restore(&saved).unwrap();
    b.ingest(Message::user("And its colour?")).unwrap();
    assert_eq!(b.complete(&greedy(6)).unwrap().text, want);

    // cut short: named, nothing panics
    let mut c = eng.session(sopts).into_chat().unwrap();
    let e = c
        .restore(&saved[..saved.len() - 7])
        .unwrap_err()
        .to_string();
    assert!(e.contains("checkpoint") || e.contains("truncated"), "{e}");
}
