//! Pythonic calls, as LFM2 writes them: `[f(a=1, b="x"), g()]`.
//!
//! Values are Python literals: strings ('…' or "…", with the usual backslash escapes), ints,
//! floats, `True`, `False`, `None`, lists, tuples and dicts; they become JSON.

use serde_json::{Map, Number, Value as Json};

use super::ToolCall;
use crate::error::{Error, Result};

/// Parses `[call, call, ...]` (or a single call without brackets); everything in `s`.
pub(crate) fn parse_calls(s: &str) -> Result<Vec<ToolCall>> {
    let mut p = Py {
        s: s.chars().collect(),
        i: 0,
    };
    p.ws();
    let mut calls = Vec::new();
    if p.peek() == Some('[') {
        p.i += 1;
        p.ws();
        if p.peek() != Some(']') {
            loop {
                calls.push(p.call()?);
                p.ws();
                match p.next() {
                    Some(',') => p.ws(),
                    Some(']') => break,
                    Some(c) => {
                        return p.err(&format!("expected ',' or ']' after a call, found {c:?}"));
                    }
                    None => return p.err("unterminated call list (missing ']')"),
                }
            }
        } else {
            p.i += 1;
        }
    } else {
        calls.push(p.call()?);
    }
    p.ws();
    if p.i != p.s.len() {
        return p.err("unexpected text after the calls");
    }
    Ok(calls)
}

struct Py {
    s: Vec<char>,
    i: usize,
}

