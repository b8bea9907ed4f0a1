//! One 30-second window's decoding, as whisper.cpp's `whisper_full` does it: the prompt once,
//! then up to `n_text_ctx / 2 - 4` steps of every live decoder together (one batched step),
//! each step's logits filtered (Whisper's rules for task, language and timestamp tokens),
//! then a token chosen greedily, sampled (temperature > 0, best of N) or by beam search.
//! A decoder completes at the end of text or of the audio, and fails on a timestamp that goes
//! back or a window that never ends; the caller scores the survivors and falls back to a
//! higher temperature when the best one looks wrong.

use super::TranscribeOptions;
use crate::backend::Backend;
use crate::error::Result;
use crate::models::whisper::Whisper;
use crate::models::whisper::decoder::{AudioKv, DecoderState};
use crate::sample::Rng;

/// 30 s in 10 ms frames: a window's length and the step without timestamps.
pub(super) const WINDOW_FRAMES: usize = 3000;
/// Frames left at the end that are not worth decoding (whisper.cpp's 100 ms).
pub(super) const DELTA_MIN: usize = 10;

/// A chosen token: its id, its log-probability, and the likeliest timestamp token at that
/// step (the segment's start when the window begins with text).
#[derive(Clone, Copy, Debug)]
pub(super) struct Tok {
    pub id: u32,
    pub tid: u32,
    pub plog: f32,
}

/// One decoder's sequence and where it stands.
#[derive(Clone, Debug)]
pub(super) struct Seq {
    pub tokens: Vec<Tok>,
    /// The tokens that count (up to the last timestamp, or all at the end of text).
    pub result_len: usize,
    /// Every chosen token's log-probability summed (beam search ranks by it).
    sum_logprobs_all: f64,
    /// How far the window's text reaches (10 ms frames): the next window starts there.
    pub seek_delta: usize,
    has_ts: bool,
    pub failed: bool,
    completed: bool,
    pub avg_logprob: f64,
    pub entropy: f64,
    pub score: f64,
}

impl Seq {
    fn new() -> Seq {
        Seq {
            tokens: Vec::new(),
            result_len: 0,
            sum_logprobs_all: 0.0,
            seek_delta: WINDOW_FRAMES,
            has_ts: false,
            failed: false,
            completed: false,
            avg_logprob: f64::NEG_INFINITY,
            entropy: 0.0,
            score: f64::NEG_INFINITY,
        }
    }

    fn live(&self) -> bool {
        !self.completed && !self.failed
    }

    /// Keeps the tokens that count; the mean log-probability, the score (the sum over the
    /// length, or a length penalty) and the entropy of the last 32 tokens (a repetition loop
    /// has little).
    fn finish(&mut self, length_penalty: Option<f32>) {
        self.tokens.truncate(self.result_len);
        let n = self.result_len;
        if n == 0 {
            return;
        }
        let sum: f64 = self.tokens.iter().map(|t| t.plog as f64).sum();
        self.avg_logprob = sum / n as f64;
        let penalty = match length_penalty {
            Some(a) if a > 0.0 => ((5.0 + n as f64) / 6.0).powf(a as f64),
            _ => n as f64,
        };
        self.score = sum / penalty;
        let tail = &self.tokens[n.saturating_sub(32)..];
        let mut counts = std::collections::BTreeMap::<u32, usize>::new();
        for t in tail {
            *counts.entry(t.id).or_default() += 1;
        }
        self.entropy = counts
            .values()
            .map(|&c| {
                let p = c as f64 / tail.len() as f64;
                -p * p.ln()
            })
            .sum();
    }
}

/// Where the window sits in the audio (10 ms frames).
#[derive(Clone, Copy, Debug)]
pub(super) struct Window {
    pub seek: usize,
    pub seek_end: usize,
}

/// What a window's decoding returns: every decoder's sequence (finished: scored, or failed)
/// and the no-speech probability of the prompt's logits.
pub(super) struct Decoded {
    pub seqs: Vec<Seq>,
    pub no_speech_prob: f32,
}

/// Reused buffers: the decoders' caches and a beam's saved states.
pub(super) struct Decoders<B: Backend> {
    pub states: Vec<DecoderState<B>>,
    saved: Vec<Vec<u8>>,
}

impl<B: Backend> Decoders<B> {
    pub fn new() -> Decoders<B> {
        Decoders {
            states: Vec::new(),
            saved: Vec::new(),
        }
    }
}

/// A decoder's filtered log-probabilities at one step.
struct Step {
    logprobs: Vec<f32>,
    /// The likeliest timestamp token.
    tid: u32,
}

