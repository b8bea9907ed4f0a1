//! Whisper's audio encoder: the log-mel window `[n_mel, 3000]` through a width-3 convolution
//! (stride 1) and GELU, another (stride 2) and GELU, plus the position embeddings, then the
//! pre-norm blocks (non-causal self-attention over the 1500 frames, the GELU MLP) and a
//! LayerNorm. The convolutions are products over im2col rows (each output frame's 3 input
//! frames side by side, channel-major as the weights are), on the host between them.

use super::{Block, Linear, Norm, SideHparams, WhisperHparams, load_blocks};
use crate::backend::{Act, Backend, KvSpec, KvType, SeqSpan, Weight};
use crate::error::{Error, Result};
use crate::media::whisper_mel::N_FRAMES;
use crate::models::loader::TensorLoader;

/// LayerNorm's epsilon in Whisper (PyTorch's default).
pub const EPS: f32 = 1e-5;

pub struct Encoder {
    pub hp: SideHparams,
    pub n_mels: usize,
    /// `[n_mels · 3, d]` and `[d · 3, d]`: the convolutions as matrices over (channel, tap)
    pub conv1: Linear,
    pub conv2: Linear,
    /// `[d, 1500]`
    pub pos: Weight,
    pub blocks: Vec<Block>,
    pub ln_post: Norm,
}

impl Encoder {
    pub(super) fn load(ld: &TensorLoader, hp: &WhisperHparams) -> Result<Encoder> {
        let h = hp.encoder.clone();
        let d = h.n_embd;
        let conv = |i: usize, c_in: usize| -> Result<Linear> {
            let name = format!("encoder.conv{i}.weight");
            let info = ld
                .file()
                .tensor(&name)
                .ok_or_else(|| Error::MissingTensor(name.clone()))?;
            let want = [3u64, c_in as u64, d as u64];
            if info.shape[..] != want[..] {
                return Err(Error::GgufTensor {
                    tensor: name,
                    reason: format!("shape {:?}, but the encoder expects {want:?}", info.shape),
                });
            }
            let w = Weight::new(ld.shared(), info).reshaped(3 * c_in, d, &name)?;
            Ok(Linear {
                w,
                b: Some(ld.vector(&format!("encoder.conv{i}.bias"), d)?),
            })
        };
        if h.n_ctx * 2 != N_FRAMES {
            return Err(Error::Model(format!(
                "whisper.encoder.context_length is {}: the encoder reads 30 s ({N_FRAMES} \
                 frames, {} after the stride-2 convolution)",
                h.n_ctx,
                N_FRAMES / 2
            )));
        }
        Ok(Encoder {
            conv1: conv(1, hp.n_mels)?,
            conv2: conv(2, d)?,
            pos: ld.matrix("encoder.positional_embedding", d, h.n_ctx)?,
            blocks: load_blocks(ld, "encoder", &h, false)?,
            ln_post: Norm {
                w: ld.vector("encoder.ln_post.weight", d)?,
                b: ld.vector("encoder.ln_post.bias", d)?,
            },
            n_mels: hp.n_mels,
            hp: h,
        })
    }

    /// The encoder's output `[1500, d]` for one window of the spectrogram (`mel`:
    /// `[n_mels, 3000]`, each band's frames contiguous), on `be`.
    pub fn encode<B: Backend>(&self, be: &B, cx: &mut B::Ctx, mel: &[f32]) -> Result<B::Tensor> {
        self.encode_windows(be, cx, &[mel])
    }

