//! Whisper's text decoder: token and position embeddings, pre-norm blocks (causal
//! self-attention over the sequence's cache, cross-attention over the audio's keys and values,
//! the GELU MLP), a LayerNorm and the logits through the token embedding (tied).
//!
//! A [`DecoderState`] is one sequence's: its self-attention caches (448 positions) and the
//! cross-attention keys and values of the audio window it transcribes, computed once per
//! window ([`Decoder::set_audio`]) and read by every step.

use super::encoder::{EPS, bias};
use super::{Block, Linear, SideHparams, WhisperHparams, load_blocks};
use crate::backend::{Act, AttentionParams, Backend, KvSpec, KvType, SeqSpan, Weight};
use crate::error::{Error, Result};
use crate::models::loader::TensorLoader;

pub struct Decoder {
    pub hp: SideHparams,
    /// `[d, n_vocab]`: the token embedding and the output projection
    pub token_embd: Weight,
    /// `[d, 448]`
    pub pos: Weight,
    pub blocks: Vec<Block>,
    pub ln_w: Vec<f32>,
    pub ln_b: Vec<f32>,
    /// Audio positions the cross-attention reads (the encoder's context).
    pub n_audio: usize,
}

/// One sequence's caches.
pub struct DecoderState<B: Backend> {
    self_kv: Vec<B::Kv>,
    cross_kv: Vec<B::Kv>,
    /// Tokens in the self-attention caches.
    pub n_past: usize,
    has_audio: bool,
}

impl Decoder {
    pub(super) fn load(ld: &TensorLoader, hp: &WhisperHparams) -> Result<Decoder> {
        let h = hp.decoder.clone();
        let d = h.n_embd;
        if d != hp.encoder.n_embd {
            return Err(Error::Model(format!(
                "whisper: the decoder's width {d} is not the encoder's {}",
                hp.encoder.n_embd
            )));
        }
        Ok(Decoder {
            token_embd: ld.matrix("decoder.token_embedding.weight", d, hp.n_vocab)?,
            pos: ld.matrix("decoder.positional_embedding", d, h.n_ctx)?,
            blocks: load_blocks(ld, "decoder", &h, true)?,
            ln_w: ld.vector("decoder.ln.weight", d)?,
            ln_b: ld.vector("decoder.ln.bias", d)?,
            n_audio: hp.encoder.n_ctx,
            hp: h,
        })
    }

    fn params(&self, causal: bool) -> AttentionParams {
        let hd = self.hp.n_embd / self.hp.n_head;
        AttentionParams {
            n_head: self.hp.n_head,
            n_kv_head: self.hp.n_head,
            head_dim: hd,
            head_dim_v: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            softcap: None,
            window: None,
            causal,
        }
    }

    /// A new sequence's (empty) caches.
    pub fn new_state<B: Backend>(&self, be: &B) -> DecoderState<B> {
        let hd = self.hp.n_embd / self.hp.n_head;
        let n = self.hp.n_head;
        let spec = KvSpec::same(KvType::F32);
        DecoderState {
            self_kv: (0..self.blocks.len())
                .map(|_| be.new_kv(spec, self.hp.n_ctx, n, hd, hd))
                .collect(),
            cross_kv: (0..self.blocks.len())
                .map(|_| be.new_kv(spec, self.n_audio, n, hd, hd))
                .collect(),
            n_past: 0,
            has_audio: false,
        }
    }

    /// The cross-attention keys and values of an audio window (`enc`: the encoder's output
    /// `[1500, d]`) into `st`, which also forgets its tokens.
    pub fn set_audio<B: Backend>(
        &self,
        be: &B,
        cx: &mut B::Ctx,
        st: &mut DecoderState<B>,
        enc: &B::Tensor,
    ) -> Result<()> {
        let span = SeqSpan {
            row0: 0,
            n: self.n_audio,
            pos0: 0,
        };
        let (mut k, mut v) = (B::Tensor::default(), B::Tensor::default());
        for (b, kv) in self.blocks.iter().zip(&mut st.cross_kv) {
            let (_, a) = b
                .cross
                .as_ref()
                .expect("decoder blocks have cross-attention");
            be.matmul_encoder(cx, &mut [(&a.k.w, &mut k), (&a.v.w, &mut v)], enc)?;
            bias(be, cx, &a.v, &mut v);
            be.kv_store(cx, kv, &k, &v, span);
        }
        st.n_past = 0;
        st.has_audio = true;
        Ok(())
    }

