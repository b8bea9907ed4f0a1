//! Decoding: sample, feed, stream text, stop on EOG, a stop string, a length or a grammar.

use std::time::Duration;

use crate::sample::Sampler;
use crate::session::{FinishReason, GenerateOptions, Summary, TokenLogprobs};

/// What one [`Generator::step`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Feed `id` next; `text` is the new complete text it adds (may be empty while a
    /// character or a possible stop string is incomplete).
    Token { id: u32, text: String },
    /// Generation ends; `text` is the last text to emit (what preceded a stop string, or the
    /// flushed rest). The sampled token, if any, is not fed.
    Done { reason: FinishReason, text: String },
}

/// Token-by-token generation for callers that run the forward passes themselves (a batched
/// scheduler's slot; [`super::Scheduler`] drives one per request): give it the logits of the last fed
/// token, it samples (under the grammar, if any), tracks stop strings and the text, and says
/// what to feed or why to stop.
pub struct Generator<'a> {
    tok: &'a crate::tokenizer::Tokenizer,
    sampler: Sampler,
    decoder: crate::tokenizer::StreamDecoder<'a>,
    stops: StopMatcher,
    constraint: Option<crate::grammar::Constraint<'a>>,
    max_tokens: usize,
    ignore_eog: bool,
    logprobs: Option<usize>,
    last_logprobs: Option<TokenLogprobs>,
    raw: Vec<f32>,
    /// Tokens sampled so far (the EOG or stop-completing one included).
    pub tokens: Vec<u32>,
    /// The text so far (stop string excluded).
    pub text: String,
    finished: Option<FinishReason>,
}

impl crate::engine::Engine {
    /// A [`Generator`] for a sequence whose context is `context` (the penalties see it).
    pub fn generator(&self, opts: &GenerateOptions, context: &[u32]) -> Generator<'_> {
        Generator::new(&self.inner, opts, context)
    }
}

impl<'a> Generator<'a> {
    pub(crate) fn new(
        engine: &'a crate::engine::EngineInner,
        opts: &GenerateOptions,
        context: &[u32],
    ) -> Generator<'a> {
        let mut sampler = Sampler::new(opts.sampler.clone());
        for &t in context {
            sampler.accept(t);
        }
        let tok = &engine.tokenizer;
        Generator {
            tok,
            sampler,
            decoder: tok.stream_decoder(),
            stops: StopMatcher::new(opts.stop.clone()),
            constraint: opts
                .grammar
                .as_ref()
                .map(|g| crate::grammar::Constraint::new(g, engine.token_trie(), tok)),
            max_tokens: opts.max_tokens,
            ignore_eog: opts.ignore_eog,
            logprobs: None,
            last_logprobs: None,
            raw: Vec::new(),
            tokens: Vec::new(),
            text: String::new(),
            finished: None,
        }
    }

    /// Also computes each chosen token's logprob and the `top` best alternatives.
    pub fn with_logprobs(mut self, top: usize) -> Self {
        self.logprobs = Some(top);
        self
    }

    /// The logprobs of the token the last step chose.
    pub fn take_logprobs(&mut self) -> Option<TokenLogprobs> {
        self.last_logprobs.take()
    }

    /// Tokens generated so far.
    /// How many of `draft`'s tokens in a row the grammar (if any) allows after the tokens
    /// sampled so far: a speculative drafter's proposal is cut there before verification,
    /// since the target could never pick a token past it.
    pub fn grammar_allowed_prefix(&self, draft: &[u32]) -> usize {
        self.constraint
            .as_ref()
            .map_or(draft.len(), |c| c.allowed_prefix(draft))
    }

    /// The token limit (0: none).
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    pub fn n_generated(&self) -> usize {
        self.tokens.len()
    }

    /// Why it ended, once it has.
    pub fn finished(&self) -> Option<FinishReason> {
        self.finished
    }

    /// Grammar counters: masked steps and time.
    pub fn grammar_stats(&self) -> (usize, Duration) {
        self.constraint
            .as_ref()
            .map_or((0, Duration::ZERO), |c| (c.n_masked, c.time))
    }

    fn done(&mut self, reason: FinishReason, mut text: String) -> Step {
        // flush text held back for a possible stop string or an incomplete character
        if reason != FinishReason::Stop {
            let rest = self.decoder.finish();
            text.push_str(&self.stops.flush(&rest));
        }
        self.text.push_str(&text);
        self.finished = Some(reason);
        Step::Done { reason, text }
    }

    /// Ends generation from outside (a cancel, a full context, a client gone).
    pub fn stop(&mut self, reason: FinishReason) -> Step {
        if self.finished.is_some() {
            return Step::Done {
                reason,
                text: String::new(),
            };
        }
        self.done(reason, String::new())
    }

    /// `Some(k)` when the next token depends on the top `k` logits alone (greedy: 1; a top-k
    /// sampler without penalties, biases, a grammar or log-probabilities): [`Generator::step_top`]
    /// may be given those instead of the whole row.
    pub fn top_k_only(&self) -> Option<usize> {
        if self.constraint.is_some() || self.logprobs.is_some() {
            return None;
        }
        self.sampler.top_k_only()
    }

    /// [`Generator::step`] from the top candidates of the last fed token's logits, largest
    /// first (at least [`Generator::top_k_only`] of them, as
    /// [`top_k_rows`](crate::backend::top_k_rows) ranks them).
    pub fn step_top(&mut self, top: &[(u32, f32)]) -> Step {
        self.step_from(Scores::Top(top))
    }

    /// Picks the next token from `logits` (those of the last fed token; modified in place).
    pub fn step(&mut self, logits: &mut [f32]) -> Step {
        self.step_from(Scores::Full(logits))
    }

    fn step_from(&mut self, scores: Scores<'_>) -> Step {
        if let Some(reason) = self.finished {
            return Step::Done {
                reason,
                text: String::new(),
            };
        }
        if self.max_tokens > 0 && self.tokens.len() >= self.max_tokens {
            return self.done(FinishReason::Length, String::new());
        }
        let (next, lp) = match scores {
            Scores::Top(top) => {
                debug_assert!(
                    self.top_k_only().is_some(),
                    "step_top with a full-row sampler"
                );
                (self.sampler.sample_top(top), None)
            }
            Scores::Full(logits) => {
                // the raw logits, before sampling transforms them in place
                let lp = self.logprobs.map(|n| {
                    self.raw.clear();
                    self.raw.extend_from_slice(logits);
                    raw_logprobs(logits, n)
                });
                let left = (self.max_tokens > 0).then(|| self.max_tokens - self.tokens.len());
                let next = match &mut self.constraint {
                    None => self.sampler.sample(logits),
                    Some(c) => match c.sample(&mut self.sampler, logits, left) {
                        Some(t) => t,
                        None => return self.done(FinishReason::GrammarDeadEnd, String::new()),
                    },
                };
                (next, lp)
            }
        };
        if let Some(c) = &mut self.constraint
            && !c.accept(next)
        {
            return self.done(FinishReason::GrammarDeadEnd, String::new());
        }
        if let Some((lse, top)) = lp {
            self.last_logprobs = Some(TokenLogprobs {
                token: next,
                logprob: self
                    .raw
                    .get(next as usize)
                    .map_or(f32::NEG_INFINITY, |&x| x - lse),
                top,
            });
        }
        self.sampler.accept(next);
        self.tokens.push(next);
        // with a finished grammar only EOG can follow: stop even when ignoring EOG
        if self.tok.is_eog(next)
            && (!self.ignore_eog || self.constraint.as_ref().is_some_and(|c| c.is_finished()))
        {
            return self.done(FinishReason::Eog, String::new());
        }
        let piece = self.decoder.push(next);
        let (emit, stopped) = self.stops.push(&piece);
        if stopped {
            return self.done(FinishReason::Stop, emit);
        }
        self.text.push_str(&emit);
        Step::Token {
            id: next,
            text: emit,
        }
    }
}

