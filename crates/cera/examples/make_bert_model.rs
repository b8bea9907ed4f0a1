//! Writes the random-weight BERT test models (the generator is `tests/common/bert_model.rs`):
//!   make_bert_model OUT.gguf [rerank]  -> prints its sha256 (`rerank`: with a classifier head)
use cera::gguf::GgufFile;

#[path = "../tests/common/bert_model.rs"]
mod bert_model;

fn main() {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .expect("usage: make_bert_model OUT.gguf [rerank]");
    let rerank = args.next().as_deref() == Some("rerank");
    let data = cera::fetch::llama_cpp_data(&mut |_| {}).expect("llama.cpp test data");
    let vocab = GgufFile::open(data.join("models").join("ggml-vocab-bert-bge.gguf")).unwrap();
    let (name, shape) = if rerank {
        ("bge-small-rerank", &bert_model::BGE_SMALL_RERANK)
    } else {
        ("bge-small", &bert_model::BGE_SMALL)
    };
    let bytes = bert_model::build(name, shape, cera::quant::GgmlType::F16, &vocab);
    std::fs::write(&out, &bytes).unwrap();
    use sha2::Digest;
    let sha = sha2::Sha256::digest(&bytes);
    println!(
        "{}",
        sha.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
}
