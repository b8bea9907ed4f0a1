//! Python's text forms of template values: `str()` (what `{{ x }}` and `|string` print),
//! `repr()` (how containers print their items) and `json.dumps` (the `tojson` filter).
//!
//! Chat templates are written against Python jinja2, where `{{ none }}` prints `None`, booleans
//! print `True`/`False`, a dict prints as `{'a': 1}` and `tojson` is `json.dumps` with
//! `", "`/`": "` separators. minijinja's own formatting differs, so every place that turns a
//! value into text goes through here.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::functions::Generator;

/// Python's `str(value)`.
pub(crate) fn py_str(value: &Value) -> String {
    match value.kind() {
        ValueKind::String => value.as_str().unwrap_or_default().to_owned(),
        ValueKind::Undefined => String::new(),
        _ => py_repr(value),
    }
}

/// Python's `repr(value)`.
pub(crate) fn py_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value, 0);
    out
}

/// Containers nested deeper than this print as `...` (Python would recurse until it runs out
/// of stack; templates never get near this).
const MAX_DEPTH: usize = 64;

fn write_repr(out: &mut String, value: &Value, depth: usize) {
    if depth > MAX_DEPTH {
        out.push_str("...");
        return;
    }
    match value.kind() {
        ValueKind::Undefined => out.push_str("Undefined"),
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&number_text(value)),
        ValueKind::String => write_str_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            let tuple = value.is_tuple();
            let (open, close) = if tuple { ('(', ')') } else { ('[', ']') };
            out.push(open);
            let mut n = 0;
            if let Ok(iter) = value.try_iter() {
                for (i, item) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &item, depth + 1);
                    n += 1;
                }
            }
            if tuple && n == 1 {
                out.push(',');
            }
            out.push(close);
        }
        ValueKind::Map => {
            out.push('{');
            for (i, (k, v)) in map_pairs(value).iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, k, depth + 1);
                out.push_str(": ");
                write_repr(out, v, depth + 1);
            }
            out.push('}');
        }
        ValueKind::Iterable if is_generator(value) => out.push_str("<generator object>"),
        ValueKind::Iterable => {
            // minijinja's lazy sequences (slices, `+` of lists) are Python lists
            let items: Vec<Value> = value.try_iter().map(|i| i.collect()).unwrap_or_default();
            write_repr(out, &Value::from(items), depth);
        }
        _ => out.push_str(&value.to_string()),
    }
}

/// Whether `value` is one of our Python generators (rather than a lazy minijinja sequence).
fn is_generator(value: &Value) -> bool {
    value.downcast_object_ref::<Generator>().is_some()
}

/// The key/value pairs of a map, in insertion order.
pub(crate) fn map_pairs(value: &Value) -> Vec<(Value, Value)> {
    match value.as_object().and_then(|o| o.try_iter_pairs()) {
        Some(iter) => iter.collect(),
        None => Vec::new(),
    }
}

/// Python's `repr` of a string: single quotes unless the text holds a `'` and no `"`.
fn write_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// The text of a number as Python prints it (integers in decimal, floats as `float.__repr__`).
fn number_text(value: &Value) -> String {
    if value.is_integer() {
        value.to_string()
    } else {
        match f64::try_from(value.clone()) {
            Ok(f) => py_float_repr(f),
            Err(_) => value.to_string(),
        }
    }
}

/// Python's `repr(float)`: the shortest text that reads back as the same float, in positional
/// notation when the decimal exponent is in `-4..16` (always with a fraction part: `2.0`), else
/// in scientific notation with a signed two-digit-minimum exponent (`1e+16`, `1.5e-05`).
pub(crate) fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let mut s = String::from(sign);
        if exp < 0 {
            s.push_str("0.");
            for _ in 0..(-exp - 1) {
                s.push('0');
            }
            s.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                s.push_str(&digits);
                for _ in digits.len()..int_len {
                    s.push('0');
                }
                s.push_str(".0");
            } else {
                s.push_str(&digits[..int_len]);
                s.push('.');
                s.push_str(&digits[int_len..]);
            }
        }
        s
    } else {
        let mut s = String::from(sign);
        s.push_str(&digits[..1]);
        if digits.len() > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        s.push('e');
        s.push(if exp < 0 { '-' } else { '+' });
        s.push_str(&format!("{:02}", exp.abs()));
        s
    }
}

/// Options of Python's `json.dumps` that templates use.
#[derive(Debug, Clone)]
pub(crate) struct JsonOptions {
    pub ensure_ascii: bool,
    /// `None`: everything on one line; `Some(s)`: one item a line, each level indented by `s`.
    pub indent: Option<String>,
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
}

