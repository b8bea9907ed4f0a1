//! Split GGUFs (`name-00001-of-00003.gguf`, ...): opening the first part opens them all; the
//! model runs exactly as the single file does; missing or mismatched parts are clear errors.

use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::fetch;
use cera::gguf::GgufFile;
use cera::gguf::split::write_split;
use cera::session::{Control, GenerateOptions};

fn smollm2() -> std::path::PathBuf {
    let entry = fetch::lookup("smollm2").unwrap();
    fetch::ensure(entry, &mut |_| {}).unwrap_or_else(|e| panic!("could not fetch SmolLM2: {e}"))
}

fn greedy_tokens(path: &std::path::Path) -> Vec<u32> {
    let mut opts = EngineOptions::default();
    opts.n_threads = Some(2);
    let eng = Engine::load(path, opts).unwrap();
    let mut s = eng.session(SessionOptions::default());
    let toks = eng
        .tokenizer()
        .encode("The three primary colors are", true, true);
    s.append_tokens(&toks).unwrap();
    let mut g = GenerateOptions::default();
    g.sampler = cera::sample::SamplerConfig::greedy();
    g.max_tokens = 16;
    s.generate(&g, &mut |_t: u32, _p: &str| Control::Continue)
        .unwrap()
        .tokens
}

#[test]
fn a_split_model_loads_from_its_first_part_and_runs_as_the_whole_file() {
    let whole_path = smollm2();
    let whole = GgufFile::open(&whole_path).unwrap();
    let dir = tempfile_dir("split");
    let per_part = whole.tensors.len().div_ceil(3);
    let parts = write_split(&whole, &dir.join("smol"), per_part).unwrap();
    assert_eq!(parts.len(), 3);
    assert!(parts[2].ends_with("smol-00003-of-00003.gguf"), "{parts:?}");

    let split = GgufFile::open(&parts[0]).unwrap();
    assert_eq!(split.paths().len(), 3);
    assert_eq!(split.tensors.len(), whole.tensors.len());
    for t in &whole.tensors {
        let s = split.tensor(&t.name).unwrap();
        assert_eq!((s.ty, &s.shape), (t.ty, &t.shape), "{}", t.name);
        assert!(
            split.tensor_data(s) == whole.tensor_data(t),
            "{} differs",
            t.name
        );
    }
    assert_eq!(
        split.get_str("general.architecture").unwrap(),
        whole.get_str("general.architecture").unwrap()
    );
    assert_eq!(greedy_tokens(&parts[0]), greedy_tokens(&whole_path));

    // A later part is not a model on its own, and says which file to open.
    let e = GgufFile::open(&parts[1]).unwrap_err().to_string();
    assert!(
        e.contains("part 2 of 3") && e.contains("smol-00001-of-00003.gguf"),
        "{e}"
    );
    // A missing part names itself.
    std::fs::remove_file(&parts[2]).unwrap();
    let e = GgufFile::open(&parts[0]).unwrap_err().to_string();
    assert!(
        e.contains("smol-00003-of-00003.gguf") && e.contains("part 3 of 3"),
        "{e}"
    );
    // A part from another split (wrong split.no) is refused.
    std::fs::copy(&parts[1], &parts[2]).unwrap();
    let e = GgufFile::open(&parts[0]).unwrap_err().to_string();
    assert!(e.contains("expected split.no 2 of 3"), "{e}");
    // A renamed first part cannot find the others.
    let lone = dir.join("renamed.gguf");
    std::fs::copy(&parts[0], &lone).unwrap();
    let e = GgufFile::open(&lone).unwrap_err().to_string();
    assert!(e.contains("cannot be found"), "{e}");
    // In memory, a split model is refused rather than loaded short of tensors.
    let e = GgufFile::from_bytes(std::fs::read(&parts[0]).unwrap()).unwrap_err();
    assert!(e.to_string().contains("split model"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("cera-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
