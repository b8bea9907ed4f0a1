//! Parity with llama.cpp's mtmd (the library behind llama-mtmd-cli, build 11434) at
//! LFM2-VL-450M's shapes, on random weights: the mmproj (SigLIP2 NaFlex base, LFM2-VL's
//! projector, f16) and a language model of LFM2-350M's shape whose vocabulary has LFM2-VL's
//! image markers, both made by our generators exactly as `scripts/gen-vision-fixtures.py` made
//! them for llama.cpp (their sha256 is checked). On llama.cpp's `test-1.jpeg` (one thumbnail),
//! a drawn 1100 x 520 image (two 512 x 512 tiles and a thumbnail) and a drawn 100 x 30 one
//! (scaled up to the fewest tokens): every projected embedding row within cosine 0.9999 of
//! mtmd's, the prompt's tokens and image positions as mtmd's chunks, the first step's top
//! logits, and the greedy tokens.
//!
//! The same for Idefics3 at SmolVLM-256M's shapes (`scripts/gen-vision-fixtures.py idefics3`:
//! SigLIP base at 512, pixel shuffle by 4, the bias-free projector to a 576-wide llama whose
//! vocabulary has SmolVLM's markers; its longest edge 1024), on `test-1.jpeg` (2 x 2 slices
//! and the overview) and a drawn 300 x 900 image (1 x 2 slices).

use std::sync::Arc;

use cera::backend::Cpu;
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::gguf::GgufFile;
use cera::media::Rgb8;
use cera::models::Mmproj;
use cera::quant::GgmlType;
use cera::session::is_media_id;
use serde_json::Value;

#[path = "common/arch_models.rs"]
mod arch_models;
#[path = "common/media_parity.rs"]
mod media_parity;
#[path = "common/mmproj_model.rs"]
mod mmproj_model;
#[path = "common/models.rs"]
mod models;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/vision");
/// The least cosine of an embedding row against mtmd's (the bound).
const MIN_COSINE: f64 = 0.9999;

/// The generator's drawn image (`pattern` in scripts/gen-vision-fixtures.py).
fn pattern(w: usize, h: usize) -> Rgb8 {
    let mut data = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            data.push((x * 255 / (w - 1)) as u8);
            data.push((y * 255 / (h - 1)) as u8);
            data.push((((x / 8 + y / 8) % 2) * 160 + (x * y) % 64) as u8);
        }
    }
    Rgb8 {
        width: w,
        height: h,
        data,
    }
}

fn image(name: &str) -> Rgb8 {
    match name {
        "test-1.jpeg" => {
            let data = cera::fetch::llama_cpp_data(&mut |_| {}).expect("llama.cpp's test data");
            Rgb8::decode(&std::fs::read(data.join("tools/mtmd/test-1.jpeg")).unwrap()).unwrap()
        }
        "pattern-1100x520" => pattern(1100, 520),
        "pattern-100x30" => pattern(100, 30),
        "pattern-300x900" => pattern(300, 900),
        other => panic!("no image {other}"),
    }
}

#[test]
fn lfm2_vl_450m_matches_mtmd() {
    let shape = mmproj_model::VisionShape {
        n_embd_out: 1024,
        ..mmproj_model::LFM2_VL_450M
    };
    matches_mtmd(
        "vision",
        &mmproj_model::lfm2_vl_tokens(),
        "lfm2_350m_q4_0",
        &shape,
    );
}

#[test]
fn smolvlm_256m_matches_mtmd() {
    let shape = mmproj_model::VisionShape {
        longest_edge: 1024,
        ..mmproj_model::SMOLVLM_256M
    };
    matches_mtmd(
        "vision-idefics3",
        &mmproj_model::idefics3_tokens(),
        "llama_576w_q8_0",
        &shape,
    );
}

/// The GPU backend (wgpu; lavapipe in CI) against mtmd's rows too, one image per family (the
/// tower's ops are the backend's own: the CPU's encoder products and attention do not run).
/// Named `gpu::…`, as arch_parity's GPU list: the workspace's test run skips them and the CI's
/// GPU step runs LFM2-VL's; SmolVLM's three slices of 1024 patches take lavapipe two and a
/// half minutes on two cores, so it runs by name (`cargo test --features gpu --test
/// vision_parity -- gpu::`).
#[cfg(feature = "gpu")]
mod gpu {
    use super::*;

