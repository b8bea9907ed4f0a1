//! Filters, tests, functions and Python methods that chat templates expect, with the behaviour
//! of Python jinja2 as Hugging Face transformers configures it.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{
    Enumerator, Kwargs, Object, ObjectRepr, Rest, Value, ValueKind, ValueOrKwargs, from_args,
};
use minijinja::{Environment, Error, ErrorKind, State};

use super::pyfmt::{JsonOptions, json_dumps, py_str};
use super::rewrite;

/// The error `raise_exception(message)` produces; found again in the error's source chain to
/// tell a template's deliberate refusal from a failure.
#[derive(Debug)]
pub(crate) struct Raised(pub String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// Registers everything on `env`.
pub(crate) fn install(env: &mut Environment<'static>) {
    env.set_formatter(|out, _state, value| {
        out.write_str(&py_str(value))
            .map_err(|_| Error::from(ErrorKind::WriteFailure))
    });
    env.set_unknown_method_callback(call_method);

    env.add_function("raise_exception", raise_exception);

    env.add_filter("tojson", tojson);
    env.add_filter("string", |v: &Value| py_str(v));
    env.add_filter(
        "trim",
        |v: &Value, chars: Option<Value>| -> Result<String, Error> {
            let s = py_str(v);
            Ok(strip(&s, chars.as_ref(), true, true)?.to_owned())
        },
    );
    env.add_filter("join", join);
    env.add_filter("indent", indent);
    env.add_filter("default", default);
    env.add_filter("d", default);
    env.add_filter("int", int);
    env.add_filter("float", float);
    env.add_filter(rewrite::ITERABLE_FILTER, iterable);
    env.add_filter(rewrite::MARKUP_FILTER, |v: &Value| {
        Value::from_object(Markup(py_str(v)))
    });
    env.add_function(rewrite::MARKUP_ADD_FUNCTION, markup_add);
    // jinja2's select/reject/map/unique are generators: always true, not JSON serializable.
    env.add_filter(
        "map",
        |state: &mut State, v: Value, args: Rest<ValueOrKwargs>| -> Result<Value, Error> {
            Ok(generator(minijinja::filters::map(state, v, args)?))
        },
    );
    env.add_filter(
        "select",
        |state: &mut State, v: Value, test: Option<String>, args: Rest<ValueOrKwargs>| {
            Ok::<_, Error>(generator(minijinja::filters::select(
                state,
                v,
                test.map(Into::into),
                args,
            )?))
        },
    );
    env.add_filter(
        "reject",
        |state: &mut State, v: Value, test: Option<String>, args: Rest<ValueOrKwargs>| {
            Ok::<_, Error>(generator(minijinja::filters::reject(
                state,
                v,
                test.map(Into::into),
                args,
            )?))
        },
    );
    env.add_filter(
        "selectattr",
        |state: &mut State,
         v: Value,
         attr: String,
         test: Option<String>,
         args: Rest<ValueOrKwargs>| {
            Ok::<_, Error>(generator(minijinja::filters::selectattr(
                state,
                v,
                attr.into(),
                test.map(Into::into),
                args,
            )?))
        },
    );
    env.add_filter(
        "rejectattr",
        |state: &mut State,
         v: Value,
         attr: String,
         test: Option<String>,
         args: Rest<ValueOrKwargs>| {
            Ok::<_, Error>(generator(minijinja::filters::rejectattr(
                state,
                v,
                attr.into(),
                test.map(Into::into),
                args,
            )?))
        },
    );

    // Python's type tests: `str` is a sequence, `bool` is a number, and so on.
    env.add_test("string", |v: &Value| v.kind() == ValueKind::String);
    env.add_test("number", |v: &Value| {
        matches!(v.kind(), ValueKind::Number | ValueKind::Bool)
    });
    env.add_test("integer", |v: &Value| {
        v.kind() == ValueKind::Number && v.is_integer()
    });
    env.add_test("float", |v: &Value| {
        v.kind() == ValueKind::Number && !v.is_integer()
    });
    env.add_test("sequence", |v: &Value| {
        matches!(
            v.kind(),
            ValueKind::String
                | ValueKind::Seq
                | ValueKind::Map
                | ValueKind::Bytes
                | ValueKind::Undefined
        )
    });
    env.add_test("iterable", |v: &Value| {
        matches!(
            v.kind(),
            ValueKind::String
                | ValueKind::Seq
                | ValueKind::Map
                | ValueKind::Bytes
                | ValueKind::Iterable
                | ValueKind::Undefined
        )
    });
}

/// A `for` loop's iterable, checked as Python's `iter()` checks it (`None` and numbers fail).
fn iterable(v: Value) -> Result<Value, Error> {
    match v.kind() {
        ValueKind::None => Err(invalid("'NoneType' object is not iterable")),
        ValueKind::Bool | ValueKind::Number => {
            Err(invalid(format!("'{}' object is not iterable", v.kind())))
        }
        _ => Ok(v),
    }
}

/// A `|safe` string about to meet `+`: prints as its text and refuses arithmetic (Python would
/// HTML-escape the other operand).
#[derive(Debug)]
struct Markup(String);

impl Object for Markup {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `a + b + ...` where `a` is a `Markup` (`|safe`) string: Python's `Markup.__add__` appends
/// safe strings as they are and HTML-escapes other strings; anything else is a `TypeError`.
fn markup_add(args: Rest<Value>) -> Result<Value, Error> {
    let mut out = String::new();
    for (i, v) in args.iter().enumerate() {
        let Some(s) = v.as_str() else {
            return Err(invalid(format!(
                "unsupported operand type(s) for +: 'Markup' and '{}'",
                v.kind()
            )));
        };
        if i == 0 || v.is_safe() {
            out.push_str(s);
        } else {
            for c in s.chars() {
                match c {
                    '&' => out.push_str("&amp;"),
                    '<' => out.push_str("&lt;"),
                    '>' => out.push_str("&gt;"),
                    '\'' => out.push_str("&#39;"),
                    '"' => out.push_str("&#34;"),
                    c => out.push(c),
                }
            }
        }
    }
    Ok(Value::from_safe_string(out))
}

/// A Python generator: iterates once, is always true, has no length and is not JSON.
#[derive(Debug)]
pub(crate) struct Generator(Mutex<Option<Vec<Value>>>);

impl Object for Generator {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let items = self.0.lock().map(|mut g| g.take()).unwrap_or_default();
        Enumerator::Iter(Box::new(items.unwrap_or_default().into_iter()))
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        None
    }

    fn is_true(self: &Arc<Self>) -> bool {
        true
    }
}

fn generator(items: Vec<Value>) -> Value {
    Value::from_object(Generator(Mutex::new(Some(items))))
}

/// jinja2's `default(value, default_value='', boolean=False)`.
fn default(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (dflt, boolean, kwargs): (Option<Value>, Option<bool>, Kwargs) = from_args(&args)?;
    let dflt = match dflt {
        Some(d) => Some(d),
        None => kwargs.get("default_value")?,
    };
    let boolean = boolean.or(kwargs.get("boolean")?).unwrap_or(false);
    kwargs.assert_all_used()?;
    if value.is_undefined() || (boolean && !value.is_true()) {
        Ok(dflt.unwrap_or_else(|| Value::from("")))
    } else {
        Ok(value.clone())
    }
}

/// jinja2's `int(value, default=0, base=10)`: strings parse as integers, then as floats;
/// whatever does not convert gives `default`.
fn int(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (dflt, base, kwargs): (Option<Value>, Option<u32>, Kwargs) = from_args(&args)?;
    let dflt = dflt.or(kwargs.get("default")?).unwrap_or(Value::from(0));
    let base = base.or(kwargs.get("base")?).unwrap_or(10);
    kwargs.assert_all_used()?;
    let converted = match value.kind() {
        ValueKind::Bool => Some(Value::from(i64::from(value.is_true()))),
        ValueKind::Number if value.is_integer() => Some(value.clone()),
        ValueKind::Number => f64::try_from(value.clone())
            .ok()
            .filter(|f| f.is_finite())
            .map(|f| Value::from(f.trunc() as i128)),
        ValueKind::String => {
            let s = strip(value.as_str().unwrap_or_default(), None, true, true)?.replace('_', "");
            if (2..=36).contains(&base) {
                i128::from_str_radix(&s, base).ok().map(Value::from)
            } else {
                None
            }
            .or_else(|| {
                s.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite() && base == 10)
                    .map(|f| Value::from(f.trunc() as i128))
            })
        }
        _ => None,
    };
    Ok(converted.unwrap_or(dflt))
}

