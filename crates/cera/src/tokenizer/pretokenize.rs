//! Pre-tokenizers: how `tokenizer.ggml.pre` cuts text into words before BPE.
//!
//! Each pre-tokenizer is a list of steps, as in llama.cpp: every step splits each piece from
//! the previous step further, keeping both its matches and the text between them. The common
//! GPT-2 / Llama 3 / Qwen 2 / Qwen 3.5 patterns and the digit and newline splits are
//! hand-written state machines (llama.cpp has the same ones, so they define the behaviour);
//! every other pattern runs through `fancy-regex` the way llama.cpp runs `std::regex`: when a
//! pattern uses `\p{..}` classes, each non-ASCII codepoint is first collapsed to one marker
//! character for its category (whitespace to U+000B) and the classes become marker sets; the
//! unit tests check the hand-written splitters against the regexes on that same text.

use fancy_regex::Regex;

use super::unicode::{
    self, CATEGORIES, Cps, Flags, LETTER, MARK, NUMBER, PUNCTUATION, SYMBOL, WHITESPACE,
};
use crate::error::{Error, Result};

/// A hand-written splitter, named by the pattern it implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Custom {
    Gpt2,
    Llama3,
    Qwen2,
    Qwen35,
    /// `\p{N}`: every number codepoint on its own.
    Digits,
    /// `[^\n]+|[\n]+`.
    Newlines,
}

#[cfg_attr(not(test), allow(dead_code))]
pub(super) const GPT2_RE: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
#[cfg_attr(not(test), allow(dead_code))]
pub(super) const LLAMA3_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
#[cfg_attr(not(test), allow(dead_code))]
pub(super) const QWEN2_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
#[cfg_attr(not(test), allow(dead_code))]
pub(super) const QWEN35_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

impl Custom {
    /// The regex this splitter is equivalent to.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn pattern(self) -> &'static str {
        match self {
            Custom::Gpt2 => GPT2_RE,
            Custom::Llama3 => LLAMA3_RE,
            Custom::Qwen2 => QWEN2_RE,
            Custom::Qwen35 => QWEN35_RE,
            Custom::Digits => r"\p{N}",
            Custom::Newlines => "[^\n]+|[\n]+",
        }
    }
}

