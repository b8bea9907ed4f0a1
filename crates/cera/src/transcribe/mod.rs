//! Speech to text with a Whisper model, as whisper.cpp's `whisper_full` does it: the audio's
//! log-mel spectrogram read in 30-second windows; each window encoded once, then decoded from
//! Whisper's task tokens (after the previous windows' text, when conditioned on it) greedily
//! or by beam search, with the temperature raised when the result looks wrong (a repetition
//! loop, a low mean log-probability over speech); timestamps split the text into segments and
//! say where the next window starts.
//!
//! ```text
//! mod.rs     options, the window loop, segments, language detection
//! decode.rs  one window: logit rules, greedy / sampling / beam search, completion, scores
//! format.rs  text, SRT, WebVTT, JSON
//! ```

mod decode;
pub mod format;

use decode::{DELTA_MIN, Decoders, WINDOW_FRAMES, Window};

use std::collections::VecDeque;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::media::whisper_mel::{HOP, SAMPLE_RATE, WhisperFrontEnd};
use crate::models::whisper::Whisper;
use crate::sample::Rng;

/// What to transcribe and how; the defaults are whisper.cpp's `whisper-cli`'s.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TranscribeOptions {
    /// The spoken language's code (`en`, `de`…); `None` or `auto`: detected from the first
    /// window. Ignored by English-only models.
    pub language: Option<String>,
    /// Translate to English instead of transcribing (multilingual models).
    pub translate: bool,
    /// Segments with timestamps (Whisper's timestamp tokens); off: one segment a window.
    pub timestamps: bool,
    /// Beams of the beam search at temperature 0 (1: greedy).
    pub beam_size: usize,
    /// Samples drawn at a temperature above 0, the best kept.
    pub best_of: usize,
    /// The first temperature, and the step of the fallback up to 1.0 (0: no fallback).
    pub temperature: f32,
    pub temperature_inc: f32,
    /// A window is decoded again, hotter, when its text's entropy (last 32 tokens) is below
    /// this (a repetition loop)…
    pub entropy_threshold: f32,
    /// …or its mean log-probability below this while the no-speech probability is below
    /// `no_speech_threshold`; above both, the window is silence and has no text.
    pub logprob_threshold: f32,
    pub no_speech_threshold: f32,
    /// The first timestamp of a window is at most this many seconds in.
    pub max_initial_ts: f32,
    /// Decode each window after the previous windows' text (up to half the text context).
    pub condition_on_previous_text: bool,
    /// Text before the first window (names, spelling, style).
    pub initial_prompt: Option<String>,
    /// The length penalty of the ranking (`None`: the mean log-probability).
    pub length_penalty: Option<f32>,
    /// Tokens never sampled, beyond Whisper's task and timestamp rules.
    pub suppress_tokens: Vec<u32>,
    /// The seed of the sampling at temperatures above 0.
    pub seed: u64,
    /// Windows encoded in one pass where the next ones are known before the decoding
    /// (without timestamps: each window starts where the last one ended). 0: the backend's
    /// choice ([`ENCODER_BATCH`] where ops are dispatches, [`Backend::fuses_ops`]; 1 on the
    /// CPU, whose products already run blocks of rows at full speed).
    pub encoder_batch: usize,
}

/// Windows a GPU encodes at once without timestamps (see `benchmarks/README.md`).
pub const ENCODER_BATCH: usize = 4;

impl Default for TranscribeOptions {
    fn default() -> TranscribeOptions {
        TranscribeOptions {
            language: None,
            translate: false,
            timestamps: true,
            beam_size: 5,
            best_of: 5,
            temperature: 0.0,
            temperature_inc: 0.2,
            entropy_threshold: 2.4,
            logprob_threshold: -1.0,
            no_speech_threshold: 0.6,
            max_initial_ts: 1.0,
            condition_on_previous_text: true,
            initial_prompt: None,
            length_penalty: None,
            suppress_tokens: Vec::new(),
            seed: 0,
            encoder_batch: 0,
        }
    }
}