/// jinja2's `float(value, default=0.0)`.
fn float(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (dflt, kwargs): (Option<Value>, Kwargs) = from_args(&args)?;
    let dflt = dflt.or(kwargs.get("default")?).unwrap_or(Value::from(0.0));
    kwargs.assert_all_used()?;
    let converted = match value.kind() {
        ValueKind::Bool => Some(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => f64::try_from(value.clone()).ok(),
        ValueKind::String => {
            let s = strip(value.as_str().unwrap_or_default(), None, true, true)?;
            match s.to_ascii_lowercase().as_str() {
                "inf" | "+inf" | "infinity" | "+infinity" => Some(f64::INFINITY),
                "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
                "nan" | "+nan" | "-nan" => Some(f64::NAN),
                _ => s.replace('_', "").parse::<f64>().ok(),
            }
        }
        _ => None,
    };
    Ok(converted.map(Value::from).unwrap_or(dflt))
}

fn raise_exception(message: Value) -> Result<Value, Error> {
    let message = py_str(&message);
    Err(invalid(message.clone()).with_source(Raised(message)))
}

/// The `strftime_now(format)` function for one render: Python's `datetime.strftime` of `now`
/// (taken as UTC).
pub(crate) fn strftime_now(now: SystemTime) -> Value {
    let secs = match now.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let now = Arc::new(CivilTime::from_unix(secs));
    Value::from_function(move |format: String| -> String { now.strftime(&format) })
}

/// `tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`: Python's
/// `json.dumps` with those arguments, as transformers defines the filter.
fn tojson(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (pos, kwargs): (&[Value], Kwargs) = from_args(&args)?;
    if pos.len() > 4 {
        return Err(Error::from(ErrorKind::TooManyArguments));
    }
    let arg = |i: usize, name: &str| -> Result<Option<Value>, Error> {
        match (pos.get(i), kwargs.get::<Option<Value>>(name)?) {
            (Some(_), Some(_)) => Err(invalid(format!(
                "tojson: got multiple values for argument '{name}'"
            ))),
            (Some(v), None) => Ok(Some(v.clone())),
            (None, v) => Ok(v),
        }
    };
    let mut opts = JsonOptions {
        ensure_ascii: arg(0, "ensure_ascii")?.is_some_and(|v| v.is_true()),
        ..JsonOptions::default()
    };
    opts.indent = match arg(1, "indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.kind() {
            ValueKind::String => v.as_str().unwrap_or_default().to_owned(),
            ValueKind::Bool => if v.is_true() { " " } else { "" }.to_owned(),
            ValueKind::Number if v.is_integer() => {
                " ".repeat(v.as_i64().unwrap_or(0).clamp(0, 1024) as usize)
            }
            _ => return Err(invalid(format!("tojson: bad indent {}", py_str(&v)))),
        }),
    };
    if opts.indent.is_some() {
        opts.item_separator = ",".into();
    }
    if let Some(seps) = arg(2, "separators")?.filter(|v| !v.is_none()) {
        let parts: Vec<Value> = seps.try_iter()?.collect();
        match parts.as_slice() {
            [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                opts.item_separator = a.as_str().unwrap_or_default().to_owned();
                opts.key_separator = b.as_str().unwrap_or_default().to_owned();
            }
            _ => return Err(invalid("tojson: separators must be two strings")),
        }
    }
    opts.sort_keys = arg(3, "sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    json_dumps(value, &opts).map(Value::from)
}

