//! Writes a random-weight PEFT LoRA adapter for a GGUF base model (the generator is
//! `tests/common/lora_gen.rs`, shared with the LoRA test), plus the base's Hugging Face
//! `config.json` that llama.cpp's `convert_lora_to_gguf.py --base` reads.
//!
//!   make_lora BASE.gguf OUT_DIR RANK ALPHA SEED AMPLITUDE [embed]
//!   (`embed`: the token embeddings get a pair too)
//!   -> OUT_DIR/{adapter_config.json, adapter_model.safetensors, config.json};
//!      prints the sha256 of adapter_model.safetensors
use cera::gguf::GgufFile;

#[path = "../tests/common/lora_gen.rs"]
mod lora_gen;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !(6..=7).contains(&args.len()) {
        eprintln!("usage: make_lora BASE.gguf OUT_DIR RANK ALPHA SEED AMPLITUDE [embed]");
        std::process::exit(2);
    }
    let base = GgufFile::open(&args[0]).expect("open base model");
    let out = std::path::Path::new(&args[1]);
    std::fs::create_dir_all(out).expect("create OUT_DIR");
    let g = lora_gen::LoraGen {
        rank: args[2].parse().expect("RANK"),
        alpha: args[3].parse().expect("ALPHA"),
        seed: args[4].parse().expect("SEED"),
        amplitude: args[5].parse().expect("AMPLITUDE"),
        embed: args.get(6).is_some_and(|a| a == "embed"),
    };
    let (config, st) = lora_gen::peft_adapter(&base, &g);
    std::fs::write(out.join("adapter_config.json"), config).unwrap();
    std::fs::write(out.join("adapter_model.safetensors"), &st).unwrap();
    std::fs::write(out.join("config.json"), lora_gen::hf_config(&base)).unwrap();
    use sha2::Digest;
    let sha = sha2::Sha256::digest(&st);
    println!(
        "{}",
        sha.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
}