impl Default for JsonOptions {
    fn default() -> Self {
        JsonOptions {
            ensure_ascii: true,
            indent: None,
            item_separator: ", ".into(),
            key_separator: ": ".into(),
            sort_keys: false,
        }
    }
}

/// Python's `json.dumps(value, **opts)`. Values JSON cannot hold are errors worded as
/// Python's `TypeError`s.
pub(crate) fn json_dumps(value: &Value, opts: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_json(&mut out, value, opts, 0)?;
    Ok(out)
}

fn not_serializable(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("tojson: object of type {what} is not JSON serializable"),
    )
}

fn newline_indent(out: &mut String, indent: &str, level: usize) {
    out.push('\n');
    for _ in 0..level {
        out.push_str(indent);
    }
}

fn write_json(
    out: &mut String,
    value: &Value,
    opts: &JsonOptions,
    level: usize,
) -> Result<(), Error> {
    if level > MAX_DEPTH {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: value nested too deeply",
        ));
    }
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&json_number(value)),
        ValueKind::String => {
            write_json_str(out, value.as_str().unwrap_or_default(), opts.ensure_ascii)
        }
        ValueKind::Seq | ValueKind::Iterable if !is_generator(value) => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, opts, level, '[', ']', &items, write_json)?;
        }
        ValueKind::Map => {
            let mut pairs = Vec::new();
            for (k, v) in map_pairs(value) {
                pairs.push((json_key(&k)?, v));
            }
            if opts.sort_keys {
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(
                out,
                opts,
                level,
                '{',
                '}',
                &pairs,
                |out, (k, v), opts, level| {
                    write_json_str(out, k, opts.ensure_ascii);
                    out.push_str(&opts.key_separator);
                    write_json(out, v, opts, level)
                },
            )?;
        }
        ValueKind::Undefined => return Err(not_serializable("Undefined")),
        ValueKind::Iterable => return Err(not_serializable("generator")),
        ValueKind::Bytes => return Err(not_serializable("bytes")),
        _ => return Err(not_serializable(&value.kind().to_string())),
    }
    Ok(())
}

fn write_container<T>(
    out: &mut String,
    opts: &JsonOptions,
    level: usize,
    open: char,
    close: char,
    items: &[T],
    mut write_item: impl FnMut(&mut String, &T, &JsonOptions, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&opts.item_separator);
        }
        if let Some(indent) = &opts.indent {
            newline_indent(out, indent, level + 1);
        }
        write_item(out, item, opts, level + 1)?;
    }
    if let Some(indent) = &opts.indent {
        newline_indent(out, indent, level);
    }
    out.push(close);
    Ok(())
}

fn json_number(value: &Value) -> String {
    if value.is_integer() {
        return value.to_string();
    }
    match f64::try_from(value.clone()) {
        Ok(f) if f.is_nan() => "NaN".into(),
        Ok(f) if f.is_infinite() => if f > 0.0 { "Infinity" } else { "-Infinity" }.into(),
        Ok(f) => py_float_repr(f),
        Err(_) => value.to_string(),
    }
}

/// Python converts `int`, `float`, `bool` and `None` keys to strings; other keys are errors.
fn json_key(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
        ValueKind::Number => json_number(key),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.into(),
        ValueKind::None => "null".into(),
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: keys must be str, int, float, bool or None, not {other}"),
            ));
        }
    })
}

/// A JSON string as Python writes it: `"`, `\` and control characters escaped (`\n`, `\u001b`,
/// lowercase hex); with `ensure_ascii`, everything outside printable ASCII as `\uXXXX` (UTF-16
/// surrogate pairs above U+FFFF).
pub(crate) fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        for (f, want) in [
            (0.5, "0.5"),
            (2.0, "2.0"),
            (-3.25, "-3.25"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123456789012345.6, "123456789012345.6"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e100, "1e+100"),
            (-0.0, "-0.0"),
        ] {
            assert_eq!(py_float_repr(f), want, "{f}");
        }
    }

    #[test]
    fn str_and_repr() {
        let v = crate::chat::template::json_to_value(
            &serde_json::json!({"a": [1, "it's", null, true, 1.0], "b": "x"}),
        );
        assert_eq!(
            py_str(&v),
            r#"{'a': [1, "it's", None, True, 1.0], 'b': 'x'}"#
        );
        assert_eq!(py_str(&Value::from("plain")), "plain");
        assert_eq!(py_str(&Value::from(())), "None");
        assert_eq!(py_str(&Value::UNDEFINED), "");
        assert_eq!(py_repr(&Value::from("a\nb'\"")), r#"'a\nb\'"'"#);
    }
}
