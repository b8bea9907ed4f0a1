//! Writes the random-weight BERT test model (the generator is `tests/common/bert_model.rs`):
//!   make_bert_model OUT.gguf  -> prints its sha256
use cera::gguf::GgufFile;

#[path = "../tests/common/bert_model.rs"]
mod bert_model;

fn main() {
    let out = std::env::args()
        .nth(1)
        .expect("usage: make_bert_model OUT.gguf");
    let data = cera::fetch::llama_cpp_data(&mut |_| {}).expect("llama.cpp test data");
    let vocab = GgufFile::open(data.join("models").join("ggml-vocab-bert-bge.gguf")).unwrap();
    let bytes = bert_model::build(
        "bge-small",
        &bert_model::BGE_SMALL,
        cera::quant::GgmlType::F16,
        &vocab,
    );
    std::fs::write(&out, &bytes).unwrap();
    use sha2::Digest;
    let sha = sha2::Sha256::digest(&bytes);
    println!(
        "{}",
        sha.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
}
