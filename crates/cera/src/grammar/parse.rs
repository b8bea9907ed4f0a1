//! GBNF text → syntax tree. The syntax is llama.cpp's:
//!
//! ```text
//! # comment
//! root  ::= greeting (", " name)? "!"      # sequence, group, optional
//! name  ::= [A-Z] [a-z]{1,15} | "world"    # class with ranges, bounded repetition, alternation
//! other ::= [^"\\\x00-\x1F] . "\u00e9"     # negated class, any character, escapes
//! ```
//!
//! Rules end at a newline, except inside parentheses, after `::=` and after `|` (an alternative
//! on the next line may also start with `|`). Names are letters, digits, `-` and `_`. Literals
//! and classes know the escapes `\n \t \r \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH` (and any other
//! punctuation escaped as itself). Repetitions: `*`, `+`, `?`, `{n}`, `{n,}`, `{n,m}`, `{,m}`.
//! Every error names its line and column (1-based, counted in characters).

use crate::error::{Error, Result};

/// Largest repetition count accepted in `{n,m}` (bigger ones would blow up the rule set).
pub(crate) const MAX_REPEAT: u32 = 10_000;

/// Deepest nesting of parentheses accepted.
pub(crate) const MAX_DEPTH: usize = 200;

/// Largest Unicode scalar value.
pub(crate) const MAX_CHAR: u32 = 0x10_FFFF;

/// A parsed rule body.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Node {
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    /// One code point in any of these inclusive ranges (sorted, merged; negation already
    /// applied).
    Chars(Vec<(u32, u32)>),
    Ref {
        name: String,
        line: usize,
        col: usize,
    },
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct RuleDef {
    pub name: String,
    pub body: Node,
    pub line: usize,
    pub col: usize,
}

