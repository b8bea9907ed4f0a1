//! Log-mel spectrograms as llama.cpp's mtmd computes them (`mtmd-audio.cpp`): 16 kHz samples,
//! a windowed FFT every hop, power through a Slaney-scale mel filterbank (area-normalized, as
//! librosa's default), then a log. [`MelParams::conformer`] is the NeMo front end of LFM2-Audio's
//! FastConformer (centred frames, pre-emphasis, natural log of power plus a floor, each mel band
//! normalized over the clip); the same code takes Whisper's parameters.
//!
//! The FFT here is an iterative radix-2 one in f64 (mtmd's is recursive in f32 from a table):
//! the spectra agree to float rounding, which the per-band normalization does not amplify.

use crate::error::{Error, Result};

/// What the front end computes.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MelParams {
    pub sample_rate: u32,
    pub n_mel: usize,
    /// FFT size (a power of two); `n_fft / 2 + 1` bins.
    pub n_fft: usize,
    /// The Hann window's length, centred in the FFT frame when shorter.
    pub window: usize,
    /// A Hann window of `window - 1` intervals (NeMo, `periodic=False`) or `window` (Whisper).
    pub symmetric_window: bool,
    pub hop: usize,
    /// Half a frame of zeros before and after the samples.
    pub center: bool,
    /// `x[i] - preemph · x[i-1]` before the frames (0: none).
    pub preemph: f32,
    /// Each band's mean and deviation over the clip's frames taken out (NeMo's `per_feature`).
    pub normalize_per_band: bool,
}

impl MelParams {
    /// LFM2-Audio's FastConformer front end (mtmd's `lfm2a`): 128 bands, a 512-point FFT over
    /// 25 ms symmetric Hann windows every 10 ms, pre-emphasis 0.97, per-band normalization.
    pub fn conformer(n_mel: usize) -> MelParams {
        MelParams {
            sample_rate: 16_000,
            n_mel,
            n_fft: 512,
            window: 400,
            symmetric_window: true,
            hop: 160,
            center: true,
            preemph: 0.97,
            normalize_per_band: true,
        }
    }
}

/// A spectrogram: `[n_mel, n_frames]`, each band's frames contiguous (mtmd's layout).
#[derive(Clone, Debug, PartialEq)]
pub struct Mel {
    pub n_mel: usize,
    pub n_frames: usize,
    pub data: Vec<f32>,
}

/// The floor added to a band's power before its log (mtmd's `mel_floor`, 2⁻²⁴).
const MEL_FLOOR: f64 = 5.960_464_477_539_063e-8;

/// The front end's tables, made once per parameter set.
pub struct MelFrontEnd {
    p: MelParams,
    /// `[n_fft]`: the window, zero-padded to the frame and centred
    window: Vec<f32>,
    /// `[n_mel, n_fft / 2 + 1]`
    filters: Vec<f32>,
    /// `[n_fft / 2]` twiddles `e^{-2πik/n}`
    twiddles: Vec<(f64, f64)>,
}

impl MelFrontEnd {
    pub fn new(p: MelParams) -> Result<MelFrontEnd> {
        if !p.n_fft.is_power_of_two() || p.n_fft < 4 || p.window > p.n_fft || p.window < 2 {
            return Err(Error::Model(format!(
                "mel front end: n_fft {} must be a power of two at least the window {}",
                p.n_fft, p.window
            )));
        }
        if p.n_mel == 0 || p.hop == 0 || p.sample_rate == 0 {
            return Err(Error::Model(
                "mel front end: zero bands, hop or sample rate".into(),
            ));
        }
        // Hann, as mtmd fills it: the angle in f64, its cosine in f32
        let denom = if p.symmetric_window {
            p.window - 1
        } else {
            p.window
        };
        let pad = (p.n_fft - p.window) / 2;
        let mut window = vec![0f32; p.n_fft];
        for i in 0..p.window {
            let c = ((2.0 * std::f64::consts::PI * i as f64) / denom as f64) as f32;
            window[pad + i] = (0.5 * (1.0 - f64::from(c.cos()))) as f32;
        }
        let twiddles = (0..p.n_fft / 2)
            .map(|k| {
                let t = -2.0 * std::f64::consts::PI * k as f64 / p.n_fft as f64;
                (t.cos(), t.sin())
            })
            .collect();
        let filters = slaney_filterbank(p.n_mel, p.n_fft, p.sample_rate);
        Ok(MelFrontEnd {
            p,
            window,
            filters,
            twiddles,
        })
    }

    pub fn params(&self) -> &MelParams {
        &self.p
    }

