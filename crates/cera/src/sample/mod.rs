//! Token sampling: greedy; temperature, top-k, top-p, min-p, typical-p; repetition, frequency and
//! presence penalties over the last N tokens; logit bias; a seeded generator.
//!
//! The chain follows llama.cpp's default order: bias → penalties → top-k → typical-p → top-p →
//! min-p → temperature → draw. Candidates are found by partial selection; only the survivors
//! are sorted, never the whole vocabulary.

mod rng;

use std::collections::{HashMap, VecDeque};

pub use crate::error::BadOption;

pub use rng::Rng;

#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SamplerConfig {
    /// 0 or less: greedy.
    pub temperature: f32,
    /// 0: no limit.
    pub top_k: usize,
    /// 1.0: off.
    pub top_p: f32,
    /// 0.0: off.
    pub min_p: f32,
    /// 1.0: off.
    pub typical_p: f32,
    /// 1.0: off.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at (0: none).
    pub repeat_last_n: usize,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    /// Added to the logits of the given tokens (`f32::NEG_INFINITY` bans a token).
    pub logit_bias: Vec<(u32, f32)>,
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// llama.cpp's defaults.
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0xFFFF_FFFF,
        }
    }
}

impl SamplerConfig {
    /// Always the most likely token.
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        }
    }
}

impl SamplerConfig {
    /// The first option out of its range, named: every number finite (a logit bias may be
    /// −∞, which bans its token), `top_p`, `min_p` and `typical_p` within [0, 1],
    /// `repeat_penalty` positive. Every generation checks its options here before it starts;
    /// front ends call it to name the option their own way (a 400 naming `top_p`, a
    /// `ValueError`, `--top-p`).
    pub fn check(&self) -> Result<(), BadOption> {
        let bad = |field, reason: String| Err(BadOption { field, reason });
        for (field, v) in [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("typical_p", self.typical_p),
            ("repeat_penalty", self.repeat_penalty),
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            if !v.is_finite() {
                return bad(field, format!("must be a finite number (got {v})"));
            }
        }
        for (field, v) in [
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("typical_p", self.typical_p),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(field, format!("must be within [0, 1] (got {v})"));
            }
        }
        if self.repeat_penalty <= 0.0 {
            let v = self.repeat_penalty;
            return bad("repeat_penalty", format!("must be positive (got {v})"));
        }
        if let Some((t, v)) = self
            .logit_bias
            .iter()
            .find(|(_, v)| v.is_nan() || *v == f32::INFINITY)
        {
            return bad(
                "logit_bias",
                format!("of token {t} must be a number or -inf (got {v})"),
            );
        }
        Ok(())
    }
}

