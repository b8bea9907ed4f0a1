//! Behaviour on tiny in-memory vocabularies: BOS/EOS, special-token parsing, byte fallback,
//! streaming decode and the end-of-generation set.

use super::*;
use crate::gguf::GgufWriter;
use crate::keys::tokenizer as k;

const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER: i32 = 4;
const BYTE: i32 = 6;

/// A SentencePiece vocabulary: `<unk> <s> </s>`, 256 byte tokens, then `extra`.
fn spm(extra: &[(&str, f32, i32)], meta: &[(&str, bool)]) -> Tokenizer {
    let mut toks = vec![
        ("<unk>".to_owned(), 0.0, UNKNOWN),
        ("<s>".to_owned(), 0.0, CONTROL),
        ("</s>".to_owned(), 0.0, CONTROL),
    ];
    toks.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 0.0, BYTE)));
    toks.extend(extra.iter().map(|&(t, s, ty)| (t.to_owned(), s, ty)));
    let mut w = GgufWriter::new();
    w.set(k::MODEL, "llama")
        .set(
            k::TOKENS,
            toks.iter().map(|t| t.0.clone()).collect::<Vec<_>>(),
        )
        .set(k::SCORES, toks.iter().map(|t| t.1).collect::<Vec<f32>>())
        .set(
            k::TOKEN_TYPE,
            toks.iter().map(|t| t.2).collect::<Vec<i32>>(),
        );
    for &(key, v) in meta {
        w.set(key, v);
    }
    let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    Tokenizer::from_gguf(&g).unwrap()
}

fn words() -> Vec<(&'static str, f32, i32)> {
    vec![
        ("▁", -1.0, NORMAL),
        ("h", -2.0, NORMAL),
        ("i", -2.0, NORMAL),
        ("▁h", -1.5, NORMAL),
        ("▁hi", -0.5, NORMAL),
        ("<|im_start|>", 0.0, CONTROL),
        ("<|im_end|>", 0.0, CONTROL),
        ("<u>", 0.0, USER),
    ]
}

fn id(t: &Tokenizer, s: &str) -> u32 {
    t.token_id(s).unwrap_or_else(|| panic!("no token {s:?}"))
}

#[test]
fn spm_bos_and_space_prefix() {
    let t = spm(&words(), &[]);
    assert!(t.add_bos() && !t.add_eos());
    assert_eq!(t.encode("hi", true, true), [1, id(&t, "▁hi")]);
    assert_eq!(t.encode("hi", false, true), [id(&t, "▁hi")]);
    assert_eq!(t.encode("", true, true), [1]);
    assert!(t.encode("", false, true).is_empty());
    let no_bos = spm(&words(), &[(k::ADD_BOS, false), (k::ADD_EOS, true)]);
    assert_eq!(no_bos.encode("hi", true, true), [id(&t, "▁hi"), 2]);
}

#[test]
fn special_tokens_parsed_only_when_asked() {
    let t = spm(&words(), &[]);
    let (start, end, user) = (id(&t, "<|im_start|>"), id(&t, "<|im_end|>"), id(&t, "<u>"));
    let hi = id(&t, "▁hi");
    // after a special token the text gets the space prefix again, as in llama.cpp
    assert_eq!(
        t.encode("<|im_start|>hi<|im_end|>", false, true),
        [start, hi, end]
    );
    let plain = t.encode("<|im_start|>hi", false, false);
    assert!(!plain.contains(&start));
    assert_eq!(t.decode(&plain), " <|im_start|>hi");
    // user-defined tokens are split out either way
    assert_eq!(t.encode("<u>hi", false, false), [user, hi]);
    assert_eq!(t.encode("<u>hi", false, true), [user, hi]);
}

#[test]
fn byte_fallback_and_streaming() {
    let t = spm(&words(), &[]);
    let ids = t.encode("😀", false, false);
    // "▁" is a token; the emoji is not, so it falls back to its four bytes
    assert_eq!(ids.len(), 5);
    assert!(ids[1..].iter().all(|&i| t.is_byte(i)));
    assert_eq!(ids[1] as usize, 3 + 0xF0);
    assert_eq!(t.decode(&ids), " 😀");
    let mut d = t.stream_decoder();
    let parts: Vec<String> = ids.iter().map(|&i| d.push(i)).collect();
    assert_eq!(parts, [" ", "", "", "", "😀"]);
    assert_eq!(d.finish(), "");
    // a character cut short by the end of the stream comes out as U+FFFD
    let mut d = t.stream_decoder();
    assert_eq!(d.push(ids[1]), "");
    assert_eq!(d.pending(), [0xF0]);
    assert_eq!(d.finish(), "\u{FFFD}");
    // bytes that can never start a character are replaced at once
    let mut d = t.stream_decoder();
    assert_eq!(d.push(3 + 0x80), "\u{FFFD}");
    assert_eq!(d.push(3 + b'a' as u32), "a");
    // byte tokens decode to their byte
    assert_eq!(t.token_bytes(3 + 0x0A), b"\n");
}

