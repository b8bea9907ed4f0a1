//! The fixture corpus (scripts/gen-tokenizer-fixtures.py): 200+ hard strings tokenized by
//! llama.cpp's `llama-tokenize --ids` for every test vocabulary we support, both catalog
//! models, and four pre-tokenizers without a test vocabulary of their own (tekken, lfm2,
//! gpt-4o, deepseek-v3: another vocabulary with only `tokenizer.ggml.pre` changed); we must
//! produce exactly the same ids in each recorded mode (defaults, `--no-parse-special`,
//! `--no-bos`, and the whole corpus joined into one text). Vocabularies and
//! models come through the project's fetch step; a failed fetch fails the test.

use std::path::{Path, PathBuf};

use cera::fetch;
use cera::gguf::{GgufFile, GgufWriter};
use cera::keys;
use cera::tokenizer::Tokenizer;
use serde_json::Value;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer")
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p:?}: {e}")))
        .unwrap()
}

fn vocab_path(file: &str) -> PathBuf {
    fetch::llama_cpp_data(&mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch llama.cpp test data: {e}"))
        .join("models")
        .join(file)
}

fn open(fx: &Value) -> GgufFile {
    let name = fx["vocab"].as_str().unwrap();
    let path = match fx["source"].as_str().unwrap() {
        "llama.cpp-data" => vocab_path(fx["file"].as_str().unwrap()),
        // another vocabulary with only tokenizer.ggml.pre changed
        "derived" => {
            let base = GgufFile::open(vocab_path(&format!(
                "ggml-vocab-{}.gguf",
                fx["base"].as_str().unwrap()
            )))
            .unwrap();
            let mut w = GgufWriter::new();
            for (k, v) in &base.metadata {
                w.set(k.clone(), v.clone());
            }
            w.set(keys::tokenizer::PRE, fx["pre"].as_str().unwrap());
            return GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        }
        "catalog" => fetch::ensure(fetch::lookup(name).unwrap(), &mut |_| {})
            .unwrap_or_else(|e| panic!("could not fetch model {name}: {e}")),
        s => panic!("unknown source {s}"),
    };
    GgufFile::open(path).unwrap()
}

fn check(name: &str) {
    let corpus: Vec<String> =
        serde_json::from_value(read_json(&fixture_dir().join("corpus.json"))).unwrap();
    let fx = read_json(&fixture_dir().join(format!("{name}.json")));
    let tok = Tokenizer::from_gguf(&open(&fx)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut failed = Vec::new();
    let mut total = 0;
    for (mode, m) in fx["modes"].as_object().unwrap() {
        // llama-tokenize adds special tokens only when the model asks for BOS
        let (add_special, parse_special) = match mode.as_str() {
            "default" | "joined" => (tok.add_bos(), true),
            "no_parse_special" => (tok.add_bos(), false),
            "no_bos" => (false, true),
            m => panic!("unknown mode {m}"),
        };
        let cases = m["cases"].as_array().unwrap();
        total += cases.len();
        for case in cases {
            // -1: the whole corpus as one text, joined by newlines
            let text = &match case[0].as_i64().unwrap() {
                -1 => corpus.join("\n"),
                i => corpus[i as usize].clone(),
            };
            let want: Vec<u32> = serde_json::from_value(case[1].clone()).unwrap();
            let got = tok.encode(text, add_special, parse_special);
            if got != want {
                failed.push(format!(
                    "  [{mode}] {text:?}\n    want {want:?}\n    got  {got:?}"
                ));
            }
        }
    }
    eprintln!("{name}: {}/{total} fixtures pass", total - failed.len());
    assert!(
        failed.is_empty(),
        "{name}: {} of {total} differ:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

macro_rules! fixture_tests {
    ($($f:ident => $name:literal),* $(,)?) => {$(
        #[test]
        fn $f() {
            check($name);
        }
    )*};
}

fixture_tests! {
    aquila => "aquila",
    baichuan => "baichuan",
    bert_bge => "bert-bge",
    command_r => "command-r",
    deepseek_coder => "deepseek-coder",
    deepseek_llm => "deepseek-llm",
    falcon => "falcon",
    gemma_4 => "gemma-4",
    gpt_2 => "gpt-2",
    gpt_neox => "gpt-neox",
    llama_bpe => "llama-bpe",
    llama_spm => "llama-spm",
    mpt => "mpt",
    phi_3 => "phi-3",
    qwen2 => "qwen2",
    qwen35 => "qwen35",
    refact => "refact",
    starcoder => "starcoder",
    smollm2 => "smollm2-135m-instruct-q4_1",
    qwen2_5_coder => "qwen2.5-coder-0.5b-instruct-q4_k_m",
    pre_tekken => "pre-tekken",
    pre_lfm2 => "pre-lfm2",
    pre_gpt_4o => "pre-gpt-4o",
    pre_deepseek_v3 => "pre-deepseek-v3",
}

/// Every fixture file is covered above, and the corpus is as large as promised.
#[test]
fn fixture_files_listed() {
    let mut names: Vec<String> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|n| n.strip_suffix(".json").map(str::to_owned))
        .filter(|n| n != "corpus")
        .collect();
    names.sort();
    assert_eq!(names.len(), 24, "{names:?}");
    let corpus = read_json(&fixture_dir().join("corpus.json"));
    assert!(corpus.as_array().unwrap().len() >= 200);
}

/// The catalog models' special ids and end-of-generation sets, as llama.cpp reports them when
/// loading (`llama-tokenize -v`: print_info).
#[test]
fn catalog_models_eog() {
    #[allow(clippy::type_complexity)]
    let table: &[(&str, Option<u32>, Option<u32>, Option<u32>, &[u32])] = &[
        (
            "qwen2.5-coder-0.5b-instruct-q4_k_m",
            Some(151643),
            Some(151645),
            Some(151645),
            &[128247, 151643, 151645, 151662, 151663, 151664],
        ),
        // llama.cpp reports eot 0 (<|endoftext|>): with both present, its pick follows hash
        // order; we prefer the end-of-turn text <|im_end|>. The EOG set is the same.
        (
            "smollm2-135m-instruct-q4_1",
            Some(1),
            Some(2),
            Some(2),
            &[0, 2, 4],
        ),
    ];
    for &(name, bos, eos, eot, eog) in table {
        let fx = serde_json::json!({"vocab": name, "source": "catalog"});
        let tok = Tokenizer::from_gguf(&open(&fx)).unwrap();
        assert_eq!((tok.bos(), tok.eos(), tok.eot()), (bos, eos, eot), "{name}");
        assert_eq!(tok.eog_ids(), eog, "{name}");
        assert!(tok.is_eog(eos.unwrap()));
        assert!(!tok.add_bos(), "{name}: add_bos is false in its metadata");
    }
}