impl TranscribeOptions {
    /// The knobs every front end has (the CLI's flags, the bindings' configs, the server's
    /// form), set the one way: `language` `None` or `auto` detects it.
    pub fn with_task(
        mut self,
        language: Option<String>,
        translate: bool,
        timestamps: bool,
    ) -> Self {
        self.language = language;
        self.translate = translate;
        self.timestamps = timestamps;
        self
    }

    /// Beams at temperature 0 (1: greedy), and samples drawn at each fallback temperature.
    pub fn with_search(mut self, beam_size: usize, best_of: usize) -> Self {
        self.beam_size = beam_size;
        self.best_of = best_of;
        self
    }

    /// The first temperature; `fallback` off: no hotter retries of a failed window (as
    /// whisper.cpp's `-nf`).
    pub fn with_temperature(mut self, temperature: f32, fallback: bool) -> Self {
        self.temperature = temperature;
        if !fallback {
            self.temperature_inc = 0.0;
        }
        self
    }

    /// Text before the first window (names, spelling, style).
    pub fn with_prompt(mut self, initial_prompt: Option<String>) -> Self {
        self.initial_prompt = initial_prompt;
        self
    }

    /// Greedy decoding without timestamps or fallback: what the parity checks against
    /// whisper.cpp (`-nt -nf -bs 1 -bo 1`) compare.
    pub fn greedy() -> TranscribeOptions {
        TranscribeOptions {
            timestamps: false,
            beam_size: 1,
            best_of: 1,
            temperature_inc: 0.0,
            ..TranscribeOptions::default()
        }
    }
}

/// A stretch of the audio and its text.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// Seconds from the start of the audio.
    pub start: f32,
    pub end: f32,
    pub text: String,
    /// The segment's tokens (text and timestamp tokens; no task token).
    pub tokens: Vec<u32>,
    /// The window's decoding: its temperature, mean log-probability and no-speech probability.
    pub temperature: f32,
    pub avg_logprob: f32,
    pub no_speech_prob: f32,
    /// Where the window started (10 ms frames), as OpenAI's `seek`.
    pub seek: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Transcript {
    pub text: String,
    pub segments: Vec<Segment>,
    /// The language transcribed (`en` for English-only models).
    pub language: String,
    /// The audio's length in seconds.
    pub duration: f32,
}

/// The languages' probabilities for the audio's first window, likeliest first (whisper.cpp's
/// `whisper_lang_auto_detect`: the start-of-transcript token's logits over the language
/// tokens, softmaxed among them).
pub fn detect_language<B: Backend>(
    model: &Whisper,
    be: &B,
    samples: &[f32],
) -> Result<Vec<(String, f32)>> {
    let fe = WhisperFrontEnd::new(model.hp.n_mels)?;
    let mel = fe.compute(samples)?;
    let mut cx = B::Ctx::default();
    let r = detect_in(model, be, &mut cx, &mel.window(0));
    be.finish(&mut cx);
    r
}

fn detect_in<B: Backend>(
    model: &Whisper,
    be: &B,
    cx: &mut B::Ctx,
    window: &[f32],
) -> Result<Vec<(String, f32)>> {
    let langs = &model.special.languages;
    if !model.special.multilingual() || langs.is_empty() {
        return Err(Error::Model(
            "language detection needs a multilingual model (this one is English-only)".into(),
        ));
    }
    let d = &model.decoder;
    let enc = model.encoder.encode(be, cx, window)?;
    let mut audio = d.new_audio(be);
    d.set_audio(be, cx, &mut audio, &enc)?;
    let mut st = d.new_state(be);
    let logits = d.step(be, cx, &audio, &mut st, &[model.special.sot])?;
    let l: Vec<f32> = langs
        .iter()
        .map(|(_, id)| {
            logits
                .get(*id as usize)
                .copied()
                .unwrap_or(f32::NEG_INFINITY)
        })
        .collect();
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = l.iter().map(|&x| ((x - max) as f64).exp()).collect();
    let sum: f64 = e.iter().sum();
    let mut out: Vec<(String, f32)> = langs
        .iter()
        .zip(e)
        .map(|((c, _), p)| (c.clone(), (p / sum) as f32))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ok(out)
}

