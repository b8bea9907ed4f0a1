//! JSON text as GBNF: the primitive rules (values, strings, numbers, formats), literals for
//! `enum`/`const` values (JSON or Python style), and keys that avoid a given set of names.

use serde_json::Value as Json;

use super::json_schema::Style;

/// Optional whitespace between JSON tokens: nothing, a space, or a newline and indentation.
pub(crate) const WS: &str = "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}";
/// Named rules added to a schema's grammar on first use (`ws`'s body is [`WS`]).
pub(crate) const PRIMITIVES: &[(&str, &str)] = &[
    ("ws", ""),
    (
        "value",
        "object | array | string | number | \"true\" | \"false\" | \"null\"",
    ),
    (
        "object",
        "\"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"",
    ),
    (
        "array",
        "\"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"",
    ),
    ("string", "\"\\\"\" char* \"\\\"\""),
    (
        "char",
        "[^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )",
    ),
    (
        "number",
        "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?",
    ),
    ("integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )"),
    ("boolean", "\"true\" | \"false\""),
    ("null", "\"null\""),
    (
        "date",
        "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )",
    ),
    (
        "time",
        "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
    ),
    ("date-time", "date \"T\" time"),
    (
        "uuid",
        "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}",
    ),
    (
        "email",
        "[a-zA-Z0-9_+] [a-zA-Z0-9_+-]{0,15} ( \".\" [a-zA-Z0-9_+-]{1,16} ){0,2} \"@\" [a-z0-9] [a-z0-9]{0,15} ( \".\" [a-z] [a-z]{1,7} ){1,2}",
    ),
];

/// The primitive rules a primitive rule refers to.
pub(crate) fn deps(name: &str) -> &'static [&'static str] {
    match name {
        "value" => &["object", "array", "string", "number"],
        "object" | "array" => &["ws", "string", "value"],
        "string" => &["char"],
        "date-time" => &["date", "time"],
        _ => &[],
    }
}

/// A GBNF literal for `s`.
pub(crate) fn lit(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                o.push_str(&format!("\\x{:02X}", c as u32))
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The compact JSON text of `v`, or its Python literal.
pub(crate) fn value_text(v: &Json, style: Style) -> String {
    match (style, v) {
        (Style::Json, _) | (_, Json::String(_) | Json::Number(_)) => {
            serde_json::to_string(v).unwrap_or_default()
        }
        (Style::Python, Json::Bool(true)) => "True".into(),
        (Style::Python, Json::Bool(false)) => "False".into(),
        (Style::Python, Json::Null) => "None".into(),
        (Style::Python, Json::Array(a)) => {
            let items: Vec<String> = a.iter().map(|x| value_text(x, style)).collect();
            format!("[{}]", items.join(", "))
        }
        (Style::Python, Json::Object(m)) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, x)| {
                    format!(
                        "{}: {}",
                        serde_json::to_string(k).unwrap_or_default(),
                        value_text(x, style)
                    )
                })
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// A JSON string (without escapes) that is none of `keys`: a walk of the keys' prefix tree
/// where leaving the tree, or ending at a node that is not a key, is allowed.
pub(crate) fn other_key(keys: &[&str]) -> String {
    fn node(prefix: &str, keys: &[&str]) -> String {
        let plain = "[^\"\\\\\\x7F\\x00-\\x1F]";
        let is_key = keys.contains(&prefix);
        let mut nexts: Vec<char> = keys
            .iter()
            .filter_map(|k| k.strip_prefix(prefix).and_then(|r| r.chars().next()))
            .collect();
        nexts.sort_unstable();
        nexts.dedup();
        let mut alts = Vec::new();
        if !is_key {
            alts.push("\"\\\"\"".to_string());
        }
        for &c in &nexts {
            let mut p = prefix.to_string();
            p.push(c);
            alts.push(format!("{} {}", lit(&c.to_string()), node(&p, keys)));
        }
        let mut excl = String::from("[^\"\\\\\\x7F\\x00-\\x1F");
        for &c in &nexts {
            excl.push_str(&super::regex::class_text(&[(c as u32, c as u32)])[1..].replace(']', ""));
        }
        excl.push(']');
        alts.push(format!("{excl} {plain}* \"\\\"\""));
        format!("( {} )", alts.join(" | "))
    }
    format!("\"\\\"\" {}", node("", keys))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Grammar;

    #[test]
    fn other_key_excludes_declared_names() {
        let g = Grammar::parse(&format!("root ::= {}", other_key(&["ab", "a", "b c"]))).unwrap();
        for ok in ["\"x\"", "\"abc\"", "\"\"", "\"b\"", "\"b d\"", "\"aa\""] {
            assert!(g.accepts(ok), "{ok}");
        }
        for bad in ["\"a\"", "\"ab\"", "\"b c\""] {
            assert!(!g.accepts(bad), "{bad}");
        }
    }
}
