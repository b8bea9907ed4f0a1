//! `Engine.generate_batch`: several prompts through the core's scheduler, in shared steps.

use cera::decode::Completion;
use cera::session::GenerateOptions;
use pyo3::PyResult;

use crate::errors::to_py;

/// Runs every prompt to its end (see [`cera::engine::Engine::generate_many`]).
pub(crate) fn generate(
    engine: &cera::engine::Engine,
    prompts: &[String],
    opts: &GenerateOptions,
    n_ctx: usize,
) -> PyResult<Vec<Completion>> {
    let mut sopts = cera::engine::SessionOptions::default();
    sopts.n_ctx = n_ctx;
    let toks: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| engine.tokenizer().encode(p, true, false))
        .collect();
    engine.generate_many(&toks, opts, sopts).map_err(to_py)
}
