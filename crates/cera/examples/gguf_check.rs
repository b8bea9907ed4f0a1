//! Parses each GGUF file given and prints `ok` or the error (for triaging fuzzer corpora).
fn main() {
    for path in std::env::args().skip(1) {
        match cera::gguf::GgufFile::open(&path) {
            Ok(g) => println!("{path}: ok ({} tensors)", g.tensors.len()),
            Err(e) => println!("{path}: error: {e}"),
        }
    }
}
