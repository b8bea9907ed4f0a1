//! LFM2-Audio's FastConformer encoder and its adapter, from an mmproj as llama.cpp writes it
//! (`clip.projector_type` `lfm2a`; mtmd's `models/conformer.cpp`), on any backend:
//!
//! - the pre-encoder: the log-mel `[frames, n_mel]` as a one-channel image through a 3 × 3
//!   stride-2 convolution, ReLU, then twice a depthwise 3 × 3 stride-2 convolution, a pointwise
//!   one and ReLU (8× fewer frames, 8× fewer bands), flattened (channel-major) and projected;
//! - per block (macaron): `x += ½ FFN(LN(x))`, `x += MHSA_relpos(LN(x))`, `x += Conv(LN(x))`,
//!   `x += ½ FFN(LN(x))`, `x = LN(x)`, where the attention scores are Transformer-XL's
//!   `(q + u)·k + (q + v)·P(i - j)` with sinusoidal relative positions and the convolution
//!   module is pointwise, GLU, depthwise (kernel 9, batch norm folded by the converter), SiLU,
//!   pointwise;
//! - the adapter: LayerNorm, Linear, GELU (erf), Linear, to the language model's width.
//!
//! The depthwise stride-2 convolutions of the pre-encoder run on the host (tens of millions of
//! products; the first convolution, the pointwise ones and every projection are backend matrix
//! products); the relative-position attention is [`Backend::rel_pos_attention`].

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

use crate::backend::{Act, Backend, Weight};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::media::mel::{Mel, MelFrontEnd, MelParams};
use crate::models::common::media::Linear;
use crate::models::loader::TensorLoader;

/// The mmproj's audio hyperparameters (`clip.audio.*`).
#[derive(Clone, Debug)]
pub struct AudioHparams {
    pub n_embd: usize,
    pub n_head: usize,
    pub n_layer: usize,
    pub n_mel: usize,
    pub eps: f32,
    /// The pre-encoder's channels (256 in LFM2-Audio).
    pub n_channels: usize,
    /// The feed-forward width (4 × n_embd in LFM2-Audio; from the tensors: the file's
    /// `feed_forward_length` says n_embd).
    pub n_ff: usize,
    /// The depthwise convolution's kernel (9).
    pub kernel: usize,
}

/// One conformer block.
pub struct ConformerLayer {
    /// `[n_embd]` LayerNorm weight and bias each
    pub ffn1_norm: (Vec<f32>, Vec<f32>),
    pub ffn1_up: Linear,
    pub ffn1_down: Linear,
    pub attn_norm: (Vec<f32>, Vec<f32>),
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    /// `[n_embd, n_embd]`, no bias: the relative positions' projection
    pub pos: Weight,
    /// `[n_head · head_dim]`: the biases of content (`u`) and position (`v`) scores
    pub pos_bias_u: Vec<f32>,
    pub pos_bias_v: Vec<f32>,
    pub conv_norm: (Vec<f32>, Vec<f32>),
    /// `[n_embd → 2 · n_embd]`, then the GLU
    pub pw1: Linear,
    /// `[n_embd, kernel]` depthwise taps and `[n_embd]` bias
    pub dw_w: Vec<f32>,
    pub dw_b: Vec<f32>,
    /// batch norm as folded by the converter: `x · scale + shift`
    pub bn_scale: Vec<f32>,
    pub bn_shift: Vec<f32>,
    pub pw2: Linear,
    pub ffn2_norm: (Vec<f32>, Vec<f32>),
    pub ffn2_up: Linear,
    pub ffn2_down: Linear,
    pub out_norm: (Vec<f32>, Vec<f32>),
}

