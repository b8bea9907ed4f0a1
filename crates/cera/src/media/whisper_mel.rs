//! Whisper's log-mel spectrogram (OpenAI's `audio.py`, as whisper.cpp computes it): 16 kHz
//! samples, a 400-point FFT of periodic Hann windows every 160 samples (10 ms), the power
//! through the Slaney mel filterbank (80 or 128 bands), `log10` of at least 1e-10, everything
//! below the spectrogram's maximum minus 8 raised to it, then `(x + 4) / 4`.
//!
//! The samples are framed as `torch.stft(center=True)` frames them after 30 seconds of zeros
//! are appended (what `transcribe` does): a reflection of the first 200 samples in front, the
//! zeros and 200 more behind, and the last frame dropped; so a clip of `n` samples gives
//! `(n + 480_000) / 160` frames, and the maximum the floor follows is taken over all of them
//! (the zeros included, as whisper.cpp does).
//!
//! 400 is not a power of two: the FFT splits even and odd samples down to odd lengths (25) and
//! takes those as DFTs, in f64.

use super::mel::slaney_filterbank;
use crate::error::{Error, Result};

/// Samples per second.
pub const SAMPLE_RATE: usize = 16_000;
/// The FFT size and window length.
pub const N_FFT: usize = 400;
/// Samples between frames.
pub const HOP: usize = 160;
/// Samples in the 30-second window the model reads.
pub const N_SAMPLES: usize = 30 * SAMPLE_RATE;
/// Frames in that window.
pub const N_FRAMES: usize = N_SAMPLES / HOP;

/// A spectrogram `[n_mel, n_frames]` (each band's frames contiguous).
#[derive(Clone, Debug, PartialEq)]
pub struct WhisperMel {
    pub n_mel: usize,
    pub n_frames: usize,
    pub data: Vec<f32>,
}

impl WhisperMel {
    /// The frames `t0..t0 + N_FRAMES` as the encoder's input `[n_mel, N_FRAMES]`, frames past
    /// the end zero-padded with the floor value of a silent frame (as whisper.cpp pads).
    pub fn window(&self, t0: usize) -> Vec<f32> {
        let mut out = vec![0f32; self.n_mel * N_FRAMES];
        for m in 0..self.n_mel {
            let band = &self.data[m * self.n_frames..(m + 1) * self.n_frames];
            let dst = &mut out[m * N_FRAMES..(m + 1) * N_FRAMES];
            let have = self.n_frames.saturating_sub(t0).min(N_FRAMES);
            dst[..have].copy_from_slice(&band[t0..t0 + have]);
        }
        out
    }
}

/// The front end's tables for `n_mel` bands.
pub struct WhisperFrontEnd {
    n_mel: usize,
    /// `[N_FFT]` periodic Hann
    window: Vec<f64>,
    /// `[n_mel, N_FFT / 2 + 1]`
    filters: Vec<f32>,
    /// `[N_FFT]`: `e^(-2πi m / N_FFT)`, the FFT's twiddles (every sub-transform's length
    /// divides N_FFT)
    twiddles: Vec<(f64, f64)>,
}

/// `e^(-2πi m / n)` for `m` in `0..n`.
fn twiddles(n: usize) -> Vec<(f64, f64)> {
    (0..n)
        .map(|m| {
            let t = -2.0 * std::f64::consts::PI * m as f64 / n as f64;
            (t.cos(), t.sin())
        })
        .collect()
}

impl WhisperFrontEnd {
    pub fn new(n_mel: usize) -> Result<WhisperFrontEnd> {
        if n_mel == 0 {
            return Err(Error::Model("whisper mel front end: zero bands".into()));
        }
        let window = (0..N_FFT)
            .map(|i| 0.5 * (1.0 - (2.0 * std::f64::consts::PI * i as f64 / N_FFT as f64).cos()))
            .collect();
        Ok(WhisperFrontEnd {
            n_mel,
            window,
            filters: slaney_filterbank(n_mel, N_FFT, SAMPLE_RATE as u32),
            twiddles: twiddles(N_FFT),
        })
    }

    /// The filterbank `[n_mel, 201]` (what whisper.cpp's model files carry).
    pub fn filters(&self) -> &[f32] {
        &self.filters
    }

