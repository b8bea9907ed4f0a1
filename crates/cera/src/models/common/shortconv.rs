//! The causal depthwise short convolution of LFM2's convolution layers, over a rolling state of
//! the last `l_cache - 1` inputs, which lives in the session (see [`ConvState`]).
//!
//! As ggml's `ssm_conv`: each channel `c` has `l_cache` taps, the first for the oldest input;
//! `out[t][c] = Σ_k w[c][k] · seq[t + k][c]`, where `seq` is the state followed by the chunk's
//! inputs. Afterwards the state holds the last `l_cache - 1` entries of `seq`.

use crate::error::{Error, Result};

/// The rolling convolution inputs of every layer of one sequence.
#[derive(Clone, Debug, Default)]
pub struct ConvState {
    /// Per layer: `l_cache - 1` rows × `n_embd`, oldest first (empty for non-convolution layers).
    pub layers: Vec<Vec<f32>>,
    /// How many tokens the state has seen: a forward pass must continue from exactly here.
    pub n_past: usize,
}

impl ConvState {
    /// `sizes[il]` values per layer (0 for layers without a convolution).
    pub fn new(sizes: impl IntoIterator<Item = usize>) -> ConvState {
        ConvState {
            layers: sizes.into_iter().map(|n| vec![0.0; n]).collect(),
            n_past: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.layers.iter().all(|l| l.is_empty())
    }

    /// Back to the empty sequence (zero inputs before position 0).
    pub fn clear(&mut self) {
        for l in &mut self.layers {
            l.fill(0.0);
        }
        self.n_past = 0;
    }

    /// Prepares a forward pass at `pos0`: position 0 starts over; anything else must continue
    /// where the state is, since the convolution cannot rewind.
    pub fn begin(&mut self, pos0: usize) -> Result<()> {
        if pos0 == 0 {
            self.clear();
        } else if pos0 != self.n_past {
            return Err(Error::Model(format!(
                "convolution state holds {} tokens; it cannot continue at position {pos0} \
                 (re-prefill from position 0)",
                self.n_past
            )));
        }
        Ok(())
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| l.len() * 4).sum()
    }
}

/// Runs the convolution over `n` tokens of `x` (rows of `d`), writing `out` (rows of `d`) and
/// rolling `state` (`(l - 1) * d`). `kernel` is `d` rows of `l` taps.
pub fn causal_conv(x: &[f32], d: usize, state: &mut [f32], kernel: &[f32], out: &mut [f32]) {
    let n = x.len() / d;
    let l = kernel.len() / d;
    let dc = l - 1;
    debug_assert_eq!(state.len(), dc * d);
    debug_assert_eq!(out.len(), n * d);
    // row j of seq: state row j for j < dc, else x row j - dc
    let row = |j: usize| -> &[f32] {
        if j < dc {
            &state[j * d..(j + 1) * d]
        } else {
            &x[(j - dc) * d..(j - dc + 1) * d]
        }
    };
    for t in 0..n {
        let o = &mut out[t * d..(t + 1) * d];
        for (c, oc) in o.iter_mut().enumerate() {
            let w = &kernel[c * l..(c + 1) * l];
            let mut s = 0f32;
            for (k, &wk) in w.iter().enumerate() {
                s += row(t + k)[c] * wk;
            }
            *oc = s;
        }
    }
    // the new state: the last dc rows of seq (n + dc rows)
    let mut new = vec![0f32; dc * d];
    for j in 0..dc {
        new[j * d..(j + 1) * d].copy_from_slice(row(n + j));
    }
    state.copy_from_slice(&new);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One chunk of n tokens equals n chunks of one token, and equals the direct definition.
    #[test]
    fn chunked_equals_stepwise_equals_definition() {
        let (d, l, n) = (5, 3, 7);
        let x: Vec<f32> = (0..n * d)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0)
            .collect();
        let kernel: Vec<f32> = (0..d * l)
            .map(|i| ((i * 13 % 7) as f32 - 3.0) / 2.0)
            .collect();
        let mut st = vec![0f32; (l - 1) * d];
        let mut all = vec![0f32; n * d];
        causal_conv(&x, d, &mut st, &kernel, &mut all);
        let mut st1 = vec![0f32; (l - 1) * d];
        for t in 0..n {
            let mut o = vec![0f32; d];
            causal_conv(&x[t * d..(t + 1) * d], d, &mut st1, &kernel, &mut o);
            assert_eq!(o, all[t * d..(t + 1) * d]);
        }
        assert_eq!(st, st1);
        for t in 0..n {
            for c in 0..d {
                let mut want = 0f32;
                for k in 0..l {
                    // tap k sees the input l-1-k steps back; before 0 the input is zero
                    if let Some(s) = (t + k).checked_sub(l - 1) {
                        want += x[s * d + c] * kernel[c * l + k];
                    }
                }
                assert!((all[t * d + c] - want).abs() < 1e-5, "t {t} c {c}");
            }
        }
        // the state is the last l-1 inputs
        assert_eq!(st, x[(n - 2) * d..].to_vec());
    }

    #[test]
    fn state_refuses_to_rewind() {
        let mut s = ConvState::new([0, 6]);
        s.n_past = 4;
        assert!(s.begin(4).is_ok());
        assert!(s.begin(2).is_err());
        s.layers[1][0] = 1.0;
        s.begin(0).unwrap();
        assert_eq!((s.n_past, s.layers[1][0]), (0, 0.0));
    }
}