    /// [`Encoder::encode`] of several windows in one pass: `[windows · 1500, d]`, window `i`'s
    /// rows from `i · 1500`, each as it would be alone (attention stays within a window). The
    /// products then run over all the windows' rows at once: on a GPU, a few dispatches
    /// instead of a few per window.
    pub fn encode_windows<B: Backend>(
        &self,
        be: &B,
        cx: &mut B::Ctx,
        mels: &[&[f32]],
    ) -> Result<B::Tensor> {
        let (n_mel, d, n) = (self.n_mels, self.hp.n_embd, self.hp.n_ctx);
        let nw = mels.len();
        if nw == 0 {
            return Err(Error::Model("whisper encoder: no window".into()));
        }
        if let Some(m) = mels.iter().find(|m| m.len() != n_mel * N_FRAMES) {
            return Err(Error::Model(format!(
                "whisper encoder: {} values for a window of {n_mel} x {N_FRAMES}",
                m.len()
            )));
        }
        let t = || B::Tensor::default();
        // conv1: [windows · 3000, n_mel · 3] rows of (channel, tap) at frames t - 1, t, t + 1
        // (zeros past each window's edges)
        let mut cols = vec![0f32; nw * N_FRAMES * n_mel * 3];
        for (wcols, mel) in cols.chunks_exact_mut(N_FRAMES * n_mel * 3).zip(mels) {
            for (f, row) in wcols.chunks_exact_mut(n_mel * 3).enumerate() {
                for c in 0..n_mel {
                    let band = &mel[c * N_FRAMES..(c + 1) * N_FRAMES];
                    for k in 0..3 {
                        let src = f + k;
                        if (1..=N_FRAMES).contains(&src) {
                            row[c * 3 + k] = band[src - 1];
                        }
                    }
                }
            }
        }
        let (mut a, mut x) = (t(), t());
        be.upload(cx, &cols, nw * N_FRAMES, n_mel * 3, &mut a);
        // (the host copies go as soon as they are read: the blocks below need the memory)
        drop(cols);
        linear(be, cx, &self.conv1, &a, &mut x)?;
        be.activate(cx, &mut x, Act::Gelu);
        // conv2, stride 2: [windows · 1500, d · 3] rows at frames 2t - 1, 2t, 2t + 1
        let mut h1 = Vec::new();
        be.download(cx, &x, &mut h1);
        // (the first convolution's input and output go before the second's rows are made)
        drop(x);
        drop(a);
        let mut cols = vec![0f32; nw * n * d * 3];
        for (wcols, wh1) in cols
            .chunks_exact_mut(n * d * 3)
            .zip(h1.chunks_exact(N_FRAMES * d))
        {
            for (f, row) in wcols.chunks_exact_mut(d * 3).enumerate() {
                for k in 0..3 {
                    let src = 2 * f + k;
                    if !(1..=N_FRAMES).contains(&src) {
                        continue;
                    }
                    let frame = &wh1[(src - 1) * d..src * d];
                    for (c, &v) in frame.iter().enumerate() {
                        row[c * 3 + k] = v;
                    }
                }
            }
        }
        drop(h1);
        let mut a = t();
        be.upload(cx, &cols, nw * n, d * 3, &mut a);
        drop(cols);
        let mut x = t();
        linear(be, cx, &self.conv2, &a, &mut x)?;
        drop(a);
        be.activate(cx, &mut x, Act::Gelu);
        let mut p = t();
        let rows: Vec<u32> = (0..nw * n).map(|r| (r % n) as u32).collect();
        be.embed(cx, &self.pos, &self.pos, &rows, &mut p)?;
        be.add(cx, &mut x, &p);
        drop(p);

        let hd = d / self.hp.n_head;
        let params = self.hp.attention(false);
        // window i: rows i · n.. of the step, its own sequence
        let spans: Vec<SeqSpan> = (0..nw)
            .map(|i| SeqSpan {
                row0: i * n,
                n,
                pos0: 0,
            })
            .collect();
        // a cache a window, rewritten by every block (f32: the attention reads the keys and
        // values as the products wrote them)
        let mut kvs: Vec<B::Kv> = (0..nw)
            .map(|_| be.new_kv(KvSpec::same(KvType::F32), n, self.hp.n_head, hd, hd))
            .collect();
        // [windows · n, d] each; no buffer of the feed-forward's [windows · n, 4d]: `encoder_ffn` may run it a
        // block of rows at a time
        let (mut hn, mut q, mut k, mut v) = (t(), t(), t(), t());
        let (mut mid, mut ffn_out) = (t(), t());
        for b in &self.blocks {
            be.layer_norm(cx, &x, &b.attn_ln.w, &b.attn_ln.b, EPS, &mut hn);
            be.matmul_encoder(
                cx,
                &mut [
                    (&b.attn.q.w, &mut q),
                    (&b.attn.k.w, &mut k),
                    (&b.attn.v.w, &mut v),
                ],
                &hn,
            )?;
            b.attn.q.add_bias(be, cx, &mut q);
            b.attn.v.add_bias(be, cx, &mut v);
            for (kv, &span) in kvs.iter_mut().zip(&spans) {
                be.kv_store(cx, kv, &k, &v, span);
            }
            let kv_refs: Vec<&B::Kv> = kvs.iter().collect();
            be.attention(cx, &q, &kv_refs, &spans, &params, &mut hn);
            // the keys are in the cache now: their buffer takes the output projection
            linear(be, cx, &b.attn.o, &hn, &mut k)?;
            be.add(cx, &mut x, &k);
            be.layer_norm(cx, &x, &b.mlp_ln.w, &b.mlp_ln.b, EPS, &mut hn);
            be.encoder_ffn(
                cx,
                &mut x,
                &hn,
                (&b.mlp_up.w, b.mlp_up.b.as_deref()),
                (&b.mlp_down.w, b.mlp_down.b.as_deref()),
                Act::Gelu,
                &mut mid,
                &mut ffn_out,
            )?;
        }
        let mut out = t();
        be.layer_norm(cx, &x, &self.ln_post.w, &self.ln_post.b, EPS, &mut out);
        Ok(out)
    }
}

/// `out = x · wᵀ + b` (an encoder's product: many rows).
fn linear<B: Backend>(
    be: &B,
    cx: &mut B::Ctx,
    l: &Linear,
    x: &B::Tensor,
    out: &mut B::Tensor,
) -> Result<()> {
    l.forward(be, cx, x, out, true)
}