/// A sampler with its penalty window and generator; one per session.
#[derive(Clone, Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: Rng,
    recent: VecDeque<u32>,
    counts: HashMap<u32, u32>,
    cand: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Sampler {
        Sampler {
            rng: Rng::new(cfg.seed),
            recent: VecDeque::with_capacity(cfg.repeat_last_n),
            // at most `repeat_last_n` distinct tokens: sized once, never grows while decoding
            counts: HashMap::with_capacity(cfg.repeat_last_n),
            cand: Vec::new(),
            cfg,
        }
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Records a token (prompt or generated) in the penalty window.
    pub fn accept(&mut self, token: u32) {
        if self.cfg.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.cfg.repeat_last_n
            && let Some(old) = self.recent.pop_front()
            && let Some(c) = self.counts.get_mut(&old)
        {
            *c -= 1;
            if *c == 0 {
                self.counts.remove(&old);
            }
        }
        self.recent.push_back(token);
        *self.counts.entry(token).or_default() += 1;
    }

    /// Forgets the penalty window (the generator keeps its state).
    pub fn reset(&mut self) {
        self.recent.clear();
        self.counts.clear();
    }

    fn penalties_active(&self) -> bool {
        self.cfg.repeat_penalty != 1.0
            || self.cfg.frequency_penalty != 0.0
            || self.cfg.presence_penalty != 0.0
    }

    /// Candidates the most a backend ranks for [`Sampler::sample_top`] (beyond: whole rows).
    pub const MAX_TOP_K: usize = 256;

    /// `Some(k)` when a pick depends on the top `k` logits alone: greedy (1), or a top-k of at
    /// most [`Sampler::MAX_TOP_K`], without biases or penalties (which reorder the logits
    /// first).
    pub fn top_k_only(&self) -> Option<usize> {
        if !self.cfg.logit_bias.is_empty() || self.penalties_active() {
            return None;
        }
        if self.cfg.temperature <= 0.0 {
            return Some(1);
        }
        (1..=Self::MAX_TOP_K)
            .contains(&self.cfg.top_k)
            .then_some(self.cfg.top_k)
    }

    /// [`Sampler::sample`] from the top candidates of the logits (largest first, the lower
    /// token first among equals; at least [`Sampler::top_k_only`] of them): the same pick as
    /// from the whole row when the sampler reads only those.
    pub fn sample_top(&mut self, top: &[(u32, f32)]) -> u32 {
        if self.cfg.temperature <= 0.0 {
            return top.first().map_or(0, |c| c.0);
        }
        self.cand.clear();
        let k = self.cfg.top_k.max(1).min(top.len());
        self.cand.extend_from_slice(&top[..k]);
        self.typical();
        self.top_p();
        self.min_p();
        self.draw()
    }

    /// Picks the next token from `logits` (modified in place by bias and penalties).
    pub fn sample(&mut self, logits: &mut [f32]) -> u32 {
        for &(t, b) in &self.cfg.logit_bias {
            if let Some(l) = logits.get_mut(t as usize) {
                *l += b;
            }
        }
        if self.penalties_active() {
            for (&t, &c) in &self.counts {
                if let Some(l) = logits.get_mut(t as usize) {
                    if *l > 0.0 {
                        *l /= self.cfg.repeat_penalty;
                    } else {
                        *l *= self.cfg.repeat_penalty;
                    }
                    *l -= c as f32 * self.cfg.frequency_penalty + self.cfg.presence_penalty;
                }
            }
        }
        if self.cfg.temperature <= 0.0 {
            return crate::backend::argmax(logits) as u32;
        }
        self.top_candidates(logits);
        self.typical();
        self.top_p();
        self.min_p();
        self.draw()
    }

    /// Fills `cand` with the top-k tokens, sorted by logit descending. Without top-k, just
    /// enough of the head of the distribution to cover top-p and min-p is selected.
    fn top_candidates(&mut self, logits: &[f32]) {
        let n = logits.len();
        let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let mut k = if self.cfg.top_k > 0 {
            self.cfg.top_k.min(n)
        } else {
            n.min(256)
        };
        let total: f64 = if self.cfg.top_k == 0 {
            logits.iter().map(|&l| ((l - max) as f64).exp()).sum()
        } else {
            0.0
        };
        loop {
            self.cand.clear();
            self.cand
                .extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)));
            if k < n {
                self.cand
                    .select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
                self.cand.truncate(k);
            }
            self.cand
                .sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            if self.cfg.top_k > 0 || k == n {
                return;
            }
            // no top-k: grow until the selection holds the top-p mass and reaches below min-p
            let mass: f64 = self
                .cand
                .iter()
                .map(|c| ((c.1 - max) as f64).exp())
                .sum::<f64>()
                / total;
            let last_p = ((self.cand[k - 1].1 - max) as f64).exp();
            if mass >= self.cfg.top_p as f64
                && (self.cfg.min_p <= 0.0 || last_p < self.cfg.min_p as f64)
            {
                return;
            }
            k = (k * 4).min(n);
        }
    }

    /// Probabilities of the current candidates (softmax of their logits).
    fn probs(&self) -> Vec<f64> {
        let max = self.cand[0].1;
        let e: Vec<f64> = self
            .cand
            .iter()
            .map(|c| ((c.1 - max) as f64).exp())
            .collect();
        let s: f64 = e.iter().sum();
        e.into_iter().map(|x| x / s).collect()
    }

    fn typical(&mut self) {
        let p = self.cfg.typical_p;
        if p >= 1.0 || self.cand.len() <= 1 {
            return;
        }
        let probs = self.probs();
        let entropy: f64 = -probs
            .iter()
            .filter(|&&x| x > 0.0)
            .map(|&x| x * x.ln())
            .sum::<f64>();
        let mut idx: Vec<usize> = (0..self.cand.len()).collect();
        let shift = |i: usize| (-probs[i].ln() - entropy).abs();
        idx.sort_by(|&a, &b| shift(a).total_cmp(&shift(b)));
        let mut cum = 0.0;
        let mut keep = idx.len();
        for (j, &i) in idx.iter().enumerate() {
            cum += probs[i];
            if cum > p as f64 && j + 1 >= 1 {
                keep = j + 1;
                break;
            }
        }
        let mut kept: Vec<(u32, f32)> = idx[..keep].iter().map(|&i| self.cand[i]).collect();
        kept.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        self.cand = kept;
    }

    fn top_p(&mut self) {
        let p = self.cfg.top_p;
        if p >= 1.0 || self.cand.len() <= 1 {
            return;
        }
        let probs = self.probs();
        let mut cum = 0.0;
        for (i, &pi) in probs.iter().enumerate() {
            cum += pi;
            if cum >= p as f64 {
                self.cand.truncate(i + 1);
                return;
            }
        }
    }

    fn min_p(&mut self) {
        let p = self.cfg.min_p;
        if p <= 0.0 || self.cand.len() <= 1 {
            return;
        }
        // p_i >= p * p_max  <=>  logit_i >= logit_max + ln(p)
        let threshold = self.cand[0].1 + p.ln();
        let keep = self
            .cand
            .iter()
            .take_while(|c| c.1 >= threshold)
            .count()
            .max(1);
        self.cand.truncate(keep);
    }

    fn draw(&mut self) -> u32 {
        let t = self.cfg.temperature;
        let max = self.cand[0].1;
        let weights: Vec<f64> = self
            .cand
            .iter()
            .map(|c| (((c.1 - max) / t) as f64).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let mut r = self.rng.next_f64() * total;
        for (c, w) in self.cand.iter().zip(&weights) {
            if r < *w {
                return c.0;
            }
            r -= w;
        }
        self.cand.last().expect("at least one candidate").0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        (0..1000).map(|i| ((i * 37 % 101) as f32) / 10.0).collect()
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        let mut l = logits();
        let want = crate::backend::argmax(&l) as u32;
        assert_eq!(s.sample(&mut l), want);
    }

    #[test]
    fn same_seed_same_tokens_and_top_k_respected() {
        let cfg = SamplerConfig {
            seed: 42,
            temperature: 1.5,
            top_k: 5,
            top_p: 1.0,
            min_p: 0.0,
            ..Default::default()
        };
        let run = || {
            let mut s = Sampler::new(cfg.clone());
            (0..50).map(|_| s.sample(&mut logits())).collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let l = logits();
        let mut sorted: Vec<f32> = l.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let fifth = sorted[4];
        assert!(a.iter().all(|&t| l[t as usize] >= fifth));
        assert!(a.iter().collect::<std::collections::HashSet<_>>().len() > 1);
    }

    #[test]
    fn min_p_and_top_p_cut_the_tail_without_top_k() {
        let mut l = vec![0.0f32; 50_000];
        l[7] = 20.0;
        l[8] = 19.5;
        l[9] = 2.0;
        let cfg = SamplerConfig {
            seed: 1,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.1,
            ..Default::default()
        };
        let mut s = Sampler::new(cfg);
        for _ in 0..200 {
            let t = s.sample(&mut l.clone());
            assert!(t == 7 || t == 8, "{t}");
        }
        let cfg = SamplerConfig {
            seed: 1,
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
            min_p: 0.0,
            ..Default::default()
        };
        let mut s = Sampler::new(cfg);
        for _ in 0..50 {
            assert_eq!(s.sample(&mut l.clone()), 7);
        }
    }

    #[test]
    fn repetition_penalty_demotes_recent_tokens() {
        let cfg = SamplerConfig {
            temperature: 0.0,
            repeat_penalty: 2.0,
            repeat_last_n: 4,
            ..Default::default()
        };
        let mut s = Sampler::new(cfg);
        let mut l = vec![0.0f32; 10];
        l[3] = 5.0;
        l[4] = 3.0;
        s.accept(3);
        assert_eq!(s.sample(&mut l.clone()), 4); // 5/2 < 3
        for t in [0, 1, 2, 5] {
            s.accept(t); // 3 falls out of the window
        }
        assert_eq!(s.sample(&mut l), 3);
    }

    #[test]
    fn logit_bias_can_ban() {
        let cfg = SamplerConfig {
            temperature: 0.0,
            logit_bias: vec![(3, f32::NEG_INFINITY)],
            ..Default::default()
        };
        let mut s = Sampler::new(cfg);
        let mut l = vec![0.0f32; 10];
        l[3] = 5.0;
        l[4] = 3.0;
        assert_eq!(s.sample(&mut l), 4);
    }
}