    /// The spectrogram of `samples` (16 kHz mono), 30 s of zeros appended (see the module).
    pub fn compute(&self, samples: &[f32]) -> Result<WhisperMel> {
        let n = samples.len();
        if n == 0 {
            return Err(Error::Media {
                what: "audio".into(),
                reason: "no samples".into(),
            });
        }
        let half = N_FFT / 2;
        // [half (reflection) | samples | N_SAMPLES + half zeros]
        let mut x = vec![0f32; n + N_SAMPLES + 2 * half];
        x[half..half + n].copy_from_slice(samples);
        for i in 0..half {
            // x[-1 - i] = samples[i + 1] (reflection without the edge); a clip shorter than
            // that reflects what it has and zeros
            x[half - 1 - i] = samples.get(i + 1).copied().unwrap_or(0.0);
        }
        let n_frames = (x.len() - N_FFT) / HOP;
        let n_bins = half + 1;
        let mut data = vec![0f32; self.n_mel * n_frames];
        let mut buf = vec![(0f64, 0f64); N_FFT];
        let mut scratch = vec![(0f64, 0f64); N_FFT];
        let mut power = vec![0f64; n_bins];
        // frames past the samples (and their reflection) see zeros only: log10(1e-10)
        let silent = (1e-10f64).log10();
        let last_live = (n + half) / HOP + 1;
        for t in 0..n_frames {
            if t >= last_live {
                for m in 0..self.n_mel {
                    data[m * n_frames + t] = silent as f32;
                }
                continue;
            }
            let frame = &x[t * HOP..t * HOP + N_FFT];
            for (b, (&s, &w)) in buf.iter_mut().zip(frame.iter().zip(&self.window)) {
                *b = (f64::from(s) * w, 0.0);
            }
            fft(&mut buf, &mut scratch, &self.twiddles);
            for (k, p) in power.iter_mut().enumerate() {
                *p = buf[k].0 * buf[k].0 + buf[k].1 * buf[k].1;
            }
            for m in 0..self.n_mel {
                let f = &self.filters[m * n_bins..(m + 1) * n_bins];
                let sum: f64 = f.iter().zip(&power).map(|(&a, &b)| f64::from(a) * b).sum();
                data[m * n_frames + t] = sum.max(1e-10).log10() as f32;
            }
        }
        let max = data.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let floor = max - 8.0;
        for v in &mut data {
            *v = (v.max(floor) + 4.0) / 4.0;
        }
        Ok(WhisperMel {
            n_mel: self.n_mel,
            n_frames,
            data,
        })
    }
}

