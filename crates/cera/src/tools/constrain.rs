//! The grammar of a tool call in each format, with the tools' names, argument names and
//! argument types from their schemas, for `--constrain-tools`.

use std::sync::Arc;

use serde_json::Value as Json;

use super::{Tool, ToolFormat};
use crate::error::{Error, Result};
use crate::grammar::json_schema::{Style, lit, schemas_to_gbnf};
use crate::grammar::{Grammar, GrammarConstraint, Trigger};

/// A lazy grammar for calls of `tools` in `format`: free text until the format's call marker,
/// then one or more well-formed calls. Also returns the GBNF text and the schema keywords
/// that are not enforced.
pub fn call_grammar(
    format: ToolFormat,
    tools: &[Tool],
) -> Result<(GrammarConstraint, String, Vec<String>)> {
    if tools.is_empty() {
        return Err(Error::Tools("no tools to constrain calls to".into()));
    }
    let params: Vec<&Json> = tools.iter().map(|t| &t.parameters).collect();
    let style = if format == ToolFormat::Lfm2 {
        Style::Python
    } else {
        Style::Json
    };
    let (args, rules, unsupported) = schemas_to_gbnf(&params, style)?;
    let ws = "[ \\t\\n]{0,4}";
    let mut calls = Vec::new();
    for (t, a) in tools.iter().zip(&args) {
        let name = lit(&serde_json::to_string(&t.name).unwrap_or_default());
        calls.push(match format {
            ToolFormat::Hermes | ToolFormat::Mistral => format!(
                "{name} {ws} \",\" {ws} \"\\\"arguments\\\"\" {ws} \":\" {ws} {a} {ws} \"}}\""
            ),
            ToolFormat::Llama3 => format!(
                "{name} {ws} \",\" {ws} \"\\\"parameters\\\"\" {ws} \":\" {ws} {a} {ws} \"}}\""
            ),
            ToolFormat::Lfm2 => format!("{} \"(\" {a} \")\"", lit(&t.name)),
        });
    }
    let alts = calls.join(" | ");
    let head = "\"{\" [ \\t\\n]{0,8} \"\\\"name\\\"\" [ \\t\\n]{0,4} \":\" [ \\t\\n]{0,4}";
    let top = match format {
        ToolFormat::Hermes => format!(
            "root ::= tc ( {ws} tc )* | call\ntc ::= \"<tool_call>\" {ws} call {ws} \"</tool_call>\"\ncall ::= {head} ( {alts} )\n"
        ),
        ToolFormat::Mistral => format!(
            "root ::= \"[TOOL_CALLS]\" {ws} \"[\" {ws} call ( {ws} \",\" {ws} call )* {ws} \"]\"\ncall ::= {head} ( {alts} )\n"
        ),
        ToolFormat::Llama3 => format!(
            "root ::= \"<|python_tag|>\"? call ( {ws} \";\"? {ws} call )*\ncall ::= \"{{\" [ \\t\\n]{{0,8}} \"\\\"name\\\"\" [ \\t\\n]{{0,4}} \":\" [ \\t\\n]{{0,4}} ( {alts} )\n"
        ),
        ToolFormat::Lfm2 => format!(
            "root ::= \"<|tool_call_start|>\" \"[\" call ( \", \" call )* \"]\" \"<|tool_call_end|>\"\ncall ::= {alts}\n"
        ),
    };
    let gbnf = format!("{top}{rules}");
    let g = Grammar::parse(&gbnf)
        .map_err(|e| Error::Tools(format!("the tool-call grammar is not usable: {e}")))?;
    let triggers = format
        .markers()
        .iter()
        .map(|m| Trigger::Word((*m).to_string()))
        .collect();
    Ok((
        GrammarConstraint::lazy(Arc::new(g), triggers),
        gbnf,
        unsupported,
    ))
}
