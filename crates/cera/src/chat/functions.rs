//! Filters, tests, functions and Python methods that chat templates expect, with the behaviour
//! of Python jinja2 as Hugging Face transformers configures it.

use std::sync::{Arc, Mutex};

use minijinja::value::{
    Enumerator, Kwargs, Object, ObjectRepr, Rest, Value, ValueKind, ValueOrKwargs, from_args,
};
use minijinja::{Environment, Error, ErrorKind, State};

use super::methods::{self, strip};
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
    env.set_unknown_method_callback(methods::call_method);

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
    // minijinja builtins that Python jinja2 lacks: a template using them fails there.
    for name in ["split", "lines", "bool", "chain", "zip"] {
        env.remove_filter(name);
    }
    for name in ["safe", "startingwith", "endingwith", "int"] {
        env.remove_test(name);
    }
    env.remove_global("debug");

    env.add_function(rewrite::PERCENT_FUNCTION, |fmt: String, rhs: Value| {
        let args: Vec<Value> = if rhs.is_tuple() {
            rhs.try_iter()?.collect()
        } else {
            vec![rhs]
        };
        percent_format(&fmt, &args)
    });
    env.add_filter("format", |value: &Value, args: Rest<Value>| {
        percent_format(&py_str(value), &args)
    });
    env.add_filter("escape", escape);
    env.add_filter("e", escape);
    env.add_filter("center", center);
    env.add_filter("wordcount", |v: &Value| {
        py_str(v)
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .count()
    });
    env.add_filter("truncate", truncate);
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
    env.add_test("sequence", |v: &Value| match v.kind() {
        ValueKind::String
        | ValueKind::Seq
        | ValueKind::Map
        | ValueKind::Bytes
        | ValueKind::Undefined => true,
        // `range()` and lazy slices have a length; generators do not
        ValueKind::Iterable => v.len().is_some() && v.downcast_object_ref::<Generator>().is_none(),
        _ => false,
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
            out.push_str(&html_escape(s));
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

/// Python's `fmt % args`: containers and `None` format through `str()`.
fn percent_format(fmt: &str, args: &[Value]) -> Result<String, Error> {
    let args: Vec<Value> = args
        .iter()
        .map(|v| match v.kind() {
            ValueKind::String | ValueKind::Number | ValueKind::Bool | ValueKind::Map => v.clone(),
            _ => Value::from(py_str(v)),
        })
        .collect();
    minijinja::formatting::format(minijinja::formatting::FormatStyle::Printf, fmt, &args)
}

/// markupsafe's `escape`: `&<>'"` as HTML entities (`&#39;`, `&#34;`); safe strings pass.
fn escape(value: &Value) -> Value {
    if value.is_safe() {
        return value.clone();
    }
    Value::from_safe_string(html_escape(&py_str(value)))
}

pub(crate) fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
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
    out
}

/// jinja2's `center(value, width=80)`: Python's `str.center`.
fn center(value: &Value, width: Option<usize>) -> String {
    let s = py_str(value);
    let width = width.unwrap_or(80);
    let len = s.chars().count();
    if width <= len {
        return s;
    }
    let marg = width - len;
    let left = marg / 2 + (marg & width & 1);
    format!("{}{s}{}", " ".repeat(left), " ".repeat(marg - left))
}

/// jinja2's `truncate(s, length=255, killwords=False, end='...', leeway=5)`.
fn truncate(value: &Value, args: Rest<ValueOrKwargs>) -> Result<String, Error> {
    let args = args.into_values();
    let (length, killwords, end, leeway, kwargs): (
        Option<usize>,
        Option<bool>,
        Option<String>,
        Option<usize>,
        Kwargs,
    ) = from_args(&args)?;
    let length = length.or(kwargs.get("length")?).unwrap_or(255);
    let killwords = killwords.or(kwargs.get("killwords")?).unwrap_or(false);
    let end = end.or(kwargs.get("end")?).unwrap_or_else(|| "...".into());
    let leeway = leeway.or(kwargs.get("leeway")?).unwrap_or(5);
    kwargs.assert_all_used()?;
    let s = py_str(value);
    let chars: Vec<char> = s.chars().collect();
    let end_len = end.chars().count();
    if length < end_len {
        return Err(invalid(
            "truncate: length must be at least the length of end",
        ));
    }
    if chars.len() <= length + leeway {
        return Ok(s);
    }
    let head: String = chars[..length - end_len].iter().collect();
    if killwords {
        return Ok(head + &end);
    }
    let head = match head.rsplit_once(' ') {
        Some((h, _)) => h.to_owned(),
        None => head,
    };
    Ok(head + &end)
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
    let lines = methods::splitlines(&s);
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
