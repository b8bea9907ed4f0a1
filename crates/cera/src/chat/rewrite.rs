//! Source rewrites that give minijinja Python jinja2's behaviour where its own differs and no
//! hook exists:
//!
//! * transformers' `{% generation %}...{% endgeneration %}` tag (it marks assistant text for
//!   token masks and otherwise renders its body) becomes `{% if true %}...{% endif %}`;
//! * `{% for x in EXPR %}` becomes `{% for x in (EXPR)|cera_iterable %}`, because Python fails
//!   to iterate `None` (`tools` is `None` when no tools are given) where minijinja iterates
//!   nothing;
//! * `X|safe + Y`: Python's `Markup.__add__` HTML-escapes `Y`; minijinja has no such operator
//!   hook. A `{{ }}` whose whole expression is such a `+` chain becomes a call of
//!   `cera_markup_add`, which concatenates as `Markup` does; elsewhere `safe` before `+` becomes
//!   `cera_markup`, whose value refuses `+` with an error naming the missing feature.
//! * `'literal' % args` (printf-style formatting; minijinja's `%` is only arithmetic) becomes
//!   `cera_percent('literal', args)`.
//!
//! The scan knows Jinja's delimiters, string literals, comments and `{% raw %}` blocks, so text
//! that only looks like a tag is left alone.

/// The filter that checks a `for` loop's iterable.
pub(crate) const ITERABLE_FILTER: &str = "cera_iterable";
/// The filter that replaces `safe` before a `+`.
pub(crate) const MARKUP_FILTER: &str = "cera_markup";
/// The function that applies Python's `str % args` to a string literal.
pub(crate) const PERCENT_FUNCTION: &str = "cera_percent";
/// The function that concatenates a `+` chain that starts with a `|safe` string.
pub(crate) const MARKUP_ADD_FUNCTION: &str = "cera_markup_add";

/// Rewrites a template source (see the module docs).
pub(crate) fn rewrite(source: &str) -> String {
    let mut out = String::with_capacity(source.len() + 64);
    let mut rest = source;
    loop {
        let Some(pos) = find_open(rest) else {
            out.push_str(rest);
            break;
        };
        out.push_str(&rest[..pos]);
        let tag = &rest[pos..];
        let kind = &tag[..2];
        if kind == "{#" {
            let end = tag.find("#}").map_or(tag.len(), |e| e + 2);
            out.push_str(&tag[..end]);
            rest = &tag[end..];
            continue;
        }
        let close = if kind == "{{" { "}}" } else { "%}" };
        let Some(end) = find_close(tag, close) else {
            // unterminated: leave it for the parser to report
            out.push_str(tag);
            break;
        };
        let inner = &tag[2..end];
        rest = &tag[end + 2..];
        let inner_owned = rewrite_percent(inner);
        let inner = inner_owned.as_str();
        if kind == "{{" {
            out.push_str("{{");
            match rewrite_markup_chain(inner) {
                Some(call) => out.push_str(&call),
                None => out.push_str(&rewrite_markup_concat(inner)),
            }
            out.push_str("}}");
            continue;
        }
        let (open_mark, body, close_mark) = split_marks(inner);
        let word_end = body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len());
        let keyword = &body[..word_end];
        match keyword {
            "raw" => {
                out.push_str(&tag[..end + 2]);
                // Python jinja2 keeps the newline right after `{% raw %}`; minijinja's
                // trim_blocks would eat it, so it gets one more to eat.
                if close_mark.is_empty() {
                    if rest.starts_with("\r\n") {
                        out.push_str("\r\n");
                    } else if rest.starts_with('\n') {
                        out.push('\n');
                    }
                }
                let stop = find_endraw(rest);
                out.push_str(&rest[..stop]);
                rest = &rest[stop..];
            }
            "generation" | "endgeneration" if body[word_end..].trim().is_empty() => {
                let repl = if keyword == "generation" {
                    " if true "
                } else {
                    " endif "
                };
                out.push_str("{%");
                out.push_str(open_mark);
                out.push_str(repl);
                out.push_str(close_mark);
                out.push_str("%}");
            }
            "for" => {
                out.push_str("{%");
                out.push_str(open_mark);
                out.push_str(&rewrite_for(&rewrite_markup_concat(body)));
                out.push_str(close_mark);
                out.push_str("%}");
            }
            _ => {
                out.push_str("{%");
                out.push_str(&rewrite_markup_concat(inner));
                out.push_str("%}");
            }
        }
    }
    out
}

/// The next `{{`, `{%` or `{#`.
fn find_open(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    (0..b.len().saturating_sub(1)).find(|&i| b[i] == b'{' && matches!(b[i + 1], b'{' | b'%' | b'#'))
}

