//! Speculative decoding: a drafter proposes the next few tokens cheaply, the target model
//! checks them all in one batched forward (logits at every position), the tokens it agrees
//! with are kept and the rest rolled back (KV positions, and LFM2's convolution state through
//! the session's snapshots), plus the one token the target picks where the draft went wrong
//! (or after the whole draft).
//!
//! Exactness: every kept token is the one the target's own sampler picks from the target's
//! logits at that position ([`crate::decode::Generator`] runs on each verified row), so
//! greedy output equals plain greedy decoding, and sampled output has the target's
//! distribution: drafters propose one token per position (a point mass q), for which
//! Leviathan et al.'s rule (accept with probability min(1, p/q), else draw from (p − q)⁺) is
//! exactly "draw from p; keep the draft iff the draw equals it". Grammars, stop strings and
//! EOG apply as in plain decoding. The one difference from plain decoding is rounding: the
//! verify pass computes K positions in one forward, which Cera's kernels make bit-identical to
//! K single steps (`tests/speculative.rs` checks it).
//!
//! Drafters ([`Drafter`]): [`NgramDrafter`] (prompt lookup) and [`DraftModel`] (a smaller
//! model with the same vocabulary, greedy); trained heads or sidecar drafters implement the
//! same trait.

mod draft;
mod ngram;

pub use draft::DraftModel;
pub use ngram::NgramDrafter;

/// Proposes up to `k` tokens to follow `ctx` (the whole sequence so far).
pub trait Drafter {
    fn propose(&mut self, ctx: &[u32], k: usize, out: &mut Vec<u32>) -> crate::Result<()>;
    /// For reports (`ngram`, `draft`).
    fn name(&self) -> &'static str;
}

impl<D: Drafter + ?Sized> Drafter for &mut D {
    fn propose(&mut self, ctx: &[u32], k: usize, out: &mut Vec<u32>) -> crate::Result<()> {
        (**self).propose(ctx, k, out)
    }
    fn name(&self) -> &'static str {
        (**self).name()
    }
}

/// How to speculate (see [`crate::session::Session::generate_speculative`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SpecOptions {
    /// Tokens drafted per verify pass at most.
    pub draft_max: usize,
    /// Drafts shorter than this are not verified (a plain step is cheaper).
    pub draft_min: usize,
    /// Pause drafting for a while when the recent acceptance rate falls below this, so a
    /// hopeless drafter costs almost nothing.
    pub min_acceptance: f64,
}

impl Default for SpecOptions {
    fn default() -> Self {
        SpecOptions {
            // a verify pass of k + 1 tokens costs more than one token's step on a CPU (the GEMM
            // turns arithmetic-bound): short drafts pay off best (benchmarks/README.md)
            draft_max: 6,
            draft_min: 1,
            min_acceptance: 0.25,
        }
    }
}

/// Plain steps drafting pauses for when acceptance falls.
const PAUSE: usize = 16;

/// The draft length policy of one sequence: start at `draft_max`, double after a draft kept
/// whole, cut back to what was kept (plus one) after a miss, and pause drafting for a few
/// steps when the recent acceptance (an exponential average) falls below `min_acceptance`, so
/// a hopeless drafter costs almost nothing. Shared by [`crate::session::Session`]'s
/// speculative generation and schedulers that speculate per slot.
#[derive(Clone, Debug)]
pub struct Adapt {
    k: usize,
    recent: f64,
    pause: usize,
    draft_max: usize,
    min_acceptance: f64,
}

impl Adapt {
    pub fn new(opts: &SpecOptions) -> Adapt {
        let draft_max = opts.draft_max.max(1);
        Adapt {
            k: draft_max,
            recent: 1.0,
            pause: 0,
            draft_max,
            min_acceptance: opts.min_acceptance,
        }
    }

    /// Tokens to draft this step (0 while paused; each call counts as one step).
    pub fn allowed(&mut self) -> usize {
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        self.k
    }

    /// After verifying a draft of `drafted` tokens of which `kept` were kept.
    pub fn record(&mut self, kept: usize, drafted: usize) {
        if drafted == 0 {
            return;
        }
        self.k = if kept == drafted {
            (self.k * 2).min(self.draft_max)
        } else {
            (kept + 1).clamp(1, self.draft_max)
        };
        self.recent = 0.7 * self.recent + 0.3 * (kept as f64 / drafted as f64);
        if self.recent < self.min_acceptance {
            self.pause = PAUSE;
            self.recent = self.min_acceptance * 2.0;
        }
    }
}

/// What speculation did in one generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpecStats {
    /// Tokens proposed and verified.
    pub drafted: usize,
    /// Of those, kept.
    pub accepted: usize,
    /// Verify passes (forwards with a draft).
    pub verify_steps: usize,
    /// Forwards of a single token (no draft, or drafting paused).
    pub plain_steps: usize,
    /// Drafted tokens dropped before verification because the grammar forbids them.
    pub grammar_cut: usize,
}

impl SpecStats {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &SpecStats) {
        self.drafted += o.drafted;
        self.accepted += o.accepted;
        self.verify_steps += o.verify_steps;
        self.plain_steps += o.plain_steps;
        self.grammar_cut += o.grammar_cut;
    }

    pub fn acceptance(&self) -> f64 {
        self.accepted as f64 / self.drafted.max(1) as f64
    }
}
