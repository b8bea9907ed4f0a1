//! A regular-expression subset (JSON Schema `pattern`) → a GBNF expression for the *JSON text*
//! of a string's content (so `"` comes out as `\"`).
//!
//! Supported: literals, `.`, classes `[a-z_]` / `[^...]`, escapes `\d \w \s \D \W \S \n \t \r
//! \uHHHH` and escaped punctuation, groups `(...)` and `(?:...)`, alternation `|`, quantifiers
//! `* + ? {n} {n,} {n,m}` (a trailing lazy `?` is accepted and ignored), and `^` / `$` at the
//! ends. Anything else (look-around, back-references, named groups, `\b`) is an error.
//!
//! The pattern is treated as anchored at both ends: the generated string is always one whole
//! match, which also satisfies JSON Schema's unanchored `pattern`. `.` and negated classes
//! leave out `"`, `\` and control characters (the generated strings are a subset of the
//! language, so they always validate).

use super::parse::{MAX_CHAR, complement, normalize};
use crate::error::{Error, Result};

/// Upper bound used for open-ended `*`, `+` and `{n,}`: none (the GBNF keeps them open).
pub(crate) fn pattern_to_gbnf(pattern: &str) -> Result<String> {
    let mut p = Re {
        s: pattern.chars().collect(),
        i: 0,
        src: pattern,
        depth: 0,
    };
    if p.peek() == Some('^') {
        p.i += 1;
    }
    let e = p.alternation()?;
    if p.peek() == Some('$') && p.i + 1 == p.s.len() {
        p.i += 1;
    }
    if p.i != p.s.len() {
        return p.err("unexpected character");
    }
    Ok(e)
}

struct Re<'a> {
    s: Vec<char>,
    i: usize,
    src: &'a str,
    depth: usize,
}

fn digit() -> Vec<(u32, u32)> {
    vec![('0' as u32, '9' as u32)]
}
fn word() -> Vec<(u32, u32)> {
    normalize(vec![
        ('0' as u32, '9' as u32),
        ('A' as u32, 'Z' as u32),
        ('_' as u32, '_' as u32),
        ('a' as u32, 'z' as u32),
    ])
}
fn space() -> Vec<(u32, u32)> {
    normalize(vec![(9, 13), (32, 32)])
}

