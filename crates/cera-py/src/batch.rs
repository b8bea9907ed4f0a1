//! `Engine.generate_batch`: several prompts through the core's scheduler, in shared steps.

use cera::decode::{Event, Finished, Request, SchedulerOptions};
use cera::session::{Control, GenerateOptions};
use pyo3::PyResult;

use crate::errors::to_py;

/// Runs every prompt to its end; per prompt, its text and how it finished.
pub(crate) fn generate(
    engine: &cera::engine::Engine,
    prompts: &[String],
    opts: &GenerateOptions,
    n_ctx: usize,
) -> PyResult<Vec<(String, Finished)>> {
    let mut sopts = cera::engine::SessionOptions::default();
    sopts.n_ctx = n_ctx;
    let mut sched = engine.scheduler(prompts.len(), sopts, SchedulerOptions::default());
    for p in prompts {
        let toks = engine.tokenizer().encode(p, true, false);
        sched.submit(Request::new(toks, opts.clone()));
    }
    // request ids are 0.. in submission order
    let mut texts = vec![String::new(); prompts.len()];
    let mut done: Vec<Option<Finished>> = vec![None; prompts.len()];
    let mut failed = None;
    sched.run_all(&mut |ev| {
        match ev {
            Event::Token { id, text, .. } | Event::Text { id, text, .. } => {
                texts[id as usize].push_str(&text)
            }
            Event::Done { id, finished } => done[id as usize] = Some(*finished),
            Event::Error { id, error } => {
                failed.get_or_insert((id, error));
            }
            _ => {}
        }
        Control::Continue
    });
    // (the first failure, with its own type: a prompt over the context, a bad token)
    if let Some((_, e)) = failed {
        return Err(to_py(e));
    }
    Ok(texts
        .into_iter()
        .zip(done)
        .map(|(t, d)| (t, d.expect("every request ends with Done or Error")))
        .collect())
}
