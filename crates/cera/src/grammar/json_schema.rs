//! JSON Schema → GBNF.
//!
//! Supported (every generated value validates; where the language is narrowed it is said so):
//! * `type` (one or a list), `enum`, `const`, boolean schemas (`true`; `false` is an error);
//! * objects: `properties` in declared order, `required` ones always present, optional ones
//!   skippable; `additionalProperties`: `false` or absent → no other keys (a subset of what
//!   absent allows), `true` or a schema → further keys (distinct from the declared ones,
//!   written without escapes) after the declared ones;
//! * arrays: `items`, `prefixItems` (and draft-7 `items: [...]` / `additionalItems`),
//!   `minItems`, `maxItems`;
//! * strings: `minLength`, `maxLength`, `format` (`date` (day ≤ 28 in February), `time`,
//!   `date-time`, `uuid`, `email`), `pattern` (see `regex.rs`; the output is one whole match);
//! * integers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (exact ranges);
//! * `$ref` to `#`, `#/$defs/...`, `#/definitions/...` (recursion allowed), `anyOf`, `oneOf`
//!   (as `anyOf`: keeping branches disjoint is the schema's job), `allOf` of object schemas
//!   (merged).
//!
//! Annotations (`title`, `description`, `default`, `examples`, `$schema`, `$id`, `$comment`,
//! ...) are ignored. Every other keyword is reported in [`CompiledSchema::unsupported`] with
//! its location; [`super::Grammar::from_json_schema`] turns them into an error.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value as Json};

use super::Grammar;
use super::int_range::int_range;
pub(crate) use super::json_text::lit;
use super::json_text::{PRIMITIVES, WS, deps, other_key, value_text};
use super::regex::pattern_to_gbnf;
use crate::error::{Error, Result};

/// A schema compiled to GBNF.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CompiledSchema {
    pub gbnf: String,
    pub grammar: Grammar,
    /// Keywords that were not enforced, as `keyword at /json/pointer`.
    pub unsupported: Vec<String>,
}

/// Compiles `schema`; keywords it cannot enforce are listed, not fatal.
pub fn compile(schema: &Json) -> Result<CompiledSchema> {
    let (gbnf, unsupported) = to_gbnf(schema)?;
    let grammar = Grammar::parse(&gbnf)
        .map_err(|e| Error::JsonSchema(format!("the schema's grammar is not usable: {e}")))?;
    Ok(CompiledSchema {
        gbnf,
        grammar,
        unsupported,
    })
}

/// The GBNF text for `schema` and the keywords it does not enforce.
pub fn to_gbnf(schema: &Json) -> Result<(String, Vec<String>)> {
    let (exprs, rules, unsupported) = schemas_to_gbnf(&[schema], Style::Json)?;
    Ok((format!("root ::= {}\n{rules}", exprs[0]), unsupported))
}

/// How values are written: JSON, or Python literals (`True`, `False`, `None`; objects as
/// dicts with double-quoted keys) for Pythonic tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Style {
    Json,
    Python,
}

/// Compiles several schemas into one rule set: an expression per schema, the rules they use
/// (one text, no `root`), and the unsupported keywords of all. In Python style each schema is
/// an object schema written as keyword arguments (tool parameters).
pub(crate) fn schemas_to_gbnf(
    schemas: &[&Json],
    style: Style,
) -> Result<(Vec<String>, String, Vec<String>)> {
    let Some(first) = schemas.first() else {
        return Ok((Vec::new(), String::new(), Vec::new()));
    };
    let mut c = Conv {
        root: first,
        scope: String::new(),
        style,
        rules: Vec::new(),
        used: HashSet::new(),
        refs: HashMap::new(),
        unsupported: BTreeSet::new(),
    };
    let mut exprs = Vec::new();
    for (i, s) in schemas.iter().enumerate() {
        c.root = s;
        c.scope = if schemas.len() > 1 {
            format!("{i}")
        } else {
            String::new()
        };
        let path = c.scope.clone();
        exprs.push(match style {
            Style::Json => c.visit(s, &path)?,
            Style::Python => c.kwargs(s, &path)?,
        });
    }
    let mut out = String::new();
    for (name, body) in &c.rules {
        out.push_str(&format!("{name} ::= {body}\n"));
    }
    Ok((exprs, out, c.unsupported.into_iter().collect()))
}

