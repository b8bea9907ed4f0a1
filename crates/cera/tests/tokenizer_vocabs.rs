//! llama.cpp's tokenizer test vocabularies: every `ggml-vocab-*.gguf.inp` text must tokenize
//! to the ids of the matching `.out` line, as llama.cpp's `test-tokenizer-0` checks (no BOS/EOS,
//! special tokens not parsed). The data comes from the project's fetch step; a failed fetch
//! fails the test.

use std::path::PathBuf;

use cera::fetch;
use cera::gguf::GgufFile;
use cera::tokenizer::Tokenizer;

fn models_dir() -> PathBuf {
    fetch::llama_cpp_data(&mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch llama.cpp test data: {e}"))
        .join("models")
}

/// `(text, ids)` pairs: texts are separated by `\n__ggml_vocab_test__\n`, ids are one line each.
fn pairs(name: &str) -> Vec<(String, Vec<u32>)> {
    let dir = models_dir();
    let base = dir.join(format!("ggml-vocab-{name}.gguf"));
    let inp = std::fs::read(base.with_extension("gguf.inp")).expect("read .inp");
    let inp = String::from_utf8(inp).expect(".inp is UTF-8");
    let out = std::fs::read_to_string(base.with_extension("gguf.out")).expect("read .out");
    let sep = "\n__ggml_vocab_test__\n";
    let mut texts = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(i) => {
                texts.push(rest[..i].to_owned());
                rest = &rest[i + sep.len()..];
            }
            None => {
                texts.push(rest.to_owned());
                break;
            }
        }
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{name}: .inp and .out disagree");
    texts.into_iter().zip(ids).collect()
}

fn check(name: &str) {
    let path = models_dir().join(format!("ggml-vocab-{name}.gguf"));
    let g = GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap_or_else(|e| panic!("{name}: {e}"));
    let pairs = pairs(name);
    let mut failed = Vec::new();
    for (text, want) in &pairs {
        let got = tok.encode(text, false, false);
        if &got != want {
            failed.push(format!("  {text:?}\n    want {want:?}\n    got  {got:?}"));
        }
    }
    eprintln!(
        "{name}: {}/{} pairs pass",
        pairs.len() - failed.len(),
        pairs.len()
    );
    assert!(
        failed.is_empty(),
        "{name}: {} of {} pairs differ:\n{}",
        failed.len(),
        pairs.len(),
        failed.join("\n")
    );
}

macro_rules! vocab_tests {
    ($($f:ident => $name:literal),* $(,)?) => {$(
        #[test]
        fn $f() {
            check($name);
        }
    )*};
}

vocab_tests! {
    bert_bge => "bert-bge",
    command_r => "command-r",
    deepseek_coder => "deepseek-coder",
    deepseek_llm => "deepseek-llm",
    falcon => "falcon",
    gemma_4 => "gemma-4",
    gpt_2 => "gpt-2",
    llama_bpe => "llama-bpe",
    llama_spm => "llama-spm",
    mpt => "mpt",
    phi_3 => "phi-3",
    qwen2 => "qwen2",
    qwen35 => "qwen35",
    refact => "refact",
    starcoder => "starcoder",
}

/// Every `.inp` in the data folder is covered above.
#[test]
fn all_vocab_pairs_listed() {
    let mut names: Vec<String> = std::fs::read_dir(models_dir())
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            n.strip_prefix("ggml-vocab-")?
                .strip_suffix(".gguf.inp")
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "bert-bge",
            "command-r",
            "deepseek-coder",
            "deepseek-llm",
            "falcon",
            "gemma-4",
            "gpt-2",
            "llama-bpe",
            "llama-spm",
            "mpt",
            "phi-3",
            "qwen2",
            "qwen35",
            "refact",
            "starcoder"
        ]
    );
}

/// BOS/EOS/EOT ids and the end-of-generation set, as llama.cpp reports them when it loads
/// each vocabulary (`llama-tokenize -v`: print_info).
#[test]
fn special_ids_match_llama_cpp() {
    #[allow(clippy::type_complexity)]
    let table: &[(&str, Option<u32>, Option<u32>, Option<u32>, &[u32])] = &[
        ("aquila", Some(0), Some(0), Some(0), &[0, 100007]),
        ("baichuan", Some(1), Some(2), None, &[2]),
        ("bert-bge", Some(101), None, None, &[0]),
        ("command-r", Some(5), Some(255001), None, &[0, 255001]),
        (
            "deepseek-coder",
            Some(32013),
            Some(32014),
            Some(32014),
            &[32014],
        ),
        (
            "deepseek-llm",
            Some(100000),
            Some(100001),
            Some(100001),
            &[100001],
        ),
        ("falcon", Some(11), Some(11), Some(11), &[11]),
        ("gemma-4", Some(2), Some(1), None, &[1, 50, 106]),
        ("gpt-2", Some(50256), Some(50256), Some(50256), &[50256]),
        ("gpt-neox", Some(0), Some(0), Some(0), &[0]),
        (
            "llama-bpe",
            Some(128000),
            Some(128001),
            Some(128009),
            &[128001, 128009],
        ),
        ("llama-spm", Some(1), Some(2), None, &[2]),
        ("mpt", Some(0), Some(0), Some(0), &[0]),
        (
            "phi-3",
            Some(1),
            Some(32000),
            Some(32007),
            &[2, 32000, 32007],
        ),
        (
            "qwen2",
            Some(151643),
            Some(151643),
            Some(151645),
            &[128247, 151643, 151645],
        ),
        (
            "qwen35",
            Some(151643),
            Some(151643),
            Some(151645),
            &[128247, 151643, 151645],
        ),
        ("refact", Some(0), Some(0), Some(0), &[0, 4, 18]),
        ("starcoder", Some(0), Some(0), Some(0), &[0, 4]),
    ];
    for &(name, bos, eos, eot, eog) in table {
        let g = GgufFile::open(models_dir().join(format!("ggml-vocab-{name}.gguf"))).unwrap();
        let tok = Tokenizer::from_gguf(&g).unwrap();
        assert_eq!((tok.bos(), tok.eos(), tok.eot()), (bos, eos, eot), "{name}");
        assert_eq!(tok.eog_ids(), eog, "{name}");
        assert!(eog.iter().all(|&i| tok.is_eog(i)));
    }
}

/// Decoding gives the text back: exactly for BPE vocabularies, after the space SentencePiece
/// puts in front for SPM ones; a streaming decoder yields the same text piece by piece.
#[test]
fn decode_round_trips() {
    for name in [
        "command-r",
        "deepseek-coder",
        "deepseek-llm",
        "falcon",
        "gemma-4",
        "gpt-2",
        "llama-bpe",
        "llama-spm",
        "mpt",
        "phi-3",
        "qwen2",
        "qwen35",
        "refact",
        "starcoder",
    ] {
        let g = GgufFile::open(models_dir().join(format!("ggml-vocab-{name}.gguf"))).unwrap();
        let tok = Tokenizer::from_gguf(&g).unwrap();
        let spm = tok.pre_tokenizer() == "spm";
        for (text, _) in pairs(name) {
            let ids = tok.encode(&text, false, false);
            let want = if spm && !text.is_empty() {
                format!(" {text}")
            } else {
                text.clone()
            };
            assert_eq!(tok.decode(&ids), want, "{name}");
            let mut dec = tok.stream_decoder();
            let mut streamed: String = ids.iter().map(|&i| dec.push(i)).collect();
            streamed.push_str(&dec.finish());
            assert_eq!(streamed, want, "{name}: streamed");
        }
    }
}
