//! `--spec ngram|draft|off` and its flags, shared by `run`, `chat` and `bench`.

use anyhow::{Context, bail};
use cera::engine::Engine;

use crate::common::resolve_model;

/// Speculative decoding.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SpecArgs {
    /// Speculative decoding: `ngram` (prompt lookup), `draft` (a draft model, -md), `off`.
    #[arg(long = "spec", default_value = "off", value_parser = ["off", "ngram", "draft"])]
    pub spec: String,
    /// The draft model for --spec draft (same vocabulary as the target).
    #[arg(long = "model-draft", visible_alias = "md")]
    pub model_draft: Option<String>,
    /// Tokens drafted per verify pass at most.
    #[arg(long = "draft-max", default_value_t = 6)]
    pub draft_max: usize,
    /// Shorter drafts are not verified.
    #[arg(long = "draft-min", default_value_t = 1)]
    pub draft_min: usize,
    /// Prompt lookup: the shortest n-gram matched (1-token matches draft poorly).
    #[arg(long = "spec-ngram-min", default_value_t = 2)]
    pub ngram_min: usize,
    /// Prompt lookup: the longest n-gram matched (longer matches are tried first).
    #[arg(long = "spec-ngram-max", default_value_t = 6)]
    pub ngram_max: usize,
}

impl SpecArgs {
    /// The drafter the flags ask for (`None`: plain decoding).
    pub fn drafter(
        &self,
        target: &Engine,
        model: &crate::gen_args::ModelArgs,
    ) -> anyhow::Result<Option<Box<dyn cera::spec::Drafter + Send>>> {
        self.drafter_with(target, model.engine_options(), model.session_options())
    }

    /// [`SpecArgs::drafter`] with the draft model's engine and session options given.
    pub fn drafter_with(
        &self,
        target: &Engine,
        eo: cera::engine::EngineOptions,
        so: cera::engine::SessionOptions,
    ) -> anyhow::Result<Option<Box<dyn cera::spec::Drafter + Send>>> {
        match self.spec.as_str() {
            "ngram" => {
                self.check_ngram()?;
                Ok(Some(Box::new(cera::spec::NgramDrafter::new(
                    self.ngram_min,
                    self.ngram_max,
                ))))
            }
            "draft" => {
                let Some(m) = &self.model_draft else {
                    bail!("--spec draft needs a draft model: -md MODEL");
                };
                let path = resolve_model(Some(m))?;
                let draft = Engine::load(&path, eo)
                    .with_context(|| format!("loading the draft model {}", path.display()))?;
                let d = cera::spec::DraftModel::new(&draft, target, so)?;
                Ok(Some(Box::new(d)))
            }
            _ => {
                if self.model_draft.is_some() {
                    bail!("-md is for --spec draft (add --spec draft)");
                }
                Ok(None)
            }
        }
    }

    /// The n-gram flags make sense (and no draft model is given with them).
    pub fn check_ngram(&self) -> anyhow::Result<()> {
        if self.model_draft.is_some() {
            bail!("-md is for --spec draft, not --spec ngram");
        }
        if self.ngram_min == 0 || self.ngram_min > self.ngram_max {
            bail!(
                "--spec-ngram-min {} and --spec-ngram-max {}: need 1 <= min <= max",
                self.ngram_min,
                self.ngram_max
            );
        }
        Ok(())
    }

    pub fn options(&self) -> cera::spec::SpecOptions {
        let mut o = cera::spec::SpecOptions::default();
        o.draft_max = self.draft_max.max(1);
        o.draft_min = self.draft_min.max(1);
        o
    }
}

/// The summary line of a speculative generation (stderr).
pub fn print_stats(kind: &str, st: &cera::spec::SpecStats) {
    eprintln!(
        "cera: speculative ({kind}): drafted {}, accepted {} ({:.1}%), {} verify passes, {} plain steps{}",
        st.drafted,
        st.accepted,
        100.0 * st.acceptance(),
        st.verify_steps,
        st.plain_steps,
        if st.grammar_cut > 0 {
            format!(", {} drafted tokens cut by the grammar", st.grammar_cut)
        } else {
            String::new()
        }
    );
}
