//! Audio files to the samples an audio encoder reads: WAV, MP3, FLAC and Ogg Vorbis decoded
//! by `symphonia`, channels averaged to mono, resampled to the encoder's rate as llama.cpp's
//! mtmd does ([`resample`]). Bounded: a clip past [`MAX_SECONDS`] is refused while it decodes,
//! so a lying header cannot make it allocate more.

use crate::error::{Error, Result};

/// The longest clip decoded, in seconds of audio (at 48 kHz stereo, 1.4 GB of f32 before
/// resampling would be the bound; the samples kept are mono).
pub const MAX_SECONDS: u64 = 30 * 60;

fn bad(reason: String) -> Error {
    Error::Media {
        what: "audio".into(),
        reason,
    }
}

/// Mono samples at `rate` Hz decoded from an audio file's bytes (the container and codec from
/// the bytes: RIFF WAV with PCM, MP3, FLAC, Ogg Vorbis).
pub fn decode_audio(bytes: &[u8], rate: u32) -> Result<Vec<f32>> {
    let (samples, src_rate) = decode_mono(bytes)?;
    resample(&samples, src_rate, rate)
}

/// Mono samples and their rate, as the file holds them.
pub fn decode_mono(bytes: &[u8]) -> Result<(Vec<f32>, u32)> {
    use symphonia::core::codecs::audio::AudioDecoderOptions;
    use symphonia::core::errors::Error as SymErr;
    use symphonia::core::formats::probe::Hint;
    use symphonia::core::formats::{FormatOptions, TrackType};
    use symphonia::core::io::MediaSourceStream;
    use symphonia::core::meta::MetadataOptions;

    if bytes.is_empty() {
        return Err(bad("the file is empty".into()));
    }
    let mss = MediaSourceStream::new(
        Box::new(std::io::Cursor::new(bytes.to_vec())),
        Default::default(),
    );
    let mut format = symphonia::default::get_probe()
        .probe(
            &Hint::new(),
            mss,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(|e| {
            bad(format!(
                "not an audio file this build reads (WAV, MP3, FLAC or Ogg Vorbis): {e}"
            ))
        })?;
    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| bad("the file has no audio track".into()))?;
    let track_id = track.id;
    let params = track
        .codec_params
        .as_ref()
        .and_then(|c| c.audio())
        .ok_or_else(|| bad("the audio track has no codec parameters".into()))?
        .clone();
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(|e| bad(format!("no decoder for the audio track: {e}")))?;
    let mut mono: Vec<f32> = Vec::new();
    let mut rate = 0u32;
    let mut frame = Vec::<f32>::new();
    let mut n_errors = 0usize;
    loop {
        let packet = match format.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            // a stream cut short ends where it was cut, as players do; what was decoded stays
            Err(SymErr::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(bad(format!("reading the audio stream: {e}"))),
        };
        if packet.track_id != track_id {
            continue;
        }
        let buf = match decoder.decode(&packet) {
            Ok(b) => b,
            Err(SymErr::DecodeError(e)) => {
                // a corrupt packet is skipped (as players do); a stream of them is not audio
                n_errors += 1;
                if n_errors > 64 && mono.is_empty() {
                    return Err(bad(format!("no packet decodes: {e}")));
                }
                continue;
            }
            Err(e) => return Err(bad(format!("decoding: {e}"))),
        };
        let spec = buf.spec();
        let channels = spec.channels().count().max(1);
        if rate == 0 {
            rate = spec.rate();
        } else if spec.rate() != rate {
            return Err(bad(format!(
                "the sample rate changes inside the stream ({rate} Hz, then {} Hz)",
                spec.rate()
            )));
        }
        if rate == 0 {
            return Err(bad("the stream says its sample rate is 0 Hz".into()));
        }
        let frames = buf.frames();
        if (mono.len() + frames) as u64 > MAX_SECONDS * u64::from(rate) {
            return Err(bad(format!(
                "longer than {} minutes (the most one clip may hold)",
                MAX_SECONDS / 60
            )));
        }
        frame.clear();
        buf.copy_to_vec_interleaved(&mut frame);
        // the channels' mean, summed then divided (as miniaudio downmixes)
        let div = channels as f32;
        mono.extend(
            frame
                .chunks_exact(channels)
                .map(|c| c.iter().sum::<f32>() / div),
        );
    }
    if mono.is_empty() {
        return Err(bad("the file holds no audio samples".into()));
    }
    if mono.iter().any(|v| !v.is_finite()) {
        return Err(bad("the decoded samples are not finite numbers".into()));
    }
    Ok((mono, rate))
}