const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "id",
    "$comment",
    "readOnly",
    "writeOnly",
    "deprecated",
    "$defs",
    "definitions",
    "$anchor",
    "strict",
];

const KNOWN: &[&str] = &[
    "type",
    "enum",
    "const",
    "$ref",
    "anyOf",
    "oneOf",
    "allOf",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
];

/// A schema location for messages (`/` for the root).
fn loc(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

struct Conv<'a> {
    root: &'a Json,
    /// Prefix of `$ref` keys (several schemas in one rule set).
    scope: String,
    style: Style,
    rules: Vec<(String, String)>,
    used: HashSet<String>,
    /// `$ref` target → rule name.
    refs: HashMap<String, String>,
    unsupported: BTreeSet<String>,
}

impl<'a> Conv<'a> {
    fn prim(&mut self, name: &str) -> String {
        if !self.used.contains(name) {
            self.used.insert(name.to_string());
            if name == "ws" {
                self.rules
                    .push(("ws".into(), WS["ws ::= ".len()..].to_string()));
            } else if let Some((_, body)) = PRIMITIVES.iter().find(|(n, _)| *n == name) {
                let body = match (self.style, name) {
                    (Style::Python, "boolean") => "\"True\" | \"False\"",
                    (Style::Python, "null") => "\"None\"",
                    (Style::Python, "value") => {
                        "object | array | string | number | \"True\" | \"False\" | \"None\""
                    }
                    _ => body,
                };
                self.rules.push((name.to_string(), body.to_string()));
            }
            for d in deps(name) {
                self.prim(d);
            }
            if name == "object" || name == "array" {
                self.prim("ws");
            }
        }
        name.to_string()
    }

    fn rule(&mut self, hint: &str, body: String) -> String {
        let mut base: String = hint
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        base = base.trim_matches('-').to_string();
        if base.is_empty() {
            base = "r".into();
        }
        base = format!("s-{base}");
        let mut name = base.clone();
        let mut i = 1;
        while self.used.contains(&name) {
            i += 1;
            name = format!("{base}-{i}");
        }
        self.used.insert(name.clone());
        self.rules.push((name.clone(), body));
        name
    }

    fn report(&mut self, kw: &str, path: &str) {
        let at = if path.is_empty() { "/" } else { path };
        self.unsupported.insert(format!("{kw} at {at}"));
    }

