//! The rolling inputs of LFM2's causal short convolutions, one sequence's worth, in backend
//! memory. The convolution itself is a backend op ([`crate::backend::Backend::short_conv`]).

use crate::backend::{Backend, Device};
use crate::error::{Error, Result};

/// The rolling convolution inputs of every layer of one sequence.
pub struct ConvState<B: Backend = Device> {
    /// Per layer: `l_cache - 1` rows × `n_embd`, oldest first (`None` for layers without a
    /// convolution).
    pub layers: Vec<Option<B::Tensor>>,
    /// How many tokens the state has seen: a forward pass must continue from exactly here.
    pub n_past: usize,
    /// Zero rows: the state is fresh (no input yet), so clearing it can be skipped.
    fresh: bool,
    bytes: usize,
}

impl<B: Backend> Clone for ConvState<B>
where
    B::Tensor: Clone,
{
    fn clone(&self) -> Self {
        ConvState {
            layers: self.layers.clone(),
            n_past: self.n_past,
            fresh: self.fresh,
            bytes: self.bytes,
        }
    }
}

impl<B: Backend> Default for ConvState<B> {
    fn default() -> Self {
        ConvState {
            layers: Vec::new(),
            n_past: 0,
            fresh: true,
            bytes: 0,
        }
    }
}

