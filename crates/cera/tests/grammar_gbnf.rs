//! GBNF grammars: llama.cpp's `grammars/*.gbnf` (from its source package, through the fetch
//! step) and grammars written here, each with strings that must be accepted and strings that
//! must be rejected; parse errors with line and column; undefined rules; left recursion;
//! UTF-8 split across tokens.

use cera::fetch;
use cera::grammar::{Grammar, JSON_GBNF};

fn check(name: &str, g: &Grammar, accept: &[&str], reject: &[&str]) {
    for s in accept {
        assert!(g.accepts(s), "{name}: should accept {s:?}");
    }
    for s in reject {
        assert!(!g.accepts(s), "{name}: should reject {s:?}");
    }
}

fn llama_grammar(file: &str) -> Grammar {
    let dir = fetch::llama_cpp_data(&mut |_| {})
        .unwrap_or_else(|e| panic!("could not fetch llama.cpp test data: {e}"));
    let path = dir.join("grammars").join(file);
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Grammar::parse(&src).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn llama_cpp_grammars() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            "arithmetic.gbnf",
            &["1+2=3\n", "(a +b)*c= x1\n", "x=1\ny = (2)\n"],
            &["1+2=3", "=3\n", "1++2=3\n", "A=1\n"],
        ),
        (
            "c.gbnf",
            &[
                "int main(){return 0;}",
                "float f(int x){x = x+1;while(x<3){x = x*2;}}",
                "char c(){}int g(){}",
            ],
            &["int main()", "int 1x(){}", "main(){}"],
        ),
        (
            "chess.gbnf",
            &[
                "1. e4 e5\n2. Nf3 Nc6\n",
                "1. d4 Nf6\n2. c4 e6\n3. Nc3 Bb4+\n",
                "1. e4 c5\n12. O-O O-O-O\n",
            ],
            &["1. e4 e5\n", "1. e9 e5\n2. d4 d5\n", "2. e4 e5\n2. d4 d5\n"],
        ),
        (
            "english.gbnf",
            &["Hello, world!", "a b\tc\nd", "It's 3 o'clock."],
            &["", "Hello  world", "héllo", " lead"],
        ),
        (
            "japanese.gbnf",
            &["こんにちは", "カタカナ 漢字", "ひらがな、カタカナ。"],
            &["hello", "こんにちは ", "日本語x"],
        ),
        (
            "json.gbnf",
            &[
                r#"{"a": 1}"#,
                r#"{"a": [1, 2.5, -3e2], "b": {"c": null}}"#,
                "{}",
                r#"{"s": "\u00e9\n"}"#,
            ],
            &[
                "[1]",
                r#"{"a": }"#,
                r#"{"a": 01}"#,
                r#"{"a": "x"#,
                r#"{'a': 1}"#,
            ],
        ),
        (
            "json_arr.gbnf",
            &["[\n]", "[\n1,\n2]", "[\n{\"a\": true}]"],
            &["[1]", "{}", "[\n1,]"],
        ),
        (
            "list.gbnf",
            &["- one\n", "- one\n- two words\n"],
            &["- one", "one\n", "-  \n- x\n\n"],
        ),
    ];
    for (file, accept, reject) in cases {
        check(file, &llama_grammar(file), accept, reject);
    }
}

