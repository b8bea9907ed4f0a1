//! `cera convert` against llama.cpp's convert_hf_to_gguf.py (`fixtures/convert.json`, made by
//! `scripts/gen-convert-fixtures.py`). Each checkpoint is made from one of our GGUF models by
//! `scripts/make-hf-checkpoint.py` (numpy and gguf only; the fixture pins the input bytes), then:
//! every output type is byte for byte the converter's (quantized types: llama-quantize's
//! quantization of the converter's lossless output), and the converted model's greedy text is
//! the one transformers generates from the checkpoint. Broken checkpoints are clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

fn cera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(args)
        .output()
        .unwrap()
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cera-convert-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn sha256(path: &Path) -> String {
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(path).unwrap();
    std::io::copy(&mut f, &mut h).unwrap();
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A Python with numpy and gguf: `CERA_TEST_PYTHON` (scripts/test.sh sets it), else python3.
fn python() -> String {
    let py = std::env::var("CERA_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import numpy, gguf"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{py} lacks numpy or gguf, which make the test checkpoints: `pip install numpy gguf`, or \
         set CERA_TEST_PYTHON (scripts/test.sh does)"
    );
    py
}

fn fixture() -> serde_json::Value {
    serde_json::from_str(include_str!("fixtures/convert.json")).unwrap()
}

fn model_path(file: &str) -> PathBuf {
    let home = std::env::var_os("CERA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/cera"));
    // `test-data/FILE`: one of llama.cpp's vocab test files (fetch_test_data)
    let p = match file.strip_prefix("test-data/") {
        Some(f) => home.join("test-data/llama.cpp-11434.0.0/models").join(f),
        None => home.join("models").join(file),
    };
    assert!(
        p.exists(),
        "{} is missing: run `cera pull` first",
        p.display()
    );
    p
}

/// Makes the fixture's checkpoint `name` and checks its files are the bytes the fixture was
/// made from.
fn checkpoint(c: &serde_json::Value) -> PathBuf {
    let name = c["name"].as_str().unwrap();
    let dir = tmp(name).join(c["folder"].as_str().unwrap());
    let script = root().join("scripts/make-hf-checkpoint.py");
    let model = model_path(c["model"].as_str().unwrap());
    let mut cmd = Command::new(python());
    cmd.arg(&script).arg(&model).arg(&dir);
    for f in c["flags"].as_array().unwrap() {
        cmd.arg(f.as_str().unwrap());
    }
    if !c["recipe"].is_null() {
        // a random-weight checkpoint: the config and tensor list transformers saves
        let recipe = tmp(&format!("{name}-recipe.json"));
        std::fs::write(&recipe, c["recipe"].to_string()).unwrap();
        cmd.arg("--recipe").arg(&recipe);
    }
    let r = cmd.output().unwrap();
    assert!(
        r.status.success(),
        "make-hf-checkpoint: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    for (file, want) in c["inputs"].as_object().unwrap() {
        assert_eq!(
            sha256(&dir.join(file)),
            want.as_str().unwrap(),
            "{name}/{file} is not the file the fixture was made from (numpy or gguf version drift?)"
        );
    }
    dir
}

