//! Constrained generation: GBNF grammars, JSON and JSON Schema, and the token masking that makes
//! the sampler follow them.
//!
//! * [`Grammar::parse`] reads llama.cpp's GBNF (see `parse.rs` for the syntax) into a flat rule
//!   table (`compile.rs`); errors name line and column, undefined rules and left recursion are
//!   rejected.
//! * The matcher (`matcher.rs`) runs a grammar over code points as a set of parse stacks, fed
//!   byte by byte (a token may end inside a UTF-8 character).
//! * [`TokenTrie`] (`trie.rs`) holds every token's bytes in a prefix tree; the allowed-token mask
//!   for a state is one walk of that tree, pruned where the grammar dies.
//! * `constraint.rs` plugs this into sampling: the sampled token is checked first and the full
//!   mask is computed only when it is rejected (then the sampler draws again from the masked
//!   logits); masks are cached per state. End-of-generation is allowed only where the grammar
//!   can be complete. With [`Trigger`]s the grammar is lazy: output is free until a trigger
//!   word or token appears, and from there on (the trigger included) it must match.
//! * [`json_schema`] compiles a JSON Schema to GBNF; [`JSON_GBNF`] is any JSON value.

mod compile;
mod constraint;
mod int_range;
pub mod json_schema;
mod json_text;
mod matcher;
mod parse;
mod regex;
mod trie;

use std::sync::Arc;

pub(crate) use constraint::Constraint;
pub use matcher::GrammarState;
pub use trie::TokenTrie;

use crate::error::Result;

/// Any JSON value (RFC 8259), with bounded whitespace and number lengths so that a sampled
/// value always ends.
pub const JSON_GBNF: &str = r#"root ::= value
value ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ws ":" ws value ws
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
ws ::= [ \t\n]{0,8}
"#;

/// One element of an alternative.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    /// One code point of `classes[i]`.
    Class(u32),
    /// The rule with this id.
    Ref(u32),
    /// End of an alternative.
    End,
}

/// A set of code points: sorted, merged inclusive ranges, with a bitmap for ASCII.
#[derive(Clone, Debug)]
pub(crate) struct CharClass {
    ranges: Vec<(u32, u32)>,
    ascii: [u64; 2],
}

impl CharClass {
    fn new(ranges: Vec<(u32, u32)>) -> CharClass {
        let mut ascii = [0u64; 2];
        for &(a, b) in &ranges {
            for c in a..=b.min(127) {
                ascii[(c >> 6) as usize] |= 1 << (c & 63);
            }
        }
        CharClass { ranges, ascii }
    }

    #[inline]
    pub(crate) fn contains(&self, c: u32) -> bool {
        if c < 128 {
            return self.ascii[(c >> 6) as usize] >> (c & 63) & 1 != 0;
        }
        let i = self.ranges.partition_point(|r| r.1 < c);
        i < self.ranges.len() && self.ranges[i].0 <= c
    }

    /// Whether any code point in `lo..=hi` is in the class.
    #[inline]
    pub(crate) fn intersects(&self, lo: u32, hi: u32) -> bool {
        let i = self.ranges.partition_point(|r| r.1 < lo);
        i < self.ranges.len() && self.ranges[i].0 <= hi
    }
}

/// A compiled grammar: immutable, shareable between sessions.
#[derive(Clone)]
pub struct Grammar {
    pub(crate) elems: Vec<Elem>,
    /// Per rule, the start of each alternative in `elems`.
    pub(crate) rules: Vec<Vec<u32>>,
    pub(crate) names: Vec<String>,
    pub(crate) classes: Vec<CharClass>,
    pub(crate) root: u32,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Grammar {{ root: {:?}, rules: {}, elements: {}, classes: {} }}",
            self.names[self.root as usize],
            self.rules.len(),
            self.elems.len(),
            self.classes.len()
        )
    }
}

impl Grammar {
    /// Parses GBNF text whose start rule is `root`.
    pub fn parse(src: &str) -> Result<Grammar> {
        Grammar::parse_with_root(src, "root")
    }

    /// Parses GBNF text with another start rule.
    pub fn parse_with_root(src: &str, root: &str) -> Result<Grammar> {
        let defs = parse::parse(src)?;
        compile::compile(&defs, root)
    }

    /// Any JSON value ([`JSON_GBNF`]).
    pub fn json() -> Grammar {
        Grammar::parse(JSON_GBNF).expect("the built-in JSON grammar parses")
    }

    /// Compiles a JSON Schema; keywords it cannot enforce are errors (see
    /// [`json_schema::compile`] for a lenient variant that returns them).
    pub fn from_json_schema(schema: &serde_json::Value) -> Result<Grammar> {
        let c = json_schema::compile(schema)?;
        if !c.unsupported.is_empty() {
            return Err(crate::Error::JsonSchema(format!(
                "unsupported keywords: {}",
                c.unsupported.join(", ")
            )));
        }
        Ok(c.grammar)
    }

    /// Number of rules (named and generated).
    pub fn n_rules(&self) -> usize {
        self.rules.len()
    }

    /// Whether the whole of `text` is in the language.
    pub fn accepts(&self, text: &str) -> bool {
        self.accepts_bytes(text.as_bytes())
    }

    /// Whether `bytes` (UTF-8) are a complete sentence of the grammar.
    pub fn accepts_bytes(&self, bytes: &[u8]) -> bool {
        self.initial_state()
            .advance_bytes(self, bytes)
            .is_some_and(|s| s.is_complete())
    }

    /// Whether `bytes` can be continued into a sentence of the grammar.
    pub fn accepts_prefix(&self, bytes: &[u8]) -> bool {
        self.initial_state().advance_bytes(self, bytes).is_some()
    }
}

/// Where a lazy grammar starts constraining.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trigger {
    /// This text in the output; the grammar must match from its first byte.
    Word(String),
    /// This token id; the grammar must match from its text.
    Token(u32),
}

/// A grammar to follow during generation, with optional lazy triggers.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GrammarConstraint {
    pub grammar: Arc<Grammar>,
    /// Empty: the grammar applies from the first token. Otherwise output is unconstrained
    /// until one of these appears.
    pub triggers: Vec<Trigger>,
}

impl GrammarConstraint {
    pub fn new(grammar: Arc<Grammar>) -> GrammarConstraint {
        GrammarConstraint {
            grammar,
            triggers: Vec::new(),
        }
    }

    pub fn lazy(grammar: Arc<Grammar>, triggers: Vec<Trigger>) -> GrammarConstraint {
        GrammarConstraint { grammar, triggers }
    }
}