/// The position of `close` ending the tag that starts at `tag[0]`, skipping string literals
/// and bracketed groups (as Jinja's lexer balances them: `{{ {'a': {}} }}`).
fn find_close(tag: &str, close: &str) -> Option<usize> {
    let b = tag.as_bytes();
    let mut depth = 0i32;
    let mut i = 2;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => i = skip_string(b, i, q),
            _ if depth <= 0 && tag[i..].starts_with(close) => return Some(i),
            b'(' | b'[' | b'{' => {
                depth += 1;
                i += 1;
            }
            b')' | b']' | b'}' => {
                depth -= 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    None
}

/// The index after the string literal that opens with quote `q` at `i`.
fn skip_string(b: &[u8], mut i: usize, q: u8) -> usize {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == q => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// Where `{% endraw %}` starts in `s` (the end when absent).
fn find_endraw(s: &str) -> usize {
    let mut from = 0;
    while let Some(p) = s[from..].find("{%") {
        let at = from + p;
        let (_, body, _) = split_marks(&s[at + 2..]);
        if body.starts_with("endraw") {
            return at;
        }
        from = at + 2;
    }
    s.len()
}

/// Splits a tag's inside into its whitespace-control marks and the trimmed body.
fn split_marks(inner: &str) -> (&str, &str, &str) {
    let (open, rest) = match inner.as_bytes().first() {
        Some(b'-' | b'+') => (&inner[..1], &inner[1..]),
        _ => ("", inner),
    };
    let (rest, close) = match rest.as_bytes().last() {
        Some(b'-' | b'+') => (&rest[..rest.len() - 1], &rest[rest.len() - 1..]),
        _ => (rest, ""),
    };
    (open, rest.trim(), close)
}

/// Top-level words of an expression with their byte ranges (outside strings and brackets).
fn top_level_words(expr: &str) -> Vec<(usize, usize)> {
    let b = expr.as_bytes();
    let mut words = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i = skip_string(b, i, q);
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            c if (c.is_ascii_alphabetic() || c == b'_') && depth == 0 => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let dotted = start > 0 && b[start - 1] == b'.';
                if !dotted {
                    words.push((start, i));
                }
                continue;
            }
            c if c.is_ascii_digit() => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    words
}

/// `for TARGET in EXPR [if COND] [recursive]` → `for TARGET in (EXPR)|cera_iterable ...`.
fn rewrite_for(body: &str) -> String {
    let words = top_level_words(body);
    let Some(in_idx) = words.iter().position(|&(a, e)| &body[a..e] == "in") else {
        return format!(" {body} ");
    };
    let expr_start = words[in_idx].1;
    let expr_end = words[in_idx + 1..]
        .iter()
        .find(|&&(a, e)| matches!(&body[a..e], "if" | "recursive"))
        .map_or(body.len(), |&(a, _)| a);
    let expr = body[expr_start..expr_end].trim();
    if expr.is_empty() {
        return format!(" {body} ");
    }
    format!(
        " {} ({expr})|{ITERABLE_FILTER} {} ",
        &body[..expr_start],
        &body[expr_end..]
    )
}

/// A whole `{{ X|safe + Y + ... }}` expression (only `+` at its top level) becomes
/// `{{ cera_markup_add(X|safe, Y, ...) }}`, which concatenates as Python's `Markup` does.
fn rewrite_markup_chain(inner: &str) -> Option<String> {
    let (open, expr, close) = split_marks(inner);
    let b = expr.as_bytes();
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i = skip_string(b, i, q);
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'+' if depth == 0 => {
                parts.push(expr[start..i].trim());
                start = i + 1;
            }
            // comparisons and `-` bind differently from a plain `+` chain
            b'=' | b'<' | b'>' | b'!' | b'-' if depth == 0 => return None,
            _ => {}
        }
        i += 1;
    }
    parts.push(expr[start..].trim());
    let first = parts[0]
        .strip_suffix("safe")?
        .trim_end()
        .strip_suffix('|')?;
    let breaks = top_level_words(expr)
        .iter()
        .any(|&(a, e)| matches!(&expr[a..e], "and" | "or" | "not" | "if" | "else" | "in"));
    if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) || breaks || first.is_empty() {
        return None;
    }
    Some(format!(
        "{open} {MARKUP_ADD_FUNCTION}({}) {close}",
        parts.join(", ")
    ))
}