/// A loaded LFM2-Audio encoder.
pub struct Conformer {
    pub hp: AudioHparams,
    /// `[channels, 3 · 3]` first convolution (one input channel) as a matrix over a patch's
    /// nine values, and `[channels]` bias
    pub conv0: Linear,
    /// the two depthwise (`[channels, 3, 3]`) and pointwise (`[channels → channels]`) pairs
    pub dw: [(Vec<f32>, Vec<f32>); 2],
    pub pw: [Linear; 2],
    /// `[channels · n_mel / 8 → n_embd]`
    pub pre_out: Linear,
    pub layers: Vec<ConformerLayer>,
    pub adapter_norm: (Vec<f32>, Vec<f32>),
    pub adapter1: Linear,
    pub adapter2: Linear,
    front_end: MelFrontEnd,
}

/// Tensors an LFM2-Audio mmproj carries for the model's audio output (the codebook
/// embeddings and their head), which mtmd reads only for a width: not used to encode.
const OUTPUT_HEAD: [&str; 3] = [
    "a.position_embd.weight",
    "a.position_embd_norm.weight",
    "a.embd_to_logits.weight",
];

/// The sample rate the encoder reads.
pub const SAMPLE_RATE: u32 = 16_000;

impl Conformer {
    /// The audio half of an mmproj file (`clip.has_audio_encoder`); what it lacks or holds in
    /// the wrong shape is named, and so is a tensor nothing reads.
    pub fn load(file: &Arc<GgufFile>) -> Result<Conformer> {
        let key = |k: &str| format!("clip.audio.{k}");
        let u = |k: &str| -> Result<usize> { Ok(file.get_u32(&key(k))? as usize) };
        let n_embd = u("embedding_length")?;
        let n_head = u("attention.head_count")?;
        let n_layer = u("block_count")?;
        let n_mel = u("num_mel_bins")?;
        let eps = file
            .get_opt::<f32>(&key("attention.layer_norm_epsilon"))?
            .unwrap_or(1e-5);
        if n_head == 0 || !n_embd.is_multiple_of(n_head) || n_embd == 0 {
            return Err(Error::Model(format!(
                "clip.audio: {n_head} heads do not divide embedding_length {n_embd}"
            )));
        }
        if n_mel < 8 || !n_mel.is_multiple_of(8) {
            return Err(Error::Model(format!(
                "clip.audio.num_mel_bins is {n_mel}: the pre-encoder halves the bands three \
                 times (a multiple of 8)"
            )));
        }
        let ld = TensorLoader::new(Arc::clone(file));
        let used: RefCell<HashSet<String>> = RefCell::new(HashSet::new());
        let take = |name: &str| {
            used.borrow_mut().insert(name.to_owned());
            name.to_owned()
        };
        // shapes read from the tensors the widths are not in the metadata for
        let dim = |name: &str, i: usize| -> Result<usize> {
            let t = file
                .tensor(name)
                .ok_or_else(|| Error::MissingTensor(name.into()))?;
            Ok(t.shape.get(i).copied().unwrap_or(1) as usize)
        };
        let n_channels = dim("a.conv1d.0.weight", 3)?;
        let n_ff = dim("a.blk.0.ffn_up.weight", 1)?;
        let kernel = dim("a.blk.0.conv_dw.weight", 0)?;
        if n_channels == 0 || n_ff == 0 || kernel == 0 || kernel.is_multiple_of(2) {
            return Err(Error::Model(format!(
                "clip.audio: {n_channels} pre-encoder channels, feed-forward {n_ff}, kernel \
                 {kernel} (an odd kernel is centred)"
            )));
        }
        let exact = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
            let t = file
                .tensor(name)
                .ok_or_else(|| Error::MissingTensor(name.into()))?;
            let got: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
            if got != shape {
                return Err(Error::GgufTensor {
                    tensor: name.into(),
                    reason: format!("shape {got:?}, but the encoder expects {shape:?}"),
                });
            }
            file.tensor_f32(name)
        };
        let c = n_channels;
        let lin = |name: &str, cols: usize, rows: usize, bias: bool| -> Result<Linear> {
            let w = ld.matrix(&take(&format!("{name}.weight")), cols, rows)?;
            let b = if bias {
                ld.vector(&take(&format!("{name}.bias")), rows)?
            } else {
                vec![0.0; rows]
            };
            Ok(Linear { w, b })
        };
        exact("a.conv1d.0.weight", &[3, 3, 1, c])?;
        let conv0 = Linear {
            w: Weight::new(file, file.tensor("a.conv1d.0.weight").expect("checked")).reshaped(
                9,
                c,
                "a.conv1d.0.weight",
            )?,
            b: exact("a.conv1d.0.bias", &[1, 1, c])?,
        };
        let dw = [
            (
                exact("a.conv1d.2.weight", &[3, 3, 1, c])?,
                exact("a.conv1d.2.bias", &[1, 1, c])?,
            ),
            (
                exact("a.conv1d.5.weight", &[3, 3, 1, c])?,
                exact("a.conv1d.5.bias", &[1, 1, c])?,
            ),
        ];
        let pointwise = |i: usize| -> Result<Linear> {
            let name = format!("a.conv1d.{i}.weight");
            let info = file
                .tensor(&name)
                .ok_or_else(|| Error::MissingTensor(name.clone()))?;
            if info.shape[..] != [1, 1, c as u64, c as u64] {
                return Err(Error::GgufTensor {
                    tensor: name,
                    reason: format!(
                        "shape {:?}, but the encoder expects [1, 1, {c}, {c}]",
                        info.shape
                    ),
                });
            }
            Ok(Linear {
                w: Weight::new(file, info).reshaped(c, c, &name)?,
                b: exact(&format!("a.conv1d.{i}.bias"), &[1, 1, c])?,
            })
        };
        let pw = [pointwise(3)?, pointwise(6)?];
        for i in [0, 2, 3, 5, 6] {
            take(&format!("a.conv1d.{i}.weight"));
            take(&format!("a.conv1d.{i}.bias"));
        }
        let pre_out = lin("a.pre_encode.out", c * n_mel / 8, n_embd, true)?;
        let d = n_embd;
        let hd = d / n_head;
        let mut layers = Vec::with_capacity(n_layer);
        for il in 0..n_layer {
            let p = |n: &str| format!("a.blk.{il}.{n}");
            let norm = |n: &str| -> Result<(Vec<f32>, Vec<f32>)> {
                Ok((
                    ld.vector(&take(&p(&format!("{n}.weight"))), d)?,
                    ld.vector(&take(&p(&format!("{n}.bias"))), d)?,
                ))
            };
            let ffn1_norm = norm("ffn_norm")?;
            let attn_norm = norm("ln1")?;
            let conv_norm = norm("norm_conv")?;
            let ffn2_norm = norm("ffn_norm_1")?;
            let out_norm = norm("ln2")?;
            let (bn_scale, bn_shift) = norm("conv_norm")?;
            let bias_uv = |n: &str| exact(&p(n), &[hd, n_head]);
            let layer = ConformerLayer {
                ffn1_up: lin(&p("ffn_up"), d, n_ff, true)?,
                ffn1_down: lin(&p("ffn_down"), n_ff, d, true)?,
                q: lin(&p("attn_q"), d, d, true)?,
                k: lin(&p("attn_k"), d, d, true)?,
                v: lin(&p("attn_v"), d, d, true)?,
                o: lin(&p("attn_out"), d, d, true)?,
                pos: lin(&p("linear_pos"), d, d, false)?.w,
                pos_bias_u: bias_uv("pos_bias_u")?,
                pos_bias_v: bias_uv("pos_bias_v")?,
                pw1: lin(&p("conv_pw1"), d, 2 * d, true)?,
                dw_w: exact(&p("conv_dw.weight"), &[kernel, d])?,
                dw_b: exact(&p("conv_dw.bias"), &[d])?,
                pw2: lin(&p("conv_pw2"), d, d, true)?,
                ffn2_up: lin(&p("ffn_up_1"), d, n_ff, true)?,
                ffn2_down: lin(&p("ffn_down_1"), n_ff, d, true)?,
                ffn1_norm,
                attn_norm,
                conv_norm,
                bn_scale,
                bn_shift,
                ffn2_norm,
                out_norm,
            };
            for n in ["pos_bias_u", "pos_bias_v", "conv_dw.weight", "conv_dw.bias"] {
                take(&p(n));
            }
            layers.push(layer);
        }
        let adapter_norm = (
            ld.vector(&take("mm.a.mlp.0.weight"), d)?,
            ld.vector(&take("mm.a.mlp.0.bias"), d)?,
        );
        let n_mid = dim("mm.a.mlp.1.weight", 1)?;
        let n_out = dim("mm.a.mlp.3.weight", 1)?;
        let adapter1 = lin("mm.a.mlp.1", d, n_mid, true)?;
        let adapter2 = lin("mm.a.mlp.3", n_mid, n_out, true)?;
        let used = used.into_inner();
        for t in &file.tensors {
            let name = t.name.as_str();
            if (name.starts_with("a.") || name.starts_with("mm.a."))
                && !used.contains(name)
                && !OUTPUT_HEAD.contains(&name)
            {
                return Err(Error::GgufTensor {
                    tensor: name.into(),
                    reason: "an audio tensor the LFM2-Audio encoder does not use (a newer \
                             layout, or a damaged file?)"
                        .into(),
                });
            }
        }
        Ok(Conformer {
            front_end: MelFrontEnd::new(MelParams::conformer(n_mel))?,
            hp: AudioHparams {
                n_embd,
                n_head,
                n_layer,
                n_mel,
                eps,
                n_channels,
                n_ff,
                kernel,
            },
            conv0,
            dw,
            pw,
            pre_out,
            layers,
            adapter_norm,
            adapter1,
            adapter2,
        })
    }

    /// The width of the embeddings it hands the language model.
    pub fn n_embd_out(&self) -> usize {
        self.adapter2.w.rows
    }

    /// The log-mel spectrogram of 16 kHz samples, as mtmd computes it for this encoder.
    pub fn mel(&self, samples: &[f32]) -> Result<Mel> {
        self.front_end.compute(samples)
    }

    /// How many embeddings `n_samples` 16 kHz samples become (their spectrogram's frames 8×
    /// fewer), before anything is computed.
    pub fn n_tokens_for(&self, n_samples: usize) -> usize {
        let p = self.front_end.params();
        let pad = if p.center { p.n_fft } else { 0 };
        let frames = (n_samples + pad).saturating_sub(p.n_fft) / p.hop + 1;
        Self::n_tokens(frames)
    }

    /// How many embeddings `n_frames` spectrogram frames become (8× fewer, rounded up at each
    /// halving).
    pub fn n_tokens(n_frames: usize) -> usize {
        n_frames.div_ceil(2).div_ceil(2).div_ceil(2)
    }

    /// The audio's embeddings: `[n_tokens, n_embd_out]` row-major, and `n_tokens`.
    pub fn encode<B: Backend>(&self, be: &B, mel: &Mel) -> Result<(Vec<f32>, usize)> {
        let hp = &self.hp;
        if mel.n_mel != hp.n_mel || mel.data.len() != mel.n_mel * mel.n_frames {
            return Err(Error::Model(format!(
                "a spectrogram of {} bands for an encoder of {}",
                mel.n_mel, hp.n_mel
            )));
        }
        if mel.n_frames < 2 {
            return Err(Error::Model(format!(
                "{} spectrogram frames: too short to encode",
                mel.n_frames
            )));
        }
        let mut cx = B::Ctx::default();
        let t = || B::Tensor::default();
        let (mut x, mut h, mut a, mut up) = (t(), t(), t(), t());
        let n = self.pre_encode(be, &mut cx, mel, &mut x)?;
        let d = hp.n_embd;
        // [2n - 1, d]: sinusoids of relative distances n - 1 down to -(n - 1), mtmd's table
        let pos = rel_positions(n, d);
        let (mut pe, mut p, mut q, mut k, mut v) = (t(), t(), t(), t(), t());
        be.upload(&mut cx, &pos, 2 * n - 1, d, &mut pe);
        let ffn = |cx: &mut B::Ctx,
                   x: &mut B::Tensor,
                   h: &mut B::Tensor,
                   up: &mut B::Tensor,
                   a: &mut B::Tensor,
                   norm: &(Vec<f32>, Vec<f32>),
                   l_up: &Linear,
                   l_down: &Linear|
         -> Result<()> {
            be.layer_norm(cx, x, &norm.0, &norm.1, hp.eps, h);
            linear(be, cx, l_up, h, up)?;
            be.activate(cx, up, Act::Silu);
            linear(be, cx, l_down, up, a)?;
            be.scale(cx, a, 0.5);
            be.add(cx, x, a);
            Ok(())
        };
        for l in &self.layers {
            ffn(
                &mut cx,
                &mut x,
                &mut h,
                &mut up,
                &mut a,
                &l.ffn1_norm,
                &l.ffn1_up,
                &l.ffn1_down,
            )?;
            be.layer_norm(&mut cx, &x, &l.attn_norm.0, &l.attn_norm.1, hp.eps, &mut h);
            be.matmul_encoder(
                &mut cx,
                &mut [(&l.q.w, &mut q), (&l.k.w, &mut k), (&l.v.w, &mut v)],
                &h,
            )?;
            be.add_bias(&mut cx, &mut q, &l.q.b);
            be.add_bias(&mut cx, &mut k, &l.k.b);
            be.add_bias(&mut cx, &mut v, &l.v.b);
            be.matmul_encoder(&mut cx, &mut [(&l.pos, &mut p)], &pe)?;
            be.rel_pos_attention(
                &mut cx,
                &q,
                &k,
                &v,
                &p,
                &l.pos_bias_u,
                &l.pos_bias_v,
                hp.n_head,
                &mut h,
            )?;
            linear(be, &mut cx, &l.o, &h, &mut a)?;
            be.add(&mut cx, &mut x, &a);
            // the convolution module
            be.layer_norm(&mut cx, &x, &l.conv_norm.0, &l.conv_norm.1, hp.eps, &mut h);
            linear(be, &mut cx, &l.pw1, &h, &mut up)?;
            self.conv_module(be, &mut cx, l, &up, &mut h)?;
            linear(be, &mut cx, &l.pw2, &h, &mut a)?;
            be.add(&mut cx, &mut x, &a);
            ffn(
                &mut cx,
                &mut x,
                &mut h,
                &mut up,
                &mut a,
                &l.ffn2_norm,
                &l.ffn2_up,
                &l.ffn2_down,
            )?;
            be.layer_norm(&mut cx, &x, &l.out_norm.0, &l.out_norm.1, hp.eps, &mut h);
            std::mem::swap(&mut x, &mut h);
        }
        let an = &self.adapter_norm;
        be.layer_norm(&mut cx, &x, &an.0, &an.1, 1e-5, &mut h);
        linear(be, &mut cx, &self.adapter1, &h, &mut up)?;
        // GELU with erf (not the tanh form of `Act::Gelu`), on the host: one pass over the
        // adapter's rows
        let mut host = Vec::new();
        be.download(&mut cx, &up, &mut host);
        for v in &mut host {
            *v = 0.5 * *v * (1.0 + libm::erff(*v * std::f32::consts::FRAC_1_SQRT_2));
        }
        be.upload(&mut cx, &host, n, self.adapter1.w.rows, &mut up);
        linear(be, &mut cx, &self.adapter2, &up, &mut a)?;
        let mut out = Vec::new();
        be.download(&mut cx, &a, &mut out);
        be.finish(&mut cx);
        Ok((out, n))
    }

    /// The convolution module between its pointwise products: `g` `[n, 2d]` through the GLU
    /// (`g[:, :d] · σ(g[:, d:])`), the depthwise convolution (kernel `k`, zero-padded to keep
    /// the length), the folded batch norm and SiLU, into `out` `[n, d]`. On the host: a few
    /// products per value (a backend op would save a GPU its round trip).
    fn conv_module<B: Backend>(
        &self,
        be: &B,
        cx: &mut B::Ctx,
        l: &ConformerLayer,
        g: &B::Tensor,
        out: &mut B::Tensor,
    ) -> Result<()> {
        let d = self.hp.n_embd;
        let k = self.hp.kernel;
        let mut host = Vec::new();
        be.download(cx, g, &mut host);
        let n = host.len() / (2 * d);
        // [n, d]
        let glu: Vec<f32> = host
            .chunks_exact(2 * d)
            .flat_map(|r| {
                let (a, b) = r.split_at(d);
                a.iter()
                    .zip(b)
                    .map(|(&a, &b)| a * (1.0 / (1.0 + (-b).exp())))
            })
            .collect();
        let half = k / 2;
        let mut y = vec![0f32; n * d];
        for t in 0..n {
            let row = &mut y[t * d..(t + 1) * d];
            row.copy_from_slice(&l.dw_b);
            for tap in 0..k {
                let src = t as isize + tap as isize - half as isize;
                if src < 0 || src >= n as isize {
                    continue;
                }
                let xs = &glu[src as usize * d..(src as usize + 1) * d];
                // taps are `[d, k]` row-major in ggml's [k, d] order: channel c's tap at c·k
                for (c, (o, &xv)) in row.iter_mut().zip(xs).enumerate() {
                    *o += l.dw_w[c * k + tap] * xv;
                }
            }
            for (c, o) in row.iter_mut().enumerate() {
                let bn = *o * l.bn_scale[c] + l.bn_shift[c];
                *o = bn / (1.0 + (-bn).exp());
            }
        }
        be.upload(cx, &y, n, d, out);
        Ok(())
    }

    /// The pre-encoder into `x` `[n, n_embd]`; returns `n`.
    fn pre_encode<B: Backend>(
        &self,
        be: &B,
        cx: &mut B::Ctx,
        mel: &Mel,
        x: &mut B::Tensor,
    ) -> Result<usize> {
        let c = self.hp.n_channels;
        let (t0, f0) = (mel.n_frames, mel.n_mel);
        // conv 0: one input channel, 3 × 3, stride 2, padding 1 over (time, band): each
        // output position's nine inputs (`[t1 · f1, 9]`, zero outside) times the kernels, a
        // backend product; the output [t1, f1, c], channels contiguous
        let (t1, f1) = (t0.div_ceil(2), f0.div_ceil(2));
        let at = |t: isize, f: isize| -> f32 {
            if t < 0 || f < 0 || t >= t0 as isize || f >= f0 as isize {
                0.0
            } else {
                mel.data[f as usize * t0 + t as usize]
            }
        };
        let mut patches = vec![0f32; t1 * f1 * 9];
        for t in 0..t1 {
            for f in 0..f1 {
                let row = &mut patches[(t * f1 + f) * 9..][..9];
                for kh in 0..3 {
                    for kw in 0..3 {
                        row[kh * 3 + kw] = at(
                            2 * t as isize + kh as isize - 1,
                            2 * f as isize + kw as isize - 1,
                        );
                    }
                }
            }
        }
        let (mut h, mut o) = (B::Tensor::default(), B::Tensor::default());
        be.upload(cx, &patches, t1 * f1, 9, &mut h);
        linear(be, cx, &self.conv0, &h, &mut o)?;
        let mut y = Vec::new();
        be.download(cx, &o, &mut y);
        for v in &mut y {
            *v = v.max(0.0);
        }
        let (mut t_cur, mut f_cur) = (t1, f1);
        for ((dw_w, dw_b), pw) in self.dw.iter().zip(&self.pw) {
            let (tn, fnn) = (t_cur.div_ceil(2), f_cur.div_ceil(2));
            let z = depthwise_s2(&y, t_cur, f_cur, c, dw_w, dw_b);
            be.upload(cx, &z, tn * fnn, c, &mut h);
            linear(be, cx, pw, &h, &mut o)?;
            // ReLU on the host, where the next depthwise convolution reads it
            be.download(cx, &o, &mut y);
            for v in &mut y {
                *v = v.max(0.0);
            }
            t_cur = tn;
            f_cur = fnn;
        }
        // [t, f, c] to [t, c · f]: each frame's features channel-major
        let last = y;
        let mut flat = vec![0f32; t_cur * c * f_cur];
        for t in 0..t_cur {
            for f in 0..f_cur {
                for ch in 0..c {
                    flat[t * c * f_cur + ch * f_cur + f] = last[(t * f_cur + f) * c + ch];
                }
            }
        }
        be.upload(cx, &flat, t_cur, c * f_cur, &mut h);
        linear(be, cx, &self.pre_out, &h, x)?;
        Ok(t_cur)
    }
}