#[test]
fn stream_decoder_hides_control_tokens_on_request() {
    let t = spm(&words(), &[]);
    let start = id(&t, "<|im_start|>");
    let mut d = t.stream_decoder().render_special(false);
    assert_eq!(d.push(start), "");
    assert_eq!(d.push(id(&t, "▁hi")), " hi");
    let mut d = t.stream_decoder();
    assert_eq!(d.push(start), "<|im_start|>");
}

#[test]
fn eog_set() {
    let t = spm(&words(), &[]);
    let end = id(&t, "<|im_end|>");
    assert!(t.is_eog(2) && t.is_eog(end) && !t.is_eog(1));
    assert_eq!(t.eog_ids(), [2, end]);
    assert_eq!(t.eot(), Some(end)); // found by its text
}

/// A byte-level BPE vocabulary over bytes with merges for "é" and "hé".
fn bpe() -> Tokenizer {
    let table = bpe::byte_to_char();
    let mut toks: Vec<String> = (0..=255u8).map(|b| table[b as usize].to_string()).collect();
    let e1 = table[0xC3].to_string();
    let e2 = table[0xA9].to_string();
    toks.push(format!("{e1}{e2}")); // é
    toks.push(format!("h{e1}{e2}")); // hé
    toks.push("<|endoftext|>".into());
    let types: Vec<i32> = (0..toks.len())
        .map(|i| if i == toks.len() - 1 { CONTROL } else { NORMAL })
        .collect();
    let merges = vec![format!("{e1} {e2}"), format!("h {e1}{e2}")];
    let mut w = GgufWriter::new();
    w.set(k::MODEL, "gpt2")
        .set(k::PRE, "qwen2")
        .set(k::TOKENS, toks)
        .set(k::TOKEN_TYPE, types)
        .set(k::MERGES, merges)
        .set(k::EOS_ID, 258u32);
    let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    Tokenizer::from_gguf(&g).unwrap()
}

#[test]
fn byte_level_bpe() {
    let t = bpe();
    assert!(!t.add_bos());
    assert_eq!(t.pre_tokenizer(), "qwen2");
    assert_eq!(t.encode("hé", true, true), [257]);
    assert_eq!(t.encode("é h", false, true), [256, 32, 104]);
    assert_eq!(t.encode("x<|endoftext|>", false, true), [120, 258]);
    assert_eq!(t.encode("<|endoftext|>", false, false).len(), 13); // "<|", "endoftext", "|>" as bytes
    assert_eq!(t.decode(&[257, 32]), "hé ");
    assert!(t.is_eog(258));
    // a multi-byte character split over two tokens is emitted once, whole
    let mut d = t.stream_decoder();
    assert_eq!(d.push(0xC3), "");
    assert_eq!(d.push(0xA9), "é");
}

#[test]
fn unknown_pre_tokenizer_warns_and_falls_back() {
    let table = bpe::byte_to_char();
    let toks: Vec<String> = (0..=255u8).map(|b| table[b as usize].to_string()).collect();
    let mut w = GgufWriter::new();
    w.set(k::MODEL, "gpt2")
        .set(k::PRE, "martian")
        .set(k::TOKENS, toks)
        .set(k::MERGES, Vec::<String>::new());
    let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let t = Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(t.pre_tokenizer(), "default");
    assert!(
        t.warnings().iter().any(|w| w.contains("martian")),
        "{:?}",
        t.warnings()
    );
    assert_eq!(t.encode("ab", false, false), [97, 98]);
}

#[test]
fn unsupported_model_is_an_error() {
    let mut w = GgufWriter::new();
    w.set(k::MODEL, "t5").set(k::TOKENS, vec!["a".to_owned()]);
    let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let e = Tokenizer::from_gguf(&g).unwrap_err().to_string();
    assert!(e.contains("'t5'"), "{e}");
}
