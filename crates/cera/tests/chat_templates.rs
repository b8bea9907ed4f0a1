//! The real chat templates of llama.cpp's test data, rendered with several conversations, must
//! match Python jinja2 as Hugging Face transformers sets it up, byte for byte; where Python
//! raised, we must fail too. Fixtures: `scripts/gen-chat-fixtures.py`.
//!
//! The templates come through the project's fetch step (pip); a failed fetch fails the test.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cera::Error;
use cera::chat::{ChatTemplate, Message, RenderOptions};
use cera::fetch;
use cera::gguf::GgufFile;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

/// Templates that do not match Python on every conversation, as `(file name, reason)`. Empty:
/// all 71 match. A template that needs something this engine lacks must fail with an error
/// naming it; list it here with that reason (the test fails for unlisted mismatches, and for
/// listed templates that match again).
const KNOWN_FAILURES: &[(&str, &str)] = &[];

/// At least this many of the templates must match on every conversation.
const MIN_FULL_MATCHES: usize = 68;

fn fixture(name: &str) -> Json {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/chat")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn fixed_now(fx: &Json) -> SystemTime {
    let d: Vec<i64> = fx["date"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    // Days from the civil date (proleptic Gregorian), for the fixture's fixed clock.
    let (y, m, day) = (d[0], d[1], d[2]);
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + d[3] * 3600 + d[4] * 60 + d[5];
    UNIX_EPOCH + Duration::from_secs(secs as u64)
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The conversation as typed [`Message`]s when they serialize back to exactly the fixture's
/// JSON (then the test renders through [`ChatTemplate::render`]).
fn typed_messages(messages: &Json) -> Option<Vec<Message>> {
    let typed: Vec<Message> = serde_json::from_value(messages.clone()).ok()?;
    (serde_json::to_value(&typed).ok()? == *messages).then_some(typed)
}

#[derive(Default)]
struct Tally {
    matched: usize,
    failures: Vec<String>,
}

#[test]
fn templates_match_python_jinja2() {
    let fx = fixture("templates.json");
    let dir = fetch::llama_cpp_data(&mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch llama.cpp test data: {e}"))
        .join("models/templates");
    let now = fixed_now(&fx);
    let bos = fx["bos_token"].as_str().unwrap();
    let eos = fx["eos_token"].as_str().unwrap();
    let conversations = fx["conversations"].as_object().unwrap();
    let templates = fx["templates"].as_object().unwrap();

    let mut typed_used = 0;
    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    for (name, t) in templates {
        let raw = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(
            sha256_hex(&raw),
            t["sha256"].as_str().unwrap(),
            "{name}: template differs from the one the fixtures were made from"
        );
        let source = String::from_utf8(raw).unwrap();
        let tally = tallies.entry(name).or_default();
        let tmpl = ChatTemplate::new(&source, bos, eos);
        for (conv_name, expected) in t["cases"].as_object().unwrap() {
            let conv = &conversations[conv_name];
            let mut opts = RenderOptions::new()
                .add_generation_prompt(conv["add_generation_prompt"].as_bool().unwrap())
                .now(now);
            if !conv["tools"].is_null() {
                opts = opts.tools(conv["tools"].clone());
            }
            let got: Result<String, Error> = match &tmpl {
                Err(e) => Err(Error::ChatTemplate {
                    reason: e.to_string(),
                }),
                Ok(tmpl) => match typed_messages(&conv["messages"]) {
                    Some(msgs) => {
                        typed_used += 1;
                        tmpl.render(&msgs, &opts)
                    }
                    None => tmpl.render_json(&conv["messages"], None, &opts),
                },
            };
            // raise_exception is Python's only source of a bare TemplateError: the same
            // message must come back as ChatTemplateRaised.
            let raised = expected
                .get("error")
                .and_then(Json::as_str)
                .and_then(|e| e.strip_prefix("TemplateError: "));
            let outcome = match (expected.get("ok"), &got) {
                (Some(want), Ok(got)) if want.as_str() == Some(got.as_str()) => Ok(()),
                (Some(want), Ok(got)) => Err(format!(
                    "{conv_name}: output differs\n--- python\n{}\n--- cera\n{got}",
                    want.as_str().unwrap()
                )),
                (Some(_), Err(e)) => Err(format!("{conv_name}: python rendered, cera failed: {e}")),
                (None, Err(Error::ChatTemplateRaised { message })) if raised.is_some() => {
                    if Some(message.as_str()) == raised {
                        Ok(())
                    } else {
                        Err(format!(
                            "{conv_name}: python raised {raised:?}, cera raised {message:?}"
                        ))
                    }
                }
                (None, Err(e)) if raised.is_some() => Err(format!(
                    "{conv_name}: python raised {raised:?} through raise_exception, cera failed: {e}"
                )),
                (None, Err(_)) => Ok(()),
                (None, Ok(got)) => Err(format!(
                    "{conv_name}: python raised {}, cera rendered\n{got}",
                    expected["error"]
                )),
            };
            match outcome {
                Ok(()) => tally.matched += 1,
                Err(msg) => tally.failures.push(msg),
            }
        }
    }

    let n_cases: usize = tallies.values().map(|t| t.matched + t.failures.len()).sum();
    let matched_cases: usize = tallies.values().map(|t| t.matched).sum();
    let full: Vec<&str> = tallies
        .iter()
        .filter(|(_, t)| t.failures.is_empty())
        .map(|(n, _)| *n)
        .collect();
    eprintln!("chat templates: per template, conversations matching Python jinja2:");
    for (name, t) in &tallies {
        eprintln!("  {:>2}/{} {name}", t.matched, t.matched + t.failures.len());
    }
    eprintln!(
        "chat templates: {}/{} templates fully match, {matched_cases}/{n_cases} cases \
         ({typed_used} rendered from typed Messages)",
        full.len(),
        tallies.len()
    );

    let mut problems = Vec::new();
    for (name, t) in &tallies {
        let known = KNOWN_FAILURES.iter().any(|(k, _)| k == name);
        if !t.failures.is_empty() && !known {
            problems.push(format!("{name}:\n{}", t.failures.join("\n")));
        }
        if t.failures.is_empty() && known {
            problems.push(format!(
                "{name} now matches everywhere: remove it from KNOWN_FAILURES"
            ));
        }
    }
    for (name, _) in KNOWN_FAILURES {
        assert!(
            tallies.contains_key(name),
            "KNOWN_FAILURES names unknown template {name}"
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    assert!(
        full.len() >= MIN_FULL_MATCHES,
        "only {} templates fully match",
        full.len()
    );
    assert!(typed_used > 0);
}

/// The SmolLM2 model's own template, read from its GGUF with its bos/eos tokens, renders a
/// system + user conversation exactly as Python jinja2 does.
#[test]
fn smollm2_template_from_gguf() {
    let fx = fixture("smollm2.json");
    let all = fixture("templates.json");
    let entry = fetch::lookup("smollm2").unwrap();
    let path = fetch::ensure(entry, &mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch test model smollm2: {e}"));
    let g = GgufFile::open(path).unwrap();
    let t = ChatTemplate::from_gguf(&g).unwrap();
    assert_eq!(t.source(), fx["template"].as_str().unwrap());
    assert_eq!(t.bos_token(), fx["bos_token"].as_str().unwrap());
    assert_eq!(t.eos_token(), fx["eos_token"].as_str().unwrap());

    let conv = &all["conversations"][fx["conversation"].as_str().unwrap()];
    let msgs: Vec<Message> = serde_json::from_value(conv["messages"].clone()).unwrap();
    let opts = RenderOptions::new()
        .add_generation_prompt(conv["add_generation_prompt"].as_bool().unwrap())
        .now(fixed_now(&all));
    let out = t.render(&msgs, &opts).unwrap();
    assert_eq!(out, fx["expected"]["ok"].as_str().unwrap());
}