#[test]
fn handwritten_grammars() {
    let cases: &[(&str, &str, &[&str], &[&str])] = &[
        (
            "builtin json",
            JSON_GBNF,
            &[
                "1",
                "\"x\"",
                "[true, false, null]",
                "{\"k\": {\"n\": -0.5e+10}}",
            ],
            &["", "01", "[1,]", "{\"k\" 1}", "tru"],
        ),
        (
            "literal escapes",
            r#"root ::= "a\tb\n\"q\"\\ \x41\u00e9\U0001F600""#,
            &["a\tb\n\"q\"\\ Aé😀"],
            &["a\\tb", "a\tb\n\"q\"\\ Aé"],
        ),
        (
            "class ranges",
            "root ::= [a-cx-z0-9_]+",
            &["abc", "z_9", "a"],
            &["", "d", "ab-"],
        ),
        (
            "negated class",
            "root ::= [^a-z\\n]*",
            &["ABC 123", "", "ÉÈ"],
            &["abc", "A\nB"],
        ),
        (
            "unicode class",
            "root ::= [α-ω]{2,3} [😀-😏]",
            &["αβ😀", "ωωω😏"],
            &["α😀", "αβγδ😀", "αβ😐"],
        ),
        (
            "any char",
            "root ::= \"<\" . . \">\"",
            &["<ab>", "<é€>", "<\n\t>"],
            &["<a>", "<abc>"],
        ),
        (
            "alternation and groups",
            "root ::= (\"ab\" | \"cd\")+ (\"!\" | \"?\")?",
            &["ab", "cdab!", "abab?"],
            &["", "ac", "ab!!"],
        ),
        (
            "exact count",
            "root ::= [0-9]{3} \"-\" [0-9]{4}",
            &["555-1234"],
            &["55-1234", "5555-1234", "555-123"],
        ),
        (
            "at least",
            "root ::= \"x\"{2,}",
            &["xx", "xxxxxx"],
            &["x", ""],
        ),
        (
            "bounded",
            "root ::= \"x\"{1,3} \"y\"{,2}",
            &["x", "xxxyy", "xy"],
            &["", "xxxx", "xyyy"],
        ),
        (
            "optional",
            "root ::= \"colou\" \"r\"? \"r\"?",
            &["colou", "colour", "colourr"],
            &["colourrr"],
        ),
        (
            "multi-line rule with comments",
            "# greeting\nroot ::= greet   # the start\n  | \"bye\"\ngreet ::= \"hi\" (\n  \" \" name # nested\n)?\nname ::= [A-Z] [a-z]*\n",
            &["hi", "hi Bob", "bye"],
            &["hi bob", "hibye"],
        ),
        (
            "right recursion",
            "root ::= item\nitem ::= \"(\" item \")\" | \"x\"",
            &["x", "(x)", "(((x)))"],
            &["((x)", "()"],
        ),
        (
            "nullable rules",
            "root ::= a b \"!\"\na ::= \"a\"?\nb ::= \"b\"*",
            &["!", "a!", "abbb!", "bb!"],
            &["aa!", "ba!"],
        ),
        (
            "email-ish",
            "root ::= local \"@\" domain\nlocal ::= [a-z0-9.]+\ndomain ::= [a-z]+ (\".\" [a-z]+)+",
            &["a.b@ex.com", "x@y.z.org"],
            &["@ex.com", "a@ex", "a@.com"],
        ),
        (
            "yes/no",
            "root ::= (\"yes\" | \"no\") \".\"",
            &["yes.", "no."],
            &["yes", "maybe."],
        ),
        (
            "csv row",
            "root ::= field (\",\" field)* \"\\n\"\nfield ::= [^,\\n\"]* | \"\\\"\" [^\"]* \"\\\"\"",
            &["a,b,c\n", "\"x,y\",z\n", ",\n"],
            &["a,b", "a,\"b\n"],
        ),
    ];
    assert!(cases.len() + 8 >= 20);
    for (name, src, accept, reject) in cases {
        let g = Grammar::parse(src).unwrap_or_else(|e| panic!("{name}: {e}"));
        check(name, &g, accept, reject);
    }
}

#[test]
fn parse_errors_name_line_and_column() {
    let cases: &[(&str, &str)] = &[
        (
            "root ::= \"abc",
            "line 1, column 10: unterminated string literal",
        ),
        (
            "root ::= [a-z",
            "line 1, column 10: unterminated character class",
        ),
        (
            "root ::= x\nx ::= (\"a\" | \"b\"\n",
            "line 3, column 1: expected ')'",
        ),
        (
            "root ::= \"a\" \"b\" ]",
            "line 1, column 18: expected end of rule, found ']'",
        ),
        (
            "root ::= \"a\"{3,1}",
            "line 1, column 13: repetition {3,1}: maximum below minimum",
        ),
        (
            "root ::= * \"a\"",
            "line 1, column 10: '*' with nothing before it",
        ),
        ("root ::= \"\\q\"", "line 1, column 11: unknown escape"),
        (
            "root ::= \"\\uD800\"",
            "line 1, column 11: '\\uD800' is not a Unicode scalar value",
        ),
        ("root ::= [z-a]", "line 1, column 13: character range end"),
        ("root \"a\"", "line 1, column 6: expected '::='"),
        (
            "root ::= \"a\"\nroot ::= \"b\"",
            "line 2, column 1: rule 'root' is defined twice",
        ),
        ("root ::= \"a\" x{99999}", "too large"),
    ];
    for (src, want) in cases {
        let e = Grammar::parse(src).expect_err(src).to_string();
        assert!(e.contains(want), "{src:?}: got {e:?}, want {want:?}");
    }
}