    fn resolve(&self, r: &str) -> Result<&'a Json> {
        let Some(ptr) = r.strip_prefix('#') else {
            return Err(Error::JsonSchema(format!(
                "$ref {r:?}: only local references (#, #/$defs/..., #/definitions/...) are supported"
            )));
        };
        let mut cur = self.root;
        for part in ptr.split('/').skip(1) {
            let part = part.replace("~1", "/").replace("~0", "~");
            cur = match cur {
                Json::Object(m) => m.get(&part),
                Json::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            }
            .ok_or_else(|| Error::JsonSchema(format!("$ref {r:?} points to nothing")))?;
        }
        Ok(cur)
    }

    fn visit(&mut self, s: &Json, path: &str) -> Result<String> {
        let m = match s {
            Json::Bool(true) => return Ok(self.prim("value")),
            Json::Bool(false) => {
                return Err(Error::JsonSchema(format!(
                    "schema at {} is `false`: no value can match",
                    if path.is_empty() { "/" } else { path }
                )));
            }
            Json::Object(m) => m,
            _ => {
                return Err(Error::JsonSchema(format!(
                    "schema at {} must be an object or a boolean",
                    if path.is_empty() { "/" } else { path }
                )));
            }
        };
        for k in m.keys() {
            if !KNOWN.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()) {
                self.report(k, path);
            }
        }
        if let Some(r) = m.get("$ref") {
            let r = r.as_str().ok_or_else(|| {
                Error::JsonSchema(format!("$ref at {loc} must be a string", loc = loc(path)))
            })?;
            for k in m.keys() {
                if k != "$ref" && KNOWN.contains(&k.as_str()) {
                    self.report(&format!("{k} (next to $ref)"), path);
                }
            }
            let key = format!("{}{r}", self.scope);
            if let Some(name) = self.refs.get(&key) {
                return Ok(name.clone());
            }
            let name = self.rule(
                &format!("{}-{}", self.scope, r.trim_start_matches("#/")),
                String::new(),
            );
            self.refs.insert(key, name.clone());
            let target = self.resolve(r)?;
            let body = self.visit(target, r.trim_start_matches('#'))?;
            if let Some(slot) = self.rules.iter_mut().find(|(n, _)| *n == name) {
                slot.1 = body;
            }
            return Ok(name);
        }
        if let Some(c) = m.get("const") {
            return Ok(lit(&value_text(c, self.style)));
        }
        if let Some(e) = m.get("enum") {
            let Json::Array(vals) = e else {
                return Err(Error::JsonSchema(format!(
                    "enum at {loc} must be an array",
                    loc = loc(path)
                )));
            };
            if vals.is_empty() {
                return Err(Error::JsonSchema(format!(
                    "enum at {loc} is empty",
                    loc = loc(path)
                )));
            }
            let alts: Vec<String> = vals
                .iter()
                .map(|v| lit(&value_text(v, self.style)))
                .collect();
            return Ok(format!("({})", alts.join(" | ")));
        }
        for kw in ["anyOf", "oneOf"] {
            if let Some(v) = m.get(kw) {
                let Json::Array(subs) = v else {
                    return Err(Error::JsonSchema(format!(
                        "{kw} at {loc} must be an array",
                        loc = loc(path)
                    )));
                };
                for k in m.keys() {
                    if k != kw && KNOWN.contains(&k.as_str()) {
                        self.report(&format!("{k} (next to {kw})"), path);
                    }
                }
                let mut alts = Vec::new();
                for (i, sub) in subs.iter().enumerate() {
                    alts.push(self.visit(sub, &format!("{path}/{kw}/{i}"))?);
                }
                if alts.is_empty() {
                    return Err(Error::JsonSchema(format!(
                        "{kw} at {loc} is empty",
                        loc = loc(path)
                    )));
                }
                return Ok(format!("({})", alts.join(" | ")));
            }
        }
        if let Some(v) = m.get("allOf") {
            return self.all_of(m, v, path);
        }
        let types: Vec<String> = match m.get("type") {
            Some(Json::String(t)) => vec![t.clone()],
            Some(Json::Array(ts)) => ts
                .iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect(),
            Some(_) => {
                return Err(Error::JsonSchema(format!(
                    "type at {loc} must be a string or array",
                    loc = loc(path)
                )));
            }
            None => {
                if m.contains_key("properties") || m.contains_key("additionalProperties") {
                    vec!["object".into()]
                } else if m.contains_key("items") || m.contains_key("prefixItems") {
                    vec!["array".into()]
                } else if m.contains_key("minLength")
                    || m.contains_key("maxLength")
                    || m.contains_key("pattern")
                    || m.contains_key("format")
                {
                    vec!["string".into()]
                } else {
                    return Ok(self.prim("value"));
                }
            }
        };
        let mut alts = Vec::new();
        for t in &types {
            alts.push(self.typed(t, m, path)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or_default()
        } else {
            format!("({})", alts.join(" | "))
        })
    }

    fn all_of(&mut self, m: &Map<String, Json>, v: &Json, path: &str) -> Result<String> {
        let Json::Array(subs) = v else {
            return Err(Error::JsonSchema(format!(
                "allOf at {loc} must be an array",
                loc = loc(path)
            )));
        };
        let mut merged = Map::new();
        let mut props = Map::new();
        let mut required: Vec<Json> = Vec::new();
        let mut parts: Vec<&Json> = vec![];
        let own = Json::Object(
            m.iter()
                .filter(|(k, _)| *k != "allOf")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
        parts.push(&own);
        let resolved: Vec<Json> = subs
            .iter()
            .map(|s| match s.get("$ref").and_then(Json::as_str) {
                Some(r) => self.resolve(r).cloned(),
                None => Ok(s.clone()),
            })
            .collect::<Result<_>>()?;
        parts.extend(resolved.iter());
        for (i, p) in parts.iter().enumerate() {
            let Json::Object(pm) = p else { continue };
            for (k, val) in pm {
                match k.as_str() {
                    "properties" => {
                        if let Json::Object(ps) = val {
                            for (pk, pv) in ps {
                                props.insert(pk.clone(), pv.clone());
                            }
                        }
                    }
                    "required" => {
                        if let Json::Array(r) = val {
                            for x in r {
                                if !required.contains(x) {
                                    required.push(x.clone());
                                }
                            }
                        }
                    }
                    "type" if val == "object" => {}
                    "additionalProperties" => {
                        merged.insert(k.clone(), val.clone());
                    }
                    k if ANNOTATIONS.contains(&k) => {}
                    k => {
                        let at = if i == 0 {
                            path.to_string()
                        } else {
                            format!("{path}/allOf/{}", i - 1)
                        };
                        self.report(&format!("{k} (allOf merges only object schemas)"), &at);
                    }
                }
            }
        }
        merged.insert("type".into(), Json::String("object".into()));
        merged.insert("properties".into(), Json::Object(props));
        merged.insert("required".into(), Json::Array(required));
        let merged = Json::Object(merged);
        let mut c = Conv {
            root: self.root,
            scope: self.scope.clone(),
            style: self.style,
            rules: std::mem::take(&mut self.rules),
            used: std::mem::take(&mut self.used),
            refs: std::mem::take(&mut self.refs),
            unsupported: std::mem::take(&mut self.unsupported),
        };
        let e = c.visit(&merged, path);
        self.rules = c.rules;
        self.used = c.used;
        self.refs = c.refs;
        self.unsupported = c.unsupported;
        e
    }

    fn typed(&mut self, t: &str, m: &Map<String, Json>, path: &str) -> Result<String> {
        match t {
            "object" => self.object(m, path),
            "array" => self.array(m, path),
            "string" => self.string(m, path),
            "integer" => {
                let lo = bound(m, "minimum", "exclusiveMinimum", true, path)?;
                let hi = bound(m, "maximum", "exclusiveMaximum", false, path)?;
                if lo.is_none() && hi.is_none() {
                    return Ok(self.prim("integer"));
                }
                Ok(self.rule(&format!("{path}-int"), int_range(lo, hi)))
            }
            "number" => {
                for k in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] {
                    if m.contains_key(k) {
                        self.report(&format!("{k} (on a non-integer number)"), path);
                    }
                }
                Ok(self.prim("number"))
            }
            "boolean" => Ok(self.prim("boolean")),
            "null" => Ok(self.prim("null")),
            other => Err(Error::JsonSchema(format!(
                "unknown type {other:?} at {loc}",
                loc = loc(path)
            ))),
        }
    }

    fn object(&mut self, m: &Map<String, Json>, path: &str) -> Result<String> {
        let ws = self.prim("ws");
        let body = self.members(m, path, false)?;
        Ok(format!("\"{{\" {ws} {body} \"}}\""))
    }

    /// Keyword arguments `a=1, b="x"` (Python style) for an object schema's properties.
    pub(crate) fn kwargs(&mut self, schema: &Json, path: &str) -> Result<String> {
        match schema {
            Json::Object(m) => {
                if m.get("type").is_some_and(|t| t != "object") {
                    return Err(Error::JsonSchema(format!(
                        "tool parameters at {loc} must be an object schema",
                        loc = loc(path)
                    )));
                }
                self.members(m, path, true)
            }
            _ => Ok(String::new()),
        }
    }

    /// The members of an object (`kw`: as keyword arguments), without the braces.
    fn members(&mut self, m: &Map<String, Json>, path: &str, kw: bool) -> Result<String> {
        let ws = self.prim("ws");
        let empty = Map::new();
        let props = match m.get("properties") {
            Some(Json::Object(p)) => p,
            Some(_) => {
                return Err(Error::JsonSchema(format!(
                    "properties at {loc} must be an object",
                    loc = loc(path)
                )));
            }
            None => &empty,
        };
        let required: Vec<&str> = match m.get("required") {
            Some(Json::Array(r)) => r.iter().filter_map(Json::as_str).collect(),
            _ => Vec::new(),
        };
        for r in &required {
            if !props.contains_key(*r) {
                return Err(Error::JsonSchema(format!(
                    "required property {r:?} at {loc} has no schema in `properties`",
                    loc = loc(path)
                )));
            }
        }
        // one rule per property: "key" ws ":" ws value ws
        let mut kvs = Vec::new();
        for (k, v) in props {
            let val = self.visit(v, &format!("{path}/properties/{k}"))?;
            let body = if kw {
                format!("{} \"=\" {val}", lit(k))
            } else {
                format!(
                    "{} {ws} \":\" {ws} {val} {ws}",
                    lit(&serde_json::to_string(k).unwrap_or_default())
                )
            };
            kvs.push((
                self.rule(&format!("{path}-{k}-kv"), body),
                required.contains(&k.as_str()),
            ));
        }
        let extra = match m.get("additionalProperties") {
            _ if kw => None,
            None | Some(Json::Bool(false)) => None,
            Some(Json::Bool(true)) if props.is_empty() => Some(self.prim("value")),
            Some(v) => Some(self.visit(v, &format!("{path}/additionalProperties"))?),
        };
        let extra_kv = match extra {
            None => None,
            Some(val) => {
                let key = if props.is_empty() {
                    self.prim("string")
                } else {
                    let keys: Vec<&str> = props.keys().map(String::as_str).collect();
                    let k = other_key(&keys);
                    self.rule(&format!("{path}-other-key"), k)
                };
                Some(self.rule(
                    &format!("{path}-extra-kv"),
                    format!("{key} {ws} \":\" {ws} {val} {ws}"),
                ))
            }
        };
        // rest_i: the properties from i on, after at least one was written
        let sep = if kw {
            "\", \"".to_string()
        } else {
            format!("\",\" {ws}")
        };
        let n = kvs.len();
        let mut rest = vec![String::new(); n + 1];
        rest[n] = match &extra_kv {
            Some(e) => format!("( {sep} {e} )*"),
            None => String::new(),
        };
        for i in (0..n).rev() {
            let (kv, req) = &kvs[i];
            let item = if *req {
                format!("{sep} {kv}")
            } else {
                format!("( {sep} {kv} )?")
            };
            rest[i] = format!("{item} {}", rest[i + 1]).trim().to_string();
        }
        // first_i: the properties from i on, none written yet
        let mut first = match &extra_kv {
            Some(e) => format!("( {e} ( {sep} {e} )* )?"),
            None => String::new(),
        };
        for i in (0..n).rev() {
            let (kv, req) = &kvs[i];
            let tail = rest[i + 1].clone();
            let this = format!("{kv} {tail}").trim().to_string();
            first = if *req {
                this
            } else if first.is_empty() {
                format!("( {this} )?")
            } else {
                let prev = self.rule(&format!("{path}-from-{i}"), first);
                format!("( {this} | {prev} )")
            };
        }
        Ok(first)
    }

    fn array(&mut self, m: &Map<String, Json>, path: &str) -> Result<String> {
        let ws = self.prim("ws");
        let uint = |k: &str| -> Result<Option<u32>> {
            match m.get(k) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(|n| Some(n.min(10_000) as u32))
                    .ok_or_else(|| {
                        Error::JsonSchema(format!(
                            "{k} at {loc} must be a non-negative integer",
                            loc = loc(path)
                        ))
                    }),
            }
        };
        let min = uint("minItems")?.unwrap_or(0);
        let max = uint("maxItems")?;
        let (prefix, rest): (Vec<&Json>, Option<&Json>) =
            match (m.get("prefixItems"), m.get("items")) {
                (Some(Json::Array(p)), items) => (p.iter().collect(), items),
                (None, Some(Json::Array(p))) => (p.iter().collect(), m.get("additionalItems")),
                (None, items) => (Vec::new(), items),
                (Some(_), _) => {
                    return Err(Error::JsonSchema(format!(
                        "prefixItems at {loc} must be an array",
                        loc = loc(path)
                    )));
                }
            };
        let mut elems = Vec::new();
        let n_prefix = prefix.len().min(max.unwrap_or(u32::MAX) as usize);
        for (i, p) in prefix.iter().take(n_prefix).enumerate() {
            elems.push(self.visit(p, &format!("{path}/prefixItems/{i}"))?);
        }
        let item = match rest {
            Some(Json::Bool(false)) => None,
            None if !prefix.is_empty() => None,
            None => Some(self.prim("value")),
            Some(s) => Some(self.visit(s, &format!("{path}/items"))?),
        };
        if (n_prefix as u32) < min && item.is_none() {
            return Err(Error::JsonSchema(format!(
                "array at {loc}: minItems {min} but only {n_prefix} items are allowed",
                loc = loc(path)
            )));
        }
        let sep = format!("\",\" {ws}");
        let mut body = String::new();
        for (i, e) in elems.iter().enumerate() {
            if i > 0 {
                body.push_str(&format!(" {sep} "));
            }
            body.push_str(&format!("{e} {ws}"));
        }
        if let Some(item) = item {
            let have = n_prefix as u32;
            let need = min.saturating_sub(have);
            let more_max = max.map(|x| x.saturating_sub(have));
            if more_max != Some(0) {
                let item_rule = self.rule(&format!("{path}-item"), format!("{item} {ws}"));
                if have == 0 {
                    // item ( , item ){need-1, max-1}, optional when need == 0
                    let lo = need.saturating_sub(1);
                    let hi = more_max.map(|x| x - 1);
                    let rep = match hi {
                        Some(h) => format!("{{{lo},{h}}}"),
                        None => format!("{{{lo},}}"),
                    };
                    let seq = format!("{item_rule} ( {sep} {item_rule} ){rep}");
                    body = if need == 0 {
                        format!("( {seq} )?")
                    } else {
                        seq
                    };
                } else {
                    let rep = match more_max {
                        Some(h) => format!("{{{need},{h}}}"),
                        None => format!("{{{need},}}"),
                    };
                    body.push_str(&format!(" ( {sep} {item_rule} ){rep}"));
                }
            }
        }
        Ok(format!("\"[\" {ws} {body} \"]\""))
    }

    fn string(&mut self, m: &Map<String, Json>, path: &str) -> Result<String> {
        let q = "\"\\\"\"";
        if let Some(f) = m.get("format").and_then(Json::as_str) {
            if matches!(f, "date" | "time" | "date-time" | "uuid" | "email") {
                for k in ["minLength", "maxLength", "pattern"] {
                    if m.contains_key(k) {
                        self.report(&format!("{k} (next to format)"), path);
                    }
                }
                let r = self.prim(f);
                return Ok(format!("{q} {r} {q}"));
            }
            self.report(&format!("format {f:?}"), path);
        }
        if let Some(p) = m.get("pattern") {
            let p = p.as_str().ok_or_else(|| {
                Error::JsonSchema(format!(
                    "pattern at {loc} must be a string",
                    loc = loc(path)
                ))
            })?;
            for k in ["minLength", "maxLength"] {
                if m.contains_key(k) {
                    self.report(&format!("{k} (next to pattern)"), path);
                }
            }
            let e = pattern_to_gbnf(p)?;
            let r = self.rule(&format!("{path}-pattern"), e);
            return Ok(format!("{q} {r} {q}"));
        }
        let min = m.get("minLength").and_then(Json::as_u64);
        let max = m.get("maxLength").and_then(Json::as_u64);
        if min.is_none() && max.is_none() {
            return Ok(self.prim("string"));
        }
        let ch = self.prim("char");
        let min = min.unwrap_or(0).min(10_000);
        let rep = match max {
            Some(x) => {
                let x = x.min(10_000);
                if x < min {
                    return Err(Error::JsonSchema(format!(
                        "maxLength below minLength at {loc}",
                        loc = loc(path)
                    )));
                }
                format!("{{{min},{x}}}")
            }
            None => format!("{{{min},}}"),
        };
        Ok(format!("{q} {ch}{rep} {q}"))
    }
}

