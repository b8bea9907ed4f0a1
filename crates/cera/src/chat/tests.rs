//! Unit tests of the chat-template module. The comparison against Python jinja2 on real
//! templates is `tests/chat_templates.rs`.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;

use super::*;
use crate::gguf::GgufWriter;

fn render_expr(expr_template: &str, vars: Json) -> String {
    let t = ChatTemplate::new(expr_template, "<s>", "</s>").unwrap();
    let mut opts = RenderOptions::new();
    if let Json::Object(m) = vars {
        opts.extra = m;
    }
    t.render_json(&json!([]), None, &opts).unwrap()
}

#[test]
fn chatml_fallback() {
    let t = ChatTemplate::chatml();
    let msgs = [
        Message::system("Be brief."),
        Message::user("Hi"),
        Message::assistant("Hello!"),
        Message::user("Again"),
    ];
    let out = t
        .render(&msgs, &RenderOptions::new().add_generation_prompt(true))
        .unwrap();
    assert_eq!(
        out,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    let out = t.render(&msgs[..2], &RenderOptions::new()).unwrap();
    assert_eq!(
        out,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    );
    // A tool-calling message has no text: an empty body.
    let call = Message::tool_calls(vec![ToolCall::new(None, "f", json!({}))]);
    assert_eq!(
        t.render(&[call], &RenderOptions::new()).unwrap(),
        "<|im_start|>assistant\n<|im_end|>\n"
    );
}

#[test]
fn from_gguf_reads_template_and_tokens() {
    let tokens: Vec<String> = ["<unk>", "<s>", "</s>", "a"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut w = GgufWriter::new();
    w.set(keys::tokenizer::TOKENS, tokens.clone())
        .set(keys::tokenizer::BOS_ID, 1u32)
        .set(keys::tokenizer::EOS_ID, 2u32)
        .set(
            keys::tokenizer::CHAT_TEMPLATE,
            "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}",
        );
    let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let t = ChatTemplate::from_gguf(&g).unwrap();
    assert_eq!((t.bos_token(), t.eos_token()), ("<s>", "</s>"));
    let out = t
        .render(&[Message::user("x")], &RenderOptions::new())
        .unwrap();
    assert_eq!(out, "<s>[x]</s>");

    // Without a template: ChatML, still with the model's tokens.
    let mut w = GgufWriter::new();
    w.set(keys::tokenizer::TOKENS, tokens)
        .set(keys::tokenizer::EOS_ID, 2u32);
    let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let t = ChatTemplate::from_gguf(&g).unwrap();
    assert_eq!(t.source(), CHATML_TEMPLATE);
    assert_eq!((t.bos_token(), t.eos_token()), ("", "</s>"));

    // A token id past the vocabulary is an error naming the key.
    let mut w = GgufWriter::new();
    w.set(keys::tokenizer::TOKENS, vec!["a".to_string()])
        .set(keys::tokenizer::BOS_ID, 7u32);
    let g = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let err = ChatTemplate::from_gguf(&g).unwrap_err().to_string();
    assert!(err.contains(keys::tokenizer::BOS_ID), "{err}");
}

#[test]
fn tojson_matches_python_json_dumps() {
    let v = json!({"b": "é\"\\\n\t\u{1}<>&'", "a": [1, 2.5, true, null, {}], "c": {"x": []}});
    // Python: json.dumps(v, ensure_ascii=False)
    assert_eq!(
        render_expr("{{ v | tojson }}", json!({ "v": v })),
        r#"{"b": "é\"\\\n\t\u0001<>&'", "a": [1, 2.5, true, null, {}], "c": {"x": []}}"#
    );
    assert_eq!(
        render_expr("{{ v | tojson(ensure_ascii=True) }}", json!({"v": "é😀"})),
        r#""\u00e9\ud83d\ude00""#
    );
    // indent: one item a line, "," item separator, empty containers stay "[]"/"{}".
    assert_eq!(
        render_expr(
            "{{ v | tojson(indent=2) }}",
            json!({"v": {"a": [1, {}], "b": []}})
        ),
        "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}"
    );
    assert_eq!(
        render_expr("{{ v | tojson(indent='\t') }}", json!({"v": [1]})),
        "[\n\t1\n]"
    );
    assert_eq!(
        render_expr(
            "{{ v | tojson(separators=(',', ':'), sort_keys=true) }}",
            json!({"v": {"b": 1, "a": 2}})
        ),
        r#"{"a":2,"b":1}"#
    );
    // Key order is the order given (serde_json preserve_order).
    assert_eq!(
        render_expr("{{ v | tojson }}", json!({"v": {"z": 1, "a": 2, "m": 3}})),
        r#"{"z": 1, "a": 2, "m": 3}"#
    );
    // Undefined and generators are not serializable, as in Python.
    let t = ChatTemplate::new("{{ nope | tojson }}", "", "").unwrap();
    let err = t
        .render(&[], &RenderOptions::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("not JSON serializable"), "{err}");
}

#[test]
fn python_printing_and_methods() {
    assert_eq!(
        render_expr(
            "{{ n }}|{{ t }}|{{ f }}|{{ d }}|{{ l }}|{{ 1.0 }}|{{ x }}",
            json!({"n": null, "t": true, "f": false, "d": {"a": "it's"}, "l": [1, "b"]})
        ),
        r#"None|True|False|{'a': "it's"}|[1, 'b']|1.0|"#
    );
    assert_eq!(
        render_expr(
            "{{ s.strip() }}|{{ s.split() }}|{{ s.startswith(' a') }}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.get('z', 'dflt') }}",
            json!({"s": " a b ", "d": {"x": 1, "y": 2}})
        ),
        "a b|['a', 'b']|True|x=1;y=2;|dflt"
    );
    assert_eq!(
        render_expr(
            "{{ 'abc' is sequence }} {{ true is number }} {{ none is none }} {{ tools is none }}",
            json!({})
        ),
        "True True True True"
    );
}

#[test]
fn raise_exception_and_strftime() {
    let t = ChatTemplate::new("{{ raise_exception('No system role!') }}", "", "").unwrap();
    match t.render(&[], &RenderOptions::new()) {
        Err(Error::ChatTemplateRaised { message }) => assert_eq!(message, "No system role!"),
        other => panic!("{other:?}"),
    }
    let t = ChatTemplate::new("{{ strftime_now('%d %b %Y %H:%M') }}", "", "").unwrap();
    let when = UNIX_EPOCH + Duration::from_secs(1_721_995_200); // 2024-07-26T12:00:00Z
    let opts = RenderOptions::new().now(when);
    assert_eq!(t.render(&[], &opts).unwrap(), "26 Jul 2024 12:00");
    // Without `now`: the clock (a four-digit year at least).
    let t = ChatTemplate::new("{{ strftime_now('%Y') }}", "", "").unwrap();
    let year = t.render(&[], &RenderOptions::new()).unwrap();
    assert!(year.len() == 4 && year.as_str() >= "2024", "{year}");
}

#[test]
fn unsupported_features_are_named() {
    let t = ChatTemplate::new("{{ x | from_json }}", "", "").unwrap();
    let err = t
        .render(&[], &RenderOptions::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unsupported filter") && err.contains("from_json"),
        "{err}"
    );
    let err = ChatTemplate::new("{% frobnicate %}", "", "")
        .unwrap_err()
        .to_string();
    assert!(err.contains("frobnicate"), "{err}");
}

#[test]
fn generation_tag_renders_its_body() {
    let t = ChatTemplate::new(
        "{% for m in messages %}{% generation %}<{{ m.content }}>{% endgeneration %}{% endfor %}",
        "",
        "",
    )
    .unwrap();
    let out = t
        .render(&[Message::assistant("a")], &RenderOptions::new())
        .unwrap();
    assert_eq!(out, "<a>");
}

#[test]
fn chat_template_is_send_and_sync() {
    fn check<T: Send + Sync + Clone>() {}
    check::<ChatTemplate>();
    check::<RenderOptions>();
    check::<Message>();
}
