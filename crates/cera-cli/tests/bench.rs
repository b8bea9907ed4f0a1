//! `cera bench` speaks llama-bench's formats: JSON records with its field names, a markdown
//! table with its columns, CSV with a header.

use std::process::Command;

fn cera(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cera {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn json_records_have_llama_bench_fields() {
    let out = cera(&[
        "bench", "-m", "smollm2", "-t", "1", "-p", "16", "-n", "4", "-d", "0,8", "-r", "2", "-o",
        "json",
    ]);
    let recs: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(recs.len(), 4, "pp and tg at two depths");
    let names: Vec<&str> = recs.iter().map(|r| r["test"].as_str().unwrap()).collect();
    assert_eq!(names, ["pp16", "tg4", "pp16 @ d8", "tg4 @ d8"]);
    for r in &recs {
        for key in [
            "n_prompt",
            "n_gen",
            "n_depth",
            "n_threads",
            "avg_ts",
            "stddev_ts",
            "samples_ts",
            "model_size",
            "model_n_params",
        ] {
            assert!(!r[key].is_null(), "missing {key} in {r}");
        }
        assert_eq!(r["samples_ts"].as_array().unwrap().len(), 2);
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0);
        assert_eq!(r["n_threads"], 1);
    }
    assert_eq!(recs[2]["n_depth"], 8);
    assert_eq!(recs[1]["n_gen"], 4);
}

#[test]
fn markdown_table_and_csv() {
    let md = cera(&[
        "bench", "-m", "smollm2", "-t", "1", "-p", "8", "-n", "0", "-r", "1",
    ]);
    let lines: Vec<&str> = md.lines().collect();
    assert!(
        lines[0].starts_with("| model") && lines[0].trim_end().ends_with("t/s |"),
        "{md}"
    );
    assert!(lines[2].contains("pp8") && lines[2].contains(" ± "), "{md}");
    let csv = cera(&[
        "bench", "-m", "smollm2", "-t", "1", "-p", "0", "-n", "2", "-r", "1", "-o", "csv",
    ]);
    let mut rows = csv.lines();
    assert!(
        rows.next()
            .unwrap()
            .starts_with("model_filename,model_type")
    );
    assert!(rows.next().unwrap().contains("\"tg2\""));
    let bad = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(["bench", "-o", "xml"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected md, json or csv"));
}

#[path = "../../cera/tests/common/audio_mmproj.rs"]
mod audio_mmproj;
#[path = "../../cera/tests/common/mmproj_model.rs"]
mod mmproj_model;

/// `--mmproj` with `--image` and `--audio`: one record per file with its encode time, tokens
/// and, for audio, the time per second of audio; a table in markdown.
#[test]
fn media_encode_times() {
    let dir = std::env::temp_dir().join(format!("cera-bench-media-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ty = cera::quant::GgmlType::F16;
    let mm = dir.join("mm.gguf");
    std::fs::write(
        &mm,
        audio_mmproj::combine(
            mmproj_model::build(
                "b",
                &mmproj_model::VisionShape {
                    n_embd_out: 576,
                    ..mmproj_model::TINY
                },
                ty,
                None,
            ),
            audio_mmproj::build(
                "b",
                &audio_mmproj::AudioShape {
                    n_embd_out: 576,
                    ..audio_mmproj::TINY_AUDIO
                },
                ty,
                None,
                None,
            ),
        ),
    )
    .unwrap();
    // 2 s of silence with a click, 16-bit mono WAV
    let n = 32_000u32;
    let mut wav = b"RIFF".to_vec();
    wav.extend_from_slice(&(36 + 2 * n).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    for v in [16u32, 0x0001_0001, 16_000, 32_000, 0x0010_0002] {
        wav.extend_from_slice(&v.to_le_bytes());
    }
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&(2 * n).to_le_bytes());
    for i in 0..n {
        let v: i16 = if i % 4000 < 20 { 12_000 } else { 0 };
        wav.extend_from_slice(&v.to_le_bytes());
    }
    let clip = dir.join("click.wav");
    std::fs::write(&clip, wav).unwrap();
    let data = cera::fetch::llama_cpp_data(&mut |_| {}).expect("llama.cpp's test data");
    let jpeg = data.join("tools/mtmd/test-1.jpeg");
    let args = [
        "bench",
        "-m",
        "smollm2",
        "-t",
        "2",
        "-p",
        "0",
        "-n",
        "0",
        "-r",
        "2",
        "--mmproj",
        mm.to_str().unwrap(),
        "--image",
        jpeg.to_str().unwrap(),
        "--audio",
        clip.to_str().unwrap(),
    ];
    let recs: Vec<serde_json::Value> =
        serde_json::from_str(&cera(&[&args[..], &["-o", "json"]].concat())).unwrap();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(recs[0]["kind"], "image");
    assert_eq!(recs[1]["kind"], "audio");
    assert_eq!(recs[1]["audio_seconds"], 2.0);
    // 201 frames of 10 ms, 26 positions after the encoder's 8x
    assert_eq!(recs[1]["n_tokens"], 26);
    for r in &recs {
        assert!(r["avg_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["samples_ms"].as_array().unwrap().len(), 2);
    }
    let md = cera(&args);
    assert!(md.contains("| test-1.jpeg | image |"), "{md}");
    assert!(md.contains("| click.wav | audio 2.00 s | 26 |"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}
