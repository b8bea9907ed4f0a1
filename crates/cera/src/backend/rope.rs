//! Rotary position embeddings: normal (adjacent pairs) and NeoX (halves) layouts, frequency
//! scaling, per-dimension frequency factors (Llama 3 `rope_freqs`) and YaRN, in one place.

/// Which elements form a rotated pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeKind {
    /// `(x[2i], x[2i+1])` — llama, granite.
    Normal,
    /// `(x[i], x[i + n_rot/2])` — qwen2, qwen3, gemma, phi3, olmo2, lfm2.
    Neox,
}

/// YaRN context extension.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeScaling {
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    pub n_ctx_orig: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    pub kind: RopeKind,
    /// Rotated dimensions per head (may be less than the head size).
    pub n_rot: usize,
    pub freq_base: f32,
    /// Linear scaling: positions are multiplied by this (1 / the scaling factor).
    pub freq_scale: f32,
    /// Per-pair divisors of the frequency (`rope_freqs.weight`), if the model has them.
    pub freq_factors: Option<Vec<f32>>,
    pub yarn: Option<RopeScaling>,
}

impl RopeConfig {
    pub fn new(kind: RopeKind, n_rot: usize, freq_base: f32) -> RopeConfig {
        RopeConfig {
            kind,
            n_rot,
            freq_base,
            freq_scale: 1.0,
            freq_factors: None,
            yarn: None,
        }
    }

    /// The YaRN correction range (in rotated dims) as ggml computes it.
    fn corr_dims(&self, y: &RopeScaling) -> [f32; 2] {
        let n_dims = self.n_rot as f32;
        let corr_dim = |n_rot: f32| {
            n_dims * (y.n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * self.freq_base.ln())
        };
        let start = corr_dim(y.beta_fast).floor().max(0.0);
        let end = corr_dim(y.beta_slow).ceil().min(n_dims - 1.0);
        [start, end]
    }

    /// Fills `cs` with `(cos, sin)` for each rotated pair at position `pos`.
    pub fn cos_sin(&self, pos: i64, cs: &mut [(f32, f32)]) {
        let theta_scale = self.freq_base.powf(-2.0 / self.n_rot as f32);
        let (ext, mut mscale, corr) = match &self.yarn {
            Some(y) if y.ext_factor != 0.0 => {
                let m = y.attn_factor * (1.0 + 0.1 * (1.0 / self.freq_scale).ln());
                (y.ext_factor, m, self.corr_dims(y))
            }
            Some(y) => (0.0, y.attn_factor, [0.0, 0.0]),
            None => (0.0, 1.0, [0.0, 0.0]),
        };
        if ext == 0.0 && self.yarn.is_none() {
            mscale = 1.0;
        }
        // theta for pair i is pos * base^(-2i/n_rot), built by repeated multiplication as ggml
        // does, so the rounding matches.
        let mut theta_base = pos as f32;
        for (i, c) in cs.iter_mut().enumerate().take(self.n_rot / 2) {
            let ff = self.freq_factors.as_ref().map_or(1.0, |f| f[i]);
            let theta_extrap = theta_base / ff;
            let theta_interp = self.freq_scale * theta_extrap;
            let theta = if ext != 0.0 {
                let i0 = (2 * i) as f32;
                let y = (i0 / 2.0 - corr[0]) / (corr[1] - corr[0]).max(0.001);
                let ramp = 1.0 - y.clamp(0.0, 1.0);
                let mix = ramp * ext;
                theta_interp * (1.0 - mix) + theta_extrap * mix
            } else {
                theta_interp
            };
            *c = (theta.cos() * mscale, theta.sin() * mscale);
            theta_base *= theta_scale;
        }
    }

    /// Rotates `n_heads` heads of `head_dim` in `x` (one token) with precomputed `cs`.
    pub fn apply(&self, x: &mut [f32], n_heads: usize, head_dim: usize, cs: &[(f32, f32)]) {
        let half = self.n_rot / 2;
        for h in 0..n_heads {
            let head = &mut x[h * head_dim..(h + 1) * head_dim];
            for (i, &(c, s)) in cs.iter().enumerate().take(half) {
                let (a, b) = match self.kind {
                    RopeKind::Normal => (2 * i, 2 * i + 1),
                    RopeKind::Neox => (i, i + half),
                };
                let x0 = head[a];
                let x1 = head[b];
                head[a] = x0 * c - x1 * s;
                head[b] = x0 * s + x1 * c;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity() {
        let cfg = RopeConfig::new(RopeKind::Neox, 8, 10000.0);
        let mut cs = vec![(0.0, 0.0); 4];
        cfg.cos_sin(0, &mut cs);
        let mut x: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let orig = x.clone();
        cfg.apply(&mut x, 2, 8, &cs);
        assert_eq!(x, orig);
    }

    #[test]
    fn rotation_preserves_norm_and_relative_angle() {
        for kind in [RopeKind::Normal, RopeKind::Neox] {
            let cfg = RopeConfig::new(kind, 64, 10000.0);
            let mut cs = vec![(0.0, 0.0); 32];
            let q: Vec<f32> = (0..64).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
            let k: Vec<f32> = (0..64).map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0).collect();
            let dot_at = |pq: i64, pk: i64| {
                let (mut a, mut b) = (q.clone(), k.clone());
                let mut cs2 = cs.clone();
                cfg.cos_sin(pq, &mut cs2);
                cfg.apply(&mut a, 1, 64, &cs2);
                cfg.cos_sin(pk, &mut cs2);
                cfg.apply(&mut b, 1, 64, &cs2);
                a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>()
            };
            // q·k depends only on the distance between positions
            let d1 = dot_at(10, 7);
            let d2 = dot_at(110, 107);
            assert!((d1 - d2).abs() < 1e-3, "{kind:?}: {d1} vs {d2}");
            cfg.cos_sin(5, &mut cs);
            let mut a = q.clone();
            cfg.apply(&mut a, 1, 64, &cs);
            let n0: f32 = q.iter().map(|v| v * v).sum();
            let n1: f32 = a.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
        }
    }
}