/// What a step samples from: the whole row of logits, or its top candidates.
enum Scores<'a> {
    Full(&'a mut [f32]),
    Top(&'a [(u32, f32)]),
}

/// `(log-sum-exp, the top n (token, logprob))` of raw logits.
fn raw_logprobs(logits: &[f32], n: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| ((x - max) as f64).exp()).sum();
    let lse = max + sum.ln() as f32;
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let k = n.min(idx.len());
    if k > 0 {
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
        idx.select_nth_unstable_by(k - 1, by_logit);
        idx.truncate(k);
        idx.sort_by(by_logit);
    } else {
        idx.clear();
    }
    let top = idx
        .into_iter()
        .map(|t| (t, logits[t as usize] - lse))
        .collect();
    (lse, top)
}

impl Generator<'_> {
    /// Moves the finished generation's tokens, text and counts into `summary`.
    pub(crate) fn fill_summary(
        &mut self,
        summary: &mut Summary,
        finish: FinishReason,
        decode: Duration,
    ) {
        summary.decode = decode;
        summary.finish = finish;
        summary.generated_tokens = self.tokens.len();
        (summary.grammar_masked, summary.grammar_time) = self.grammar_stats();
        summary.tokens = std::mem::take(&mut self.tokens);
        summary.text = std::mem::take(&mut self.text);
    }
}

/// The length of the longest suffix of `text` (on a char boundary, shorter than the pattern)
/// that is the start of one of `patterns`: what a stream must hold back because it could
/// still become a pattern (a stop string, a tool-call marker).
pub fn partial_match_len<S: AsRef<str>>(text: &str, patterns: &[S]) -> usize {
    patterns
        .iter()
        .map(|p| {
            let p = p.as_ref();
            (1..p.len().min(text.len() + 1))
                .rev()
                .find(|&k| {
                    text.is_char_boundary(text.len() - k) && p.starts_with(&text[text.len() - k..])
                })
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

/// Holds back text that could still become a stop string.
struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    fn new(stops: Vec<String>) -> Self {
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
        let keep = partial_match_len(&self.held, &self.stops);
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
        let mut m = StopMatcher::new(stops.clone());
        let mut out = String::new();
        for piece in ["Hel", "lo </", "en", "d> world"] {
            let (e, stop) = m.push(piece);
            out.push_str(&e);
            if stop {
                break;
            }
        }
        assert_eq!(out, "Hello ");
        let mut m = StopMatcher::new(stops.clone());
        assert_eq!(m.push("a\n"), ("a".to_string(), false));
        assert_eq!(m.push("b"), ("\nb".to_string(), false));
        assert_eq!(m.push("\n\nc"), (String::new(), true));
    }
}
