//! Python's `str` and `dict` methods (`s.strip()`, `s.split(',')`, `d.items()`, ...) with
//! Python's exact semantics for the ones chat templates lean on.

use minijinja::value::{Kwargs, Value, from_args};
use minijinja::{Error, ErrorKind, State};

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// Python's `str.isspace` for one character (Unicode whitespace plus the separators
/// U+001C..U+001F).
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip/lstrip/rstrip(chars=None)`.
pub(crate) fn strip<'a>(
    s: &'a str,
    chars: Option<&Value>,
    left: bool,
    right: bool,
) -> Result<&'a str, Error> {
    let set: Option<Vec<char>> = match chars {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(c) => Some(c.chars().collect()),
            None => return Err(invalid("strip arg must be None or str")),
        },
    };
    let matches = |c: char| match &set {
        None => is_py_space(c),
        Some(set) => set.contains(&c),
    };
    let mut out = s;
    if left {
        out = out.trim_start_matches(matches);
    }
    if right {
        out = out.trim_end_matches(matches);
    }
    Ok(out)
}

/// Python's `str.splitlines()` (without the line ends).
pub(crate) fn splitlines(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let is_break = matches!(
            c,
            '\n' | '\r'
                | '\u{b}'
                | '\u{c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        );
        if is_break {
            out.push(&s[start..i]);
            let mut end = i + c.len_utf8();
            if c == '\r' && chars.peek().is_some_and(|&(_, n)| n == '\n') {
                chars.next();
                end += 1;
            }
            start = end;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Python's `str.split(sep=None, maxsplit=-1)` and `str.rsplit`.
fn split(
    s: &str,
    sep: Option<&Value>,
    maxsplit: Option<i64>,
    from_right: bool,
) -> Result<Vec<String>, Error> {
    let limit = match maxsplit {
        Some(n) if n >= 0 => Some(n as usize),
        _ => None,
    };
    let sep = match sep {
        Some(v) if !v.is_none() => Some(
            v.as_str()
                .ok_or_else(|| invalid("split: separator must be a string or None"))?
                .to_owned(),
        ),
        _ => None,
    };
    let mut parts: Vec<String> = Vec::new();
    match sep {
        Some(sep) => {
            if sep.is_empty() {
                return Err(invalid("split: empty separator"));
            }
            match (limit, from_right) {
                (None, _) => parts = s.split(sep.as_str()).map(str::to_owned).collect(),
                (Some(n), false) => {
                    parts = s.splitn(n + 1, sep.as_str()).map(str::to_owned).collect()
                }
                (Some(n), true) => {
                    parts = s.rsplitn(n + 1, sep.as_str()).map(str::to_owned).collect();
                    parts.reverse();
                }
            }
        }
        None => {
            // Runs of whitespace separate; leading/trailing whitespace yields no empty parts.
            let words: Vec<(usize, usize)> = word_spans(s);
            let n = limit.unwrap_or(usize::MAX);
            if words.len() <= n {
                parts = words.iter().map(|&(a, b)| s[a..b].to_owned()).collect();
            } else if !from_right {
                for &(a, b) in &words[..n] {
                    parts.push(s[a..b].to_owned());
                }
                parts.push(s[words[n].0..].to_owned());
            } else {
                let cut = words.len() - n;
                parts.push(s[..words[cut - 1].1].to_owned());
                for &(a, b) in &words[cut..] {
                    parts.push(s[a..b].to_owned());
                }
            }
        }
    }
    Ok(parts)
}

fn word_spans(s: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        match (is_py_space(c), start) {
            (true, Some(a)) => {
                spans.push((a, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(a) = start {
        spans.push((a, s.len()));
    }
    spans
}

/// Python methods on values (`s.strip()`, `d.items()`, ...): the string methods whose details
/// matter are ours; the rest come from minijinja-contrib's `pycompat`.
pub(crate) fn call_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        match method {
            "strip" | "lstrip" | "rstrip" => {
                let (chars,): (Option<Value>,) = from_args(args)?;
                let (l, r) = match method {
                    "strip" => (true, true),
                    "lstrip" => (true, false),
                    _ => (false, true),
                };
                return Ok(Value::from(strip(s, chars.as_ref(), l, r)?));
            }
            "split" | "rsplit" => {
                let (sep, maxsplit, kwargs): (Option<Value>, Option<i64>, Kwargs) =
                    from_args(args)?;
                let sep = sep.or(kwargs.get("sep")?);
                let maxsplit = maxsplit.or(kwargs.get("maxsplit")?);
                kwargs.assert_all_used()?;
                let parts = split(s, sep.as_ref(), maxsplit, method == "rsplit")?;
                return Ok(Value::from(parts));
            }
            "join" => {
                // Python: every item must be a str
                let (items,): (Value,) = from_args(args)?;
                let mut parts = Vec::new();
                for (i, item) in items.try_iter()?.enumerate() {
                    match item.as_str() {
                        Some(p) => parts.push(p.to_owned()),
                        None => {
                            return Err(invalid(format!(
                                "sequence item {i}: expected str instance, {} found",
                                item.kind()
                            )));
                        }
                    }
                }
                return Ok(Value::from(parts.join(s)));
            }
            "splitlines" => {
                let () = from_args(args)?;
                let lines: Vec<Value> = splitlines(s).into_iter().map(Value::from).collect();
                return Ok(Value::from(lines));
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args).map_err(|e| {
        if e.kind() == ErrorKind::UnknownMethod {
            Error::new(
                ErrorKind::UnknownMethod,
                format!("{} has no method named {method}", value.kind()),
            )
        } else {
            e
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_string_helpers() {
        assert_eq!(splitlines("a\nb\r\nc\rd\n"), ["a", "b", "c", "d"]);
        assert_eq!(splitlines(""), Vec::<&str>::new());
        assert_eq!(
            split("  a  b c ", None, None, false).unwrap(),
            ["a", "b", "c"]
        );
        assert_eq!(
            split("  a  b c ", None, Some(1), false).unwrap(),
            ["a", "b c "]
        );
        assert_eq!(
            split("  a  b c ", None, Some(1), true).unwrap(),
            ["  a  b", "c"]
        );
        let sep = Value::from("</think>");
        assert_eq!(
            split("x</think>y</think>z", Some(&sep), Some(1), false).unwrap(),
            ["x", "y</think>z"]
        );
        assert_eq!(
            split("x</think>y</think>z", Some(&sep), Some(1), true).unwrap(),
            ["x</think>y", "z"]
        );
        assert_eq!(split("", Some(&sep), None, false).unwrap(), [""]);
        assert_eq!(split("  a  b ", None, Some(1), false).unwrap(), ["a", "b "]);
        assert_eq!(split("  a  b ", None, Some(1), true).unwrap(), ["  a", "b"]);
        assert_eq!(split("a b", None, Some(5), false).unwrap(), ["a", "b"]);
        assert_eq!(split(" a ", None, Some(0), true).unwrap(), [" a"]);
        assert_eq!(split(" a b ", None, Some(0), false).unwrap(), ["a b "]);
        assert_eq!(strip("\n x \u{1c}", None, true, true).unwrap(), "x");
        assert_eq!(
            strip("xxaxx", Some(&Value::from("x")), true, false).unwrap(),
            "axx"
        );
    }
}
