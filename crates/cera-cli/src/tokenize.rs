//! `cera tokenize`: the token ids of a text, printed as `llama-tokenize --ids` prints them
//! (same defaults: BOS/EOS as the model asks, special tokens parsed, escapes processed).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use cera::gguf::GgufFile;
use cera::tokenizer::Tokenizer;

use crate::common::resolve_model;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a GGUF file or a catalog name; the default model when omitted.
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// The text to tokenize; `-` reads standard input.
    #[arg(short = 'p', long, conflicts_with_all = ["file", "stdin"])]
    prompt: Option<String>,
    /// Read the text from a file, byte for byte (a trailing newline is kept).
    #[arg(short = 'f', long, conflicts_with = "stdin")]
    file: Option<PathBuf>,
    /// Read the text from standard input (as `-p -`).
    #[arg(long)]
    stdin: bool,
    /// Keep the text of control tokens such as `<|im_start|>` as plain text.
    #[arg(long)]
    no_parse_special: bool,
    /// Do not add BOS/EOS, even when the model asks for them.
    #[arg(long)]
    no_bos: bool,
    /// Do not turn `\n`, `\t`, `\\`, `\xHH`... in the text into the characters they name.
    #[arg(long)]
    no_escape: bool,
    /// Print one token per line, its id and its piece, instead of the id list.
    #[arg(long)]
    show_pieces: bool,
    /// Also print the number of tokens.
    #[arg(long)]
    show_count: bool,
    /// Print the time spent reading the model, building the tokenizer and encoding to stderr.
    #[arg(long)]
    timings: bool,
    /// Accepted for compatibility with llama-tokenize: ids are the default output.
    #[arg(long, hide = true)]
    ids: bool,
}

/// llama.cpp's escape processing: `\n \r \t \' \" \\` and `\xHH`; any other backslash stays.
fn process_escapes(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] != b'\\' || i + 1 >= s.len() {
            out.push(s[i]);
            i += 1;
            continue;
        }
        let c = s[i + 1];
        i += 2;
        match c {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'\'' | b'"' | b'\\' => out.push(c),
            b'x' if i + 1 < s.len() && strtol2(s[i], s[i + 1]).is_some() => {
                out.push(strtol2(s[i], s[i + 1]).expect("checked"));
                i += 2;
            }
            _ => {
                out.push(b'\\');
                out.push(c);
            }
        }
    }
    out
}

/// C's `strtol(.., 16)` over exactly two characters, as llama.cpp parses `\xHH`.
fn strtol2(a: u8, b: u8) -> Option<u8> {
    let hex = |c: u8| (c as char).to_digit(16);
    match (hex(a), hex(b)) {
        (Some(x), Some(y)) => Some((x * 16 + y) as u8),
        (None, Some(y)) if matches!(a, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b'+') => {
            Some(y as u8)
        }
        (None, Some(y)) if a == b'-' => Some((y as u8).wrapping_neg()),
        _ => None,
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let raw: Vec<u8> = if a.stdin || a.prompt.as_deref() == Some("-") {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("reading standard input")?;
        buf
    } else if let Some(f) = &a.file {
        std::fs::read(f).with_context(|| format!("reading {}", f.display()))?
    } else if let Some(p) = &a.prompt {
        p.clone().into_bytes()
    } else {
        anyhow::bail!("give the text with -p TEXT, -f FILE or --stdin");
    };
    let bytes = if a.no_escape {
        raw
    } else {
        process_escapes(&raw)
    };
    let text = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cera: warning: the text is not valid UTF-8; invalid bytes become U+FFFD");
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        }
    };

    let path = resolve_model(a.model.as_deref())?;
    let t0 = Instant::now();
    let g = GgufFile::open(&path)?;
    let t1 = Instant::now();
    let tok = Tokenizer::from_gguf(&g).with_context(|| format!("{}", path.display()))?;
    let t2 = Instant::now();
    for w in tok.warnings() {
        if w.contains("pre-tokenizer") || w.contains("tokenizer.ggml.pre") {
            eprintln!("cera: warning: {w}");
        }
    }
    let add_special = tok.add_bos() && !a.no_bos;
    let ids = tok.encode(&text, add_special, !a.no_parse_special);
    let t3 = Instant::now();
    if a.timings {
        let enc = (t3 - t2).as_secs_f64();
        eprintln!(
            "cera: gguf {:.1} ms, tokenizer {:.1} ms, encode {:.1} ms ({} bytes, {} tokens, {:.1} MB/s)",
            (t1 - t0).as_secs_f64() * 1e3,
            (t2 - t1).as_secs_f64() * 1e3,
            enc * 1e3,
            text.len(),
            ids.len(),
            text.len() as f64 / enc.max(1e-9) / 1e6
        );
    }

    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if a.show_pieces {
        for &id in &ids {
            let piece = String::from_utf8_lossy(tok.token_bytes(id));
            writeln!(out, "{id:6} -> '{piece}'")?;
        }
    } else {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        writeln!(out, "[{}]", list.join(", "))?;
    }
    if a.show_count {
        writeln!(out, "Total number of tokens: {}", ids.len())?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::process_escapes;

    #[test]
    fn escapes_as_llama_cpp() {
        assert_eq!(process_escapes(br"a\nb\tc\\d"), b"a\nb\tc\\d");
        assert_eq!(process_escapes(br#"\'\""#), b"'\"");
        assert_eq!(process_escapes(br"\x41\x4"), b"A\\x4");
        assert_eq!(process_escapes(br"\q\"), b"\\q\\");
    }
}
