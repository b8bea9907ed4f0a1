//! The real test models, fetched (and verified) on first use: a test that needs one gets it or
//! fails naming it, never skips.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use cera::fetch;
use cera::gguf::GgufFile;

/// The cached file of catalog model `name` (`smollm2`, `qwen`), fetched when missing.
pub fn real_model(name: &str) -> PathBuf {
    let entry = fetch::lookup(name).unwrap();
    fetch::ensure(entry, &mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch test model {name}: {e}"))
}

/// SmolLM2's GGUF: the tokenizer the random-weight architecture models are written with.
pub fn tokenizer() -> &'static GgufFile {
    static TOK: OnceLock<GgufFile> = OnceLock::new();
    TOK.get_or_init(|| GgufFile::open(real_model("smollm2")).unwrap())
}
