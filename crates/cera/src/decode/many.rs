//! Several prompts at once, to the end: what the bindings' batch calls run.

use super::scheduler::{Event, Finished, Request, SchedulerOptions};
use crate::engine::{Engine, SessionOptions};
use crate::error::{Error, Result};
use crate::session::{Control, GenerateOptions};

/// One prompt's result of [`Engine::generate_many`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Completion {
    pub text: String,
    /// The tokens sampled, in order.
    pub tokens: Vec<u32>,
    pub finished: Finished,
}

impl Engine {
    /// Generates after every prompt at once, each in a session of its own (`session`'s
    /// options): prefilled and decoded together in batched steps, one forward pass reading
    /// the weights once for all of them. Results in the prompts' order; the first failure
    /// (a prompt over the context, a token past the vocabulary) fails the call.
    pub fn generate_many(
        &self,
        prompts: &[Vec<u32>],
        opts: &GenerateOptions,
        session: SessionOptions,
    ) -> Result<Vec<Completion>> {
        if prompts.is_empty() {
            return Ok(Vec::new());
        }
        let mut sched = self.scheduler(prompts.len(), session, SchedulerOptions::default());
        for p in prompts {
            sched.submit(Request::new(p.clone(), opts.clone()));
        }
        // request ids are 0.. in submission order
        let n = prompts.len();
        let mut out: Vec<(String, Vec<u32>, Option<Finished>)> =
            vec![(String::new(), Vec::new(), None); n];
        let mut failed: Option<Error> = None;
        sched.run_all(&mut |ev| {
            match ev {
                Event::Token {
                    id, token, text, ..
                } => {
                    let o = &mut out[id as usize];
                    o.0.push_str(&text);
                    o.1.push(token);
                }
                Event::Text { id, text, .. } => out[id as usize].0.push_str(&text),
                Event::Done { id, finished } => out[id as usize].2 = Some(*finished),
                Event::Error { error, .. } => {
                    failed.get_or_insert(error);
                }
                _ => {}
            }
            Control::Continue
        });
        if let Some(e) = failed {
            return Err(e);
        }
        out.into_iter()
            .map(|(text, tokens, f)| {
                let finished =
                    f.ok_or_else(|| Error::Model("a prompt ended without a result".into()))?;
                Ok(Completion {
                    text,
                    tokens,
                    finished,
                })
            })
            .collect()
    }
}
