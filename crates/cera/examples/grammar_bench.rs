//! Decode speed with a JSON-schema grammar against unconstrained decoding, on one model.
//!
//! `cargo run --release -p cera --example grammar_bench -- [MODEL] [RUNS] [TOKENS] [THREADS]`
//! (defaults: smollm2, 5, 128, 2). Runs alternate free / constrained with the same seeds and
//! report each run's decode tokens/s, the medians, the cost of the grammar, how many steps
//! needed the full mask, and how long building the vocabulary trie takes (once per model).
//! Because tokens/s is noisy on a shared machine, the time spent in the grammar itself is
//! measured too (`Summary::grammar_time`, as a share of decode time), and the cost of a
//! full mask at a few typical states.

use std::sync::Arc;
use std::time::Instant;

use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::grammar::{GrammarConstraint, TokenTrie, json_schema};
use cera::session::{Control, GenerateOptions};

const SCHEMA: &str = r#"{"type": "array", "minItems": 6, "maxItems": 10, "items": {
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 24},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "email": {"type": "string", "format": "email"},
    "city": {"type": "string", "maxLength": 24},
    "member": {"type": "boolean"}
  },
  "required": ["name", "age", "email", "city", "member"]}}"#;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let model = args.get(1).map_or("smollm2", String::as_str);
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let tokens: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(128);
    let threads: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(2);
    let entry = cera::fetch::lookup(model).expect("catalog model");
    let path = cera::fetch::ensure(entry, &mut |_| {}).expect("model fetch");
    let mut eo = EngineOptions::default();
    eo.n_threads = Some(threads);
    let engine = Engine::load(&path, eo).expect("load");
    let t = Instant::now();
    let trie = TokenTrie::new(engine.tokenizer());
    println!(
        "model {model}: vocabulary {} tokens, trie {} nodes built in {:.1} ms",
        engine.n_vocab(),
        trie.n_nodes(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).expect("schema");
    let g = Arc::new(json_schema::compile(&schema).expect("compile").grammar);
    let tmpl = cera::chat::ChatTemplate::from_gguf(engine.gguf()).expect("template");
    let msgs = [cera::chat::Message::user(
        "List people as a JSON array of objects with name, age, email, city and member fields.",
    )];
    let prompt = tmpl
        .render(
            &msgs,
            &cera::chat::RenderOptions::new().add_generation_prompt(true),
        )
        .expect("render");
    let toks = engine.tokenizer().encode(&prompt, true, true);
    for prefix in [
        "",
        "[",
        "[{\"name\": \"",
        "[{\"name\": \"Al",
        "[{\"name\": \"Alice\", \"age\": 4",
    ] {
        let st = g
            .initial_state()
            .advance_bytes(&g, prefix.as_bytes())
            .expect("prefix");
        let mut mask = vec![0u64; engine.n_vocab().div_ceil(64)];
        let reps = 5;
        let t = Instant::now();
        for _ in 0..reps {
            trie.mask(&g, &st, &mut mask);
        }
        let allowed: u32 = mask.iter().map(|w| w.count_ones()).sum();
        println!(
            "full mask after {prefix:?}: {:.2} ms, {allowed} tokens allowed",
            t.elapsed().as_secs_f64() * 1e3 / reps as f64
        );
    }
    let (mut free, mut constrained) = (Vec::new(), Vec::new());
    let mut shares = Vec::new();
    // the first constrained run also builds the engine's trie: do it once before timing
    for run in 0..=runs {
        for constrain in [false, true] {
            let mut s = engine.session(SessionOptions::default());
            s.append_tokens(&toks).expect("prefill");
            let mut o = GenerateOptions::default();
            o.max_tokens = tokens;
            o.sampler.temperature = 1.0;
            o.sampler.seed = 1000 + run as u64;
            o.ignore_eog = !constrain;
            if constrain {
                o.grammar = Some(GrammarConstraint::new(Arc::clone(&g)));
            }
            let sum = s
                .generate(&o, &mut |_: u32, _: &str| Control::Continue)
                .expect("generate");
            if sum.finish == cera::session::FinishReason::GrammarDeadEnd {
                eprintln!("dead end after {:?} (tokens {:?})", sum.text, sum.tokens);
            }
            if run == 0 {
                continue;
            }
            let tps = sum.decode_tps();
            let share = sum.grammar_time.as_secs_f64() / sum.decode.as_secs_f64().max(1e-9);
            println!(
                "run {run} {:<11} {:>4} tokens {:>7.2} tok/s  masked steps {:>3}  grammar {:>6.2} ms ({:.2}% of decode)  finish {}",
                if constrain { "constrained" } else { "free" },
                sum.generated_tokens,
                tps,
                sum.grammar_masked,
                sum.grammar_time.as_secs_f64() * 1e3,
                share * 100.0,
                sum.finish.as_str()
            );
            if constrain {
                serde_json::from_str::<serde_json::Value>(&sum.text)
                    .map_err(|e| format!("{e}: {}", sum.text))
                    .ok();
                constrained.push(tps);
                shares.push(share * 100.0);
            } else {
                free.push(tps);
            }
        }
    }
    let (f, c) = (median(&mut free), median(&mut constrained));
    println!(
        "median: free {f:.2} tok/s, constrained {c:.2} tok/s, cost {:.1}%; grammar time {:.2}% of decode",
        (1.0 - c / f) * 100.0,
        median(&mut shares)
    );
}
