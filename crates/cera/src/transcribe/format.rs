//! A transcript as the formats users expect of Whisper: plain text, SubRip (`.srt`), WebVTT
//! (`.vtt`), OpenAI's `json` (`{"text"}`) and `verbose_json` (language, duration, segments
//! with their times, tokens and decoding figures). The CLI and the server write the same bytes.

use std::fmt::Write;

use serde_json::{Value, json};

use super::Transcript;
use crate::error::{Error, Result};

/// The formats, by the names OpenAI's `response_format` and `cera transcribe -o` take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    Text,
    Srt,
    Vtt,
    Json,
    VerboseJson,
}

impl Format {
    /// `text`/`txt`, `srt`, `vtt`, `json`, `verbose_json`; another name is an error listing
    /// them.
    pub fn parse(s: &str) -> Result<Format> {
        Ok(match s {
            "text" | "txt" => Format::Text,
            "srt" => Format::Srt,
            "vtt" => Format::Vtt,
            "json" => Format::Json,
            "verbose_json" => Format::VerboseJson,
            _ => {
                return Err(Error::Model(format!(
                    "response format '{s}': the formats are text, srt, vtt, json and verbose_json"
                )));
            }
        })
    }

    /// The HTTP content type of the format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text | Format::Srt => "text/plain; charset=utf-8",
            Format::Vtt => "text/vtt; charset=utf-8",
            Format::Json | Format::VerboseJson => "application/json",
        }
    }
}

/// `hh:mm:ss{sep}mmm`.
fn clock(secs: f32, sep: char) -> String {
    let ms = (secs.max(0.0) as f64 * 1000.0).round() as u64;
    format!(
        "{:02}:{:02}:{:02}{sep}{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// The transcript in `f`.
pub fn render(t: &Transcript, f: Format) -> String {
    let mut out = String::new();
    match f {
        Format::Text => {
            out.push_str(t.text.trim());
            out.push('\n');
        }
        Format::Srt => {
            for (i, s) in t.segments.iter().enumerate() {
                let _ = write!(
                    out,
                    "{}\n{} --> {}\n{}\n\n",
                    i + 1,
                    clock(s.start, ','),
                    clock(s.end, ','),
                    s.text.trim()
                );
            }
        }
        Format::Vtt => {
            out.push_str("WEBVTT\n\n");
            for s in &t.segments {
                let _ = write!(
                    out,
                    "{} --> {}\n{}\n\n",
                    clock(s.start, '.'),
                    clock(s.end, '.'),
                    s.text.trim()
                );
            }
        }
        Format::Json => out = json!({ "text": t.text.trim() }).to_string(),
        Format::VerboseJson => out = verbose(t).to_string(),
    }
    out
}

/// OpenAI's `verbose_json`.
pub fn verbose(t: &Transcript) -> Value {
    let r = |x: f32| (x as f64 * 1000.0).round() / 1000.0;
    json!({
        "task": "transcribe",
        "language": t.language,
        "duration": r(t.duration),
        "text": t.text.trim(),
        "segments": t.segments.iter().enumerate().map(|(i, s)| json!({
            "id": i,
            "seek": s.seek,
            "start": r(s.start),
            "end": r(s.end),
            "text": s.text,
            "tokens": s.tokens,
            "temperature": s.temperature,
            "avg_logprob": s.avg_logprob,
            "no_speech_prob": s.no_speech_prob,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcribe::Segment;

    fn seg(start: f32, end: f32, text: &str) -> Segment {
        Segment {
            start,
            end,
            text: text.into(),
            tokens: vec![1, 2],
            temperature: 0.0,
            avg_logprob: -0.2,
            no_speech_prob: 0.01,
            seek: 0,
        }
    }

    #[test]
    fn subtitles_and_json() {
        let t = Transcript {
            text: " Hello there. General Kenobi.".into(),
            segments: vec![
                seg(0.0, 1.5, " Hello there."),
                seg(1.5, 3723.25, " General Kenobi."),
            ],
            language: "en".into(),
            duration: 3724.0,
        };
        assert_eq!(
            render(&t, Format::Srt),
            "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n\
             2\n00:00:01,500 --> 01:02:03,250\nGeneral Kenobi.\n\n"
        );
        assert!(render(&t, Format::Vtt).starts_with("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n"));
        assert_eq!(render(&t, Format::Text), "Hello there. General Kenobi.\n");
        let v: Value = serde_json::from_str(&render(&t, Format::VerboseJson)).unwrap();
        assert_eq!(v["segments"][1]["end"], 3723.25);
        assert_eq!(v["language"], "en");
        assert!(
            Format::parse("docx")
                .unwrap_err()
                .to_string()
                .contains("srt")
        );
    }
}
