//! Fetches llama.cpp's test data (vocabularies, chat templates, grammars) and prints its folder.
fn main() {
    match cera::fetch::llama_cpp_data(&mut |p| eprintln!("{p:?}")) {
        Ok(p) => println!("{}", p.display()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