    /// The spectrogram of `samples` (at the front end's rate). Fewer samples than two hops
    /// cannot be normalized per band: an error naming the length.
    pub fn compute(&self, samples: &[f32]) -> Result<Mel> {
        let p = &self.p;
        let n_in = samples.len();
        let effective = n_in / p.hop;
        if p.normalize_per_band && effective < 2 {
            return Err(Error::Media {
                what: "audio".into(),
                reason: format!(
                    "{n_in} samples is under two {} ms frames ({} samples at {} Hz)",
                    p.hop * 1000 / p.sample_rate as usize,
                    2 * p.hop,
                    p.sample_rate
                ),
            });
        }
        let half = p.n_fft / 2;
        let pad = if p.center { half } else { 0 };
        // [pad + n_in + pad]
        let mut x = vec![0f32; n_in + 2 * pad];
        x[pad..pad + n_in].copy_from_slice(samples);
        if p.preemph != 0.0 && n_in > 1 {
            // from the second sample on, against the previous one before it was changed
            let mut prev = x[pad];
            for v in &mut x[pad + 1..pad + n_in] {
                let cur = *v;
                *v = cur - p.preemph * prev;
                prev = cur;
            }
        }
        if x.len() < p.n_fft {
            return Err(Error::Media {
                what: "audio".into(),
                reason: format!("{n_in} samples is under one {}-sample frame", p.n_fft),
            });
        }
        let n_frames = (x.len() - p.n_fft) / p.hop + 1;
        let n_bins = half + 1;
        let mut data = vec![0f32; p.n_mel * n_frames];
        let mut re = vec![0f64; p.n_fft];
        let mut im = vec![0f64; p.n_fft];
        let mut power = vec![0f32; n_bins];
        for t in 0..n_frames {
            let frame = &x[t * p.hop..t * p.hop + p.n_fft];
            for (i, (&s, &w)) in frame.iter().zip(&self.window).enumerate() {
                re[i] = f64::from(w * s);
                im[i] = 0.0;
            }
            fft(&mut re, &mut im, &self.twiddles);
            for (k, pw) in power.iter_mut().enumerate() {
                let (r, i) = (re[k] as f32, im[k] as f32);
                *pw = r * r + i * i;
            }
            for m in 0..p.n_mel {
                let f = &self.filters[m * n_bins..(m + 1) * n_bins];
                let sum: f64 = f.iter().zip(&power).map(|(&a, &b)| f64::from(a * b)).sum();
                data[m * n_frames + t] = (sum + MEL_FLOOR).ln() as f32;
            }
        }
        if p.normalize_per_band {
            for band in data.chunks_exact_mut(n_frames) {
                let used = &band[..effective];
                let mean = used.iter().map(|&v| f64::from(v)).sum::<f64>() / effective as f64;
                let var = used
                    .iter()
                    .map(|&v| (f64::from(v) - mean).powi(2))
                    .sum::<f64>()
                    / (effective - 1) as f64;
                let std = var.sqrt() + 1e-5;
                for v in &mut band[..effective] {
                    *v = ((f64::from(*v) - mean) / std) as f32;
                }
                band[effective..].fill(0.0);
            }
        }
        Ok(Mel {
            n_mel: p.n_mel,
            n_frames,
            data,
        })
    }
}

/// The mel filterbank `[n_mel, n_fft / 2 + 1]`: triangles between Slaney-scale mel points
/// from 0 Hz to half the rate, each scaled to unit area (`2 / (right - left)`), in f64.
pub(crate) fn slaney_filterbank(n_mel: usize, n_fft: usize, rate: u32) -> Vec<f32> {
    const MIN_LOG_HZ: f64 = 1000.0;
    const LIN_SLOPE: f64 = 3.0 / 200.0;
    let min_log_mel = MIN_LOG_HZ * LIN_SLOPE;
    let log_step = 6.4f64.ln() / 27.0;
    let hz_to_mel = |f: f64| {
        if f < MIN_LOG_HZ {
            f * LIN_SLOPE
        } else {
            min_log_mel + (f / MIN_LOG_HZ).ln() / log_step
        }
    };
    let mel_to_hz = |m: f64| {
        if m < min_log_mel {
            m / LIN_SLOPE
        } else {
            MIN_LOG_HZ * ((m - min_log_mel) * log_step).exp()
        }
    };
    let fmax = 0.5 * f64::from(rate);
    let (lo, hi) = (hz_to_mel(0.0), hz_to_mel(fmax));
    let hz: Vec<f64> = (0..n_mel + 2)
        .map(|i| mel_to_hz(lo + (hi - lo) * (i as f64 / (n_mel + 1) as f64)))
        .collect();
    let n_bins = n_fft / 2 + 1;
    let step = f64::from(rate) / n_fft as f64;
    let mut out = vec![0f32; n_mel * n_bins];
    for m in 0..n_mel {
        let (l, c, r) = (hz[m], hz[m + 1], hz[m + 2]);
        let enorm = 2.0 / (r - l).max(1e-30);
        for k in 0..n_bins {
            let f = k as f64 * step;
            let w = if f >= l && f <= c {
                (f - l) / (c - l).max(1e-30)
            } else if f > c && f <= r {
                (r - f) / (r - c).max(1e-30)
            } else {
                0.0
            };
            out[m * n_bins + k] = (w * enorm) as f32;
        }
    }
    out
}

