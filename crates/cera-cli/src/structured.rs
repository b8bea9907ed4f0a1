//! Flags for structured output (`--grammar`, `--json`, `-j/--json-schema`) and tool calling
//! (`--tools`, `--constrain-tools`, `--tool-format`), shared by the generating commands.

use std::sync::Arc;

use anyhow::{Context, bail};
use cera::chat::{ChatTemplate, Message, RenderOptions};
use cera::engine::Engine;
use cera::grammar::{Grammar, GrammarConstraint, json_schema};
use cera::tools::{Tool, ToolFormat};

#[derive(clap::Args, Debug, Clone, Default)]
pub struct StructuredArgs {
    /// Constrain the output to a GBNF grammar (llama.cpp syntax): the text, or @FILE.
    #[arg(long = "grammar", conflicts_with_all = ["json", "json_schema", "grammar_file"])]
    pub grammar: Option<String>,
    /// Like --grammar @FILE.
    #[arg(long = "grammar-file", conflicts_with_all = ["json", "json_schema"])]
    pub grammar_file: Option<std::path::PathBuf>,
    /// Constrain the output to one JSON value.
    #[arg(long = "json", conflicts_with = "json_schema")]
    pub json: bool,
    /// Constrain the output to JSON matching this JSON Schema: the text, or @FILE.
    #[arg(short = 'j', long = "json-schema")]
    pub json_schema: Option<String>,
    /// Tools the model may call (OpenAI function definitions, a JSON array): the text, or
    /// @FILE. stdout is then only the JSON array of calls (`[]` for a prose answer); the prose
    /// goes to stderr.
    #[arg(long = "tools")]
    pub tools: Option<String>,
    /// With --tools: from the format's call marker on, constrain the output to well-formed
    /// calls of the given tools (names, argument names and types, required arguments).
    #[arg(long = "constrain-tools", requires = "tools")]
    pub constrain_tools: bool,
    /// Tool-call format (hermes, lfm2, llama3, mistral); detected from the template when
    /// omitted.
    #[arg(long = "tool-format", requires = "tools")]
    pub tool_format: Option<String>,
}

/// `TEXT` or `@FILE`.
fn text_or_file(v: &str, what: &str) -> anyhow::Result<String> {
    match v.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {what} file {path}"))
        }
        None => Ok(v.to_owned()),
    }
}

/// What the tools mode needs after generation.
pub struct ToolsMode {
    pub tools: Vec<Tool>,
    pub format: ToolFormat,
}

impl StructuredArgs {
    /// The grammar from --grammar, --grammar-file, --json or --json-schema.
    pub fn grammar(&self, verbose: bool) -> anyhow::Result<Option<GrammarConstraint>> {
        let g = if let Some(g) = &self.grammar {
            let src = text_or_file(g, "grammar")?;
            Grammar::parse(&src).context("bad --grammar")?
        } else if let Some(path) = &self.grammar_file {
            let src = std::fs::read_to_string(path)
                .with_context(|| format!("reading grammar file {}", path.display()))?;
            Grammar::parse(&src).with_context(|| format!("bad grammar in {}", path.display()))?
        } else if self.json {
            Grammar::json()
        } else if let Some(s) = &self.json_schema {
            let text = text_or_file(s, "JSON schema")?;
            let schema: serde_json::Value =
                serde_json::from_str(&text).context("--json-schema is not valid JSON")?;
            let c = json_schema::compile(&schema).context("bad --json-schema")?;
            if !c.unsupported.is_empty() {
                eprintln!(
                    "cera: warning: JSON Schema keywords not enforced: {}",
                    c.unsupported.join(", ")
                );
            }
            if verbose {
                eprintln!("cera: schema grammar:\n{}", c.gbnf);
            }
            c.grammar
        } else {
            return Ok(None);
        };
        Ok(Some(GrammarConstraint::new(Arc::new(g))))
    }

    /// The tools, their format and (with --constrain-tools) the lazy call grammar.
    pub fn tools(
        &self,
        engine: &Engine,
        verbose: bool,
    ) -> anyhow::Result<Option<(ToolsMode, Option<GrammarConstraint>)>> {
        let Some(t) = &self.tools else {
            return Ok(None);
        };
        if self.grammar.is_some()
            || self.grammar_file.is_some()
            || self.json
            || self.json_schema.is_some()
        {
            bail!("--tools cannot be combined with --grammar, --json or --json-schema");
        }
        let text = text_or_file(t, "tools")?;
        let v: serde_json::Value =
            serde_json::from_str(&text).context("--tools is not valid JSON")?;
        let tools = cera::tools::parse_tools(&v)?;
        let format = match &self.tool_format {
            Some(f) => f.parse::<ToolFormat>()?,
            None => {
                let tmpl = ChatTemplate::from_gguf(engine.gguf())?;
                let arch = engine.gguf().architecture().unwrap_or("");
                ToolFormat::detect(tmpl.source(), arch)
            }
        };
        if verbose {
            eprintln!("cera: tool-call format {}", format.as_str());
        }
        let grammar = if self.constrain_tools {
            let (g, gbnf, unsupported) = cera::tools::call_grammar(format, &tools)?;
            if !unsupported.is_empty() {
                eprintln!(
                    "cera: warning: tool parameter schema keywords not enforced: {}",
                    unsupported.join(", ")
                );
            }
            if verbose {
                eprintln!("cera: tool-call grammar:\n{gbnf}");
            }
            Some(g)
        } else {
            None
        };
        Ok(Some((ToolsMode { tools, format }, grammar)))
    }
}

/// A one-turn conversation rendered with the tools in the template's `tools` variable.
pub fn chat_prompt_with_tools(
    engine: &Engine,
    system: Option<&str>,
    user: &str,
    tools: &[Tool],
) -> anyhow::Result<String> {
    let tmpl = ChatTemplate::from_gguf(engine.gguf())?;
    let mut msgs = Vec::new();
    if let Some(s) = system {
        msgs.push(Message::new("system", s));
    }
    msgs.push(Message::new("user", user));
    let opts = RenderOptions::new()
        .add_generation_prompt(true)
        .tools(cera::tools::tools_value(tools));
    let prompt = tmpl.render(&msgs, &opts)?;
    if !tools.iter().any(|t| prompt.contains(&t.name)) {
        eprintln!(
            "cera: warning: the model's chat template does not render `tools`; the model is not told about them"
        );
    }
    Ok(prompt)
}