/// jinja2's `join(value, d='', attribute=None)`: `str()` of each item.
fn join(value: &Value, args: Rest<ValueOrKwargs>) -> Result<String, Error> {
    let args = args.into_values();
    let (sep, kwargs): (Option<Value>, Kwargs) = from_args(&args)?;
    let attribute: Option<Value> = kwargs.get("attribute")?;
    kwargs.assert_all_used()?;
    let sep = sep.map(|s| py_str(&s)).unwrap_or_default();
    if value.is_undefined() {
        return Ok(String::new());
    }
    let mut parts = Vec::new();
    for item in value.try_iter()? {
        let item = match &attribute {
            Some(attr) => match attr.as_str() {
                Some(path) => get_path(&item, path)?,
                None => item.get_item(attr)?,
            },
            None => item,
        };
        parts.push(py_str(&item));
    }
    Ok(parts.join(&sep))
}

/// jinja2's attribute getter for `attribute=` arguments: dotted parts, digits as indices.
fn get_path(value: &Value, path: &str) -> Result<Value, Error> {
    let mut v = value.clone();
    for part in path.split('.') {
        v = match part.parse::<i64>() {
            Ok(i) => v.get_item(&Value::from(i))?,
            Err(_) => v.get_attr(part)?,
        };
    }
    Ok(v)
}