/// In-place radix-2 decimation-in-time FFT of `n` = `re.len()` points (a power of two);
/// `tw[k]` is `e^{-2πik/n}`.
fn fft(re: &mut [f64], im: &mut [f64], tw: &[(f64, f64)]) {
    let n = re.len();
    let bits = n.trailing_zeros();
    for i in 0..n {
        let j = i.reverse_bits() >> (usize::BITS - bits);
        if j > i {
            re.swap(i, j);
            im.swap(i, j);
        }
    }
    let mut len = 2;
    while len <= n {
        let stride = n / len;
        for start in (0..n).step_by(len) {
            for k in 0..len / 2 {
                let (wr, wi) = tw[k * stride];
                let (a, b) = (start + k, start + k + len / 2);
                let (xr, xi) = (re[b] * wr - im[b] * wi, re[b] * wi + im[b] * wr);
                re[b] = re[a] - xr;
                im[b] = im[a] - xi;
                re[a] += xr;
                im[a] += xi;
            }
        }
        len *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The FFT against a direct DFT.
    #[test]
    fn fft_matches_the_dft() {
        let n = 64;
        let x: Vec<f64> = (0..n).map(|i| ((i * 7 % 13) as f64 - 6.0) / 3.0).collect();
        let tw: Vec<(f64, f64)> = (0..n / 2)
            .map(|k| {
                let t = -2.0 * std::f64::consts::PI * k as f64 / n as f64;
                (t.cos(), t.sin())
            })
            .collect();
        let (mut re, mut im) = (x.clone(), vec![0.0; n]);
        fft(&mut re, &mut im, &tw);
        for k in 0..n {
            let (mut r, mut i) = (0.0, 0.0);
            for (j, &v) in x.iter().enumerate() {
                let t = -2.0 * std::f64::consts::PI * (k * j) as f64 / n as f64;
                r += v * t.cos();
                i += v * t.sin();
            }
            assert!(
                (re[k] - r).abs() < 1e-9 && (im[k] - i).abs() < 1e-9,
                "bin {k}"
            );
        }
    }

    /// A tone's energy lands in the band around its frequency; each used band is normalized
    /// to mean 0 and unit deviation, the frames past the clip are zero; short clips are
    /// refused by length.
    #[test]
    fn tone_bands_and_normalization() {
        let fe = MelFrontEnd::new(MelParams::conformer(128)).unwrap();
        let n = 16_000;
        let tone: Vec<f32> = (0..n)
            .map(|i| (2.0 * std::f32::consts::PI * 1000.0 * i as f32 / 16_000.0).sin() * 0.5)
            .collect();
        let mel = fe.compute(&tone).unwrap();
        assert_eq!(mel.n_frames, n / 160 + 1);
        let eff = n / 160;
        for band in mel.data.chunks_exact(mel.n_frames) {
            let mean: f64 = band[..eff].iter().map(|&v| v as f64).sum::<f64>() / eff as f64;
            assert!(mean.abs() < 1e-4, "mean {mean}");
            assert_eq!(band[eff], 0.0);
        }
        // before normalization the 1 kHz band is the loudest: check through a raw front end
        let mut raw = MelParams::conformer(128);
        raw.normalize_per_band = false;
        let raw = MelFrontEnd::new(raw).unwrap().compute(&tone).unwrap();
        let mid = raw.n_frames / 2;
        let loudest = (0..128)
            .max_by(|&a, &b| {
                raw.data[a * raw.n_frames + mid].total_cmp(&raw.data[b * raw.n_frames + mid])
            })
            .unwrap();
        // band centres: 1 kHz falls in the linear part of the Slaney scale, near band 37
        assert!((30..45).contains(&loudest), "loudest band {loudest}");
        let e = fe.compute(&tone[..300]).unwrap_err().to_string();
        assert!(e.contains("300 samples"), "{e}");
    }
}
