//! Writes the tiny random-weight test models (one or more per architecture) used by the
//! architecture parity fixtures; the generator itself lives in `tests/common/arch_models.rs`.
//!
//!   make_test_model --list [suite]                 (suite: the CPU benchmark suite's models)
//!   make_test_model OUT_DIR [NAME...]          -> OUT_DIR/NAME.gguf, prints "NAME sha256"
//!   make_test_model --check [NAME...]          -> runs each with our engine: logit spread,
//!                                                 greedy variety, closest top-2 gap
//!   make_test_model --tokenizer VOCAB.gguf ...  -> the tokenizer from VOCAB.gguf (any GGUF
//!                                                 with `tokenizer.*` keys) instead of SmolLM2
//!                                                 (fetched); with a real model's vocab the
//!                                                 `*_shape_f16` models have its exact shape
//!   make_test_model --media-tokens ...          -> LFM2-VL's image marker tokens appended to
//!                                                 the vocabulary as control tokens
//!   make_test_model --idefics3-tokens ...       -> Idefics3's (SmolVLM's) instead
use std::sync::Arc;

use cera::backend::{Cpu, KvSpec, KvType, argmax};
use cera::fetch;
use cera::gguf::GgufFile;
use cera::models::Model;

#[path = "../tests/common/arch_models.rs"]
mod arch_models;
#[path = "../tests/common/mmproj_model.rs"]
mod mmproj_model;

fn tokenizer_source() -> GgufFile {
    let entry = fetch::lookup("smollm2").expect("catalog entry");
    let path = fetch::ensure(entry, &mut |_| {}).expect("fetch SmolLM2 (tokenizer source)");
    GgufFile::open(path).expect("open SmolLM2")
}

fn std_dev(x: &[f32]) -> f32 {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    (x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt() as f32
}

fn top2(x: &[f32]) -> (f32, f32) {
    let mut s = x.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    (s[0], s[1])
}

/// Greedy-decodes 32 tokens after a fixed prompt and reports what the fixtures care about.
fn check(name: &str, bytes: Vec<u8>) {
    let model = Model::load(Arc::new(GgufFile::from_bytes(bytes).unwrap())).unwrap();
    let cpu = Cpu::new(2);
    let mut st = model.new_state(128, KvSpec::same(KvType::F16));
    let prompt: Vec<u32> = vec![504, 3458, 282, 4649, 314, 2114, 30, 378, 9212, 28];
    let mut logits = Vec::new();
    model
        .forward(&cpu, &mut st, &prompt, 0, false, &mut logits)
        .unwrap();
    let (mut min_gap, mut stds, mut toks) = (f32::MAX, Vec::new(), Vec::new());
    for pos in prompt.len()..prompt.len() + 32 {
        let sd = std_dev(&logits);
        let (a, b) = top2(&logits);
        min_gap = min_gap.min((a - b) / sd);
        stds.push(sd);
        let t = argmax(&logits) as u32;
        toks.push(t);
        model
            .forward(&cpu, &mut st, &[t], pos, false, &mut logits)
            .unwrap();
    }
    let mut distinct = toks.clone();
    distinct.sort();
    distinct.dedup();
    let lo = stds.iter().cloned().fold(f32::MAX, f32::min);
    let hi = stds.iter().cloned().fold(0.0, f32::max);
    println!(
        "{name:14} logit std {lo:.2}..{hi:.2}  distinct {:2}/32  min top-2 gap {min_gap:.4} std  {:?}",
        distinct.len(),
        &toks[..12]
    );
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut tok_file = None;
    if let Some(i) = args.iter().position(|a| a == "--tokenizer") {
        assert!(i + 1 < args.len(), "--tokenizer needs a GGUF file");
        tok_file = Some(args.remove(i + 1));
        args.remove(i);
    }
    let media_tokens = args
        .iter()
        .position(|a| a == "--media-tokens" || a == "--idefics3-tokens")
        .map(|i| args.remove(i));
    let all: Vec<_> = arch_models::variants();
    if args.first().map(String::as_str) == Some("--list") {
        // `--list suite`: the CPU benchmark suite's models (scripts/bench-suite.sh)
        let listed = match args.get(1).map(String::as_str) {
            Some("suite") => arch_models::suite_variants(),
            _ => all,
        };
        for v in &listed {
            println!("{}", v.name);
        }
        return;
    }
    let (check_mode, out, names) = match args.first().map(String::as_str) {
        Some("--check") => (true, None, &args[1..]),
        Some(dir) => (false, Some(std::path::PathBuf::from(dir)), &args[1..]),
        None => {
            eprintln!("usage: make_test_model (--list | --check [NAME...] | OUT_DIR [NAME...])");
            std::process::exit(2);
        }
    };
    let chosen: Vec<_> = if names.is_empty() {
        all
    } else {
        names.iter().map(|n| arch_models::variant(n)).collect()
    };
    let tok = match tok_file {
        Some(f) => GgufFile::open(&f).unwrap_or_else(|e| panic!("{f}: {e}")),
        None => tokenizer_source(),
    };
    let tok = if let Some(flag) = &media_tokens {
        let extra = if flag == "--idefics3-tokens" {
            mmproj_model::idefics3_tokens()
        } else {
            mmproj_model::lfm2_vl_tokens()
        };
        let bytes = mmproj_model::with_control_tokens(&tok, &extra);
        GgufFile::from_bytes(bytes).expect("the extended tokenizer")
    } else {
        tok
    };
    for v in &chosen {
        let bytes = arch_models::build(v, &tok);
        if check_mode {
            check(v.name, bytes);
        } else {
            let dir = out.as_ref().unwrap();
            std::fs::create_dir_all(dir).unwrap();
            let path = dir.join(format!("{}.gguf", v.name));
            std::fs::write(&path, &bytes).unwrap();
            println!("{} {}", v.name, arch_models::sha256_hex(&bytes));
        }
    }
}