/// Decodes one window at temperature `t` with `n_dec` decoders (beam search when `beam`).
#[allow(clippy::too_many_arguments)]
pub(super) fn decode_window<B: Backend>(
    model: &Whisper,
    be: &B,
    cx: &mut B::Ctx,
    audio: &AudioKv<B>,
    dec: &mut Decoders<B>,
    prompt: &[u32],
    w: Window,
    opts: &TranscribeOptions,
    t: f32,
    n_dec: usize,
    beam: bool,
    rng: &mut Rng,
) -> Result<Decoded> {
    let d = &model.decoder;
    while dec.states.len() < n_dec {
        dec.states.push(d.new_state(be));
    }
    let mut seqs: Vec<Seq> = (0..n_dec).map(|_| Seq::new()).collect();
    // the prompt once, into the first decoder; the others start as copies of it
    dec.states[0].n_past = 0;
    let raw = d.step(be, cx, audio, &mut dec.states[0], prompt)?;
    let no_speech_prob = softmax_at(&raw, model.special.nosp);
    let first = process(model, opts, &raw, &seqs[0], t);
    let mut steps: Vec<Step> = Vec::with_capacity(n_dec);
    if n_dec > 1 {
        let mut buf = std::mem::take(&mut dec.saved);
        buf.resize(1, Vec::new());
        buf[0].clear();
        d.save_state(be, &dec.states[0], &mut buf[0]);
        for st in &mut dec.states[1..n_dec] {
            d.load_state(be, st, prompt.len(), &buf[0])?;
        }
        dec.saved = buf;
    }
    for _ in 0..n_dec {
        steps.push(Step {
            logprobs: first.logprobs.clone(),
            tid: first.tid,
        });
    }
    let n_max = model.hp.decoder.n_ctx / 2 - 4;
    let beg = model.special.timestamp_begin;
    let eot = model.special.eot;
    for i in 0..n_max {
        if beam {
            beam_step(model, be, dec, &mut seqs, &steps, n_dec)?;
        } else {
            for (s, st) in seqs.iter_mut().zip(&steps) {
                if !s.live() {
                    continue;
                }
                let id = if t < 1e-6 {
                    argmax(&st.logprobs)
                } else {
                    sample(&st.logprobs, rng)
                };
                let plog = st.logprobs[id as usize];
                let tid = if id >= beg { id } else { st.tid };
                s.tokens.push(Tok { id, tid, plog });
                s.sum_logprobs_all += plog as f64;
            }
        }
        for s in seqs.iter_mut().filter(|s| s.live()) {
            let tok = *s.tokens.last().expect("a live decoder has chosen a token");
            if tok.id > beg {
                let delta = 2 * (tok.id - beg) as usize;
                if s.has_ts && s.seek_delta > delta && s.result_len < i {
                    s.failed = true;
                    continue;
                }
                s.seek_delta = delta;
                s.result_len = i + 1;
                s.has_ts = true;
            }
            let audio_end = s.has_ts && w.seek + s.seek_delta + DELTA_MIN >= w.seek_end;
            if tok.id == eot || audio_end {
                if s.result_len == 0 && opts.timestamps {
                    if w.seek + s.seek_delta + DELTA_MIN >= w.seek_end {
                        s.result_len = i + 1;
                    } else {
                        s.failed = true;
                        continue;
                    }
                }
                if !opts.timestamps {
                    s.result_len = i + 1;
                    s.seek_delta = WINDOW_FRAMES;
                }
                s.completed = true;
                continue;
            }
            if i == n_max - 1 && (s.result_len == 0 || s.seek_delta < WINDOW_FRAMES / 2) {
                // a window that never ends: a repetition loop
                s.failed = true;
            }
        }
        let live: Vec<usize> = (0..n_dec).filter(|&j| seqs[j].live()).collect();
        if live.is_empty() {
            break;
        }
        // the next tokens of every live decoder, one batched step
        let toks: Vec<[u32; 1]> = live
            .iter()
            .map(|&j| [seqs[j].tokens.last().expect("chosen").id])
            .collect();
        let mut batch: Vec<(&mut DecoderState<B>, &[u32])> = Vec::with_capacity(live.len());
        let mut k = 0;
        for (j, st) in dec.states.iter_mut().enumerate().take(n_dec) {
            if live.get(k) == Some(&j) {
                batch.push((st, &toks[k][..]));
                k += 1;
            }
        }
        let logits = d.step_many(be, cx, audio, &mut batch)?;
        for (&j, raw) in live.iter().zip(&logits) {
            steps[j] = process(model, opts, raw, &seqs[j], t);
        }
    }
    for s in &mut seqs {
        if !s.failed {
            s.finish(opts.length_penalty);
        }
    }
    Ok(Decoded {
        seqs,
        no_speech_prob,
    })
}