impl Re<'_> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn err<T>(&self, msg: &str) -> Result<T> {
        Err(Error::JsonSchema(format!(
            "pattern {:?}: {msg} at character {} (supported: literals, ., [classes], \\d \\w \\s, \
             groups, |, * + ? {{n,m}}, ^ and $ at the ends)",
            self.src,
            self.i + 1
        )))
    }

    fn alternation(&mut self) -> Result<String> {
        let mut alts = vec![self.concat()?];
        while self.peek() == Some('|') {
            self.i += 1;
            alts.push(self.concat()?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or_default()
        } else {
            format!("({})", alts.join(" | "))
        })
    }

    fn concat(&mut self) -> Result<String> {
        let mut items: Vec<String> = Vec::new();
        while let Some(c) = self.peek() {
            let atom = match c {
                '|' | ')' => break,
                '$' if self.i + 1 == self.s.len() => break,
                '(' => {
                    if self.depth >= super::parse::MAX_DEPTH {
                        return self.err("groups nested too deeply");
                    }
                    self.depth += 1;
                    self.i += 1;
                    if self.peek() == Some('?') {
                        if self.s.get(self.i + 1) == Some(&':') {
                            self.i += 2;
                        } else {
                            return self.err("look-around and named groups are not supported");
                        }
                    }
                    let inner = self.alternation()?;
                    self.depth -= 1;
                    if self.peek() != Some(')') {
                        return self.err("missing ')'");
                    }
                    self.i += 1;
                    format!("({inner})")
                }
                '[' => {
                    self.i += 1;
                    let set = self.class()?;
                    set_expr(&set)
                }
                '.' => {
                    self.i += 1;
                    let nl = [('\n' as u32, '\n' as u32)];
                    set_expr(&complement(&nl))
                }
                '\\' => {
                    self.i += 1;
                    set_expr(&self.escape()?)
                }
                '*' | '+' | '?' | '{' => return self.err("quantifier with nothing to repeat"),
                '^' | '$' => return self.err("anchors are only supported at the ends"),
                c => {
                    self.i += 1;
                    set_expr(&[(c as u32, c as u32)])
                }
            };
            let q = self.quantifier()?;
            items.push(format!("{atom}{q}"));
        }
        Ok(if items.is_empty() {
            "\"\"".into()
        } else {
            items.join(" ")
        })
    }

    fn quantifier(&mut self) -> Result<String> {
        let q = match self.peek() {
            Some('*') => {
                self.i += 1;
                "*".to_string()
            }
            Some('+') => {
                self.i += 1;
                "+".to_string()
            }
            Some('?') => {
                self.i += 1;
                "?".to_string()
            }
            Some('{') => {
                let start = self.i;
                let mut j = self.i + 1;
                let mut body = String::new();
                while let Some(&c) = self.s.get(j) {
                    if c == '}' {
                        break;
                    }
                    body.push(c);
                    j += 1;
                }
                let valid = self.s.get(j) == Some(&'}')
                    && !body.is_empty()
                    && body.chars().all(|c| c.is_ascii_digit() || c == ',')
                    && body.matches(',').count() <= 1
                    && !body.starts_with(',');
                if !valid {
                    self.i = start;
                    return self.err("bad {n,m} quantifier");
                }
                self.i = j + 1;
                format!("{{{body}}}")
            }
            _ => return Ok(String::new()),
        };
        if self.peek() == Some('?') {
            self.i += 1; // lazy: same language
        }
        if matches!(self.peek(), Some('*' | '+' | '{')) {
            return self.err("possessive or doubled quantifiers are not supported");
        }
        Ok(q)
    }

    /// After a backslash: the set it stands for.
    fn escape(&mut self) -> Result<Vec<(u32, u32)>> {
        let Some(c) = self.peek() else {
            return self.err("dangling backslash");
        };
        self.i += 1;
        let one = |c: char| vec![(c as u32, c as u32)];
        Ok(match c {
            'd' => digit(),
            'D' => complement(&digit()),
            'w' => word(),
            'W' => complement(&word()),
            's' => space(),
            'S' => complement(&space()),
            'n' => one('\n'),
            't' => one('\t'),
            'r' => one('\r'),
            'f' => one('\x0c'),
            'v' => one('\x0b'),
            'u' => {
                let hex: String = self
                    .s
                    .get(self.i..self.i + 4)
                    .unwrap_or(&[])
                    .iter()
                    .collect();
                match u32::from_str_radix(&hex, 16) {
                    Ok(v) if hex.len() == 4 && !(0xD800..=0xDFFF).contains(&v) => {
                        self.i += 4;
                        vec![(v, v)]
                    }
                    _ => return self.err("bad \\u escape"),
                }
            }
            c if c.is_ascii_punctuation() || c == ' ' => one(c),
            _ => return self.err("unsupported escape"),
        })
    }

    fn class(&mut self) -> Result<Vec<(u32, u32)>> {
        let negated = self.peek() == Some('^');
        if negated {
            self.i += 1;
        }
        let mut set = Vec::new();
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                return self.err("unterminated [class]");
            };
            if c == ']' && !first {
                self.i += 1;
                break;
            }
            first = false;
            self.i += 1;
            let lo: Vec<(u32, u32)> = if c == '\\' {
                self.escape()?
            } else {
                vec![(c as u32, c as u32)]
            };
            if lo.len() == 1
                && lo[0].0 == lo[0].1
                && self.peek() == Some('-')
                && self.s.get(self.i + 1).is_some_and(|&n| n != ']')
            {
                self.i += 1;
                let Some(h) = self.peek() else {
                    return self.err("unterminated [class]");
                };
                self.i += 1;
                let hi = if h == '\\' {
                    let e = self.escape()?;
                    if e.len() != 1 || e[0].0 != e[0].1 {
                        return self.err("bad range in [class]");
                    }
                    e[0].0
                } else {
                    h as u32
                };
                if hi < lo[0].0 {
                    return self.err("range out of order in [class]");
                }
                set.push((lo[0].0, hi));
            } else {
                set.extend(lo);
            }
        }
        let set = normalize(set);
        Ok(if negated { complement(&set) } else { set })
    }
}