/// `samples` at `from` Hz resampled to `to` Hz (a copy when the rates are equal) as
/// llama.cpp's mtmd resamples (miniaudio's default): the ratio reduced to lowest terms, a
/// fourth-order Butterworth low-pass at the lower rate's Nyquist frequency (two biquads,
/// transposed direct form II, f32) on the input side when decimating and on the output side
/// when interpolating, and linear interpolation between the two latest input samples. A
/// sharper resampler would give cleaner audio, and embeddings 0.9995 alike instead of 0.9999+.
pub fn resample(samples: &[f32], from: u32, to: u32) -> Result<Vec<f32>> {
    if from == 0 || to == 0 {
        return Err(bad(format!("resampling {from} Hz to {to} Hz")));
    }
    if from == to || samples.is_empty() {
        return Ok(samples.to_vec());
    }
    let g = gcd(from, to);
    let (fi, fo) = (from / g, to / g);
    let mut lpf = [
        Biquad::low_pass(fi.max(fo), fi.min(fo), 0),
        Biquad::low_pass(fi.max(fo), fi.min(fo), 1),
    ];
    let filter = |lpf: &mut [Biquad; 2], x: f32| lpf.iter_mut().fold(x, |v, b| b.process(v));
    let down = fi > fo;
    let (adv_int, adv_frac) = (fi / fo, fi % fo);
    let (mut x0, mut x1) = (0f32, 0f32);
    // one input sample is loaded before the first output
    let (mut t_int, mut t_frac) = (1u32, 0u32);
    let mut out =
        Vec::with_capacity((samples.len() as u64 * u64::from(fo) / u64::from(fi)) as usize + 1);
    let mut input = samples.iter();
    loop {
        while t_int > 0 {
            let Some(&x) = input.next() else { break };
            x0 = x1;
            x1 = if down { filter(&mut lpf, x) } else { x };
            t_int -= 1;
        }
        if t_int > 0 {
            break;
        }
        let a = t_frac as f32 / fo as f32;
        let y = x0 + (x1 - x0) * a;
        out.push(if down { y } else { filter(&mut lpf, y) });
        t_int += adv_int;
        t_frac += adv_frac;
        if t_frac >= fo {
            t_frac -= fo;
            t_int += 1;
        }
    }
    Ok(out)
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A second-order section of a Butterworth low-pass (the RBJ cookbook's form, coefficients
/// in f64 normalized and rounded to f32), in transposed direct form II.
struct Biquad {
    b0: f32,
    b1: f32,
    b2: f32,
    a1: f32,
    a2: f32,
    r1: f32,
    r2: f32,
}

impl Biquad {
    /// Section `k` of the fourth-order filter: Q = 1 / (2 cos((2k + 1) π / 8)).
    fn low_pass(rate: u32, cutoff: u32, k: u32) -> Biquad {
        use std::f64::consts::PI;
        let q = 1.0 / (2.0 * ((1 + 2 * k) as f64 * (PI / 8.0)).cos());
        let w = 2.0 * PI * (f64::from(cutoff) * 0.5) / f64::from(rate);
        let (s, c) = (w.sin(), w.cos());
        let alpha = s / (2.0 * q);
        let a0 = 1.0 + alpha;
        Biquad {
            b0: ((1.0 - c) / 2.0 / a0) as f32,
            b1: ((1.0 - c) / a0) as f32,
            b2: ((1.0 - c) / 2.0 / a0) as f32,
            a1: (-2.0 * c / a0) as f32,
            a2: ((1.0 - alpha) / a0) as f32,
            r1: 0.0,
            r2: 0.0,
        }
    }

    fn process(&mut self, x: f32) -> f32 {
        let y = self.b0 * x + self.r1;
        self.r1 = self.b1 * x - self.a1 * y + self.r2;
        self.r2 = self.b2 * x - self.a2 * y;
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 16-bit PCM WAV file of `samples` (interleaved) at `rate`.
    pub(crate) fn wav(samples: &[i16], channels: u16, rate: u32) -> Vec<u8> {
        let data_len = (samples.len() * 2) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(b"RIFF");
        b.extend_from_slice(&(36 + data_len).to_le_bytes());
        b.extend_from_slice(b"WAVEfmt ");
        b.extend_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&channels.to_le_bytes());
        b.extend_from_slice(&rate.to_le_bytes());
        b.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
        b.extend_from_slice(&(channels * 2).to_le_bytes());
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(b"data");
        b.extend_from_slice(&data_len.to_le_bytes());
        for s in samples {
            b.extend_from_slice(&s.to_le_bytes());
        }
        b
    }

    #[test]
    fn wav_stereo_is_averaged_and_resampled() {
        // 0.5 s of a 440 Hz tone at 48 kHz, the right channel silent
        let n = 24_000;
        let mut s = Vec::with_capacity(2 * n);
        for i in 0..n {
            let v = (2.0 * std::f32::consts::PI * 440.0 * i as f32 / 48_000.0).sin();
            s.push((v * 16_000.0) as i16);
            s.push(0);
        }
        let (mono, rate) = decode_mono(&wav(&s, 2, 48_000)).unwrap();
        assert_eq!((mono.len(), rate), (n, 48_000));
        let peak = mono.iter().fold(0f32, |a, &v| a.max(v.abs()));
        assert!((peak - 16_000.0 / 32_768.0 / 2.0).abs() < 1e-3, "{peak}");
        let r = decode_audio(&wav(&s, 2, 48_000), 16_000).unwrap();
        assert!((r.len() as i64 - 8_000).abs() <= 1, "{}", r.len());
        // the tone passes the low-pass whole (its RMS is the sine's) and a tone above the new
        // Nyquist frequency does not
        let rms = |x: &[f32]| (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
        let mid = rms(&r[2_000..6_000]);
        assert!(
            (mid - peak / 2f32.sqrt()).abs() < 0.01,
            "{mid} vs {}",
            peak / 2f32.sqrt()
        );
        let high: Vec<f32> = (0..48_000)
            .map(|i| (2.0 * std::f32::consts::PI * 15_000.0 * i as f32 / 48_000.0).sin())
            .collect();
        let h = resample(&high, 48_000, 16_000).unwrap();
        assert!(rms(&h[2_000..14_000]) < 0.05, "{}", rms(&h[2_000..14_000]));
    }

    #[test]
    fn hostile_files_are_named_errors() {
        let e = |b: &[u8]| decode_audio(b, 16_000).unwrap_err().to_string();
        assert!(e(&[]).contains("empty"));
        // a WAV header with no samples
        assert!(e(&wav(&[], 1, 16_000)).contains("no audio samples"));
        assert!(e(b"this is not audio at all, just some text").contains("not an audio file"));
        // an MP3 frame header that lies (a frame sync, then garbage)
        let mut lying = vec![0xFF, 0xFB, 0x90, 0x64];
        lying.extend(std::iter::repeat_n(0x55, 4000));
        let msg = e(&lying);
        assert!(msg.starts_with("audio:"), "{msg}");
    }
}