/// Transcribes `samples` (16 kHz mono) with `model` on `be`.
pub fn transcribe<B: Backend>(
    model: &Whisper,
    be: &B,
    samples: &[f32],
    opts: &TranscribeOptions,
) -> Result<Transcript> {
    check(opts)?;
    if samples.is_empty() {
        return Err(Error::Model("transcribe: no audio (0 samples)".into()));
    }
    if let Some(i) = samples.iter().position(|x| !x.is_finite()) {
        return Err(Error::Model(format!(
            "transcribe: sample {i} is not a number ({})",
            samples[i]
        )));
    }
    let sp = &model.special;
    let fe = WhisperFrontEnd::new(model.hp.n_mels)?;
    let mel = fe.compute(samples)?;
    let mut cx = B::Ctx::default();
    let language = match opts.language.as_deref() {
        _ if !sp.multilingual() => "en".to_owned(),
        None | Some("auto") | Some("") => {
            let probs = detect_in(model, be, &mut cx, &mel.window(0))?;
            probs[0].0.clone()
        }
        Some(l) => l.to_ascii_lowercase(),
    };
    let mut init = vec![sp.sot];
    if sp.multilingual() {
        let lang = sp
            .languages
            .iter()
            .find(|(c, _)| *c == language)
            .map(|(_, id)| *id)
            .ok_or_else(|| {
                Error::Model(format!(
                    "language '{language}' is not one this model knows ({} languages: {}…)",
                    sp.languages.len(),
                    sp.languages
                        .iter()
                        .take(8)
                        .map(|(c, _)| c.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        init.push(lang);
        init.push(if opts.translate {
            sp.translate
        } else {
            sp.transcribe
        });
    } else if opts.translate {
        return Err(Error::Model(
            "translation needs a multilingual model (this one is English-only)".into(),
        ));
    }
    if !opts.timestamps {
        init.push(sp.no_timestamps);
    }

    // the content's frames (the 30 s of padding not counted)
    let seek_end = 1 + (samples.len() + 200).saturating_sub(400) / HOP;
    let mut temperatures = vec![opts.temperature];
    if opts.temperature_inc > 0.0 {
        let mut t = opts.temperature + opts.temperature_inc;
        while t < 1.0 + 1e-6 {
            temperatures.push(t);
            t += opts.temperature_inc;
        }
    }
    // the previous windows' tokens (the initial prompt first)
    let mut past: Vec<u32> = match &opts.initial_prompt {
        Some(p) if !p.is_empty() => model.tokenizer.encode(p, false, false),
        _ => Vec::new(),
    };
    let max_prompt = model.hp.decoder.n_ctx / 2;
    let mut rng = Rng::new(opts.seed);
    let mut dec = Decoders::new();
    let mut segments = Vec::new();
    let mut seek = 0;
    let batch = match opts.encoder_batch {
        _ if opts.timestamps => 1,
        0 if be.fuses_ops() => ENCODER_BATCH,
        0 => 1,
        b => b,
    };
    // windows encoded ahead: (seek, its rows of the encoder's output)
    let mut ahead: VecDeque<(usize, B::Tensor)> = VecDeque::new();
    while seek + DELTA_MIN < seek_end {
        let enc = match ahead.pop_front() {
            Some((s, enc)) if s == seek => enc,
            _ if batch > 1 => {
                ahead = encode_ahead(model, be, &mut cx, &mel, seek, seek_end, batch)?;
                ahead.pop_front().expect("one window at least").1
            }
            _ => {
                let window = mel.window(seek);
                model.encoder.encode(be, &mut cx, &window)?
            }
        };
        // the cross-attention caches made anew after each window's encoding, not held through
        // it: the encoder's buffers and these are the peak of the memory in use
        let mut audio = model.decoder.new_audio(be);
        model.decoder.set_audio(be, &mut cx, &mut audio, &enc)?;
        drop(enc);
        if seek > 0 && seek + 500 >= seek_end {
            // a short last stretch: the past text tends to make the decoder repeat it
            past.clear();
        }
        let w = Window { seek, seek_end };
        let mut best = None;
        let mut prompt = Vec::new();
        for (it, &t) in temperatures.iter().enumerate() {
            prompt.clear();
            if opts.condition_on_previous_text && t < 0.5 && !past.is_empty() {
                prompt.push(sp.prev);
                let n = (max_prompt - 1).min(past.len());
                prompt.extend_from_slice(&past[past.len() - n..]);
            }
            prompt.extend_from_slice(&init);
            let (n_dec, beam) = if t > 0.0 {
                (opts.best_of.max(1), false)
            } else if opts.beam_size > 1 {
                (opts.beam_size, true)
            } else {
                (1, false)
            };
            let out = decode::decode_window(
                model, be, &mut cx, &audio, &mut dec, &prompt, w, opts, t, n_dec, beam, &mut rng,
            )?;
            let mut pick = None;
            let mut best_score = f64::NEG_INFINITY;
            for (j, s) in out.seqs.iter().enumerate() {
                if s.failed {
                    continue;
                }
                if s.result_len > 32 && s.entropy < opts.entropy_threshold as f64 {
                    continue;
                }
                if pick.is_none() || s.score > best_score {
                    best_score = s.score;
                    pick = Some(j);
                }
            }
            let ok = pick.is_some_and(|j| {
                let s = &out.seqs[j];
                !(s.avg_logprob < opts.logprob_threshold as f64
                    && out.no_speech_prob < opts.no_speech_threshold)
            });
            let last = it + 1 == temperatures.len();
            if ok || last {
                let j = pick.unwrap_or(0);
                best = Some((out.seqs.into_iter().nth(j), out.no_speech_prob, t));
                break;
            }
        }
        let (seq, no_speech, t) = best.expect("one temperature at least");
        let Some(seq) = seq.filter(|s| !s.failed) else {
            // every decoder failed at every temperature: nothing in this window
            seek += WINDOW_FRAMES.min(seek_end - seek);
            continue;
        };
        let no_speech_window =
            no_speech > opts.no_speech_threshold && seq.avg_logprob < opts.logprob_threshold as f64;
        // the next window's past: this prompt's past, then this window's tokens
        if prompt.first() != Some(&sp.prev) {
            past.clear();
        }
        if !no_speech_window {
            past.extend(seq.tokens.iter().map(|t| t.id));
        }
        if past.len() > max_prompt {
            past.drain(..past.len() - max_prompt);
        }
        let toks = &seq.tokens;
        if !toks.is_empty() && !no_speech_window {
            split_segments(model, &seq, w, t, no_speech, opts.timestamps, &mut segments);
        }
        let mut delta = seq.seek_delta;
        let n = toks.len();
        let beg = sp.timestamp_begin;
        if n > 1 && toks[n - 2].id < beg && toks[n - 1].id > beg {
            // one timestamp at the end: the rest of the window holds no more speech
            delta = (seek_end - seek).min(WINDOW_FRAMES);
        }
        seek += delta.max(1);
    }
    be.finish(&mut cx);
    let text = segments.iter().map(|s| s.text.as_str()).collect();
    Ok(Transcript {
        text,
        segments,
        language,
        duration: samples.len() as f32 / SAMPLE_RATE as f32,
    })
}

/// The windows from `seek` on, a window apart, up to `batch` of them, encoded in one pass
/// and split into each one's rows.
fn encode_ahead<B: Backend>(
    model: &Whisper,
    be: &B,
    cx: &mut B::Ctx,
    mel: &crate::media::whisper_mel::WhisperMel,
    seek: usize,
    seek_end: usize,
    batch: usize,
) -> Result<VecDeque<(usize, B::Tensor)>> {
    let seeks: Vec<usize> = (0..batch)
        .map(|i| seek + i * WINDOW_FRAMES)
        .take_while(|&s| s == seek || s + DELTA_MIN < seek_end)
        .collect();
    let windows: Vec<Vec<f32>> = seeks.iter().map(|&s| mel.window(s)).collect();
    let refs: Vec<&[f32]> = windows.iter().map(|w| w.as_slice()).collect();
    let all = model.encoder.encode_windows(be, cx, &refs)?;
    drop(windows);
    let n = model.hp.encoder.n_ctx;
    Ok(seeks
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let mut t = B::Tensor::default();
            let rows: Vec<usize> = (i * n..(i + 1) * n).collect();
            be.gather_rows(cx, &all, &rows, &mut t);
            (s, t)
        })
        .collect())
}

/// The window's tokens into segments at its timestamp tokens (whisper.cpp's rule: a
/// timestamp closes the text before it; a run of them opens the next at the last).
fn split_segments(
    model: &Whisper,
    seq: &decode::Seq,
    w: Window,
    temperature: f32,
    no_speech_prob: f32,
    timestamps: bool,
    out: &mut Vec<Segment>,
) {
    let beg = model.special.timestamp_begin;
    let eot = model.special.eot;
    let toks = &seq.tokens;
    let seek = w.seek;
    let secs = |frames: usize| frames as f32 * HOP as f32 / SAMPLE_RATE as f32;
    let frame = |tid: u32| seek + 2 * tid.saturating_sub(beg) as usize;
    let mut push = |t0: usize, t1: usize, ids: &[u32], text: Vec<u32>| {
        let s = model.tokenizer.decode(&text);
        if text.is_empty() {
            return;
        }
        out.push(Segment {
            start: secs(t0),
            end: secs(t1),
            text: s,
            tokens: ids.to_vec(),
            temperature,
            avg_logprob: seq.avg_logprob as f32,
            no_speech_prob,
            seek,
        });
    };
    let mut t0 = if timestamps { frame(toks[0].tid) } else { seek };
    let mut i0 = 0;
    let mut text: Vec<u32> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let id = toks[i].id;
        if id < eot {
            text.push(id);
        }
        if id > beg && timestamps {
            let t1 = frame(toks[i].tid);
            let ids: Vec<u32> = toks[i0..=i].iter().map(|t| t.id).collect();
            push(t0, t1, &ids, std::mem::take(&mut text));
            t0 = t1;
            while i + 1 < toks.len() && toks[i + 1].id > beg {
                i += 1;
                t0 = frame(toks[i].tid);
            }
            i0 = i + 1;
        }
        i += 1;
    }
    if !text.is_empty() {
        let t1 = (seek + seq.seek_delta).min(w.seek_end);
        let ids: Vec<u32> = toks[i0..].iter().map(|t| t.id).collect();
        push(t0, t1, &ids, text);
    }
}

fn check(o: &TranscribeOptions) -> Result<()> {
    let bad = |what: String| Err(Error::Model(format!("transcribe: {what}")));
    if o.beam_size == 0 || o.beam_size > 16 {
        return bad(format!("beam size {} (1 to 16)", o.beam_size));
    }
    if o.best_of == 0 || o.best_of > 16 {
        return bad(format!("best-of {} (1 to 16)", o.best_of));
    }
    if !(0.0..=1.0).contains(&o.temperature) || !(0.0..=1.0).contains(&o.temperature_inc) {
        return bad(format!(
            "temperature {} + {} a step (each 0 to 1)",
            o.temperature, o.temperature_inc
        ));
    }
    if !(o.entropy_threshold.is_finite()
        && o.logprob_threshold.is_finite()
        && o.no_speech_threshold.is_finite()
        && o.max_initial_ts.is_finite())
    {
        return bad("a threshold that is not a number".into());
    }
    Ok(())
}