/// One step of a pre-tokenizer definition.
#[derive(Clone, Copy, Debug)]
pub(super) enum StepDef {
    Custom(Custom),
    Regex(&'static str),
}

use Custom as C;
use StepDef::{Custom as H, Regex as R};

/// What a `tokenizer.ggml.pre` name selects.
#[derive(Clone, Copy, Debug)]
pub(super) struct Config {
    /// The canonical name (llama.cpp's pre-tokenizer type).
    pub name: &'static str,
    pub steps: &'static [StepDef],
    /// GPT-2 byte-to-unicode vocabulary (false: raw UTF-8 with `<0xXX>` byte tokens).
    pub byte_level: bool,
    /// Spaces become U+2581 before splitting (SentencePiece-style BPE).
    pub escape_spaces: bool,
    /// A word that is a token is taken whole, without merging.
    pub ignore_merges: bool,
    pub add_bos: bool,
    pub add_sep: bool,
    /// The vocabulary has no BOS token.
    pub no_bos: bool,
}

const fn cfg(name: &'static str, steps: &'static [StepDef]) -> Config {
    Config {
        name,
        steps,
        byte_level: true,
        escape_spaces: false,
        ignore_merges: false,
        add_bos: false,
        add_sep: false,
        no_bos: false,
    }
}

const DEFAULT: Config = cfg(
    "default",
    &[
        R(r"[\p{P}\$\+<=>\^~\|]+"),
        H(C::Gpt2),
        R(r"\p{N}+"),
        R("[0-9][0-9][0-9]"),
    ],
);
const GPT2: &[StepDef] = &[H(C::Gpt2)];
const STARCODER: &[StepDef] = &[H(C::Digits), H(C::Gpt2)];
const LLAMA3: &[StepDef] = &[H(C::Llama3)];
const QWEN2: &[StepDef] = &[H(C::Qwen2)];
const NEWLINES: &[StepDef] = &[H(C::Newlines)];
const DEEPSEEK_LLM: &[StepDef] = &[
    R("[\r\n]"),
    R(
        "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+",
    ),
    R(r"\s?[!-/:-~！-／：-～‘-‟　-。]+"),
    R(r"\s+$"),
    R("[一-龥ࠀ-一가-퟿]+"),
    R(r"\p{N}+"),
];
const DEEPSEEK_CODER: &[StepDef] = &[
    R("[\r\n]"),
    R(r"\s?\p{L}+"),
    R(r"\s?\p{P}+"),
    R("[一-龥ࠀ-一가-퟿]+"),
    R(r"\p{N}"),
];
const DEEPSEEK3: &[StepDef] = &[
    R(r"\p{N}{1,3}"),
    R("[一-龥぀-ゟ゠-ヿ]+"),
    R(
        r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
    ),
];
const FALCON: &[StepDef] = &[
    R(r"[\p{P}\$\+<=>\^~\|`]+"),
    H(C::Gpt2),
    R("[0-9][0-9][0-9]"),
];
const PORO: &[StepDef] = &[R(r" ?[^(\s|.,!?…。，、।۔،)]+")];
const VIKING: &[StepDef] = &[R(r" ?[^(\s|.,!?…。，、।۔،)]+"), R(r"\p{N}")];
const TEKKEN: &[StepDef] = &[R(
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)];
const CHAMELEON: &[StepDef] = &[
    R("<sentinel:[0-9]+>"),
    R("(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"),
    R("([\t\n]|    |  )"),
    R(r"\p{N}"),
    R(r"[\p{P}!-/:-@\[-`{-~]"),
    H(C::Gpt2),
];
const GPT4O: &[StepDef] = &[R(
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)];
const SEED_CODER: &[StepDef] = &[R(
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
)];
const BAILINGMOE: &[StepDef] = &[R(
    r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
)];
const UFAKZEKA: &[StepDef] = &[R(
    r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)];
const MINICPM5: &[StepDef] = &[
    R(r"\p{N}{1,3}"),
    R(
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
];

/// Looks up a `tokenizer.ggml.pre` name (`""`: absent); `None` for names we do not know.
pub(super) fn lookup(pre: &str) -> Option<Config> {
    Some(match pre {
        "" | "default" => DEFAULT,
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => Config {
            ignore_merges: true,
            add_bos: true,
            ..cfg("llama3", LLAMA3)
        },
        "dbrx" | "smaug-bpe" => cfg("llama3", LLAMA3),
        "chatglm-bpe" => Config {
            no_bos: true,
            ..cfg("chatglm4", LLAMA3)
        },
        "glm4" | "glm5" => Config {
            no_bos: true,
            ignore_merges: true,
            ..cfg("chatglm4", LLAMA3)
        },
        "deepseek-llm" => cfg("deepseek-llm", DEEPSEEK_LLM),
        "deepseek-coder" => cfg("deepseek-coder", DEEPSEEK_CODER),
        "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => cfg("deepseek3-llm", DEEPSEEK3),
        "falcon" => cfg("falcon", FALCON),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "exaone4" => cfg("gpt-2", GPT2),
        "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => Config {
            add_sep: true,
            ..cfg("gpt-2", GPT2)
        },
        "mpt" | "olmo" | "jais" | "trillion" | "granite-docling" => cfg("gpt-2", GPT2),
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b"
        | "mellum2" => cfg("starcoder", STARCODER),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "hunyuan"
        | "solar-open" | "megrez" | "grok-2" => cfg("qwen2", QWEN2),
        "qwen35" => cfg("qwen35", &[H(C::Qwen35)]),
        "laguna" => cfg("laguna", &[H(C::Newlines), H(C::Qwen2)]),
        "tekken" => Config {
            ignore_merges: true,
            add_bos: true,
            ..cfg("tekken", TEKKEN)
        },
        "poro-chat" | "bloom" | "gpt3-finnish" => cfg("bloom", PORO),
        "viking" => cfg("viking", VIKING),
        "chameleon" => Config {
            add_bos: true,
            ..cfg("chameleon", CHAMELEON)
        },
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => cfg("gpt-4o", GPT4O),
        "seed-coder" => cfg("seed-coder", SEED_CODER),
        "bailingmoe" | "bailingmoe2" | "llada-moe" => cfg("bailingmoe", BAILINGMOE),
        "ufakzeka" => cfg("ufakzeka", UFAKZEKA),
        "minicpm5" => Config {
            ignore_merges: true,
            ..cfg("minicpm5", MINICPM5)
        },
        "gemma4" | "granite-embed-multi-311m" | "sarvam-moe" => Config {
            byte_level: false,
            escape_spaces: true,
            ..cfg("gemma4", NEWLINES)
        },
        _ => return None,
    })
}

/// The fallback for an unknown `tokenizer.ggml.pre`: llama.cpp's own choice when the key is
/// missing (its "default" regexes). llama.cpp itself refuses to load an unknown name.
pub(super) const FALLBACK: Config = DEFAULT;

enum Step {
    Custom(Custom),
    Regex { re: Regex, collapsed: bool },
}

pub(super) struct PreTokenizer {
    steps: Vec<Step>,
}

/// Codepoint ranges `[start, end)` of the pieces so far.
type Pieces = Vec<(u32, u32)>;

impl PreTokenizer {
    pub fn new(c: &Config) -> Result<PreTokenizer> {
        let steps = c
            .steps
            .iter()
            .map(|s| match *s {
                StepDef::Custom(h) => Ok(Step::Custom(h)),
                StepDef::Regex(p) => compile(p),
            })
            .collect::<Result<_>>()?;
        Ok(PreTokenizer { steps })
    }

