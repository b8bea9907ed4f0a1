//! `cera run` with structured output: `--json` and `-j` print JSON that parses, `--grammar`
//! output is in the language, `--tools` prints only a JSON array on stdout, and bad grammars,
//! schemas and tools fail with a clear message and a non-zero exit (no panic).

use std::process::{Command, Output};

fn cera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(args)
        .output()
        .unwrap()
}

fn ok_stdout(args: &[&str]) -> String {
    let out = cera(args);
    assert!(
        out.status.success(),
        "cera {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const GEN: &[&str] = &[
    "run", "-m", "smollm2", "-t", "2", "--temp", "1", "-s", "7", "-n", "200",
];

#[test]
fn json_and_schema_outputs_parse() {
    let mut a = GEN.to_vec();
    a.extend(["-p", "Describe a dog as JSON.", "--json"]);
    let out = ok_stdout(&a);
    serde_json::from_str::<serde_json::Value>(out.trim())
        .unwrap_or_else(|e| panic!("--json output is not JSON ({e}): {out:?}"));
    let mut a = GEN.to_vec();
    let schema = r#"{"type":"object","properties":{"name":{"type":"string","maxLength":12},"legs":{"type":"integer","minimum":0,"maximum":8}},"required":["name","legs"]}"#;
    a.extend(["-p", "Describe a dog as JSON.", "-j", schema]);
    let v: serde_json::Value = serde_json::from_str(ok_stdout(&a).trim()).unwrap();
    let legs = v["legs"].as_i64().unwrap();
    assert!((0..=8).contains(&legs), "{v}");
    assert!(v["name"].as_str().unwrap().chars().count() <= 12, "{v}");
}

#[test]
fn grammar_output_is_in_the_language() {
    let mut a = GEN.to_vec();
    a.extend([
        "-p",
        "Is water wet? Answer yes or no.",
        "--grammar",
        "root ::= (\"yes\" | \"no\") \", because \" [a-z ]{1,40} \".\"",
    ]);
    let out = ok_stdout(&a);
    let g = cera::grammar::Grammar::parse(
        "root ::= (\"yes\" | \"no\") \", because \" [a-z ]{1,40} \".\"",
    )
    .unwrap();
    assert!(g.accepts(out.trim_end_matches('\n')), "{out:?}");
}

#[test]
fn tools_mode_prints_only_a_json_array() {
    let dir = std::env::temp_dir().join(format!("cera-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tools = dir.join("tools.json");
    std::fs::write(
        &tools,
        r#"[{"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]"#,
    )
    .unwrap();
    let at = format!("@{}", tools.display());
    for extra in [&[][..], &["--constrain-tools"][..]] {
        let mut a = GEN.to_vec();
        a.extend(["-p", "What's the weather in Paris?", "--tools", &at]);
        a.extend(extra);
        let out = ok_stdout(&a);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let calls = v.as_array().expect("a JSON array");
        for c in calls {
            assert_eq!(c["name"], "get_weather", "{out}");
            assert!(c["arguments"].is_object(), "{out}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_fails_cleanly() {
    for (args, msg) in [
        (
            &["--grammar", "root ::= [a-"][..],
            "line 1, column 10: unterminated character class",
        ),
        (&["--grammar", "root ::= x"][..], "undefined rule 'x'"),
        (
            &["--grammar", "root ::= root \"a\" | \"b\""][..],
            "left recursion",
        ),
        (
            &["-j", "{\"type\": \"object\", \"required\": [\"a\"]}"][..],
            "required property \"a\"",
        ),
        (&["-j", "not json"][..], "--json-schema is not valid JSON"),
        (
            &["-j", "@/nonexistent/schema.json"][..],
            "reading JSON schema file",
        ),
        (
            &["--tools", "{\"description\": \"no name\"}"][..],
            "tool 0 has no name",
        ),
        (
            &["--tools", "[]", "--tool-format", "xml"][..],
            "unknown tool format",
        ),
    ] {
        let mut a = vec!["run", "-m", "smollm2", "-n", "4", "-p", "hi"];
        a.extend(args);
        let out = cera(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