/// Beam search's step: each live decoder's `beam_size` likeliest next tokens become
/// candidates, ranked by their sequences' summed log-probabilities; each live decoder takes
/// the best candidate no other took (and that candidate's history: its caches copied).
fn beam_step<B: Backend>(
    model: &Whisper,
    be: &B,
    dec: &mut Decoders<B>,
    seqs: &mut [Seq],
    steps: &[Step],
    n_dec: usize,
) -> Result<()> {
    let beg = model.special.timestamp_begin;
    // (decoder, token, sum of log-probabilities)
    let mut cands: Vec<(usize, Tok, f64)> = Vec::new();
    for (j, (s, st)) in seqs.iter().zip(steps).enumerate() {
        if !s.live() {
            continue;
        }
        for id in top_k(&st.logprobs, n_dec) {
            let plog = st.logprobs[id as usize];
            if plog == f32::NEG_INFINITY {
                continue;
            }
            let tid = if id >= beg { id } else { st.tid };
            cands.push((j, Tok { id, tid, plog }, s.sum_logprobs_all + plog as f64));
        }
    }
    if cands.is_empty() {
        return Ok(());
    }
    cands.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    let same = |a: &(usize, Tok, f64), b: &(usize, Tok, f64)| {
        a.1.id == b.1.id
            && seqs[a.0].tokens.len() == seqs[b.0].tokens.len()
            && seqs[a.0]
                .tokens
                .iter()
                .zip(&seqs[b.0].tokens)
                .all(|(x, y)| x.id == y.id)
    };
    let mut taken: Vec<usize> = Vec::new();
    let mut picks: Vec<(usize, usize)> = Vec::new(); // (decoder, candidate)
    let mut c = 0;
    for (j, s) in seqs.iter().enumerate().take(n_dec) {
        if !s.live() {
            continue;
        }
        let mut tries = 0;
        while tries < cands.len() {
            if c >= cands.len() {
                c = 0;
            }
            let dup = taken.iter().any(|&t| same(&cands[t], &cands[c]));
            if !dup || tries + 1 == cands.len() {
                break;
            }
            c += 1;
            tries += 1;
        }
        if c >= cands.len() {
            c = 0;
        }
        taken.push(c);
        picks.push((j, c));
        c += 1;
    }
    // the sources' histories first (a decoder may be both a source and a destination)
    let d = &model.decoder;
    let mut saved = std::mem::take(&mut dec.saved);
    saved.resize(n_dec, Vec::new());
    let mut src_len = vec![0usize; n_dec];
    let mut need = vec![false; n_dec];
    for &(j, ci) in &picks {
        let src = cands[ci].0;
        if src != j {
            need[src] = true;
        }
    }
    for (src, n) in need.iter().enumerate() {
        if *n {
            saved[src].clear();
            d.save_state(be, &dec.states[src], &mut saved[src]);
            src_len[src] = dec.states[src].n_past;
        }
    }
    let old: Vec<Seq> = picks
        .iter()
        .map(|&(_, ci)| seqs[cands[ci].0].clone())
        .collect();
    for (&(j, ci), mut s) in picks.iter().zip(old) {
        let (src, tok, sum) = cands[ci];
        if src != j {
            d.load_state(be, &mut dec.states[j], src_len[src], &saved[src])?;
        }
        s.tokens.push(tok);
        s.sum_logprobs_all = sum;
        seqs[j] = s;
    }
    dec.saved = saved;
    Ok(())
}