/// An inclusive integer bound from `minimum`/`exclusiveMinimum` (or the maximum pair),
/// accepting draft-4 boolean exclusives.
fn bound(
    m: &Map<String, Json>,
    inc: &str,
    exc: &str,
    lower: bool,
    path: &str,
) -> Result<Option<i64>> {
    let num = |v: &Json, k: &str| {
        v.as_f64().ok_or_else(|| {
            Error::JsonSchema(format!("{k} at {loc} must be a number", loc = loc(path)))
        })
    };
    let mut out: Option<i64> = None;
    let mut tighten = |b: i64| {
        out = Some(match out {
            None => b,
            Some(o) if lower => o.max(b),
            Some(o) => o.min(b),
        })
    };
    let draft4_exclusive = m.get(exc).and_then(Json::as_bool).unwrap_or(false);
    if let Some(v) = m.get(inc) {
        let x = num(v, inc)?;
        let b = if lower { x.ceil() } else { x.floor() } as i64;
        let exact = x.fract() == 0.0;
        tighten(if draft4_exclusive && exact {
            if lower { b + 1 } else { b - 1 }
        } else {
            b
        });
    }
    if let Some(v) = m.get(exc)
        && !v.is_boolean()
    {
        let x = num(v, exc)?;
        let b = if lower {
            x.floor() as i64 + 1
        } else {
            x.ceil() as i64 - 1
        };
        tighten(b);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unsupported_keywords_are_listed() {
        let c = compile(&json!({"type": "object", "properties": {"a": {"type": "string", "minProperties": 1}}, "patternProperties": {}})).unwrap();
        assert_eq!(
            c.unsupported,
            vec!["minProperties at /properties/a", "patternProperties at /"]
        );
        assert!(Grammar::from_json_schema(&json!({"type": "array", "uniqueItems": true})).is_err());
    }

    #[test]
    fn required_and_optional_properties() {
        let g = Grammar::from_json_schema(&json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
            "required": ["b"]
        }))
        .unwrap();
        for ok in [
            r#"{"b":"x"}"#,
            r#"{"a":1,"b":"x"}"#,
            r#"{"b":"x", "c":true}"#,
            r#"{ "a": -3, "b": "", "c": false }"#,
        ] {
            assert!(g.accepts(ok), "{ok}");
        }
        for bad in [
            r#"{}"#,
            r#"{"a":1}"#,
            r#"{"b":"x","a":1}"#,
            r#"{"b":"x",}"#,
            r#"{"b":"x","d":1}"#,
        ] {
            assert!(!g.accepts(bad), "{bad}");
        }
    }
}