    /// Every step as a regex, the hand-written ones included (for cross-checking).
    #[cfg(test)]
    pub fn regex_only(c: &Config) -> Result<PreTokenizer> {
        let steps = c
            .steps
            .iter()
            .map(|s| match *s {
                StepDef::Custom(h) => compile(h.pattern()),
                StepDef::Regex(p) => compile(p),
            })
            .collect::<Result<_>>()?;
        Ok(PreTokenizer { steps })
    }

    /// Splits `text` into words, appended as byte ranges.
    pub fn split(&self, text: &str, words: &mut Vec<(u32, u32)>) {
        if text.is_empty() {
            return;
        }
        let cps = Cps::new(text);
        let fl: Vec<Flags> = cps.cps.iter().map(|&c| unicode::flags(c)).collect();
        let mut cur: Pieces = vec![(0, cps.cps.len() as u32)];
        let mut next = Pieces::new();
        for step in &self.steps {
            next.clear();
            for &(a, b) in &cur {
                let (a, b) = (a as usize, b as usize);
                let t = Text {
                    cps: &cps.cps,
                    fl: &fl,
                    end: b,
                };
                match step {
                    Step::Custom(h) => t.split_custom(*h, a, &mut next),
                    Step::Regex { re, collapsed } => t.split_regex(re, *collapsed, a, &mut next),
                }
            }
            std::mem::swap(&mut cur, &mut next);
        }
        words.extend(
            cur.iter()
                .map(|&(a, b)| (cps.offs[a as usize], cps.offs[b as usize])),
        );
    }
}

const UCATS: [(&str, Flags); 10] = [
    (r"\p{N}", NUMBER),
    (r"\p{L}", LETTER),
    (r"\p{P}", PUNCTUATION),
    (r"\p{M}", MARK),
    (r"\p{S}", SYMBOL),
    (r"\p{Lu}", LETTER),
    (r"\p{Ll}", LETTER),
    (r"\p{Lt}", LETTER),
    (r"\p{Lm}", LETTER),
    (r"\p{Lo}", LETTER),
];

/// The marker a non-ASCII codepoint of a category collapses to, and the ASCII members of the
/// category, as class contents.
fn ucat_class(f: Flags) -> (char, &'static str) {
    match f {
        NUMBER => ('\u{D1}', "0-9"),
        LETTER => ('\u{D2}', "A-Za-z"),
        PUNCTUATION => ('\u{D3}', r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
        MARK => ('\u{D4}', ""),
        _ => ('\u{D5}', r"\$\+<->\^`\|~"), // SYMBOL
    }
}

fn collapse(cp: u32, f: Flags) -> char {
    if cp < 0x80 {
        return char::from_u32(cp).expect("ascii");
    }
    if f & WHITESPACE != 0 {
        return '\u{0B}';
    }
    match f & CATEGORIES {
        NUMBER | LETTER | PUNCTUATION | MARK | SYMBOL => ucat_class(f & CATEGORIES).0,
        _ => '\u{D0}',
    }
}

/// Rewrites `\p{..}` classes into marker sets, tracking `[...]` the way llama.cpp does.
fn collapse_pattern(p: &str) -> String {
    let b = p.as_bytes();
    let mut out = String::with_capacity(p.len() * 2);
    let mut inside = false;
    let mut i = 0;
    while i < b.len() {
        let prev_bs = i > 0 && b[i - 1] == b'\\';
        if b[i] == b'[' && !prev_bs {
            inside = true;
        } else if inside && b[i] == b']' && !prev_bs {
            inside = false;
        } else if b[i] == b'\\'
            && let Some(&(name, f)) = UCATS.iter().find(|(n, _)| p[i..].starts_with(n))
        {
            let (marker, ascii) = ucat_class(f);
            if !inside {
                out.push('[');
            }
            out.push(marker);
            out.push_str(ascii);
            if !inside {
                out.push(']');
            }
            i += name.len();
            continue;
        }
        let ch = p[i..].chars().next().expect("char boundary");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn compile(p: &str) -> Result<Step> {
    let collapsed = UCATS.iter().any(|(n, _)| p.contains(n));
    if collapsed && !p.is_ascii() {
        return Err(Error::Tokenizer {
            reason: format!("pre-tokenizer regex mixes \\p{{..}} and non-ASCII: {p}"),
        });
    }
    let src = if collapsed {
        collapse_pattern(p)
    } else {
        p.to_owned()
    };
    let re = Regex::new(&src).map_err(|e| Error::Tokenizer {
        reason: format!("pre-tokenizer regex {p:?}: {e}"),
    })?;
    Ok(Step::Regex { re, collapsed })
}

/// One piece of text under a splitter: positions past `end` read as codepoint `u32::MAX`
/// with no flags, as the end of a piece hides what follows it.
struct Text<'a> {
    cps: &'a [u32],
    fl: &'a [Flags],
    end: usize,
}

const OUT: u32 = u32::MAX;

impl Text<'_> {
    #[inline]
    fn cp(&self, i: usize) -> u32 {
        if i < self.end { self.cps[i] } else { OUT }
    }
    #[inline]
    fn f(&self, i: usize) -> Flags {
        if i < self.end { self.fl[i] } else { 0 }
    }

    fn split_regex(&self, re: &Regex, collapsed: bool, a: usize, out: &mut Pieces) {
        let mut s = String::with_capacity(self.end - a);
        let mut starts = Vec::with_capacity(self.end - a + 1);
        for i in a..self.end {
            starts.push(s.len());
            let (cp, f) = (self.cps[i], self.fl[i]);
            s.push(if collapsed {
                collapse(cp, f)
            } else if cp > 0x7F && f & WHITESPACE != 0 {
                '\u{0B}' // as llama.cpp: std::regex's \s only knows ASCII whitespace
            } else {
                char::from_u32(cp).expect("valid codepoint")
            });
        }
        starts.push(s.len());
        let at = |off: usize| (a + starts.binary_search(&off).expect("char boundary")) as u32;
        let mut done = a as u32;
        for m in re.find_iter(&s) {
            let Ok(m) = m else { break }; // backtrack limit: keep the rest whole
            let (ms, me) = (at(m.start()), at(m.end()));
            if ms > done {
                out.push((done, ms));
            }
            if me > ms {
                out.push((ms, me));
            }
            done = me;
        }
        if (done as usize) < self.end {
            out.push((done, self.end as u32));
        }
    }

    fn split_custom(&self, h: Custom, a: usize, out: &mut Pieces) {
        let mut pos = a;
        let mut emit = |end: usize, pos: &mut usize| {
            if end > *pos {
                out.push((*pos as u32, end as u32));
            }
            *pos = end;
        };
        match h {
            Custom::Digits => {
                let mut start = a;
                for i in a..self.end {
                    if self.fl[i] & NUMBER != 0 {
                        emit(i, &mut start);
                        emit(i + 1, &mut start);
                    }
                }
                emit(self.end, &mut start);
                return;
            }
            Custom::Newlines => {
                while pos < self.end {
                    let nl = self.cps[pos] == '\n' as u32;
                    let mut e = pos;
                    while e < self.end && (self.cps[e] == '\n' as u32) == nl {
                        e += 1;
                    }
                    emit(e, &mut pos);
                }
                return;
            }
            _ => {}
        }
        let gpt2 = h == Custom::Gpt2;
        // letters-and-marks for Qwen 3.5, letters for the others
        let word = if h == Custom::Qwen35 {
            LETTER | MARK
        } else {
            LETTER
        };
        let is_rn = |c: u32| c == '\r' as u32 || c == '\n' as u32;
        while pos < self.end {
            let c = self.cp(pos);
            let f = self.f(pos);

            // contractions: 's 't 're 've 'm 'll 'd (case-insensitive except for GPT-2)
            if c == '\'' as u32 && pos + 1 < self.end {
                let low = |c: u32| if gpt2 { c } else { unicode::to_lower(c) };
                let n1 = low(self.cp(pos + 1));
                if [b's', b't', b'm', b'd'].iter().any(|&x| n1 == x as u32) {
                    emit(pos + 2, &mut pos);
                    continue;
                }
                if pos + 2 < self.end {
                    let n2 = low(self.cp(pos + 2));
                    let pair = |x: u8, y: u8| n1 == x as u32 && n2 == y as u32;
                    if pair(b'r', b'e') || pair(b'v', b'e') || pair(b'l', b'l') {
                        emit(pos + 3, &mut pos);
                        continue;
                    }
                }
            }

            if gpt2 {
                // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
                let f2 = if c == ' ' as u32 { self.f(pos + 1) } else { f };
                let run = |cls: &dyn Fn(Flags) -> bool, pos: usize| {
                    let mut p = pos + (c == ' ' as u32) as usize;
                    while cls(self.f(p)) {
                        p += 1;
                    }
                    p
                };
                let other = |f: Flags| f & (WHITESPACE | LETTER | NUMBER) == 0 && f != 0;
                if f2 & LETTER != 0 {
                    let e = run(&|f| f & LETTER != 0, pos);
                    emit(e, &mut pos);
                    continue;
                }
                if f2 & NUMBER != 0 {
                    let e = run(&|f| f & NUMBER != 0, pos);
                    emit(e, &mut pos);
                    continue;
                }
                if other(f2) {
                    let e = run(&other, pos);
                    emit(e, &mut pos);
                    continue;
                }
            } else {
                // `[^\r\n\p{L}\p{N}]?\p{L}+` (Qwen 3.5: `[\p{L}\p{M}]+`)
                if !(is_rn(c) || f & NUMBER != 0) && (f & word != 0 || self.f(pos + 1) & word != 0)
                {
                    let mut e = pos + 1;
                    while self.f(e) & word != 0 {
                        e += 1;
                    }
                    emit(e, &mut pos);
                    continue;
                }
                // `\p{N}{1,3}` (Llama 3) or `\p{N}`
                if f & NUMBER != 0 {
                    let max = if h == Custom::Llama3 { 3 } else { 1 };
                    let mut e = pos;
                    while self.f(e) & NUMBER != 0 && e - pos < max {
                        e += 1;
                    }
                    emit(e, &mut pos);
                    continue;
                }
                // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
                let f2 = if c == ' ' as u32 { self.f(pos + 1) } else { f };
                let other = |f: Flags| f & (WHITESPACE | word | NUMBER) == 0;
                if other(f2) && f != 0 {
                    let mut e = pos + (c == ' ' as u32) as usize;
                    while other(self.f(e)) && self.f(e) != 0 {
                        e += 1;
                    }
                    while is_rn(self.cp(e)) {
                        e += 1;
                    }
                    emit(e, &mut pos);
                    continue;
                }
            }

            let mut n_ws = 0;
            let mut last_rn = 0;
            while self.f(pos + n_ws) & WHITESPACE != 0 {
                if !gpt2 && is_rn(self.cp(pos + n_ws)) {
                    last_rn = pos + n_ws + 1;
                }
                n_ws += 1;
            }
            if last_rn > 0 {
                // `\s*[\r\n]+`
                emit(last_rn, &mut pos);
            } else if n_ws > 1 && self.cp(pos + n_ws) != OUT {
                // `\s+(?!\S)`: leave the last space to the word that follows
                emit(pos + n_ws - 1, &mut pos);
            } else if n_ws > 0 {
                emit(pos + n_ws, &mut pos);
            } else {
                emit(pos + 1, &mut pos);
            }
        }
    }
}

#[cfg(test)]
mod tests;
