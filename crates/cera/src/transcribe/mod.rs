//! Speech to text with a Whisper model: the audio's log-mel spectrogram in 30-second windows,
//! each encoded once and decoded from Whisper's task tokens, as whisper.cpp's `whisper_full`
//! does (its logit filters, its window steps). This first form decodes greedily without
//! timestamps: a window is one segment, and the next window starts 30 s later.

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::media::whisper_mel::{HOP, N_FRAMES, SAMPLE_RATE, WhisperFrontEnd};
use crate::models::whisper::Whisper;

/// What to transcribe and how.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct TranscribeOptions {
    /// The spoken language's code (`en`, `de`…); `None`: English (detection comes later).
    /// Ignored by English-only models.
    pub language: Option<String>,
    /// Translate to English instead of transcribing (multilingual models).
    pub translate: bool,
    /// Most tokens a window's segment takes (whisper.cpp: half the text context, less 4).
    pub max_tokens: Option<usize>,
}

/// A stretch of the audio and its text.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// Seconds from the start of the audio.
    pub start: f32,
    pub end: f32,
    pub text: String,
    /// The sampled tokens (no task or timestamp tokens).
    pub tokens: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Transcript {
    pub text: String,
    pub segments: Vec<Segment>,
    /// The language transcribed (`en` for English-only models).
    pub language: String,
}

/// Windows closer than this to the end (10 ms frames) are not decoded (whisper.cpp's 100 ms).
const DELTA_MIN: usize = 10;

/// Transcribes `samples` (16 kHz mono) with `model` on `be`.
pub fn transcribe<B: Backend>(
    model: &Whisper,
    be: &B,
    samples: &[f32],
    opts: &TranscribeOptions,
) -> Result<Transcript> {
    let sp = &model.special;
    let multilingual = model.hp.n_vocab >= 51865;
    let language = if multilingual {
        opts.language.clone().unwrap_or_else(|| "en".into())
    } else {
        "en".into()
    };
    let mut init = vec![sp.sot];
    if multilingual {
        let lang = sp
            .languages
            .iter()
            .find(|(c, _)| *c == language)
            .map(|(_, id)| *id)
            .ok_or_else(|| {
                Error::Model(format!(
                    "language '{language}' is not one this model knows ({} languages)",
                    sp.languages.len()
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
    init.push(sp.no_timestamps);

    let fe = WhisperFrontEnd::new(model.hp.n_mels)?;
    let mel = fe.compute(samples)?;
    // the content's frames (the 30 s of padding not counted)
    let seek_end = 1 + (samples.len() + 200).saturating_sub(400) / HOP;
    let n_max = opts
        .max_tokens
        .unwrap_or(model.hp.decoder.n_ctx / 2 - 4)
        .min(model.hp.decoder.n_ctx - init.len());
    let mut cx = B::Ctx::default();
    let mut state = model.decoder.new_state(be);
    let mut segments = Vec::new();
    let mut seek = 0;
    while seek + DELTA_MIN < seek_end {
        let window = mel.window(seek);
        let enc = model.encoder.encode(be, &mut cx, &window)?;
        model.decoder.set_audio(be, &mut cx, &mut state, &enc)?;
        let mut tokens: Vec<u32> = Vec::new();
        let mut logits = model.decoder.step(be, &mut cx, &mut state, &init)?;
        for _ in 0..n_max {
            filter(model, &mut logits, tokens.is_empty());
            let next = argmax(&logits);
            if next == sp.eot {
                break;
            }
            tokens.push(next);
            if state.n_past + 1 > model.hp.decoder.n_ctx {
                break;
            }
            logits = model.decoder.step(be, &mut cx, &mut state, &[next])?;
        }
        let start = seek as f32 * HOP as f32 / SAMPLE_RATE as f32;
        let end_frame = (seek + N_FRAMES).min(seek_end);
        segments.push(Segment {
            start,
            end: end_frame as f32 * HOP as f32 / SAMPLE_RATE as f32,
            text: model.tokenizer.decode(&tokens),
            tokens,
        });
        seek += N_FRAMES;
    }
    be.finish(&mut cx);
    let text = segments.iter().map(|s| s.text.as_str()).collect();
    Ok(Transcript {
        text,
        segments,
        language,
    })
}

/// whisper.cpp's logit filters without timestamps: the end of text and the space never first,
/// no timestamp or task token, no start-of-transcript, no-speech, start-of-LM, previous-text
/// or language token.
fn filter(model: &Whisper, logits: &mut [f32], initial: bool) {
    let sp = &model.special;
    let mut off = |id: u32| {
        if let Some(l) = logits.get_mut(id as usize) {
            *l = f32::NEG_INFINITY;
        }
    };
    if initial {
        off(sp.eot);
        if let Some(space) = model.tokenizer.token_id("Ġ") {
            off(space);
        }
    }
    for id in [
        sp.no_timestamps,
        sp.sot,
        sp.nosp,
        sp.solm,
        sp.translate,
        sp.transcribe,
        sp.prev,
    ] {
        off(id);
    }
    for &(_, id) in &sp.languages {
        off(id);
    }
    for l in logits.iter_mut().skip(sp.timestamp_begin as usize) {
        *l = f32::NEG_INFINITY;
    }
}

/// The first index of the largest value.
fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}