/// Sorts and merges ranges.
pub(crate) fn normalize(mut r: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    r.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(r.len());
    for (a, b) in r {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The complement of sorted, merged ranges within `0..=MAX_CHAR`.
pub(crate) fn complement(r: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for &(a, b) in r {
        if a > next {
            out.push((next, a - 1));
        }
        next = b.saturating_add(1);
    }
    if next <= MAX_CHAR {
        out.push((next, MAX_CHAR));
    }
    out
}

pub(crate) fn parse(src: &str) -> Result<Vec<RuleDef>> {
    let mut p = Parser {
        s: src.chars().collect(),
        i: 0,
        depth: 0,
    };
    let mut rules = Vec::new();
    p.skip_space(true);
    while !p.eof() {
        rules.push(p.rule()?);
        p.skip_space(true);
    }
    if rules.is_empty() {
        return Err(Error::Grammar("the grammar has no rules".into()));
    }
    Ok(rules)
}

struct Parser {
    s: Vec<char>,
    i: usize,
    depth: usize,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

impl Parser {
    fn eof(&self) -> bool {
        self.i >= self.s.len()
    }

    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn line_col(&self, at: usize) -> (usize, usize) {
        let mut line = 1;
        let mut col = 1;
        for &c in &self.s[..at.min(self.s.len())] {
            if c == '\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
        }
        (line, col)
    }

    fn err_at<T>(&self, at: usize, msg: impl std::fmt::Display) -> Result<T> {
        let (line, col) = self.line_col(at);
        Err(Error::Grammar(format!("line {line}, column {col}: {msg}")))
    }

    fn err<T>(&self, msg: impl std::fmt::Display) -> Result<T> {
        self.err_at(self.i, msg)
    }

    fn found(&self) -> String {
        match self.peek() {
            None => "end of input".into(),
            Some('\n') => "end of line".into(),
            Some(c) => format!("'{}'", c.escape_debug()),
        }
    }

    /// Skips blanks and comments, and newlines too when `newlines`.
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.i += 1,
                '#' => {
                    while let Some(c) = self.peek() {
                        if c == '\n' || c == '\r' {
                            break;
                        }
                        self.i += 1;
                    }
                }
                '\r' | '\n' if newlines => self.i += 1,
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<String> {
        let start = self.i;
        while self.peek().is_some_and(is_name_char) {
            self.i += 1;
        }
        if start == self.i {
            return self.err(format!("expected a rule name, found {}", self.found()));
        }
        Ok(self.s[start..self.i].iter().collect())
    }

    fn rule(&mut self) -> Result<RuleDef> {
        let at = self.i;
        let name = self.name()?;
        self.skip_space(false);
        if self.s[self.i..].starts_with(&[':', ':', '=']) {
            self.i += 3;
        } else {
            return self.err(format!(
                "expected '::=' after rule name '{name}', found {}",
                self.found()
            ));
        }
        self.skip_space(true);
        let mut alts = vec![self.sequence(false)?];
        loop {
            self.skip_space(false);
            match self.peek() {
                Some('|') => {
                    self.i += 1;
                    self.skip_space(true);
                    alts.push(self.sequence(false)?);
                }
                None | Some('\n') | Some('\r') => {
                    // an alternative on the next line may start with '|'
                    let save = self.i;
                    self.skip_space(true);
                    if self.peek() == Some('|') {
                        continue;
                    }
                    self.i = save;
                    break;
                }
                _ => return self.err(format!("expected end of rule, found {}", self.found())),
            }
        }
        let (line, col) = self.line_col(at);
        Ok(RuleDef {
            name,
            body: if alts.len() == 1 {
                alts.pop().unwrap_or(Node::Seq(Vec::new()))
            } else {
                Node::Alt(alts)
            },
            line,
            col,
        })
    }

    /// Alternatives inside parentheses (newlines allowed anywhere).
    fn alternates(&mut self) -> Result<Node> {
        let mut alts = vec![self.sequence(true)?];
        while self.peek() == Some('|') {
            self.i += 1;
            self.skip_space(true);
            alts.push(self.sequence(true)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Node::Seq(Vec::new()))
        } else {
            Node::Alt(alts)
        })
    }

    fn sequence(&mut self, nested: bool) -> Result<Node> {
        let mut items: Vec<Node> = Vec::new();
        while let Some(c) = self.peek() {
            let at = self.i;
            match c {
                '"' => {
                    self.i += 1;
                    let mut chars = Vec::new();
                    loop {
                        match self.peek() {
                            None | Some('\n') | Some('\r') => {
                                return self.err_at(at, "unterminated string literal");
                            }
                            Some('"') => {
                                self.i += 1;
                                break;
                            }
                            Some(_) => chars.push(self.char_or_escape()?),
                        }
                    }
                    items.push(Node::Seq(
                        chars
                            .into_iter()
                            .map(|c| Node::Chars(vec![(c, c)]))
                            .collect(),
                    ));
                }
                '[' => {
                    self.i += 1;
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.i += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        match self.peek() {
                            None | Some('\n') | Some('\r') => {
                                return self.err_at(at, "unterminated character class");
                            }
                            Some(']') => {
                                self.i += 1;
                                break;
                            }
                            Some(_) => {
                                let lo = self.char_or_escape()?;
                                let mut hi = lo;
                                if self.peek() == Some('-')
                                    && self
                                        .s
                                        .get(self.i + 1)
                                        .is_some_and(|&c| c != ']' && c != '\n')
                                {
                                    self.i += 1;
                                    let range_at = self.i;
                                    hi = self.char_or_escape()?;
                                    if hi < lo {
                                        return self.err_at(
                                            range_at,
                                            format!("character range end U+{hi:04X} is before its start U+{lo:04X}"),
                                        );
                                    }
                                }
                                ranges.push((lo, hi));
                            }
                        }
                    }
                    let ranges = normalize(ranges);
                    items.push(Node::Chars(if negated {
                        complement(&ranges)
                    } else {
                        ranges
                    }));
                }
                '.' => {
                    self.i += 1;
                    items.push(Node::Chars(vec![(0, MAX_CHAR)]));
                }
                '(' => {
                    if self.depth >= MAX_DEPTH {
                        return self.err(format!("groups nested deeper than {MAX_DEPTH}"));
                    }
                    self.i += 1;
                    self.skip_space(true);
                    self.depth += 1;
                    let inner = self.alternates()?;
                    self.depth -= 1;
                    if self.peek() != Some(')') {
                        return self.err(format!(
                            "expected ')' to close the group, found {}",
                            self.found()
                        ));
                    }
                    self.i += 1;
                    items.push(inner);
                }
                '*' | '+' | '?' | '{' => {
                    let Some(last) = items.pop() else {
                        return self.err(format!("'{c}' with nothing before it to repeat"));
                    };
                    let (min, max) = self.repetition()?;
                    items.push(Node::Repeat {
                        node: Box::new(last),
                        min,
                        max,
                    });
                }
                c if is_name_char(c) => {
                    let name = self.name()?;
                    let (line, col) = self.line_col(at);
                    items.push(Node::Ref { name, line, col });
                }
                _ => break,
            }
            self.skip_space(nested);
        }
        Ok(if items.len() == 1 {
            items.pop().unwrap_or(Node::Seq(Vec::new()))
        } else {
            Node::Seq(items)
        })
    }

    fn number(&mut self) -> Result<Option<u32>> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        if start == self.i {
            return Ok(None);
        }
        let text: String = self.s[start..self.i].iter().collect();
        match text.parse::<u32>() {
            Ok(n) if n <= MAX_REPEAT => Ok(Some(n)),
            _ => self.err_at(
                start,
                format!("repetition count {text} is too large (at most {MAX_REPEAT})"),
            ),
        }
    }

    fn repetition(&mut self) -> Result<(u32, Option<u32>)> {
        let at = self.i;
        let c = self.peek().unwrap_or(' ');
        self.i += 1;
        match c {
            '*' => return Ok((0, None)),
            '+' => return Ok((1, None)),
            '?' => return Ok((0, Some(1))),
            _ => {}
        }
        self.skip_space(true);
        let min = self.number()?;
        self.skip_space(true);
        let (min, max) = match self.peek() {
            Some('}') => match min {
                Some(n) => (n, Some(n)),
                None => return self.err("expected a number in '{}'"),
            },
            Some(',') => {
                self.i += 1;
                self.skip_space(true);
                let max = self.number()?;
                self.skip_space(true);
                (min.unwrap_or(0), max)
            }
            _ => {
                return self.err(format!(
                    "expected a number, ',' or '}}' in a repetition, found {}",
                    self.found()
                ));
            }
        };
        if self.peek() != Some('}') {
            return self.err(format!(
                "expected '}}' to close the repetition, found {}",
                self.found()
            ));
        }
        self.i += 1;
        if let Some(m) = max
            && m < min
        {
            return self.err_at(
                at,
                format!("repetition {{{min},{m}}}: maximum below minimum"),
            );
        }
        Ok((min, max))
    }

    /// One character of a literal or class, with escapes.
    fn char_or_escape(&mut self) -> Result<u32> {
        let at = self.i;
        let Some(c) = self.peek() else {
            return self.err("unexpected end of input");
        };
        if c == '\n' || c == '\r' {
            return self.err("unexpected end of line");
        }
        self.i += 1;
        if c != '\\' {
            return Ok(c as u32);
        }
        let Some(e) = self.peek() else {
            return self.err("unexpected end of input after '\\'");
        };
        self.i += 1;
        let hex = |p: &mut Parser, n: usize| -> Result<u32> {
            let digits: String = p.s.get(p.i..p.i + n).unwrap_or(&[]).iter().collect();
            if digits.len() != n || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
                return p.err_at(at, format!("'\\{e}' needs {n} hex digits"));
            }
            p.i += n;
            let v = u32::from_str_radix(&digits, 16).unwrap_or(u32::MAX);
            if v > MAX_CHAR || (0xD800..=0xDFFF).contains(&v) {
                return p.err_at(at, format!("'\\{e}{digits}' is not a Unicode scalar value"));
            }
            Ok(v)
        };
        Ok(match e {
            'n' => '\n' as u32,
            't' => '\t' as u32,
            'r' => '\r' as u32,
            'x' => hex(self, 2)?,
            'u' => hex(self, 4)?,
            'U' => hex(self, 8)?,
            c if c.is_ascii_punctuation() || c == ' ' => c as u32,
            c => return self.err_at(at, format!("unknown escape '\\{}'", c.escape_debug())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_normalize_and_complement() {
        assert_eq!(
            normalize(vec![(5, 9), (0, 2), (3, 4), (20, 30)]),
            vec![(0, 9), (20, 30)]
        );
        assert_eq!(
            complement(&[(0, 9), (20, 30)]),
            vec![(10, 19), (31, MAX_CHAR)]
        );
        assert_eq!(complement(&[(0, MAX_CHAR)]), vec![]);
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse("root ::= \"a\"\nfoo ::= [abc\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2, column 9"), "{e}");
        let e = parse("root ::= \"a\" )").unwrap_err().to_string();
        assert!(e.contains("line 1, column 14"), "{e}");
        let e = parse("root = \"a\"").unwrap_err().to_string();
        assert!(e.contains("line 1, column 6") && e.contains("::="), "{e}");
    }
}