impl<B: Backend> ConvState<B> {
    /// `(rows, cols)` per layer (`None` for layers without a convolution), zeroed.
    pub fn new(be: &B, sizes: impl IntoIterator<Item = Option<(usize, usize)>>) -> ConvState<B> {
        let mut bytes = 0;
        let layers = sizes
            .into_iter()
            .map(|s| {
                s.map(|(r, c)| {
                    bytes += r * c * 4;
                    be.zeros(r, c)
                })
            })
            .collect();
        ConvState {
            layers,
            n_past: 0,
            fresh: true,
            bytes,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.layers.iter().all(|l| l.is_none())
    }

    /// Back to the empty sequence (zero inputs before position 0).
    pub fn clear(&mut self, be: &B, cx: &mut B::Ctx) {
        if !self.fresh {
            for l in self.layers.iter_mut().flatten() {
                be.fill_zero(cx, l);
            }
        }
        self.fresh = true;
        self.n_past = 0;
    }

    /// Prepares a forward pass at `pos0`: position 0 starts over; anything else must continue
    /// where the state is, since the convolution cannot rewind.
    pub fn begin(&mut self, be: &B, cx: &mut B::Ctx, pos0: usize) -> Result<()> {
        if pos0 == 0 {
            self.clear(be, cx);
        } else if pos0 != self.n_past && !self.is_empty() {
            return Err(Error::Model(format!(
                "convolution state holds {} tokens; it cannot continue at position {pos0} \
                 (re-prefill from position 0)",
                self.n_past
            )));
        }
        Ok(())
    }

    /// After a forward pass of `n` tokens from `pos0`.
    pub fn advance(&mut self, pos0: usize, n: usize) {
        self.n_past = pos0 + n;
        self.fresh = self.fresh && n == 0;
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Copies the state (as of `n_past`) into `snap`, reusing its buffers.
    pub fn snapshot_into(&self, be: &B, cx: &mut B::Ctx, snap: &mut ConvSnapshot) {
        snap.pos = self.n_past;
        snap.layers.resize(self.layers.len(), None);
        for (l, s) in self.layers.iter().zip(snap.layers.iter_mut()) {
            match l {
                None => *s = None,
                Some(t) => be.download(cx, t, s.get_or_insert_with(Vec::new)),
            }
        }
    }

    /// Copies the state (as of `n_past`) into `snap` in backend memory, reusing its tensors:
    /// no read back (on a GPU the copies are recorded into the step's stream), so sessions
    /// take one after every forward pass.
    pub fn keep_into(&self, be: &B, cx: &mut B::Ctx, snap: &mut KeptState<B>) {
        snap.pos = self.n_past;
        snap.layers.resize_with(self.layers.len(), || None);
        for (l, s) in self.layers.iter().zip(snap.layers.iter_mut()) {
            match l {
                None => *s = None,
                Some(t) => {
                    let cols = be.shape(t).1;
                    be.copy_cols(cx, t, 0, cols, s.get_or_insert_with(Default::default));
                }
            }
        }
    }

    /// Puts the state back to `snap` (kept from this state by [`ConvState::keep_into`]).
    pub fn restore_kept(&mut self, be: &B, cx: &mut B::Ctx, snap: &KeptState<B>) -> Result<()> {
        if snap.layers.len() != self.layers.len()
            || self
                .layers
                .iter()
                .zip(&snap.layers)
                .any(|(l, s)| l.as_ref().map(|t| be.shape(t)) != s.as_ref().map(|t| be.shape(t)))
        {
            return Err(Error::Model(
                "convolution state snapshot: not this model's layers".into(),
            ));
        }
        for (l, s) in self.layers.iter_mut().zip(&snap.layers) {
            if let (Some(t), Some(v)) = (l, s) {
                let cols = be.shape(v).1;
                be.copy_cols(cx, v, 0, cols, t);
            }
        }
        self.n_past = snap.pos;
        self.fresh = false;
        Ok(())
    }

    /// A kept state read back to the host (to save it).
    pub fn kept_to_host(&self, be: &B, cx: &mut B::Ctx, snap: &KeptState<B>) -> ConvSnapshot {
        ConvSnapshot {
            pos: snap.pos,
            layers: snap
                .layers
                .iter()
                .map(|l| {
                    l.as_ref().map(|t| {
                        let mut v = Vec::new();
                        be.download(cx, t, &mut v);
                        v
                    })
                })
                .collect(),
        }
    }

    /// A host snapshot (read from saved bytes) in backend memory, checked against this state.
    pub fn host_to_kept(
        &self,
        be: &B,
        cx: &mut B::Ctx,
        snap: &ConvSnapshot,
    ) -> Result<KeptState<B>> {
        self.check(be, snap)?;
        let layers = self
            .layers
            .iter()
            .zip(&snap.layers)
            .map(|(l, s)| match (l, s) {
                (Some(t), Some(v)) => {
                    let (r, c) = be.shape(t);
                    let mut k = B::Tensor::default();
                    be.upload(cx, v, r, c, &mut k);
                    Some(k)
                }
                _ => None,
            })
            .collect();
        Ok(KeptState {
            pos: snap.pos,
            layers,
        })
    }

    pub fn snapshot(&self, be: &B, cx: &mut B::Ctx) -> ConvSnapshot {
        let mut s = ConvSnapshot::default();
        self.snapshot_into(be, cx, &mut s);
        s
    }

    /// Puts the state back to `snap` (taken from a state of the same model).
    pub fn restore(&mut self, be: &B, cx: &mut B::Ctx, snap: &ConvSnapshot) -> Result<()> {
        self.check(be, snap)?;
        for (l, s) in self.layers.iter_mut().zip(&snap.layers) {
            if let (Some(t), Some(v)) = (l, s) {
                let (r, c) = be.shape(t);
                be.upload(cx, v, r, c, t);
            }
        }
        self.n_past = snap.pos;
        self.fresh = false;
        Ok(())
    }

    /// Whether `snap` has this state's layers and sizes.
    pub fn check(&self, be: &B, snap: &ConvSnapshot) -> Result<()> {
        let bad = |why: String| Err(Error::Model(format!("convolution state snapshot: {why}")));
        if snap.layers.len() != self.layers.len() {
            return bad(format!(
                "{} layers, the model has {}",
                snap.layers.len(),
                self.layers.len()
            ));
        }
        for (i, (l, s)) in self.layers.iter().zip(&snap.layers).enumerate() {
            match (l, s) {
                (None, None) => {}
                (Some(t), Some(v)) => {
                    let (r, c) = be.shape(t);
                    if v.len() != r * c {
                        return bad(format!(
                            "layer {i} holds {} values, expected {}",
                            v.len(),
                            r * c
                        ));
                    }
                }
                _ => {
                    return bad(format!(
                        "layer {i} is a convolution in one and not the other"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A copy of a [`ConvState`] at one position in backend memory (see
/// [`ConvState::keep_into`]).
pub struct KeptState<B: Backend = Device> {
    /// Tokens the state had seen.
    pub pos: usize,
    /// Per layer, the rolling inputs (`None` for layers without a convolution).
    pub layers: Vec<Option<B::Tensor>>,
}

impl<B: Backend> Default for KeptState<B> {
    fn default() -> Self {
        KeptState {
            pos: 0,
            layers: Vec::new(),
        }
    }
}

impl<B: Backend> Clone for KeptState<B>
where
    B::Tensor: Clone,
{
    fn clone(&self) -> Self {
        KeptState {
            pos: self.pos,
            layers: self.layers.clone(),
        }
    }
}

/// A host copy of a [`ConvState`] at one position: cheap (two rows per convolution layer),
/// so sessions keep several to rewind without re-prefilling.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConvSnapshot {
    /// Tokens the state had seen.
    pub pos: usize,
    /// Per layer, the rolling inputs (`None` for layers without a convolution).
    pub layers: Vec<Option<Vec<f32>>>,
}

impl ConvSnapshot {
    pub fn bytes(&self) -> usize {
        self.layers.iter().flatten().map(|v| v.len() * 4).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cpu;
    use crate::backend::cpu::causal_conv;

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
        let mut tmp = Vec::new();
        let mut st = vec![0f32; (l - 1) * d];
        let mut all = vec![0f32; n * d];
        causal_conv(&x, d, &mut st, &kernel, &mut all, &mut tmp);
        let mut st1 = vec![0f32; (l - 1) * d];
        for t in 0..n {
            let mut o = vec![0f32; d];
            causal_conv(
                &x[t * d..(t + 1) * d],
                d,
                &mut st1,
                &kernel,
                &mut o,
                &mut tmp,
            );
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
        let cpu = Cpu::new(1);
        let mut cx = Default::default();
        let mut s: ConvState<Cpu> = ConvState::new(&cpu, [None, Some((2, 3))]);
        s.advance(0, 4);
        assert!(s.begin(&cpu, &mut cx, 4).is_ok());
        assert!(s.begin(&cpu, &mut cx, 2).is_err());
        s.layers[1].as_mut().unwrap().data_mut()[0] = 1.0;
        s.begin(&cpu, &mut cx, 0).unwrap();
        assert_eq!(s.n_past, 0);
        assert_eq!(s.layers[1].as_ref().unwrap().data()[0], 0.0);
    }
}
