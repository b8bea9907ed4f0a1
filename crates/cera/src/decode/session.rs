//! A session's own generation: a one-slot run of the [`Scheduler`] over the session.

use std::sync::Arc;

use super::scheduler::{Draft, Event, Finished, Request, Scheduler, SchedulerOptions};
use crate::error::{Error, Result};
use crate::session::{Control, GenerateOptions, Session, Sink, Summary};
use crate::spec::{Drafter, SpecOptions, SpecStats};

impl Session {
    /// Samples and feeds tokens until a stop condition, streaming text to `sink`.
    pub fn generate(&mut self, opts: &GenerateOptions, sink: &mut dyn Sink) -> Result<Summary> {
        self.generate_with(opts, None, sink).map(|f| f.summary)
    }

    /// [`Session::generate`] with a drafter: each round feeds the token decided last plus up to
    /// `draft_max` drafted ones in one forward with logits at every position, keeps the drafted
    /// tokens the target's sampler agrees with, and rolls back the rest. The draft length
    /// adapts (doubling after a fully kept draft, cut back to what was kept after a miss) and
    /// drafting pauses for a few steps when the recent acceptance falls below
    /// `min_acceptance`.
    pub fn generate_speculative(
        &mut self,
        opts: &GenerateOptions,
        spec: &SpecOptions,
        drafter: &mut dyn Drafter,
        sink: &mut dyn Sink,
    ) -> Result<(Summary, SpecStats)> {
        let draft = Draft {
            options: spec.clone(),
            drafter: Box::new(drafter),
        };
        self.generate_with(opts, Some(draft), sink)
            .map(|f| (f.summary, f.spec))
    }

    fn generate_with(
        &mut self,
        opts: &GenerateOptions,
        draft: Option<Draft<'_>>,
        sink: &mut dyn Sink,
    ) -> Result<Finished> {
        let engine = Arc::clone(&self.engine);
        let mut sched: Scheduler<'_, &mut Session> =
            Scheduler::over(&engine, SchedulerOptions::default());
        sched.add_slot(self);
        let mut req = Request::continuation(0, opts.clone());
        req.logprobs = sink.logprobs();
        req.draft = draft;
        sched.submit(req);
        let mut result: Option<Result<Finished>> = None;
        sched.run_all(&mut |ev| {
            match ev {
                Event::Token {
                    token,
                    text,
                    logprobs,
                    ..
                } => {
                    if let Some(lp) = logprobs {
                        sink.on_logprobs(lp);
                    }
                    return sink.on_token(token, &text);
                }
                Event::Text { token, text, .. } => {
                    sink.on_token(token, &text);
                }
                Event::Done { finished, .. } => result = Some(Ok(*finished)),
                Event::Error { error, .. } => result = Some(Err(error)),
                Event::Started { .. } => {}
            }
            Control::Continue
        });
        result.unwrap_or_else(|| Err(Error::Model("the generation ended without a result".into())))
    }
}