/// whisper.cpp's `whisper_process_logits`: `raw` over the temperature, then the rules (no
/// blank or end of text first, no task, language, start or no-speech token, timestamps in
/// pairs and never going back, the first one within `max_initial_ts`, a timestamp forced when
/// timestamps together outweigh every text token), then log-softmax.
fn process(model: &Whisper, opts: &TranscribeOptions, raw: &[f32], s: &Seq, t: f32) -> Step {
    let sp = &model.special;
    let n = raw.len();
    let beg = sp.timestamp_begin as usize;
    let eot = sp.eot as usize;
    let mut l: Vec<f32> = if t > 0.0 {
        raw.iter().map(|x| x / t).collect()
    } else {
        raw.to_vec()
    };
    let off = |l: &mut [f32], id: u32| {
        if let Some(x) = l.get_mut(id as usize) {
            *x = f32::NEG_INFINITY;
        }
    };
    let toks = &s.tokens;
    let initial = toks.is_empty();
    if initial {
        off(&mut l, sp.eot);
        if let Some(space) = model.tokenizer.token_id("Ġ") {
            off(&mut l, space);
        }
    }
    off(&mut l, sp.no_timestamps);
    if !opts.timestamps {
        l[beg.min(n)..].fill(f32::NEG_INFINITY);
    }
    for id in [
        sp.sot,
        sp.nosp,
        sp.solm,
        sp.translate,
        sp.transcribe,
        sp.prev,
    ] {
        off(&mut l, id);
    }
    for &(_, id) in &sp.languages {
        off(&mut l, id);
    }
    for &id in &opts.suppress_tokens {
        off(&mut l, id);
    }
    // timestamps come in pairs, except right before the end of text
    let last_ts = toks.last().is_some_and(|t| t.id as usize >= beg);
    let penult_ts = toks.len() < 2 || toks[toks.len() - 2].id as usize >= beg;
    if last_ts {
        if penult_ts {
            l[beg.min(n)..].fill(f32::NEG_INFINITY);
        } else {
            l[..eot.min(n)].fill(f32::NEG_INFINITY);
        }
    }
    if initial && opts.max_initial_ts > 0.0 {
        // one timestamp step is 30 s over the audio context (20 ms)
        let precision = 30.0 / model.hp.encoder.n_ctx as f32;
        let tid0 = (opts.max_initial_ts / precision).round() as usize;
        l[(beg + tid0 + 1).min(n)..].fill(f32::NEG_INFINITY);
    }
    if s.has_ts {
        // timestamps never go back
        let tid0 = s.seek_delta / 2;
        l[beg.min(n)..(beg + tid0).min(n)].fill(f32::NEG_INFINITY);
    }
    let mut lp = log_softmax(&l);
    if beg < n {
        let ts_max = lp[beg..].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut ts_lse = f32::NEG_INFINITY;
        if ts_max > f32::NEG_INFINITY {
            let sum: f32 = lp[beg..]
                .iter()
                .filter(|&&x| x > f32::NEG_INFINITY)
                .map(|&x| (x - ts_max).exp())
                .sum();
            if sum > 0.0 {
                ts_lse = sum.ln() + ts_max;
            }
        }
        let text_max = lp[..beg].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if ts_lse > text_max {
            lp[..beg].fill(f32::NEG_INFINITY);
        }
    }
    let tid = if beg < n {
        beg as u32 + argmax(&lp[beg..])
    } else {
        sp.timestamp_begin
    };
    Step { logprobs: lp, tid }
}

fn log_softmax(l: &[f32]) -> Vec<f32> {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return l.to_vec();
    }
    let sum: f32 = l
        .iter()
        .filter(|&&x| x > f32::NEG_INFINITY)
        .map(|&x| (x - max).exp())
        .sum();
    let lse = sum.ln() + max;
    l.iter()
        .map(|&x| {
            if x > f32::NEG_INFINITY {
                x - lse
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect()
}

/// The probability of `id` under the softmax of `raw` (no filter).
fn softmax_at(raw: &[f32], id: u32) -> f32 {
    let max = raw.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = raw.iter().map(|&x| ((x - max) as f64).exp()).sum();
    raw.get(id as usize)
        .map_or(0.0, |&x| (((x - max) as f64).exp() / sum) as f32)
}

/// The first index of the largest value.
pub(super) fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// The `k` largest values' indices, largest first (ties: lower index first).
fn top_k(x: &[f32], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..x.len() as u32).collect();
    let k = k.min(idx.len());
    if k == 0 {
        return Vec::new();
    }
    let cmp = |a: &u32, b: &u32| x[*b as usize].total_cmp(&x[*a as usize]).then(a.cmp(b));
    idx.select_nth_unstable_by(k - 1, cmp);
    idx.truncate(k);
    idx.sort_by(cmp);
    idx
}

/// A token drawn from the distribution `exp(lp)`.
fn sample(lp: &[f32], rng: &mut Rng) -> u32 {
    let mut r = rng.next_f64();
    let mut last = 0;
    for (i, &x) in lp.iter().enumerate() {
        if x == f32::NEG_INFINITY {
            continue;
        }
        let p = (x as f64).exp();
        last = i;
        if r < p {
            return i as u32;
        }
        r -= p;
    }
    last as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_and_breaks_ties_by_index() {
        let x = [0.1, 0.9, 0.5, 0.9, f32::NEG_INFINITY, 0.3];
        assert_eq!(top_k(&x, 3), vec![1, 3, 2]);
        assert_eq!(top_k(&x, 10).len(), 6);
    }

    #[test]
    fn log_softmax_keeps_masked_and_normalises() {
        let lp = log_softmax(&[1.0, f32::NEG_INFINITY, 1.0]);
        assert_eq!(lp[1], f32::NEG_INFINITY);
        assert!((lp[0].exp() + lp[2].exp() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn entropy_of_a_loop_is_low() {
        let mut s = Seq::new();
        s.tokens = (0..40)
            .map(|i| Tok {
                id: i % 2,
                tid: 0,
                plog: -0.1,
            })
            .collect();
        s.result_len = 40;
        s.finish(None);
        assert!((s.entropy - std::f64::consts::LN_2).abs() < 1e-9);
        assert!((s.avg_logprob + 0.1).abs() < 1e-6);
    }
}
