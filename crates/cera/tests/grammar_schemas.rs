//! JSON Schema → grammar, checked two ways for each of 46 schemas:
//! * hand-written instances that validate must be accepted by the grammar (compact and
//!   pretty-printed, keys in declared order), and texts that do not validate (or put keys out
//!   of the declared order) must be rejected;
//! * SmolLM2 (temperature 1, two seeds each; all but the recursive schema, see
//!   `NOT_GENERATED`) generates under the grammar, and every output
//!   must end by itself (EOG), parse as JSON and validate against the schema with an
//!   independent validator (the `jsonschema` crate, formats checked).
//!
//! The model comes through the project's fetch step; a failed fetch fails the test.

use std::sync::Arc;
use std::time::Instant;

use cera::chat::{ChatTemplate, Message, RenderOptions};
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::fetch;
use cera::grammar::{Grammar, GrammarConstraint, Trigger, json_schema};
use cera::session::{Control, FinishReason, GenerateOptions};
use serde_json::{Value as Json, json};

struct Case {
    name: &'static str,
    schema: Json,
    good: Vec<Json>,
    bad: Vec<&'static str>,
}

fn case(name: &'static str, schema: Json, good: Vec<Json>, bad: Vec<&'static str>) -> Case {
    Case {
        name,
        schema,
        good,
        bad,
    }
}