/// jinja2's `indent(s, width=4, first=False, blank=False)`.
fn indent(value: &Value, args: Rest<ValueOrKwargs>) -> Result<String, Error> {
    let args = args.into_values();
    let (width, first, blank, kwargs): (Option<Value>, Option<bool>, Option<bool>, Kwargs) =
        from_args(&args)?;
    let width = match (width, kwargs.get::<Option<Value>>("width")?) {
        (Some(w), None) | (None, Some(w)) => w,
        (None, None) => Value::from(4),
        (Some(_), Some(_)) => return Err(invalid("indent: width given twice")),
    };
    let first = first.or(kwargs.get("first")?).unwrap_or(false);
    let blank = blank.or(kwargs.get("blank")?).unwrap_or(false);
    kwargs.assert_all_used()?;
    let pad = match width.as_str() {
        Some(s) => s.to_owned(),
        None => " ".repeat(usize::try_from(width.as_i64().unwrap_or(0)).unwrap_or(0)),
    };
    let mut s = py_str(value);
    s.push('\n');
    let lines = splitlines(&s);
    let mut rv = String::new();
    if blank {
        rv = lines.join(&format!("\n{pad}"));
    } else if let Some((head, rest)) = lines.split_first() {
        rv.push_str(head);
        for line in rest {
            rv.push('\n');
            if !line.is_empty() {
                rv.push_str(&pad);
            }
            rv.push_str(line);
        }
    }
    if first {
        rv.insert_str(0, &pad);
    }
    Ok(rv)
}