    /// Drops the sequence's tokens from position `n` on (the audio stays).
    pub fn truncate<B: Backend>(&self, st: &mut DecoderState<B>, n: usize) {
        st.n_past = st.n_past.min(n);
    }

    /// Appends `tokens` to the sequence and returns the logits after its last one
    /// (`[n_vocab]`).
    pub fn step<B: Backend>(
        &self,
        be: &B,
        cx: &mut B::Ctx,
        st: &mut DecoderState<B>,
        tokens: &[u32],
    ) -> Result<Vec<f32>> {
        let n = tokens.len();
        if !st.has_audio {
            return Err(Error::Model(
                "whisper decoder: a step before any audio".into(),
            ));
        }
        if n == 0 || st.n_past + n > self.hp.n_ctx {
            return Err(Error::ContextOverflow {
                n_ctx: self.hp.n_ctx,
                needed: st.n_past + n,
            });
        }
        if n > self.n_audio {
            return Err(Error::Model(
                "whisper decoder: more tokens in a step than audio positions".into(),
            ));
        }
        let t = || B::Tensor::default();
        let (mut x, mut p) = (t(), t());
        be.embed(cx, &self.token_embd, &self.token_embd, tokens, &mut x)?;
        let pos: Vec<u32> = (st.n_past..st.n_past + n).map(|i| i as u32).collect();
        be.embed(cx, &self.pos, &self.pos, &pos, &mut p)?;
        be.add(cx, &mut x, &p);
        let self_span = SeqSpan {
            row0: 0,
            n,
            pos0: st.n_past,
        };
        // the cross-attention's queries sit at the end of the audio's positions: non-causal,
        // each sees every audio key
        let cross_span = SeqSpan {
            row0: 0,
            n,
            pos0: self.n_audio - n,
        };
        let (causal, full) = (self.params(true), self.params(false));
        let (mut h, mut q, mut k, mut v, mut o, mut up) = (t(), t(), t(), t(), t(), t());
        for (l, b) in self.blocks.iter().enumerate() {
            be.layer_norm(cx, &x, &b.attn_ln.w, &b.attn_ln.b, EPS, &mut h);
            be.matmul(
                cx,
                &mut [
                    (&b.attn.q.w, &mut q),
                    (&b.attn.k.w, &mut k),
                    (&b.attn.v.w, &mut v),
                ],
                &h,
            )?;
            bias(be, cx, &b.attn.q, &mut q);
            bias(be, cx, &b.attn.v, &mut v);
            be.kv_store(cx, &mut st.self_kv[l], &k, &v, self_span);
            be.attention(cx, &q, &[&st.self_kv[l]], &[self_span], &causal, &mut h);
            linear(be, cx, &b.attn.o, &h, &mut o)?;
            be.add(cx, &mut x, &o);
            let (ln, a) = b
                .cross
                .as_ref()
                .expect("decoder blocks have cross-attention");
            be.layer_norm(cx, &x, &ln.w, &ln.b, EPS, &mut h);
            linear(be, cx, &a.q, &h, &mut q)?;
            be.attention(cx, &q, &[&st.cross_kv[l]], &[cross_span], &full, &mut h);
            linear(be, cx, &a.o, &h, &mut o)?;
            be.add(cx, &mut x, &o);
            be.layer_norm(cx, &x, &b.mlp_ln.w, &b.mlp_ln.b, EPS, &mut h);
            linear(be, cx, &b.mlp_up, &h, &mut up)?;
            be.activate(cx, &mut up, Act::Gelu);
            linear(be, cx, &b.mlp_down, &up, &mut o)?;
            be.add(cx, &mut x, &o);
        }
        st.n_past += n;
        // the last row only
        if n > 1 {
            be.gather_rows(cx, &x, &[n - 1], &mut h);
            std::mem::swap(&mut x, &mut h);
        }
        be.layer_norm(cx, &x, &self.ln_w, &self.ln_b, EPS, &mut h);
        let mut logits = t();
        be.matmul(cx, &mut [(&self.token_embd, &mut logits)], &h)?;
        let mut out = Vec::new();
        be.download(cx, &logits, &mut out);
        Ok(out)
    }
}

fn linear<B: Backend>(
    be: &B,
    cx: &mut B::Ctx,
    l: &Linear,
    x: &B::Tensor,
    out: &mut B::Tensor,
) -> Result<()> {
    be.matmul(cx, &mut [(&l.w, out)], x)?;
    bias(be, cx, l, out);
    Ok(())
}