fn cases() -> Vec<Case> {
    let s10 = json!({"type": "string", "maxLength": 10});
    vec![
        case(
            "person",
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"]}),
            vec![json!({"name": "Ann", "age": 31})],
            vec![
                r#"{"name":"Ann"}"#,
                r#"{"name":"Ann","age":121}"#,
                r#"{"age":3,"name":"A"}"#,
            ],
        ),
        case(
            "optional fields",
            json!({"type": "object", "properties": {"title": {"type": "string"}, "subtitle": {"type": "string", "maxLength": 30}, "year": {"type": "integer"}}, "required": ["title"]}),
            vec![
                json!({"title": "x"}),
                json!({"title": "x", "year": 1999}),
                json!({"title": "x", "subtitle": "y", "year": 1}),
            ],
            vec![r#"{"year":1}"#, r#"{}"#],
        ),
        case(
            "all optional",
            json!({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}}),
            vec![json!({}), json!({"b": null}), json!({"a": true, "b": null})],
            vec![r#"{"a":1}"#, r#"{"b":null,"a":true}"#],
        ),
        case(
            "no additional properties",
            json!({"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"], "additionalProperties": false}),
            vec![json!({"x": 1.5})],
            vec![r#"{"x":1,"y":2}"#],
        ),
        case(
            "typed additional properties",
            json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"], "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9}}),
            vec![json!({"id": 5}), json!({"id": 5, "n": 3, "m": 0})],
            vec![r#"{"id":5,"id":7}"#, r#"{"id":5,"n":10}"#],
        ),
        case(
            "dictionary",
            json!({"type": "object", "additionalProperties": {"type": "string", "maxLength": 10}}),
            vec![json!({}), json!({"a": "b", "c": ""})],
            vec![r#"{"a":1}"#],
        ),
        case(
            "string enum",
            json!({"type": "string", "enum": ["red", "green", "blue"]}),
            vec![json!("red"), json!("blue")],
            vec![r#""yellow""#, "red"],
        ),
        case(
            "mixed enum",
            json!({"enum": [1, "two", null, true, [3]]}),
            vec![json!(1), json!("two"), json!(null), json!(true), json!([3])],
            vec!["2", "false"],
        ),
        case(
            "const object",
            json!({"const": {"version": 2}}),
            vec![json!({"version": 2})],
            vec![r#"{"version":3}"#],
        ),
        case(
            "const field",
            json!({"type": "object", "properties": {"kind": {"const": "circle"}, "radius": {"type": "number"}}, "required": ["kind", "radius"]}),
            vec![json!({"kind": "circle", "radius": 2})],
            vec![r#"{"kind":"square","radius":2}"#],
        ),
        case(
            "bounded int array",
            json!({"type": "array", "items": {"type": "integer", "minimum": -10, "maximum": 10}, "minItems": 2, "maxItems": 5}),
            vec![json!([1, -10]), json!([0, 1, 2, 3, 10])],
            vec!["[1]", "[1,2,3,4,5,6]", "[1,11]"],
        ),
        case(
            "exact string array",
            json!({"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 3, "maxItems": 3}),
            vec![json!(["a", "b", "c"])],
            vec![r#"["a","b"]"#, r#"["a","b","c","d"]"#],
        ),
        case(
            "tuple",
            json!({"type": "array", "prefixItems": [{"type": "string", "maxLength": 10}, {"type": "integer"}, {"type": "boolean"}], "items": false}),
            vec![json!(["x", 1, false])],
            vec![r#"["x",1]"#, r#"[1,"x",false]"#, r#"["x",1,true,2]"#],
        ),
        case(
            "tuple with rest",
            json!({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string", "maxLength": 5}, "maxItems": 4}),
            vec![json!([1]), json!([1, "a", "b", "c"])],
            vec![r#"[1,"a","b","c","d"]"#, r#"["a"]"#],
        ),
        case(
            "draft-7 tuple",
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "number"}, s10.clone()], "additionalItems": false}),
            vec![json!([1.5, "x"])],
            vec![r#"[1.5,"x",2]"#],
        ),
        case(
            "nested object",
            json!({"type": "object", "properties": {"name": s10.clone(), "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^\\d{5}$"}}, "required": ["street", "city", "zip"]}}, "required": ["name", "address"]}),
            vec![json!({"name": "A", "address": {"street": "s", "city": "c", "zip": "12345"}})],
            vec![r#"{"name":"A","address":{"street":"s","city":"c","zip":"1234"}}"#],
        ),
        case(
            "array of objects",
            json!({"type": "object", "properties": {"points": {"type": "array", "maxItems": 4, "items": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]}}}, "required": ["points"]}),
            vec![json!({"points": []}), json!({"points": [{"x": 1, "y": 2}]})],
            vec![r#"{"points":[{"x":1}]}"#],
        ),
        case(
            "$defs ref",
            json!({"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}}, "type": "object", "properties": {"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}}, "required": ["from", "to"]}),
            vec![json!({"from": {"x": 0, "y": 1}, "to": {"x": 2, "y": 3}})],
            vec![r#"{"from":{"x":0},"to":{"x":2,"y":3}}"#],
        ),
        case(
            "definitions ref",
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"color": {"type": "string", "enum": ["red", "blue"]}}, "type": "array", "items": {"$ref": "#/definitions/color"}, "minItems": 1, "maxItems": 3}),
            vec![json!(["red", "blue"])],
            vec![r#"["green"]"#, "[]"],
        ),
        case(
            "recursive ref",
            json!({"type": "object", "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 99}, "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#"}}}, "required": ["value"]}),
            vec![json!({"value": 1, "children": [{"value": 2}, {"value": 3, "children": []}]})],
            vec![r#"{"value":1,"children":[{}]}"#],
        ),
        case(
            "anyOf",
            json!({"anyOf": [{"type": "integer"}, s10.clone()]}),
            vec![json!(5), json!("five")],
            vec!["5.5", "true"],
        ),
        case(
            "oneOf disjoint",
            json!({"oneOf": [
                {"type": "object", "properties": {"cat": s10.clone()}, "required": ["cat"], "additionalProperties": false},
                {"type": "object", "properties": {"dog": {"type": "integer"}}, "required": ["dog"], "additionalProperties": false}]}),
            vec![json!({"cat": "tom"}), json!({"dog": 3})],
            vec![r#"{"cat":"tom","dog":3}"#],
        ),
        case(
            "allOf merge",
            json!({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"properties": {"b": {"type": "string", "maxLength": 5}}, "required": ["b"]}]}),
            vec![json!({"a": 1, "b": "x"})],
            vec![r#"{"a":1}"#, r#"{"b":"x"}"#],
        ),
        case(
            "allOf with ref",
            json!({"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}, "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"tag": s10.clone()}}]}),
            vec![json!({"id": 1}), json!({"id": 1, "tag": "t"})],
            vec![r#"{"tag":"t"}"#],
        ),
        case(
            "nullable string",
            json!({"type": ["string", "null"], "maxLength": 10}),
            vec![json!("abc"), json!(null)],
            vec!["1"],
        ),
        case(
            "string length",
            json!({"type": "string", "minLength": 3, "maxLength": 6}),
            vec![json!("abc"), json!("abcdef"), json!("é\"\\x")],
            vec![r#""ab""#, r#""abcdefg""#],
        ),
        case(
            "date",
            json!({"type": "string", "format": "date"}),
            vec![json!("2024-02-28"), json!("1999-12-31")],
            vec![r#""2024-13-01""#, r#""2024-04-31""#, r#""24-01-01""#],
        ),
        case(
            "time",
            json!({"type": "string", "format": "time"}),
            vec![json!("12:34:56Z"), json!("23:59:59.123+05:30")],
            vec![r#""24:00:00Z""#, r#""12:34:56""#],
        ),
        case(
            "date-time",
            json!({"type": "string", "format": "date-time"}),
            vec![json!("2024-01-15T08:30:00Z")],
            vec![r#""2024-01-15 08:30:00Z""#],
        ),
        case(
            "uuid",
            json!({"type": "string", "format": "uuid"}),
            vec![json!("123e4567-e89b-12d3-a456-426614174000")],
            vec![r#""123e4567-e89b-12d3-a456""#],
        ),
        case(
            "email",
            json!({"type": "string", "format": "email"}),
            vec![json!("john.doe@example.com"), json!("a_b+c@mail.co.uk")],
            vec![r#""john@""#, r#""@example.com""#],
        ),
        case(
            "pattern phone",
            json!({"type": "string", "pattern": "^\\(\\d{3}\\) \\d{3}-\\d{4}$"}),
            vec![json!("(555) 123-4567")],
            vec![r#""555-123-4567""#],
        ),
        case(
            "pattern alternation",
            json!({"type": "string", "pattern": "^(red|green|blue)-[a-z]{2,4}$"}),
            vec![json!("red-ab"), json!("blue-abcd")],
            vec![r#""red-a""#, r#""pink-ab""#],
        ),
        case(
            "pattern name",
            json!({"type": "string", "pattern": "^[A-Z][a-z]{1,12}( [A-Z][a-z]{1,12})?$"}),
            vec![json!("Ada"), json!("Ada Lovelace")],
            vec![r#""ada""#, r#""Ada lovelace""#],
        ),
        case(
            "integer minimum",
            json!({"type": "integer", "minimum": 1000}),
            vec![json!(1000), json!(123456)],
            vec!["999", "-1000"],
        ),
        case(
            "negative maximum",
            json!({"type": "integer", "maximum": -5}),
            vec![json!(-5), json!(-1234)],
            vec!["-4", "0", "5"],
        ),
        case(
            "exclusive bounds",
            json!({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}),
            vec![json!(1), json!(9)],
            vec!["0", "10"],
        ),
        case(
            "wide range",
            json!({"type": "integer", "minimum": -1000, "maximum": 250000}),
            vec![json!(-1000), json!(0), json!(250000), json!(99999)],
            vec!["-1001", "250001", "1000000"],
        ),
        case(
            "number",
            json!({"type": "number"}),
            vec![json!(1), json!(-0.25), json!(3e10)],
            vec!["01", ".5", "1."],
        ),
        case(
            "boolean",
            json!({"type": "boolean"}),
            vec![json!(true), json!(false)],
            vec!["1", r#""true""#],
        ),
        case(
            "null fields",
            json!({"type": "object", "properties": {"deleted": {"type": "null"}, "ok": {"type": "boolean"}}, "required": ["deleted", "ok"]}),
            vec![json!({"deleted": null, "ok": true})],
            vec![r#"{"deleted":false,"ok":true}"#],
        ),
        case(
            "many optional",
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": s10.clone(), "c": {"type": "boolean"}, "d": {"type": "number"}, "e": {"type": "null"}}}),
            vec![
                json!({}),
                json!({"c": true}),
                json!({"a": 1, "e": null}),
                json!({"a": 1, "b": "x", "c": false, "d": 0.5, "e": null}),
            ],
            vec![r#"{"e":null,"a":1}"#],
        ),
        case(
            "enum array",
            json!({"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3}),
            vec![json!(["a"]), json!(["c", "c", "b"])],
            vec![r#"["d"]"#, "[]"],
        ),
        case(
            "nullable via anyOf",
            json!({"type": "object", "properties": {"nick": {"anyOf": [s10.clone(), {"type": "null"}]}}, "required": ["nick"]}),
            vec![json!({"nick": null}), json!({"nick": "bo"})],
            vec![r#"{"nick":1}"#],
        ),
        case(
            "declared and other keys",
            json!({"type": "object", "properties": {"name": s10.clone()}, "required": ["name"], "additionalProperties": {"type": "boolean"}}),
            vec![json!({"name": "n", "flag": true})],
            vec![r#"{"name":"n","name":true}"#, r#"{"name":"n","flag":1}"#],
        ),
        case(
            "inventory",
            json!({"type": "object", "properties": {
                "sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
                "qty": {"type": "integer", "minimum": 0, "maximum": 500},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
                "restock": {"type": "string", "format": "date"}}, "required": ["sku", "qty"]}),
            vec![
                json!({"sku": "ABC-1234", "qty": 0}),
                json!({"sku": "ABC-1234", "qty": 5, "tags": ["x"], "restock": "2025-05-05"}),
            ],
            vec![r#"{"sku":"AB-1234","qty":0}"#],
        ),
    ]
}

/// Checked by instances only: SmolLM2 nests a recursive schema without end (until the token
/// limit), which says nothing about the grammar.
const NOT_GENERATED: &[&str] = &["recursive ref"];

fn validator(schema: &Json) -> jsonschema::Validator {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .unwrap_or_else(|e| panic!("the validator rejects the schema {schema}: {e}"))
}

#[test]
fn schema_grammars_accept_valid_and_reject_invalid_instances() {
    let cases = cases();
    assert!(cases.len() >= 40, "{} schemas", cases.len());
    for c in &cases {
        let g = Grammar::from_json_schema(&c.schema).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let v = validator(&c.schema);
        for inst in &c.good {
            assert!(
                v.is_valid(inst),
                "{}: fixture {inst} should validate",
                c.name
            );
            let text = serde_json::to_string(inst).unwrap();
            assert!(g.accepts(&text), "{}: grammar should accept {text}", c.name);
            // enum and const values are literals: only their compact form is generated
            if !["mixed enum", "const object"].contains(&c.name) {
                let pretty = serde_json::to_string_pretty(inst).unwrap();
                assert!(
                    g.accepts(&pretty),
                    "{}: grammar should accept {pretty}",
                    c.name
                );
            }
        }
        for text in &c.bad {
            assert!(!g.accepts(text), "{}: grammar should reject {text}", c.name);
        }
    }
}

#[test]
fn unsupported_keywords_are_reported() {
    let schema = json!({"type": "object", "minProperties": 1, "properties": {
        "n": {"type": "number", "minimum": 0, "multipleOf": 2},
        "s": {"type": "string", "format": "hostname"},
        "l": {"type": "array", "uniqueItems": true, "contains": {"type": "integer"}}}});
    let c = json_schema::compile(&schema).unwrap();
    assert_eq!(
        c.unsupported,
        vec![
            "contains at /properties/l",
            "format \"hostname\" at /properties/s",
            "minProperties at /",
            "minimum (on a non-integer number) at /properties/n",
            "multipleOf at /properties/n",
            "uniqueItems at /properties/l",
        ]
    );
    let e = Grammar::from_json_schema(&schema).unwrap_err().to_string();
    assert!(
        e.contains("unsupported keywords: contains at /properties/l"),
        "{e}"
    );
    for (bad, msg) in [
        (
            json!({"$ref": "http://example.com/s.json"}),
            "only local references",
        ),
        (json!({"$ref": "#/$defs/missing"}), "points to nothing"),
        (
            json!({"type": "object", "properties": {"a": {}}, "required": ["b"]}),
            "required property \"b\"",
        ),
        (json!({"type": "strange"}), "unknown type"),
        (json!(false), "no value can match"),
        (
            json!({"type": "string", "pattern": "(?<=a)b"}),
            "look-around",
        ),
        (json!({"enum": []}), "enum at / is empty"),
    ] {
        let e = json_schema::compile(&bad).unwrap_err().to_string();
        assert!(e.contains(msg), "{bad}: {e}");
    }
}

fn smollm2() -> Engine {
    let entry = fetch::lookup("smollm2").unwrap();
    let path = fetch::ensure(entry, &mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch the test model: {e}"));
    let mut eo = EngineOptions::default();
    eo.n_threads = Some(2);
    Engine::load(path, eo).unwrap()
}

/// Lazy grammars: free text until the trigger (a word, or a token id), then the grammar from
/// the trigger on; the generated text from the trigger validates. A logit bias makes the
/// trigger the first token (after that the grammar masks it); a trigger in the middle of a
/// reply is covered by `tests/tools.rs` (Qwen writes prose, then the call).
#[test]
fn lazy_grammars_start_at_their_trigger() {
    let engine = smollm2();
    let tok = engine.tokenizer();
    let schema = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["name", "age"]});
    let g = Arc::new(Grammar::from_json_schema(&schema).unwrap());
    let v = validator(&schema);
    let tmpl = ChatTemplate::from_gguf(engine.gguf()).unwrap();
    let prompt = tmpl
        .render(
            &[Message::user(
                "Tell me about a person, then give their name and age as a JSON object.",
            )],
            &RenderOptions::new().add_generation_prompt(true),
        )
        .unwrap();
    let brace = tok.token_id("{").expect("a '{' token");
    for (trigger, bias) in [
        (Trigger::Word("{".into()), Some(brace)),
        (Trigger::Token(brace), Some(brace)),
    ] {
        for seed in [3u64, 4] {
            let mut s = engine.session(SessionOptions::default());
            s.append_text(&prompt, true).unwrap();
            let mut o = GenerateOptions::default();
            o.max_tokens = 300;
            o.sampler.temperature = 1.0;
            o.sampler.seed = seed;
            if let Some(b) = bias {
                // the first token is the trigger; afterwards the grammar bans it
                o.sampler.logit_bias = vec![(b, 100.0)];
            }
            o.grammar = Some(GrammarConstraint::lazy(
                Arc::clone(&g),
                vec![trigger.clone()],
            ));
            let sum = s
                .generate(&o, &mut |_: u32, _: &str| Control::Continue)
                .unwrap();
            let what = format!("{trigger:?} seed {seed}: {:?}", sum.text);
            assert_eq!(sum.finish, FinishReason::Eog, "{what}");
            let at = sum
                .text
                .find('{')
                .unwrap_or_else(|| panic!("no trigger in {what}"));
            if bias.is_some() {
                assert_eq!(at, 0, "{what}");
                assert_eq!(sum.tokens[0], brace, "{what}");
            }
            let inst: Json =
                serde_json::from_str(&sum.text[at..]).unwrap_or_else(|e| panic!("{e}: {what}"));
            assert!(v.is_valid(&inst), "{what}");
        }
    }
}

/// Generation ends where the grammar does: a finished grammar allows only EOG (even with
/// `ignore_eog`), and the output is the sentence.
#[test]
fn generation_stops_when_the_grammar_is_finished() {
    let engine = smollm2();
    let g = Arc::new(Grammar::parse("root ::= (\"yes\" | \"no\") \".\"").unwrap());
    for ignore_eog in [false, true] {
        let mut s = engine.session(SessionOptions::default());
        s.append_text("Is the sky blue? Answer: ", true).unwrap();
        let mut o = GenerateOptions::default();
        o.max_tokens = 50;
        o.ignore_eog = ignore_eog;
        o.grammar = Some(GrammarConstraint::new(Arc::clone(&g)));
        let sum = s
            .generate(&o, &mut |_: u32, _: &str| Control::Continue)
            .unwrap();
        assert_eq!(sum.finish, FinishReason::Eog, "{:?}", sum.text);
        assert!(sum.text == "yes." || sum.text == "no.", "{:?}", sum.text);
        assert!(sum.generated_tokens <= 5, "{:?}", sum.tokens);
    }
}

/// The trie walk allows exactly the tokens that, fed one by one through the matcher, the
/// grammar accepts: checked over SmolLM2's whole vocabulary at states of several schemas.
#[test]
fn trie_masks_equal_token_by_token_checks_on_a_real_vocabulary() {
    let engine = smollm2();
    let tok = engine.tokenizer();
    let trie = cera::grammar::TokenTrie::new(tok);
    let n = tok.n_vocab();
    let cases = cases();
    let mut checked = 0;
    for (name, prefixes) in [
        (
            "person",
            &[
                "",
                "{",
                "{\"name\": \"",
                "{\"name\": \"Bo",
                "{\"name\": \"Bob\", \"age\": 1",
            ][..],
        ),
        ("date", &["", "\"2024-0", "\"2024-02-2"][..]),
        ("string length", &["\"", "\"\u{e9}", "\"abcde"][..]),
        ("pattern name", &["\"A", "\"Ada "][..]),
        ("wide range", &["", "-", "2500", "-100"][..]),
    ] {
        let c = cases.iter().find(|c| c.name == name).unwrap();
        let g = Grammar::from_json_schema(&c.schema).unwrap();
        for p in prefixes {
            let st = g.initial_state().advance_bytes(&g, p.as_bytes()).unwrap();
            let mut mask = vec![0u64; n.div_ceil(64)];
            trie.mask(&g, &st, &mut mask);
            for t in 0..n as u32 {
                let bytes = tok.token_bytes(t);
                let want =
                    !tok.is_eog(t) && !bytes.is_empty() && st.advance_bytes(&g, bytes).is_some();
                let got = mask[(t >> 6) as usize] >> (t & 63) & 1 != 0;
                assert_eq!(got, want, "{name} after {p:?}: token {t} {bytes:?}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 17);
}

#[test]
fn smollm2_outputs_always_validate() {
    let engine = smollm2();
    let tmpl = ChatTemplate::from_gguf(engine.gguf()).unwrap();
    let t0 = Instant::now();
    let mut failures = Vec::new();
    let mut lengths = Vec::new();
    let mut n = 0;
    let mut tokens = 0;
    for c in cases() {
        if NOT_GENERATED.contains(&c.name) {
            continue;
        }
        let g = Arc::new(Grammar::from_json_schema(&c.schema).unwrap());
        let v = validator(&c.schema);
        let msgs = [
            Message::system("You answer with JSON only."),
            Message::user(format!(
                "Write one example JSON value that matches this JSON Schema: {}",
                c.schema
            )),
        ];
        let prompt = tmpl
            .render(&msgs, &RenderOptions::new().add_generation_prompt(true))
            .unwrap();
        let toks = engine.tokenizer().encode(&prompt, true, true);
        for seed in [1u64, 2] {
            let mut s = engine.session(SessionOptions::default());
            s.append_tokens(&toks).unwrap();
            let mut o = GenerateOptions::default();
            o.max_tokens = 400;
            o.sampler.temperature = 1.0;
            o.sampler.seed = seed;
            o.grammar = Some(GrammarConstraint::new(Arc::clone(&g)));
            let sum = s
                .generate(&o, &mut |_: u32, _: &str| Control::Continue)
                .unwrap();
            n += 1;
            tokens += sum.generated_tokens;
            let what = format!("{} (seed {seed})", c.name);
            if sum.finish == FinishReason::Length {
                // at temperature 1 a sample may wander inside an unbounded string or number
                // until the budget ends (the grammar keeps every prefix valid but cannot make
                // the model stop); a few such runs say nothing about the constraint, many would
                lengths.push(format!("{what}: {:?}", sum.text));
                continue;
            }
            if sum.finish != FinishReason::Eog {
                failures.push(format!(
                    "{what}: finished by {} after {:?}",
                    sum.finish.as_str(),
                    sum.text
                ));
                continue;
            }
            match serde_json::from_str::<Json>(&sum.text) {
                Err(e) => failures.push(format!("{what}: not JSON ({e}): {:?}", sum.text)),
                Ok(inst) => {
                    if let Err(e) = v.validate(&inst) {
                        failures.push(format!("{what}: {inst} does not validate: {e}"));
                    }
                }
            }
        }
    }
    eprintln!(
        "{n} generations, {tokens} tokens in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(n >= 80);
    assert!(
        lengths.len() <= 3,
        "{} of {n} generations ran to the token budget:\n{}",
        lengths.len(),
        lengths.join("\n")
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Hostile schemas: random JSON documents made of schema keywords and random patterns give a
/// grammar or an error, never a panic; what compiles also runs.
#[test]
fn hostile_schemas_fail_cleanly() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let keys = [
        "type",
        "properties",
        "required",
        "items",
        "prefixItems",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "additionalProperties",
        "$defs",
    ];
    let atoms = [
        json!("object"),
        json!("string"),
        json!("integer"),
        json!("array"),
        json!("#"),
        json!("#/$defs/a"),
        json!("date"),
        json!("^a[b-c]+(x|y)?$"),
        json!("(("),
        json!(-3),
        json!(0),
        json!(5),
        json!(1e300),
        json!(true),
        json!(false),
        json!(null),
        json!([]),
        json!(["a"]),
        json!({}),
    ];
    fn random_schema(
        depth: u32,
        rnd: &mut dyn FnMut(u64) -> u64,
        keys: &[&str],
        atoms: &[Json],
    ) -> Json {
        if depth == 0 || rnd(3) == 0 {
            return atoms[rnd(atoms.len() as u64) as usize].clone();
        }
        match rnd(3) {
            0 => Json::Array(
                (0..rnd(3))
                    .map(|_| random_schema(depth - 1, rnd, keys, atoms))
                    .collect(),
            ),
            _ => {
                let mut m = serde_json::Map::new();
                for _ in 0..1 + rnd(4) {
                    let k = if rnd(5) == 0 {
                        "a"
                    } else {
                        keys[rnd(keys.len() as u64) as usize]
                    };
                    m.insert(k.to_string(), random_schema(depth - 1, rnd, keys, atoms));
                }
                Json::Object(m)
            }
        }
    }
    let mut compiled = 0;
    for _ in 0..3000 {
        let s = random_schema(4, &mut rnd, &keys, &atoms);
        if let Ok(c) = json_schema::compile(&s) {
            compiled += 1;
            for t in ["{}", "[]", "\"a\"", "1", "{\"a\": 1}"] {
                let _ = c.grammar.accepts(t);
            }
        }
    }
    assert!(compiled > 300, "only {compiled} random schemas compiled");
    for p in [
        "(", ")", "[", "[]", "a{", "a{2,1}", "\\", "(?:", "a**", "[z-a]", "x{99999}", "^$", "|",
        "()",
    ] {
        let _ = json_schema::compile(&json!({"type": "string", "pattern": p}));
    }
}