/// `'lit' % rhs` → `cera_percent('lit', rhs)`, where `rhs` is one operand at the precedence of
/// `%` (a primary with its attribute, item and call suffixes and its filters).
fn rewrite_percent(expr: &str) -> String {
    let b = expr.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        let q = b[i];
        if q != b'\'' && q != b'"' {
            i += 1;
            continue;
        }
        let lit_start = i;
        let lit_end = skip_string(b, i, q);
        i = lit_end;
        let op = skip_ws(b, lit_end);
        if b.get(op) != Some(&b'%') {
            continue;
        }
        let Some(rhs_end) = operand_end(b, op + 1) else {
            continue;
        };
        out.push_str(&expr[copied..lit_start]);
        out.push_str(PERCENT_FUNCTION);
        out.push('(');
        out.push_str(&expr[lit_start..lit_end]);
        out.push_str(", ");
        out.push_str(expr[op + 1..rhs_end].trim());
        out.push(')');
        copied = rhs_end;
        i = rhs_end;
    }
    if copied == 0 {
        return expr.to_owned();
    }
    out.push_str(&expr[copied..]);
    out
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The index after the bracketed group opening at `i`, skipping strings.
fn skip_group(b: &[u8], i: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut j = i;
    while j < b.len() {
        match b[j] {
            q @ (b'\'' | b'"') => {
                j = skip_string(b, j, q);
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            _ => {}
        }
        j += 1;
    }
    None
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The end of the unary-level operand starting at or after `i`, if one is there.
fn operand_end(b: &[u8], i: usize) -> Option<usize> {
    let mut i = skip_ws(b, i);
    if matches!(b.get(i), Some(b'-' | b'+')) {
        i = skip_ws(b, i + 1);
    }
    i = match *b.get(i)? {
        q @ (b'\'' | b'"') => skip_string(b, i, q),
        b'(' | b'[' | b'{' => skip_group(b, i)?,
        c if is_ident(c) => {
            let mut j = i;
            while j < b.len() && (is_ident(b[j]) || b[j] == b'.') {
                j += 1;
            }
            j
        }
        _ => return None,
    };
    loop {
        match b.get(i) {
            Some(b'[' | b'(') => i = skip_group(b, i)?,
            _ => {
                let j = skip_ws(b, i);
                if b.get(j) != Some(&b'|') {
                    return Some(i);
                }
                let mut k = skip_ws(b, j + 1);
                let name_start = k;
                while k < b.len() && is_ident(b[k]) {
                    k += 1;
                }
                if k == name_start {
                    return Some(i);
                }
                i = if b.get(k) == Some(&b'(') {
                    skip_group(b, k)?
                } else {
                    k
                };
            }
        }
    }
}

/// `|safe` directly followed by `+` becomes `|cera_markup`.
fn rewrite_markup_concat(expr: &str) -> String {
    let b = expr.as_bytes();
    let mut out = String::with_capacity(expr.len());
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i = skip_string(b, i, q);
                continue;
            }
            b'|' => {
                let mut j = i + 1;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                let is_safe = expr[j..].starts_with("safe")
                    && !b
                        .get(j + 4)
                        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_');
                if is_safe {
                    let mut k = j + 4;
                    while k < b.len() && b[k].is_ascii_whitespace() {
                        k += 1;
                    }
                    if b.get(k) == Some(&b'+') {
                        out.push_str(&expr[copied..j]);
                        out.push_str(MARKUP_FILTER);
                        copied = j + 4;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    out.push_str(&expr[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_if_blocks() {
        assert_eq!(
            rewrite("a{% generation %}b{%- endgeneration -%}c{% if x %}{%+generation%}"),
            "a{% if true %}b{%- endif -%}c{% if x %}{%+ if true %}"
        );
        assert_eq!(rewrite("{% generations %}{%"), "{% generations %}{%");
    }

    #[test]
    fn for_loops_check_their_iterable() {
        assert_eq!(
            rewrite("{%- for t in tools %}{{ t }}{% endfor %}"),
            "{%- for t in (tools)|cera_iterable  %}{{ t }}{% endfor %}"
        );
        assert_eq!(
            rewrite("{% for k, v in d.items() if k != 'in' -%}"),
            "{% for k, v in (d.items())|cera_iterable if k != 'in' -%}"
        );
        assert_eq!(
            rewrite("{% for x in xs|selectattr('a', 'in', [1]) recursive %}"),
            "{% for x in (xs|selectattr('a', 'in', [1]))|cera_iterable recursive %}"
        );
        // not tags: comments, strings, raw blocks
        let s =
            "{# {% for a in b %} #}{{ '{% for a in b %}' }}{% raw %}{% for a in b %}{% endraw %}";
        assert_eq!(rewrite(s), s);
    }

    #[test]
    fn percent_formatting() {
        assert_eq!(
            rewrite("{{ '%s-%s' % (a, b['x']) ~ '%d' % -n|int + 1 }}{% set x = \"%s\" % y.z(1) %}"),
            "{{ cera_percent('%s-%s', (a, b['x'])) ~ cera_percent('%d', -n|int) + 1 }}{% set x = cera_percent(\"%s\", y.z(1)) %}"
        );
        assert_eq!(rewrite("{{ a % b }}{{ '%' }}"), "{{ a % b }}{{ '%' }}");
        assert_eq!(
            rewrite("{{ {'a': {'b': '%s' % x}} }}"),
            "{{ {'a': {'b': cera_percent('%s', x)}} }}"
        );
    }

    #[test]
    fn markup_concat() {
        assert_eq!(
            rewrite(
                "{{- 'a'|safe + b['+'] + 'c' | safe + d|tojson() }}{{ x|safe }}{{ '|safe +' }}"
            ),
            "{{- cera_markup_add('a'|safe, b['+'], 'c' | safe, d|tojson()) }}{{ x|safe }}{{ '|safe +' }}"
        );
        // Not a plain `+` chain: the marker that refuses `+`.
        assert_eq!(
            rewrite("{{ 'a'|safe + b if c }}{% set x = 'a'|safe + b %}"),
            "{{ 'a'|cera_markup + b if c }}{% set x = 'a'|cera_markup + b %}"
        );
    }
}