impl Py {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek();
        self.i += c.is_some() as usize;
        c
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.i += 1;
        }
    }

    fn err<T>(&self, msg: &str) -> Result<T> {
        let near: String = self.s[self.i.min(self.s.len())..].iter().take(20).collect();
        Err(Error::Tools(format!(
            "Pythonic call: {msg} at character {} (near {near:?})",
            self.i + 1
        )))
    }

    fn ident(&mut self) -> Result<String> {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '-')
        {
            self.i += 1;
        }
        if start == self.i || self.s[start].is_ascii_digit() {
            return self.err("expected a name");
        }
        Ok(self.s[start..self.i].iter().collect())
    }

    fn call(&mut self) -> Result<ToolCall> {
        let name = self.ident()?;
        self.ws();
        if self.next() != Some('(') {
            return self.err(&format!("expected '(' after {name:?}"));
        }
        let mut args = Map::new();
        loop {
            self.ws();
            match self.peek() {
                Some(')') => {
                    self.i += 1;
                    break;
                }
                None => return self.err(&format!("unterminated call to {name:?} (missing ')')")),
                _ => {}
            }
            if !self.peek().is_some_and(|c| c.is_alphabetic() || c == '_') {
                return self.err(
                    "expected name=value (only keyword arguments are supported, not positional ones)",
                );
            }
            let key = self.ident()?;
            self.ws();
            if self.next() != Some('=') {
                return self.err(&format!(
                    "expected '=' after argument {key:?} (only keyword arguments are supported)"
                ));
            }
            self.ws();
            let v = self.value()?;
            args.insert(key, v);
            self.ws();
            match self.peek() {
                Some(',') => self.i += 1,
                Some(')') => {}
                None => return self.err(&format!("unterminated call to {name:?} (missing ')')")),
                Some(c) => return self.err(&format!("expected ',' or ')', found {c:?}")),
            }
        }
        Ok(ToolCall::new(None, name, Json::Object(args)))
    }

    fn value(&mut self) -> Result<Json> {
        match self.peek() {
            None => self.err("expected a value, found the end"),
            Some('"') | Some('\'') => self.string().map(Json::String),
            Some('[') | Some('(') => {
                let close = if self.next() == Some('[') { ']' } else { ')' };
                let mut items = Vec::new();
                loop {
                    self.ws();
                    if self.peek() == Some(close) {
                        self.i += 1;
                        break;
                    }
                    items.push(self.value()?);
                    self.ws();
                    match self.next() {
                        Some(',') => {}
                        Some(c) if c == close => break,
                        None => return self.err("unterminated list"),
                        Some(c) => {
                            return self.err(&format!("expected ',' or '{close}', found {c:?}"));
                        }
                    }
                }
                Ok(Json::Array(items))
            }
            Some('{') => {
                self.i += 1;
                let mut m = Map::new();
                loop {
                    self.ws();
                    if self.peek() == Some('}') {
                        self.i += 1;
                        break;
                    }
                    let k = match self.value()? {
                        Json::String(s) => s,
                        other => other.to_string(),
                    };
                    self.ws();
                    if self.next() != Some(':') {
                        return self.err("expected ':' in a dict");
                    }
                    self.ws();
                    let v = self.value()?;
                    m.insert(k, v);
                    self.ws();
                    match self.next() {
                        Some(',') => {}
                        Some('}') => break,
                        None => return self.err("unterminated dict"),
                        Some(c) => return self.err(&format!("expected ',' or '}}', found {c:?}")),
                    }
                }
                Ok(Json::Object(m))
            }
            Some(c) if c == '-' || c == '+' || c == '.' || c.is_ascii_digit() => self.number(),
            Some(_) => {
                let start = self.i;
                let word = self.ident()?;
                match word.as_str() {
                    "True" | "true" => Ok(Json::Bool(true)),
                    "False" | "false" => Ok(Json::Bool(false)),
                    "None" | "null" => Ok(Json::Null),
                    _ => {
                        self.i = start;
                        self.err(&format!("unknown value {word:?}"))
                    }
                }
            }
        }
    }

    fn number(&mut self) -> Result<Json> {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E' | '_'))
        {
            self.i += 1;
        }
        let text: String = self.s[start..self.i]
            .iter()
            .filter(|&&c| c != '_')
            .collect();
        if let Ok(n) = text.parse::<i64>() {
            return Ok(Json::Number(n.into()));
        }
        match text.parse::<f64>().ok().and_then(Number::from_f64) {
            Some(n) => Ok(Json::Number(n)),
            None => {
                self.i = start;
                self.err(&format!("bad number {text:?}"))
            }
        }
    }

    fn string(&mut self) -> Result<String> {
        let q = self.next().unwrap_or('"');
        let mut out = String::new();
        loop {
            let Some(c) = self.next() else {
                return self.err("unterminated string");
            };
            if c == q {
                return Ok(out);
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some(e) = self.next() else {
                return self.err("unterminated string");
            };
            match e {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '0' => out.push('\0'),
                'u' | 'x' => {
                    let n = if e == 'u' { 4 } else { 2 };
                    let hex: String = self
                        .s
                        .get(self.i..self.i + n)
                        .unwrap_or(&[])
                        .iter()
                        .collect();
                    match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        Some(ch) if hex.len() == n => {
                            self.i += n;
                            out.push(ch);
                        }
                        _ => return self.err("bad escape in string"),
                    }
                }
                '\n' => {}
                other => out.push(other),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pythonic_calls() {
        let c = parse_calls("[get_weather(city=\"Paris\", days=3), f(), g(x=[1, 2.5, None], y={'k': True}, z='it\\'s')]").unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].name, "get_weather");
        assert_eq!(c[0].arguments, json!({"city": "Paris", "days": 3}));
        assert_eq!(c[1].arguments, json!({}));
        assert_eq!(
            c[2].arguments,
            json!({"x": [1, 2.5, null], "y": {"k": true}, "z": "it's"})
        );
        for bad in [
            "[f(a=1",
            "[f(a=)]",
            "[f(1)]",
            "[f(a=1) g()]",
            "[f(a=\"x)]",
            "[f(a=nope)]",
            "",
            "[",
            "f",
        ] {
            assert!(parse_calls(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_calls("[]").unwrap(), vec![]);
    }
}