    fn encodes_as_mtmd(dir: &str, shape: mmproj_model::VisionShape, name: &str) {
        let gpu = cera::backend::gpu::Gpu::new().expect("a wgpu adapter (lavapipe in CI)");
        let mm = mmproj_model::build("make_mmproj", &shape, GgmlType::F16, None);
        let mm = Mmproj::load(Arc::new(GgufFile::from_bytes(mm).unwrap())).unwrap();
        let t0 = std::time::Instant::now();
        let enc = mm.encode_image(&gpu, &image(name)).unwrap();
        let path = format!("{FIXTURES}/../{dir}/{name}.embd.f16");
        let worst = media_parity::least_cosine(&enc, &path, shape.n_embd_out);
        eprintln!(
            "gpu {dir} {name}: {} rows in {:.1} s, the least cosine {worst:.7}",
            enc.n_embd_rows,
            t0.elapsed().as_secs_f64()
        );
        assert!(
            worst >= MIN_COSINE,
            "gpu {dir} {name}: a row's cosine is {worst}"
        );
    }

    #[test]
    fn lfm2_vl_encodes_as_mtmd() {
        let shape = mmproj_model::VisionShape {
            n_embd_out: 1024,
            ..mmproj_model::LFM2_VL_450M
        };
        encodes_as_mtmd("vision", shape, "pattern-100x30");
    }

    #[test]
    fn smolvlm_encodes_as_mtmd() {
        let shape = mmproj_model::VisionShape {
            longest_edge: 1024,
            ..mmproj_model::SMOLVLM_256M
        };
        encodes_as_mtmd("vision-idefics3", shape, "pattern-300x900");
    }
}

/// The pair (`lm` with `markers` in its vocabulary, the mmproj of `shape`) against mtmd's
/// fixtures in `dir`.
fn matches_mtmd(dir: &str, markers: &[String], lm: &str, shape: &mmproj_model::VisionShape) {
    let fixtures = format!("{FIXTURES}/../{dir}");
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{fixtures}/index.json")).unwrap())
            .unwrap();
    // the pair, as the fixture generator made it
    let tok = mmproj_model::with_control_tokens(models::tokenizer(), markers);
    let tok = GgufFile::from_bytes(tok).unwrap();
    let model = arch_models::build(&arch_models::variant(lm), &tok);
    assert_eq!(
        arch_models::sha256_hex(&model),
        index["model_sha256"].as_str().unwrap(),
        "the language model's generator changed: run scripts/gen-vision-fixtures.py"
    );
    let mm = mmproj_model::build("make_mmproj", shape, GgmlType::F16, None);
    assert_eq!(
        arch_models::sha256_hex(&mm),
        index["mmproj_sha256"].as_str().unwrap(),
        "the mmproj generator changed: run scripts/gen-vision-fixtures.py"
    );
    let width = shape.n_embd_out;
    let mm = Mmproj::load(Arc::new(GgufFile::from_bytes(mm).unwrap())).unwrap();
    let mut o = EngineOptions::default();
    o.n_threads = Some(2);
    let engine = Engine::from_bytes(model, o).unwrap();
    let cpu = Cpu::new(2);
    let prompt = index["prompt"].as_str().unwrap();

    for (name, want) in index["images"].as_object().unwrap() {
        // the embeddings: every row against mtmd's
        let enc = mm.encode_image(&cpu, &image(name)).unwrap();
        let worst = media_parity::least_cosine(&enc, &format!("{fixtures}/{name}.embd.f16"), width);
        eprintln!(
            "{name}: {} rows, the least cosine {worst:.7}",
            enc.n_embd_rows
        );
        assert!(
            worst >= MIN_COSINE,
            "{name}: an embedding row's cosine is {worst}"
        );

        // the prompt: tokens as mtmd's text chunks, image rows where its media chunks are
        let mut so = SessionOptions::default();
        so.n_ctx = 2048;
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
            "{name}: the prompt's tokens and image positions"
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
            let argmax =
                (0..logits.len()).fold(0, |b, j| if s.logits()[j] > s.logits()[b] { j } else { b });
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
