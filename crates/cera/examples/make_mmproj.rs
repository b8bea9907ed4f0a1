//! Writes a random-weight mmproj of LFM2-VL's layout (the generator is
//! `tests/common/mmproj_model.rs`) or LFM2-Audio's (`tests/common/audio_mmproj.rs`), its
//! projector as wide as the given model's embeddings:
//!   make_mmproj OUT.gguf N_EMBD_OUT [f32|f16|q8_0]
//!               [tiny|lfm2-vl-450m|tiny-idefics3|smolvlm-256m|tiny-audio|lfm2-audio-1.5b|tiny+audio]
//!               [LONGEST_EDGE]  -> prints its sha256
//! (Idefics3's layouts from SmolVLM's tower; LONGEST_EDGE overrides their
//! `preproc_image_size`, so a test can slice into fewer parts)
//! (`tiny+audio`: one file with both tiny halves, as a model that reads images and audio has)
#[path = "../tests/common/audio_mmproj.rs"]
mod audio_mmproj;
#[path = "../tests/common/mmproj_model.rs"]
mod mmproj_model;

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: make_mmproj OUT.gguf N_EMBD_OUT [f32|f16|q8_0] \
                 [tiny|lfm2-vl-450m|tiny-idefics3|smolvlm-256m|tiny-audio|lfm2-audio-1.5b|tiny+audio] \
                 [LONGEST_EDGE]";
    let out = args.next().expect(usage);
    let n_embd_out: usize = args.next().and_then(|v| v.parse().ok()).expect(usage);
    let ty = match args.next().as_deref().unwrap_or("f16") {
        "f32" => cera::quant::GgmlType::F32,
        "f16" => cera::quant::GgmlType::F16,
        "q8_0" => cera::quant::GgmlType::Q8_0,
        other => panic!("{usage} (not {other})"),
    };
    let base = args.next();
    let edge: Option<usize> = args.next().map(|v| v.parse().expect(usage));
    let bytes = match base.as_deref().unwrap_or("tiny") {
        v @ ("tiny" | "lfm2-vl-450m" | "tiny-idefics3" | "smolvlm-256m") => {
            let base = match v {
                "tiny" => mmproj_model::TINY,
                "lfm2-vl-450m" => mmproj_model::LFM2_VL_450M,
                "tiny-idefics3" => mmproj_model::TINY_IDEFICS3,
                _ => mmproj_model::SMOLVLM_256M,
            };
            let longest_edge = edge.unwrap_or(base.longest_edge);
            let shape = mmproj_model::VisionShape {
                n_embd_out,
                longest_edge,
                ..base
            };
            mmproj_model::build("make_mmproj", &shape, ty, None)
        }
        a @ ("tiny-audio" | "lfm2-audio-1.5b") => {
            let base = if a == "tiny-audio" {
                audio_mmproj::TINY_AUDIO
            } else {
                audio_mmproj::LFM2_AUDIO_1_5B
            };
            let shape = audio_mmproj::AudioShape { n_embd_out, ..base };
            audio_mmproj::build("make_mmproj", &shape, ty, None, None)
        }
        "tiny+audio" => audio_mmproj::combine(
            mmproj_model::build(
                "make_mmproj",
                &mmproj_model::VisionShape {
                    n_embd_out,
                    ..mmproj_model::TINY
                },
                ty,
                None,
            ),
            audio_mmproj::build(
                "make_mmproj",
                &audio_mmproj::AudioShape {
                    n_embd_out,
                    ..audio_mmproj::TINY_AUDIO
                },
                ty,
                None,
                None,
            ),
        ),
        other => panic!("{usage} (not {other})"),
    };
    std::fs::write(&out, &bytes).unwrap();
    use sha2::Digest;
    let sha = sha2::Sha256::digest(&bytes);
    println!(
        "{}",
        sha.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
}