/// A depthwise 3 × 3 convolution, stride 2, padding 1, over `[t, f, c]` (channels
/// contiguous), plus bias: `[⌈t/2⌉, ⌈f/2⌉, c]`.
fn depthwise_s2(x: &[f32], t: usize, f: usize, c: usize, w: &[f32], b: &[f32]) -> Vec<f32> {
    let (tn, fnn) = (t.div_ceil(2), f.div_ceil(2));
    let mut out = vec![0f32; tn * fnn * c];
    for ot in 0..tn {
        for of in 0..fnn {
            let o = &mut out[(ot * fnn + of) * c..][..c];
            o.copy_from_slice(b);
            for kh in 0..3 {
                let it = (2 * ot + kh) as isize - 1;
                if it < 0 || it >= t as isize {
                    continue;
                }
                for kw in 0..3 {
                    let i_f = (2 * of + kw) as isize - 1;
                    if i_f < 0 || i_f >= f as isize {
                        continue;
                    }
                    let src = &x[(it as usize * f + i_f as usize) * c..][..c];
                    let tap = kh * 3 + kw;
                    for (ch, (ov, &xv)) in o.iter_mut().zip(src).enumerate() {
                        *ov += w[ch * 9 + tap] * xv;
                    }
                }
            }
        }
    }
    out
}