#[test]
fn undefined_rules_and_missing_root() {
    let e = Grammar::parse("root ::= item\nitem ::= \"a\" other")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line 2, column 14: undefined rule 'other'"),
        "{e}"
    );
    let e = Grammar::parse("start ::= \"a\"").unwrap_err().to_string();
    assert!(e.contains("no 'root' rule"), "{e}");
    assert!(
        Grammar::parse_with_root("start ::= \"a\"", "start")
            .unwrap()
            .accepts("a")
    );
    assert!(
        Grammar::parse("")
            .unwrap_err()
            .to_string()
            .contains("no rules")
    );
}

#[test]
fn left_recursion_is_rejected() {
    for (src, rule) in [
        (
            "root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]",
            "expr",
        ),
        ("root ::= a\na ::= b \"x\"\nb ::= c\nc ::= a | \"y\"", "a"),
        ("root ::= opt root \"x\" | \"y\"\nopt ::= \"o\"?", "root"),
    ] {
        let e = Grammar::parse(src).unwrap_err().to_string();
        assert!(
            e.contains(&format!("left recursion in rule '{rule}'")),
            "{src:?}: {e}"
        );
    }
    let e = Grammar::parse("root ::= (\"a\"?)*")
        .unwrap_err()
        .to_string();
    assert!(e.contains("can match the empty string"), "{e}");
}

#[test]
fn utf8_split_across_tokens() {
    let g = Grammar::parse("root ::= [é-ê] \"€\" [😀-😏]").unwrap();
    let text = "é€😃".as_bytes();
    // every split point: the prefix is viable and the whole is accepted
    for cut in 0..=text.len() {
        let st = g
            .initial_state()
            .advance_bytes(&g, &text[..cut])
            .expect("prefix");
        let st = st.advance_bytes(&g, &text[cut..]).expect("rest");
        assert!(st.is_complete());
    }
    // a lead byte whose characters are all outside the class, overlong forms, surrogates
    for bad in [
        &b"\xe0"[..],
        b"\xc3\xa0",
        b"\xc0\xa9",
        b"\xed\xa0\x80",
        b"\xff",
    ] {
        assert!(!g.accepts_prefix(bad), "{bad:?}");
    }
    let any = Grammar::parse("root ::= [a-z] | [\\u0800-\\uFFFF]").unwrap();
    assert!(!any.accepts_prefix(b"\xe0\x80"), "overlong 3-byte prefix");
    assert!(any.accepts_prefix(b"\xe0\xa0"));
    assert!(
        !any.accepts_prefix(b"\xc3"),
        "no 2-byte character is in the class"
    );
}

/// Hostile input: deep nesting is an error (not a stack overflow), and random bytes or
/// random edits of real grammars give a grammar or an error, never a panic. Whatever
/// compiles must also run (matching random text).
#[test]
fn hostile_grammars_fail_cleanly() {
    let deep = format!(
        "root ::= {}\"a\"{}",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    let e = Grammar::parse(&deep).unwrap_err().to_string();
    assert!(e.contains("nested deeper than"), "{e}");
    let big = format!("root ::= {}", "[a-z]{10000} ".repeat(500));
    let e = Grammar::parse(&big).unwrap_err().to_string();
    assert!(e.contains("too large"), "{e}");
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet: Vec<char> = "root::=|()[]^-*+?{},.\"\\ \n\tabcxuU0123456789#é😀"
        .chars()
        .collect();
    let sources = [
        JSON_GBNF.to_string(),
        "root ::= (\"ab\" | [c-e]+)* \"!\"{1,3}\nx ::= root?".to_string(),
    ];
    let mut compiled = 0;
    for i in 0..3000 {
        let src: String = if i % 2 == 0 {
            let n = (rnd() % 60) as usize;
            let body: String = (0..n)
                .map(|_| alphabet[(rnd() % alphabet.len() as u64) as usize])
                .collect();
            format!("root ::= {body}")
        } else {
            let mut chars: Vec<char> = sources[i % sources.len()].chars().collect();
            for _ in 0..1 + rnd() % 4 {
                let at = (rnd() % chars.len() as u64) as usize;
                let c = alphabet[(rnd() % alphabet.len() as u64) as usize];
                match rnd() % 3 {
                    0 => chars[at] = c,
                    1 => chars.insert(at, c),
                    _ => {
                        chars.remove(at);
                    }
                }
            }
            chars.into_iter().collect()
        };
        if let Ok(g) = Grammar::parse(&src) {
            compiled += 1;
            for text in ["", "a", "ab!", "{\"a\": [1, 2]}", "é😀", "\u{0}\u{7f}"] {
                let _ = g.accepts(text);
            }
        }
    }
    assert!(compiled > 100, "only {compiled} random grammars compiled");
}
