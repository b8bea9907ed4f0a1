//! Decoding: sample, feed, stream text, stop on EOG, a stop string, a length or a grammar.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Control, FinishReason, GenerateOptions, Session, Sink, Summary};
use crate::error::{Error, Result};
use crate::sample::Sampler;

impl Session {
    /// Samples and feeds tokens until a stop condition, streaming text to `sink`.
    pub fn generate(&mut self, opts: &GenerateOptions, sink: &mut dyn Sink) -> Result<Summary> {
        if !self.logits_valid {
            return Err(Error::Model(
                "generate needs at least one token in the context first".into(),
            ));
        }
        let mut sampler = Sampler::new(opts.sampler.clone());
        for &t in &self.tokens {
            sampler.accept(t);
        }
        let engine = Arc::clone(&self.engine);
        let tok = &engine.tokenizer;
        let mut decoder = tok.stream_decoder();
        let mut stops = StopMatcher::new(&opts.stop);
        let mut constraint = opts
            .grammar
            .as_ref()
            .map(|g| crate::grammar::Constraint::new(g, engine.token_trie(), tok));
        let mut summary = Summary {
            prompt_tokens: std::mem::take(&mut self.pending_prompt),
            generated_tokens: 0,
            prefill: std::mem::take(&mut self.pending_prefill),
            decode: Duration::ZERO,
            finish: FinishReason::Length,
            text: String::new(),
            tokens: Vec::new(),
            grammar_masked: 0,
            grammar_time: Duration::ZERO,
        };
        self.cancel.store(false, Ordering::Release);
        let t0 = Instant::now();
        loop {
            if opts.max_tokens > 0 && summary.generated_tokens >= opts.max_tokens {
                summary.finish = FinishReason::Length;
                break;
            }
            if self.cancel.swap(false, Ordering::AcqRel) {
                summary.finish = FinishReason::Cancelled;
                break;
            }
            let next = match &mut constraint {
                None => sampler.sample(&mut self.logits),
                Some(c) => match c.sample(&mut sampler, &mut self.logits) {
                    Some(t) => t,
                    None => {
                        summary.finish = FinishReason::GrammarDeadEnd;
                        break;
                    }
                },
            };
            if let Some(c) = &mut constraint
                && !c.accept(next)
            {
                summary.finish = FinishReason::GrammarDeadEnd;
                break;
            }
            sampler.accept(next);
            summary.generated_tokens += 1;
            summary.tokens.push(next);
            // with a finished grammar only EOG can follow: stop even when ignoring EOG
            if tok.is_eog(next)
                && (!opts.ignore_eog || constraint.as_ref().is_some_and(|c| c.is_finished()))
            {
                summary.finish = FinishReason::Eog;
                break;
            }
            let piece = decoder.push(next);
            let (emit, stopped) = stops.push(&piece);
            summary.text.push_str(&emit);
            if sink.on_token(next, &emit) == Control::Stop {
                summary.finish = FinishReason::Cancelled;
                break;
            }
            if stopped {
                summary.finish = FinishReason::Stop;
                break;
            }
            // with the context shift on, make room as llama.cpp does (keeping one cell free)
            if self.shift_keep.is_some() && self.tokens.len() + 1 >= self.n_ctx() {
                self.shift_context()?;
            }
            if self.tokens.len() >= self.n_ctx() {
                summary.finish = FinishReason::ContextFull;
                break;
            }
            self.forward(&[next], false)?;
        }
        // flush text held back for a possible stop string or an incomplete character
        if summary.finish != FinishReason::Stop {
            let mut rest = decoder.finish();
            rest = stops.flush(&rest);
            if !rest.is_empty() {
                summary.text.push_str(&rest);
                sink.on_token(*summary.tokens.last().unwrap_or(&0), &rest);
            }
        }
        // an EOG token or the token that completed a stop string was sampled but not fed; keep
        // the context consistent: the logits still belong to the last fed token
        summary.decode = t0.elapsed();
        if let Some(c) = constraint {
            summary.grammar_masked = c.n_masked;
            summary.grammar_time = c.time;
        }
        Ok(summary)
    }
}

/// Holds back text that could still become a stop string.
struct StopMatcher<'a> {
    stops: &'a [String],
    held: String,
}

impl<'a> StopMatcher<'a> {
    fn new(stops: &'a [String]) -> Self {
        StopMatcher {
            stops,
            held: String::new(),
        }
    }

    /// Adds `piece`; returns the text safe to emit and whether a stop string was found.
    fn push(&mut self, piece: &str) -> (String, bool) {
        if self.stops.is_empty() {
            return (piece.to_owned(), false);
        }
        self.held.push_str(piece);
        if let Some(at) = self
            .stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let out = self.held[..at].to_owned();
            self.held.clear();
            return (out, true);
        }
        // keep the longest suffix that is a prefix of some stop string
        let keep = self
            .stops
            .iter()
            .map(|s| {
                (1..s.len().min(self.held.len() + 1))
                    .rev()
                    .find(|&k| {
                        self.held.is_char_boundary(self.held.len() - k)
                            && s.starts_with(&self.held[self.held.len() - k..])
                    })
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_owned();
        self.held.drain(..cut);
        (out, false)
    }

    fn flush(&mut self, tail: &str) -> String {
        let mut s = std::mem::take(&mut self.held);
        s.push_str(tail);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    #[test]
    fn stop_strings_are_held_back_and_cut() {
        let stops = vec!["</end>".to_string(), "\n\n".to_string()];
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for piece in ["Hel", "lo </", "en", "d> world"] {
            let (e, stop) = m.push(piece);
            out.push_str(&e);
            if stop {
                break;
            }
        }
        assert_eq!(out, "Hello ");
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("a\n"), ("a".to_string(), false));
        assert_eq!(m.push("b"), ("\nb".to_string(), false));
        assert_eq!(m.push("\n\nc"), (String::new(), true));
    }
}