/// In-place DFT of `x` (complex, any length): even and odd halves recursively while the
/// length is even, a direct DFT at an odd length; `scratch` as long as `x`; `tw` the
/// [`twiddles`] of a length that `x`'s divides (computed once: the sines and cosines were a
/// tenth of a transcription's time).
fn fft(x: &mut [(f64, f64)], scratch: &mut [(f64, f64)], tw: &[(f64, f64)]) {
    let n = x.len();
    if n <= 1 {
        return;
    }
    debug_assert!(tw.len().is_multiple_of(n));
    let stride = tw.len() / n;
    if n % 2 == 1 {
        let (s, _) = scratch.split_at_mut(n);
        for (k, out) in s.iter_mut().enumerate() {
            let mut acc = (0.0, 0.0);
            for (j, &(re, im)) in x.iter().enumerate() {
                let (c, si) = tw[(k * j) % n * stride];
                acc.0 += re * c - im * si;
                acc.1 += re * si + im * c;
            }
            *out = acc;
        }
        x.copy_from_slice(s);
        return;
    }
    let h = n / 2;
    {
        let (even, odd) = scratch[..n].split_at_mut(h);
        for i in 0..h {
            even[i] = x[2 * i];
            odd[i] = x[2 * i + 1];
        }
    }
    let (even, odd) = scratch[..n].split_at_mut(h);
    {
        let (a, b) = x.split_at_mut(h);
        fft(even, a, tw);
        fft(odd, b, tw);
    }
    for k in 0..h {
        let (c, s) = tw[k * stride];
        let (ore, oim) = odd[k];
        let w = (ore * c - oim * s, ore * s + oim * c);
        x[k] = (even[k].0 + w.0, even[k].1 + w.1);
        x[k + h] = (even[k].0 - w.0, even[k].1 - w.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The FFT against a direct DFT at Whisper's size and a few others.
    #[test]
    fn fft_matches_the_dft() {
        for n in [1, 2, 5, 8, 50, 400] {
            let x: Vec<(f64, f64)> = (0..n)
                .map(|i| (((i * 7) % 11) as f64 - 5.0, ((i * 3) % 5) as f64 * 0.1))
                .collect();
            let mut y = x.clone();
            let mut s = vec![(0.0, 0.0); n];
            fft(&mut y, &mut s, &twiddles(n));
            for (k, yk) in y.iter().enumerate() {
                let mut acc = (0.0, 0.0);
                for (j, &(re, im)) in x.iter().enumerate() {
                    let t = -2.0 * std::f64::consts::PI * (k * j) as f64 / n as f64;
                    acc.0 += re * t.cos() - im * t.sin();
                    acc.1 += re * t.sin() + im * t.cos();
                }
                assert!(
                    (yk.0 - acc.0).abs() < 1e-9 && (yk.1 - acc.1).abs() < 1e-9,
                    "{n} {k}"
                );
            }
        }
    }

    /// A tone's energy lands in the bands around its frequency; the frame count and the
    /// floor follow the module's rules; silence is an even floor.
    #[test]
    fn a_tone_and_the_frame_count() {
        let fe = WhisperFrontEnd::new(80).unwrap();
        let tone: Vec<f32> = (0..16_000)
            .map(|i| (2.0 * std::f32::consts::PI * 1000.0 * i as f32 / 16_000.0).sin() * 0.5)
            .collect();
        let m = fe.compute(&tone).unwrap();
        assert_eq!(m.n_frames, (16_000 + N_SAMPLES) / HOP);
        let t = 50;
        let col: Vec<f32> = (0..80).map(|b| m.data[b * m.n_frames + t]).collect();
        let peak = (0..80).max_by(|&a, &b| col[a].total_cmp(&col[b])).unwrap();
        // 1 kHz is mel band ~ 27 of 80 on the Slaney scale up to 8 kHz
        assert!((24..=30).contains(&peak), "peak band {peak}");
        let max = m.data.iter().fold(f32::MIN, |a, &b| a.max(b));
        let min = m.data.iter().fold(f32::MAX, |a, &b| a.min(b));
        assert!((max - min - 2.0).abs() < 1e-5, "{max} {min}");
        assert!(fe.compute(&[]).is_err());
        let w = m.window(m.n_frames - 10);
        assert_eq!(w.len(), 80 * N_FRAMES);
    }

    /// The filterbanks equal OpenAI's own (`mel_filters.npz` of the `openai-whisper` package,
    /// written to the fixture by scripts/gen-whisper-mel-fixture.py): 80 bands, and the 128
    /// of large-v3; and a 128-band front end gives 128 bands of the clip.
    #[test]
    fn filterbanks_equal_openai_mel_filters() {
        let fx: serde_json::Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/whisper/mel_filters.json"
        ))
        .unwrap();
        for n_mel in [80usize, 128] {
            let r = &fx[format!("mel_{n_mel}")];
            let n_bins = N_FFT / 2 + 1;
            assert_eq!(r["shape"], serde_json::json!([n_mel, n_bins]));
            let mut want = vec![0f32; n_mel * n_bins];
            for e in r["nonzero"].as_array().unwrap() {
                let (m, k) = (
                    e[0].as_u64().unwrap() as usize,
                    e[1].as_u64().unwrap() as usize,
                );
                want[m * n_bins + k] = e[2].as_f64().unwrap() as f32;
            }
            let got = slaney_filterbank(n_mel, N_FFT, SAMPLE_RATE as u32);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-6 * w.abs().max(1e-3),
                    "{n_mel} bands: band {} bin {}: {g} against OpenAI's {w}",
                    i / n_bins,
                    i % n_bins
                );
            }
        }
        let m = WhisperFrontEnd::new(128)
            .unwrap()
            .compute(&[0.1; 1600])
            .unwrap();
        assert_eq!((m.n_mel, m.data.len()), (128, 128 * m.n_frames));
    }
}
