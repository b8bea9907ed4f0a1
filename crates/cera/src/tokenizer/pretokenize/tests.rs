//! The hand-written splitters against the regexes they stand for (run through fancy-regex on
//! the same collapsed text), on the fixture corpus and on random strings built from the
//! characters that steer the patterns.

use super::*;

const NAMES: &[&str] = &[
    "gpt-2",
    "starcoder",
    "llama3",
    "qwen2",
    "qwen35",
    "falcon",
    "default",
    "laguna",
    "gemma4",
    "chameleon",
];

fn corpus() -> Vec<String> {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tokenizer/corpus.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).expect("corpus.json")).expect("json")
}

/// Characters of every class the patterns distinguish.
const POOL: &[char] = &[
    'a', 'Z', 's', 't', 'r', 'e', 'v', 'l', 'm', 'd', 'S', 'T', 'L', 'D', '\'', '\'', ' ', ' ',
    ' ', '\n', '\n', '\r', '\t', '0', '7', '9', '!', '.', ',', '$', '+', '<', '|', '`', '_', '/',
    '(', '中', 'é', 'ß', 'Ж', '\u{301}', '\u{93F}', '٣', '½', 'Ⅻ', '😀', '\u{200D}', '\u{3000}',
    '\u{A0}', '\u{85}', '\u{2028}', '\u{378}', '\u{E000}', '\u{1F}', '\u{B}', '—', '€', '™',
];

fn random_strings(n: usize) -> Vec<String> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|_| {
            let len = (next() % 24) as usize;
            (0..len)
                .map(|_| POOL[(next() % POOL.len() as u64) as usize])
                .collect()
        })
        .collect()
}

fn split(p: &PreTokenizer, s: &str) -> Vec<String> {
    let mut w = Vec::new();
    p.split(s, &mut w);
    w.iter()
        .map(|&(a, b)| s[a as usize..b as usize].to_owned())
        .collect()
}

#[test]
fn hand_written_equals_regex() {
    let mut texts = corpus();
    texts.extend(random_strings(4000));
    for name in NAMES {
        let cfg = lookup(name).unwrap_or_else(|| panic!("{name}"));
        let fast = PreTokenizer::new(&cfg).unwrap();
        let slow = PreTokenizer::regex_only(&cfg).unwrap();
        for t in &texts {
            assert_eq!(split(&fast, t), split(&slow, t), "{name}: {t:?}");
        }
    }
}

#[test]
fn pieces_cover_the_text() {
    for name in NAMES
        .iter()
        .chain(&["deepseek-llm", "deepseek-coder", "tekken", "gpt-4o"])
    {
        let p = PreTokenizer::new(&lookup(name).unwrap()).unwrap();
        for t in corpus().iter().chain(&random_strings(300)) {
            assert_eq!(split(&p, t).concat(), *t, "{name}");
        }
    }
}

#[test]
fn known_splits() {
    let p = |n: &str, s: &str| split(&PreTokenizer::new(&lookup(n).unwrap()).unwrap(), s);
    assert_eq!(p("gpt-2", "Hello world  x"), ["Hello", " world", " ", " x"]);
    assert_eq!(p("gpt-2", "it's 12345"), ["it", "'s", " 12345"]);
    assert_eq!(
        p("llama3", "IT'S 12345\n\n x"),
        ["IT", "'S", " ", "123", "45", "\n\n", " x"]
    );
    assert_eq!(p("qwen2", "ab 123"), ["ab", " ", "1", "2", "3"]);
    assert_eq!(p("starcoder", "abc 12"), ["abc", " ", "1", "2"]);
    assert_eq!(p("qwen35", "e\u{301}x!"), ["e\u{301}x", "!"]);
    assert_eq!(p("gemma4", "a\u{2581}b\n\nc"), ["a\u{2581}b", "\n\n", "c"]);
}

#[test]
fn every_table_entry_compiles() {
    for name in [
        "default",
        "llama3",
        "dbrx",
        "chatglm-bpe",
        "deepseek-llm",
        "deepseek-coder",
        "deepseek-v3",
        "falcon",
        "gpt-2",
        "starcoder",
        "qwen2",
        "qwen35",
        "laguna",
        "tekken",
        "bloom",
        "viking",
        "chameleon",
        "gpt-4o",
        "seed-coder",
        "bailingmoe",
        "ufakzeka",
        "minicpm5",
        "gemma4",
        "lfm2",
        "smollm",
        "command-r",
        "refact",
        "mpt",
    ] {
        let cfg = lookup(name).unwrap_or_else(|| panic!("{name} not in the table"));
        PreTokenizer::new(&cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
        PreTokenizer::regex_only(&cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert!(lookup("no-such-pre").is_none());
}
