//! Speculative generation over a session (see [`crate::spec`] for why it is exact).

use crate::runtime::time::Instant;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Control, FinishReason, GenerateOptions, Generator, Session, Sink, Step, Summary};
use crate::error::Result;
use crate::spec::{Adapt, Drafter, SpecOptions, SpecStats};

impl Session {
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
        let mut summary = self.start_generation()?;
        let engine = Arc::clone(&self.engine);
        let n_vocab = engine.model.n_vocab();
        let mut g = Generator::new(&engine, opts, &self.tokens);
        let mut stats = SpecStats::default();
        let t0 = Instant::now();
        let mut adapt = Adapt::new(spec);
        let (mut draft, mut ctx, mut rows) = (Vec::new(), Vec::new(), Vec::new());
        // a token decided (and streamed) but not fed yet
        let mut pending: Option<u32> = None;
        let finish = 'outer: loop {
            if self.cancel.swap(false, Ordering::AcqRel) {
                g.stop(FinishReason::Cancelled);
                break FinishReason::Cancelled;
            }
            let tok = match pending.take() {
                Some(t) => t,
                None => match g.step(&mut self.logits) {
                    Step::Done { reason, text } => {
                        if !text.is_empty() {
                            sink.on_token(*g.tokens.last().unwrap_or(&0), &text);
                        }
                        break reason;
                    }
                    Step::Token { id, text } => {
                        if sink.on_token(id, &text) == Control::Stop {
                            g.stop(FinishReason::Cancelled);
                            break FinishReason::Cancelled;
                        }
                        id
                    }
                },
            };
            if self.shift_keep.is_some() && self.tokens.len() + 1 >= self.n_ctx() {
                self.shift_context()?;
            }
            if self.tokens.len() >= self.n_ctx() {
                if let Step::Done { text, .. } = g.stop(FinishReason::ContextFull)
                    && !text.is_empty()
                {
                    sink.on_token(tok, &text);
                }
                break FinishReason::ContextFull;
            }
            // draft what follows `tok`, within the context and the token budget
            let mut room = self.n_ctx() - self.tokens.len() - 1;
            if opts.max_tokens > 0 {
                room = room.min(opts.max_tokens.saturating_sub(g.n_generated()));
            }
            draft.clear();
            let k = adapt.allowed();
            if k > 0 && room >= spec.draft_min {
                ctx.clear();
                ctx.extend_from_slice(&self.tokens);
                ctx.push(tok);
                let k = k.min(room);
                drafter.propose(&ctx, k, &mut draft)?;
                draft.truncate(k);
                // the grammar's state after `tok` is the generator's (it accepted `tok`)
                let allowed = g.grammar_allowed_prefix(&draft);
                stats.grammar_cut += draft.len() - allowed;
                draft.truncate(allowed);
                if draft.len() < spec.draft_min {
                    draft.clear();
                }
            }
            // a rollback on a recurrent model may have left a replay to do
            self.catch_up()?;
            if draft.is_empty() {
                self.forward(&[tok], false)?;
                stats.plain_steps += 1;
                continue;
            }
            // verify: `tok` and the draft in one forward, logits at every position
            let base = self.tokens.len();
            ctx.clear();
            ctx.push(tok);
            ctx.extend_from_slice(&draft);
            rows.clear();
            self.forward_chunks(&ctx, true, &mut rows)?;
            stats.verify_steps += 1;
            stats.drafted += draft.len();
            let mut kept = 0;
            for i in 0..=draft.len() {
                let row = &mut rows[i * n_vocab..(i + 1) * n_vocab];
                match g.step(row) {
                    Step::Token { id, text } => {
                        let stop = sink.on_token(id, &text) == Control::Stop;
                        if i < draft.len() && id == draft[i] && !stop {
                            kept += 1;
                            continue;
                        }
                        if stop {
                            g.stop(FinishReason::Cancelled);
                            self.keep_verified(base + 1 + i, &rows, i, n_vocab);
                            stats.accepted += kept;
                            break 'outer FinishReason::Cancelled;
                        }
                        // the target's own token where the draft went wrong (or after it)
                        pending = Some(id);
                        break;
                    }
                    Step::Done { reason, text } => {
                        if !text.is_empty() {
                            sink.on_token(*g.tokens.last().unwrap_or(&0), &text);
                        }
                        self.keep_verified(base + 1 + i, &rows, i, n_vocab);
                        stats.accepted += kept;
                        break 'outer reason;
                    }
                }
            }
            stats.accepted += kept;
            if kept < draft.len() {
                self.keep_verified(base + 1 + kept, &rows, kept, n_vocab);
            }
            adapt.record(kept, draft.len());
        };
        g.fill_summary(&mut summary, finish, t0.elapsed());
        Ok((summary, stats))
    }

    /// Keeps the first `n` tokens after a verify pass, whose logits are row `row` of `rows`.
    fn keep_verified(&mut self, n: usize, rows: &[f32], row: usize, n_vocab: usize) {
        self.truncate(n);
        self.logits.clear();
        self.logits
            .extend_from_slice(&rows[row * n_vocab..(row + 1) * n_vocab]);
        self.logits_valid = true;
    }
}