/// A GBNF class item for one code point.
fn class_char(c: u32) -> String {
    match char::from_u32(c) {
        Some(ch) if ch.is_ascii_alphanumeric() => ch.to_string(),
        _ if c < 0x80 => format!("\\x{c:02X}"),
        _ if c <= 0xFFFF => format!("\\u{c:04X}"),
        _ => format!("\\U{c:08X}"),
    }
}

/// GBNF class text for ranges (non-empty).
pub(crate) fn class_text(r: &[(u32, u32)]) -> String {
    let mut s = String::from("[");
    for &(a, b) in r {
        s.push_str(&class_char(a));
        if b > a {
            s.push('-');
            s.push_str(&class_char(b));
        }
    }
    s.push(']');
    s
}

/// The JSON-text expression for one character of `set`: plain characters as a class, `"` and
/// `\` escaped, `\n \t \r \b \f` as their escapes; other control characters are dropped.
pub(crate) fn set_expr(set: &[(u32, u32)]) -> String {
    let has = |c: u32| set.iter().any(|&(a, b)| a <= c && c <= b);
    let forbidden = normalize(vec![
        (0, 0x1F),
        ('"' as u32, '"' as u32),
        ('\\' as u32, '\\' as u32),
    ]);
    let plain: Vec<(u32, u32)> = {
        // set minus forbidden
        let allowed = complement(&forbidden);
        let mut out = Vec::new();
        for &(a, b) in set {
            for &(c, d) in &allowed {
                let lo = a.max(c);
                let hi = b.min(d).min(MAX_CHAR);
                if lo <= hi {
                    out.push((lo, hi));
                }
            }
        }
        normalize(out)
    };
    let mut alts = Vec::new();
    if !plain.is_empty() {
        alts.push(class_text(&plain));
    }
    for (c, esc) in [
        ('"', "\"\\\\\\\"\""),
        ('\\', "\"\\\\\\\\\""),
        ('\n', "\"\\\\n\""),
        ('\t', "\"\\\\t\""),
        ('\r', "\"\\\\r\""),
        ('\x08', "\"\\\\b\""),
        ('\x0c', "\"\\\\f\""),
    ] {
        if has(c as u32) {
            alts.push(esc.to_string());
        }
    }
    match alts.len() {
        0 => "[^\\x00-\\U0010FFFF]".into(), // matches nothing: a dead end the compiler allows
        1 => alts.pop().unwrap_or_default(),
        _ => format!("({})", alts.join(" | ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Grammar;

    fn g(p: &str) -> Grammar {
        let e = pattern_to_gbnf(p).unwrap();
        Grammar::parse(&format!("root ::= {e}")).unwrap()
    }

    #[test]
    fn patterns_compile_to_matching_grammars() {
        let d = g("^\\d{3}-[A-Z]{2}$");
        assert!(d.accepts("123-AB"));
        assert!(!d.accepts("12-AB"));
        let a = g("(cat|dog)s?");
        assert!(a.accepts("cats") && a.accepts("dog") && !a.accepts("cow"));
        let q = g("a\"b\\\\c");
        assert!(q.accepts("a\\\"b\\\\c"));
        let w = g("[^a-z]+");
        assert!(w.accepts("ABC") && !w.accepts("AbC") && !w.accepts("A\"") && w.accepts("A\\\""));
        assert!(pattern_to_gbnf("(?=x)").is_err());
        assert!(pattern_to_gbnf("a{2").is_err());
        assert!(pattern_to_gbnf("\\1").is_err());
    }
}
