//! One-behaviour templates (printing, filters, Python methods, tests, loops, whitespace
//! control) rendered by Python jinja2 as transformers sets it up must render the same here, or
//! fail where Python raised. Fixtures: `scripts/gen-chat-fixtures.py`
//! (`tests/fixtures/chat/snippets.json`).

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use cera::chat::{ChatTemplate, RenderOptions};
use serde_json::Value as Json;

/// Snippets where this engine knowingly differs from Python, and why.
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[
    // minijinja orders values of different types instead of failing, and offers no hook on
    // comparison operators; templates only compare like with like.
    (
        "compare_str_int",
        "ordering a str and an int: Python raises TypeError, minijinja answers false",
    ),
    // minijinja macros take exactly their declared parameters; none of the real templates
    // uses the implicit `varargs`/`kwargs`.
    (
        "macro_varargs_kwargs",
        "macros collecting extra arguments in `varargs`/`kwargs`: an error here",
    ),
    // minijinja's namespace object is a map to its `is mapping` test, and it keeps the type
    // private, so the test cannot tell it apart.
    (
        "mapping_tests_on_objects",
        "`namespace() is mapping`: Python false, here true",
    ),
    // Slicing is built into minijinja's VM: `none[1:]` is an empty list there.
    (
        "slice_none",
        "slicing None: Python raises TypeError, minijinja gives []",
    ),
];

#[test]
fn snippets_match_python_jinja2() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat/snippets.json");
    let fx: Json = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    // The fixtures' fixed clock: 2025-03-14T09:26:53.
    let now = UNIX_EPOCH + Duration::from_secs(1_741_944_413);
    let mut opts = RenderOptions::new().now(now);
    for (k, v) in fx["vars"].as_object().unwrap() {
        opts = opts.var(k.clone(), v.clone());
    }
    let mut failures = Vec::new();
    let mut matched = 0;
    let snippets = fx["snippets"].as_object().unwrap();
    for (name, case) in snippets {
        let source = case["template"].as_str().unwrap();
        let got = ChatTemplate::new(source, "<s>", "</s>")
            .and_then(|t| t.render_json(&Json::Array(vec![]), None, &opts))
            .map_err(|e| e.to_string());
        let ok = match (case.get("ok").and_then(Json::as_str), &got) {
            (Some(want), Ok(got)) => want == got,
            (None, Err(_)) => true,
            _ => false,
        };
        let known = KNOWN_DIFFERENCES.iter().any(|(k, _)| k == name);
        match (ok, known) {
            (true, false) => matched += 1,
            (true, true) => failures.push(format!(
                "{name}: now matches, remove it from KNOWN_DIFFERENCES"
            )),
            (false, true) => {}
            (false, false) => failures.push(format!(
                "{name}: {source:?}\n  python: {}\n  cera:   {got:?}",
                case.get("ok").unwrap_or(&case["error"])
            )),
        }
    }
    eprintln!(
        "chat semantics: {matched}/{} snippets match Python jinja2 ({} known differences)",
        snippets.len(),
        KNOWN_DIFFERENCES.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
