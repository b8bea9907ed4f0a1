//! Greedy-decodes a few tokens from word-level token ids (smoke test before the tokenizer).
use std::sync::Arc;

use cera::backend::{Cpu, KvSpec, KvType, argmax};
use cera::gguf::GgufFile;
use cera::models::Model;

fn main() {
    let path = std::env::args().nth(1).expect("model path");
    let words: Vec<String> = std::env::args().skip(2).collect();
    let g = Arc::new(GgufFile::open(&path).unwrap());
    let vocab = g.get_str_array("tokenizer.ggml.tokens").unwrap().to_vec();
    let mut toks: Vec<u32> = words
        .iter()
        .map(|w| {
            vocab
                .iter()
                .position(|v| v == w)
                .unwrap_or_else(|| panic!("no token {w}")) as u32
        })
        .collect();
    let model = Model::load(g).unwrap();
    let cpu = Cpu::new(
        std::env::var("T")
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(2),
    );
    let mut st = model.new_state(256, KvSpec::same(KvType::F16));
    let mut logits = Vec::new();
    let t0 = std::time::Instant::now();
    model
        .forward(&cpu, &mut st, &toks, 0, false, &mut logits)
        .unwrap();
    for _ in 0..16 {
        let next = argmax(&logits) as u32;
        toks.push(next);
        model
            .forward(&cpu, &mut st, &[next], toks.len() - 1, false, &mut logits)
            .unwrap();
    }
    let text: String = toks
        .iter()
        .map(|&t| vocab[t as usize].replace('Ġ', " ").replace('Ċ', "\n"))
        .collect();
    println!("{text}");
    println!("{:?} ({:.2?})", toks, t0.elapsed());
}