/// `[2n - 1, d]` sinusoidal embeddings of relative distances `n - 1` down to `-(n - 1)` (row
/// `p` is distance `n - 1 - p`), sine and cosine interleaved, as mtmd fills its `pos_emb`:
/// frequencies `10000^(-2i/d)` in f64, the angle rounded to f32 before its sine.
pub fn rel_positions(n: usize, d: usize) -> Vec<f32> {
    let inv: Vec<f64> = (0..d / 2)
        .map(|i| (-(10000f64.ln() / d as f64) * (2.0 * i as f64)).exp())
        .collect();
    let mut out = vec![0f32; (2 * n - 1) * d];
    for p in 0..2 * n - 1 {
        let dist = n as f64 - p as f64 - 1.0;
        for (i, &f) in inv.iter().enumerate() {
            let ang = (dist * f) as f32;
            out[p * d + 2 * i] = ang.sin();
            out[p * d + 2 * i + 1] = ang.cos();
        }
    }
    out
}

/// `out = x · wᵀ + b`.
fn linear<B: Backend>(
    be: &B,
    cx: &mut B::Ctx,
    l: &Linear,
    x: &B::Tensor,
    out: &mut B::Tensor,
) -> Result<()> {
    be.matmul_encoder(cx, &mut [(&l.w, out)], x)?;
    be.add_bias(cx, out, &l.b);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_and_positions() {
        // mtmd's n_patches: ((((n + 1) / 2) + 1) / 2 + 1) / 2
        let mtmd = [
            (2usize, 1usize),
            (3, 1),
            (8, 1),
            (9, 2),
            (100, 13),
            (1744, 218),
        ];
        for (n, want) in mtmd {
            assert_eq!(Conformer::n_tokens(n), want, "{n} frames");
        }
        let p = rel_positions(3, 4);
        // row 2 is distance 0: sin 0, cos 0 for both frequencies
        assert_eq!(&p[2 * 4..3 * 4], &[0.0, 1.0, 0.0, 1.0]);
        // row 0 is distance 2 at frequency 1
        assert_eq!(p[0], 2f32.sin());
    }
}