fn convert(dir: &Path, outtype: &str, out: &Path) -> String {
    let r = cera(&[
        "convert",
        dir.to_str().unwrap(),
        "--outtype",
        outtype,
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(r.status.success(), "cera convert {outtype}: {err}");
    err
}

/// Every case of one checkpoint byte for byte; then greedy text from the lossless output.
fn check(name: &str) {
    let fx = fixture();
    let c = fx["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap();
    let dir = checkpoint(c);
    let mut failures = Vec::new();
    for case in c["cases"].as_array().unwrap() {
        let ot = case["outtype"].as_str().unwrap();
        let out = tmp(&format!("{name}-{ot}.gguf"));
        let log = convert(&dir, ot, &out);
        let got = sha256(&out);
        if got != case["sha256"].as_str().unwrap() {
            failures.push(format!(
                "{name} {ot}: sha256 {got}, the converter's {} ({} vs {} bytes)\n{log}",
                case["sha256"],
                std::fs::metadata(&out).unwrap().len(),
                case["size"]
            ));
        }
        if ot != "auto" {
            std::fs::remove_file(&out).unwrap();
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    if c["embedding"].is_object() {
        check_embedding(name, &dir, &c["embedding"]);
    } else {
        check_greedy(name, &dir, c, &fx);
    }
    for t in ["auto", "f32"] {
        let _ = std::fs::remove_file(tmp(&format!("{name}-{t}.gguf")));
    }
    std::fs::remove_dir_all(tmp(name)).unwrap();
}

/// The converted model continues the prompt as transformers does on the checkpoint; random
/// weights have near-ties that bf16 activations (ours and llama.cpp's) break differently from
/// transformers' f32, so those are compared through an f32 conversion.
fn check_greedy(name: &str, dir: &Path, c: &serde_json::Value, fx: &serde_json::Value) {
    let ty = if c["recipe"].is_null() { "auto" } else { "f32" };
    let auto = tmp(&format!("{name}-{ty}.gguf"));
    if ty == "f32" {
        convert(dir, "f32", &auto);
    }
    let g = &c["greedy"];
    let n = fx["n_greedy"].as_u64().unwrap().to_string();
    let r = cera(&[
        "run",
        "-m",
        auto.to_str().unwrap(),
        "--raw",
        "--temp",
        "0",
        "-n",
        &n,
        "-p",
        g["prompt"].as_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        g["text"].as_str().unwrap(),
        "{name}: greedy text of the converted model ({ty})"
    );
}

/// An encoder: its f32 conversion embeds the text as transformers does (CLS pooling,
/// normalized), to float precision.
fn check_embedding(name: &str, dir: &Path, e: &serde_json::Value) {
    let out = tmp(&format!("{name}-f32.gguf"));
    convert(dir, "f32", &out);
    let r = cera(&[
        "embed",
        "-m",
        out.to_str().unwrap(),
        "-p",
        e["text"].as_str().unwrap(),
        "--embd-output-format",
        "raw",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let got: Vec<f64> = String::from_utf8_lossy(&r.stdout)
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let want: Vec<f64> = e["vector"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(got.len(), want.len(), "{name}: embedding size");
    let dot: f64 = got.iter().zip(&want).map(|(a, b)| a * b).sum();
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(
        dot > 0.99999 && worst < 1e-4,
        "{name}: embedding off transformers' (cosine {dot}, largest difference {worst})"
    );
}

#[test]
fn smollm2_bf16_checkpoint_equals_the_converter() {
    check("smollm2");
}

#[test]
fn smollm2_f32_checkpoint_equals_the_converter() {
    check("smollm2-f32");
}

#[test]
fn qwen_sharded_checkpoint_equals_the_converter() {
    check("qwen");
}

// random weights at small shapes, one per other architecture we run

#[test]
fn qwen3_equals_the_converter() {
    check("qwen3");
}

#[test]
fn granite_equals_the_converter() {
    check("granite");
}

#[test]
fn olmo2_equals_the_converter() {
    check("olmo2");
}

#[test]
fn lfm2_equals_the_converter() {
    check("lfm2");
}

#[test]
fn lfm2moe_equals_the_converter() {
    check("lfm2moe");
}

#[test]
fn gemma2_equals_the_converter() {
    check("gemma2");
}

#[test]
fn gemma3_equals_the_converter() {
    check("gemma3");
}

#[test]
fn phi3_equals_the_converter() {
    check("phi3");
}

#[test]
fn bert_equals_the_converter() {
    check("bert");
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

fn convert_err(dir: &Path, extra: &[&str]) -> String {
    let out = tmp("bad-out.gguf");
    let mut args = vec![
        "convert",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let r = cera(&args);
    let err = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(!r.status.success(), "cera {args:?} should fail");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists(), "a failed conversion left {}", out.display());
    err
}

/// A tiny checkpoint (2 layers of SmolLM2, its tokenizer), then broken in one way at a time.
#[test]
fn broken_checkpoints_are_clear_errors() {
    let fx = fixture();
    let c = &fx["checkpoints"][0];
    let good = checkpoint(&serde_json::json!({
        "name": "hostile", "folder": "SmolLM2-135M-Instruct", "model": c["model"],
        "flags": ["--dtype", "bf16", "--layers", "2"], "inputs": {},
    }));
    let copy = |tag: &str| {
        let d = tmp(&format!("hostile-{tag}"));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for e in std::fs::read_dir(&good).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
        }
        d
    };
    // the good one converts
    let out = tmp("hostile-ok.gguf");
    convert(&good, "f16", &out);
    std::fs::remove_file(&out).unwrap();

    let e = convert_err(&tmp("no-such-folder"), &[]);
    assert!(e.contains("not a folder"), "{e}");

    let d = copy("noconfig");
    std::fs::remove_file(d.join("config.json")).unwrap();
    let e = convert_err(&d, &[]);
    assert!(e.contains("no config.json"), "{e}");

    let d = copy("arch");
    let cfg = std::fs::read_to_string(d.join("config.json")).unwrap();
    write(
        &d.join("config.json"),
        &cfg.replace("LlamaForCausalLM", "FancyNewForCausalLM"),
    );
    let e = convert_err(&d, &[]);
    assert!(
        e.contains("FancyNewForCausalLM") && e.contains("supported"),
        "{e}"
    );

    let d = copy("json");
    write(&d.join("config.json"), "{\"architectures\": [");
    let e = convert_err(&d, &[]);
    assert!(e.contains("config.json is not valid JSON"), "{e}");

    let d = copy("header");
    let st = d.join("model.safetensors");
    let mut bytes = std::fs::read(&st).unwrap();
    bytes[8] = b'x'; // the JSON header's first byte
    std::fs::write(&st, &bytes).unwrap();
    let e = convert_err(&d, &[]);
    assert!(
        e.contains("model.safetensors") && e.contains("header"),
        "{e}"
    );

    let d = copy("truncated");
    let st = d.join("model.safetensors");
    let len = std::fs::metadata(&st).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&st)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let e = convert_err(&d, &[]);
    assert!(e.contains("do not hold"), "{e}");

    let d = copy("index");
    write(
        &d.join("model.safetensors.index.json"),
        r#"{"weight_map": {"model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}"#,
    );
    let e = convert_err(&d, &[]);
    assert!(
        e.contains("model-00002-of-00002.safetensors") && e.contains("missing"),
        "{e}"
    );

    let d = copy("tensor");
    // rename a tensor in the header, keeping its length
    let st = d.join("model.safetensors");
    let mut bytes = std::fs::read(&st).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(bytes[8..8 + n].to_vec()).unwrap();
    let renamed = header.replacen("mlp.up_proj", "mlp.uq_proj", 1);
    bytes[8..8 + n].copy_from_slice(renamed.as_bytes());
    std::fs::write(&st, &bytes).unwrap();
    let e = convert_err(&d, &[]);
    assert!(e.contains("uq_proj") && e.contains("cannot map"), "{e}");

    let d = copy("pre2");
    let mut j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("tokenizer.json")).unwrap()).unwrap();
    // swap two merges: the same pre-tokenizer now tokenizes the check text differently
    let merges = j["model"]["merges"].as_array_mut().unwrap();
    merges.swap(0, 500);
    merges.truncate(20000);
    write(&d.join("tokenizer.json"), &j.to_string());
    let e = convert_err(&d, &[]);
    assert!(
        e.contains("pre-tokenizer") && e.contains("fingerprint"),
        "{e}"
    );

    // a llama checkpoint with a tokenizer.model reads it (as the converter prefers it); a
    // broken one is named
    let d = copy("spm");
    std::fs::write(d.join("tokenizer.model"), [0x0a, 0xff, 0xff, 0x01, 0x00]).unwrap();
    let e = convert_err(&d, &[]);
    assert!(
        e.contains("tokenizer.model is not a SentencePiece model"),
        "{e}"
    );

    let e = convert_err(&good, &["--outtype", "q9_9"]);
    assert!(e.contains("q9_9"), "{e}");
    std::fs::remove_dir_all(tmp("hostile")).unwrap();
}

/// Whisper in Hugging Face's layout (`scripts/make-hf-whisper.py` writes transformers' names,
/// config and tokenizer from the catalog's tiny.en, which `cera pull` converted from
/// faster-whisper's CTranslate2 files): `cera convert` gives back that very file. At 128 mel
/// bands (large-v3's front end; the first convolution composed with an interpolation of the
/// bands) it converts and transcribes JFK in the 80-band model's words. Broken checkpoints are
/// clear errors.
#[test]
fn whisper_hf_checkpoint_converts_as_ct2() {
    let ct2 = model_path("whisper-tiny.en.gguf");
    let make = |tag: &str, flags: &[&str]| -> PathBuf {
        let dir = tmp(&format!("whisper-hf-{tag}"));
        let r = Command::new(python())
            .arg(root().join("scripts/make-hf-whisper.py"))
            .arg(&ct2)
            .arg(&dir)
            .args(flags)
            .output()
            .unwrap();
        assert!(
            r.status.success(),
            "make-hf-whisper: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        dir
    };
    let dir = make("f16", &[]);
    let out = tmp("whisper-hf.gguf");
    let r = cera(&[
        "convert",
        dir.to_str().unwrap(),
        "--model-name",
        "whisper-tiny.en",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        sha256(&out),
        sha256(&ct2),
        "the Hugging Face layout's GGUF differs from the CTranslate2 one's"
    );

    // 128 bands: the same words
    let jfk = root().join("crates/cera/tests/fixtures/whisper/jfk.wav");
    let text = |model: &Path| {
        let r = cera(&[
            "transcribe",
            "-m",
            model.to_str().unwrap(),
            "--no-timestamps",
            "-t",
            "2",
            jfk.to_str().unwrap(),
        ]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        String::from_utf8_lossy(&r.stdout).trim().to_owned()
    };
    let dir128 = make("128", &["--mels", "128", "--proj-out"]);
    let out128 = tmp("whisper-hf-128.gguf");
    convert(&dir128, "f16", &out128);
    let g = cera::gguf::GgufFile::open(&out128).unwrap();
    assert_eq!(g.get_u32("whisper.audio.num_mel_bins").unwrap(), 128);
    // (the words: the interpolated bands move a comma)
    let words = |s: &str| -> Vec<String> {
        s.to_lowercase()
            .split_whitespace()
            .map(|w| w.chars().filter(|c| c.is_alphanumeric()).collect())
            .collect()
    };
    let want = text(&out);
    assert!(
        want.contains("ask not what your country can do for you"),
        "{want}"
    );
    assert_eq!(words(&text(&out128)), words(&want));

    // broken (copies of the checkpoints above, their weights hard-linked): an untied output
    // projection, a layer config.json promises, a width that does not match the tensors, no
    // tokenizer
    let copy = |from: &Path, tag: &str| -> PathBuf {
        let d = tmp(&format!("whisper-hf-{tag}"));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_name() == "model.safetensors" {
                std::fs::hard_link(e.path(), d.join(e.file_name())).unwrap();
            } else {
                std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
            }
        }
        d
    };
    let d = copy(&dir128, "untied");
    let st = d.join("model.safetensors");
    let mut bytes = std::fs::read(&st).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let at = 8
        + n
        + header["proj_out.weight"]["data_offsets"][0]
            .as_u64()
            .unwrap() as usize;
    bytes[at + 1] ^= 0x04; // one value of the projection, not the embedding's
    std::fs::remove_file(&st).unwrap();
    std::fs::write(&st, bytes).unwrap();
    let e = convert_err(&d, &[]);
    assert!(e.contains("proj_out.weight differs"), "{e}");
    let edit = |tag: &str, key: &str, v: serde_json::Value| {
        let d = copy(&dir, tag);
        let p = d.join("config.json");
        let mut c: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        c[key] = v;
        write(&p, &c.to_string());
        d
    };
    let e = convert_err(&edit("layers", "encoder_layers", 5.into()), &[]);
    assert!(e.contains("model.encoder.layers.4."), "{e}");
    let e = convert_err(&edit("width", "num_mel_bins", 81.into()), &[]);
    assert!(
        e.contains("model.encoder.conv1.weight") && e.contains("[384, 80, 3]"),
        "{e}"
    );
    let d = copy(&dir, "notok");
    std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    let e = convert_err(&d, &[]);
    assert!(e.contains("no tokenizer.json"), "{e}");
    let e = convert_err(&dir, &["--outtype", "q4_k_m"]);
    assert!(e.contains("cera quantize"), "{e}");
    for t in ["f16", "128", "untied", "layers", "width", "notok"] {
        let _ = std::fs::remove_dir_all(tmp(&format!("whisper-hf-{t}")));
    }
}