/// Python's `str.isspace` for one character (Unicode whitespace plus the separators
/// U+001C..U+001F).
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip/lstrip/rstrip(chars=None)`.
fn strip<'a>(s: &'a str, chars: Option<&Value>, left: bool, right: bool) -> Result<&'a str, Error> {
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
fn splitlines(s: &str) -> Vec<&str> {
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
fn call_method(
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

/// A UTC calendar date and time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CivilTime {
    pub year: i64,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Monday .. 6 = Sunday
    pub weekday: u32,
    /// 1..=366
    pub yday: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

impl CivilTime {
    /// The UTC date and time `secs` seconds after 1970-01-01T00:00:00.
    pub fn from_unix(secs: i64) -> CivilTime {
        let days = secs.div_euclid(86_400);
        let tod = secs.rem_euclid(86_400) as u32;
        // Count 400-year eras from 0000-03-01 so that the leap day ends each cycle year.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097); // day of era, 0..146096
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..399
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of March-based year
        let mp = (5 * doy + 2) / 153; // March = 0
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let yday = cum[month as usize - 1] + day + u32::from(month > 2 && is_leap(year));
        CivilTime {
            year,
            month,
            day,
            hour: tod / 3600,
            minute: tod / 60 % 60,
            second: tod % 60,
            // 1970-01-01 was a Thursday (3).
            weekday: (days + 3).rem_euclid(7) as u32,
            yday,
        }
    }

    /// C/Python `strftime` in the C locale. Supports the common conversions and glibc's `-`
    /// (no padding), `_` (space padding) and `0` flags; `%z`/`%Z` are empty (the time is
    /// naive, as `datetime.now()` is). Unknown conversions are copied through.
    pub fn strftime(&self, format: &str) -> String {
        let mut out = String::new();
        let mut chars = format.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let flag = match chars.peek() {
                Some(&f @ ('-' | '_' | '0')) => {
                    chars.next();
                    Some(f)
                }
                _ => None,
            };
            let Some(conv) = chars.next() else {
                out.push('%');
                if let Some(f) = flag {
                    out.push(f);
                }
                break;
            };
            let num = |n: i64, width: usize, default_pad: char| -> String {
                match flag.unwrap_or(default_pad) {
                    '-' => n.to_string(),
                    '_' => format!("{n:>width$}"),
                    _ => format!("{n:0width$}"),
                }
            };
            let hour12 = match self.hour % 12 {
                0 => 12,
                h => h,
            };
            let s = match conv {
                'a' => WEEKDAYS[self.weekday as usize][..3].to_owned(),
                'A' => WEEKDAYS[self.weekday as usize].to_owned(),
                'b' | 'h' => MONTHS[self.month as usize - 1][..3].to_owned(),
                'B' => MONTHS[self.month as usize - 1].to_owned(),
                'c' => self.strftime("%a %b %e %H:%M:%S %Y"),
                'C' => num(self.year.div_euclid(100), 2, '0'),
                'd' => num(self.day.into(), 2, '0'),
                'D' | 'x' => self.strftime("%m/%d/%y"),
                'e' => num(self.day.into(), 2, '_'),
                'F' => self.strftime("%Y-%m-%d"),
                'H' => num(self.hour.into(), 2, '0'),
                'I' => num(hour12.into(), 2, '0'),
                'j' => num(self.yday.into(), 3, '0'),
                'k' => num(self.hour.into(), 2, '_'),
                'l' => num(hour12.into(), 2, '_'),
                'm' => num(self.month.into(), 2, '0'),
                'M' => num(self.minute.into(), 2, '0'),
                'n' => "\n".to_owned(),
                'p' => if self.hour < 12 { "AM" } else { "PM" }.to_owned(),
                'P' => if self.hour < 12 { "am" } else { "pm" }.to_owned(),
                'r' => self.strftime("%I:%M:%S %p"),
                'R' => self.strftime("%H:%M"),
                'S' => num(self.second.into(), 2, '0'),
                't' => "\t".to_owned(),
                'T' | 'X' => self.strftime("%H:%M:%S"),
                'u' => (self.weekday + 1).to_string(),
                'w' => ((self.weekday + 1) % 7).to_string(),
                'y' => num(self.year.rem_euclid(100), 2, '0'),
                'Y' => self.year.to_string(),
                'z' | 'Z' => String::new(),
                '%' => "%".to_owned(),
                other => {
                    let mut s = String::from('%');
                    if let Some(f) = flag {
                        s.push(f);
                    }
                    s.push(other);
                    s
                }
            };
            out.push_str(&s);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_time() {
        // 2025-03-14T09:26:53Z, a Friday, day 73.
        let t = CivilTime::from_unix(1_741_944_413);
        assert_eq!(
            (
                t.year, t.month, t.day, t.hour, t.minute, t.second, t.weekday, t.yday
            ),
            (2025, 3, 14, 9, 26, 53, 4, 73)
        );
        assert_eq!(t.strftime("%d %b %Y"), "14 Mar 2025");
        assert_eq!(t.strftime("%B %d, %Y"), "March 14, 2025");
        assert_eq!(t.strftime("%Y-%m-%d %H:%M:%S"), "2025-03-14 09:26:53");
        assert_eq!(
            t.strftime("%A %-d %e %j %I%p %%"),
            "Friday 14 14 073 09AM %"
        );
        assert_eq!(t.strftime("%c"), "Fri Mar 14 09:26:53 2025");
        let leap = CivilTime::from_unix(951_782_400); // 2000-02-29
        assert_eq!(
            (leap.year, leap.month, leap.day, leap.yday),
            (2000, 2, 29, 60)
        );
        let end = CivilTime::from_unix(1_704_067_199); // 2023-12-31T23:59:59
        assert_eq!(
            (end.year, end.month, end.day, end.yday, end.weekday),
            (2023, 12, 31, 365, 6)
        );
        let before = CivilTime::from_unix(-1); // 1969-12-31T23:59:59, a Wednesday
        assert_eq!(
            (before.year, before.month, before.day, before.weekday),
            (1969, 12, 31, 2)
        );
    }

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
