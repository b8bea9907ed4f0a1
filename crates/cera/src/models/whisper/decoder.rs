//! Whisper's text decoder: token and position embeddings, pre-norm blocks (causal
//! self-attention over the sequence's cache, cross-attention over the audio's keys and values,
//! the GELU MLP), a LayerNorm and the logits through the token embedding (tied).
//!
//! A [`DecoderState`] is one sequence's self-attention caches (448 positions); an [`AudioKv`]
//! holds the cross-attention keys and values of the audio window, computed once per window
//! ([`Decoder::set_audio`]) and read by every sequence (the beams of a beam search).

use super::encoder::EPS;
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

/// One sequence's self-attention caches (448 positions).
pub struct DecoderState<B: Backend> {
    self_kv: Vec<B::Kv>,
    /// Tokens in the caches.
    pub n_past: usize,
}

/// An audio window's cross-attention keys and values, one cache per block (1500 positions),
/// read by every sequence that transcribes the window.
pub struct AudioKv<B: Backend> {
    cross_kv: Vec<B::Kv>,
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
        self.hp.attention(causal)
    }

    fn kv_spec(&self) -> (KvSpec, usize, usize) {
        (
            KvSpec::same(KvType::F16),
            self.hp.n_head,
            self.hp.n_embd / self.hp.n_head,
        )
    }

    /// A new sequence's (empty) caches.
    pub fn new_state<B: Backend>(&self, be: &B) -> DecoderState<B> {
        let (spec, n, hd) = self.kv_spec();
        DecoderState {
            self_kv: (0..self.blocks.len())
                .map(|_| be.new_kv(spec, self.hp.n_ctx, n, hd, hd))
                .collect(),
            n_past: 0,
        }
    }

    /// Caches for an audio window's keys and values (filled by [`Decoder::set_audio`]).
    pub fn new_audio<B: Backend>(&self, be: &B) -> AudioKv<B> {
        let (spec, n, hd) = self.kv_spec();
        AudioKv {
            cross_kv: (0..self.blocks.len())
                .map(|_| be.new_kv(spec, self.n_audio, n, hd, hd))
                .collect(),
        }
    }

    /// The cross-attention keys and values of an audio window (`enc`: the encoder's output
    /// `[1500, d]`) into `audio`.
    pub fn set_audio<B: Backend>(
        &self,
        be: &B,
        cx: &mut B::Ctx,
        audio: &mut AudioKv<B>,
        enc: &B::Tensor,
    ) -> Result<()> {
        let span = SeqSpan {
            row0: 0,
            n: self.n_audio,
            pos0: 0,
        };
        let (mut k, mut v) = (B::Tensor::default(), B::Tensor::default());
        for (b, kv) in self.blocks.iter().zip(&mut audio.cross_kv) {
            let (_, a) = b
                .cross
                .as_ref()
                .expect("decoder blocks have cross-attention");
            be.matmul_encoder(cx, &mut [(&a.k.w, &mut k), (&a.v.w, &mut v)], enc)?;
            a.v.add_bias(be, cx, &mut v);
            be.kv_store(cx, kv, &k, &v, span);
        }
        Ok(())
    }

    /// Appends a sequence's caches (its `n_past` positions) to `out`: what
    /// [`Decoder::load_state`] reads into another sequence (a beam taking another's history).
    pub fn save_state<B: Backend>(&self, be: &B, st: &DecoderState<B>, out: &mut Vec<u8>) {
        for kv in &st.self_kv {
            be.kv_save(kv, st.n_past, out);
        }
    }

    /// Sets `st` to what [`Decoder::save_state`] wrote of a sequence of `n_past` tokens.
    pub fn load_state<B: Backend>(
        &self,
        be: &B,
        st: &mut DecoderState<B>,
        n_past: usize,
        src: &[u8],
    ) -> Result<()> {
        let n = st.self_kv.len();
        if n == 0 || !src.len().is_multiple_of(n) {
            return Err(Error::Model(
                "whisper decoder: a saved state of the wrong size".into(),
            ));
        }
        for (kv, part) in st.self_kv.iter_mut().zip(src.chunks_exact(src.len() / n)) {
            be.kv_load(kv, n_past, part)?;
        }
        st.n_past = n_past;
        Ok(())
    }

    /// Appends `tokens` to one sequence and returns the logits after its last one
    /// (`[n_vocab]`).
    pub fn step<B: Backend>(
        &self,
        be: &B,
        cx: &mut B::Ctx,
        audio: &AudioKv<B>,
        st: &mut DecoderState<B>,
        tokens: &[u32],
    ) -> Result<Vec<f32>> {
        let mut out = self.step_many(be, cx, audio, &mut [(st, tokens)])?;
        Ok(out.pop().unwrap_or_default())
    }

    /// Appends each sequence's tokens to it in one pass (the rows of every sequence through
    /// the same products) and returns the logits after each one's last token (`[n_vocab]`
    /// each, in order).
    pub fn step_many<B: Backend>(
        &self,
        be: &B,
        cx: &mut B::Ctx,
        audio: &AudioKv<B>,
        seqs: &mut [(&mut DecoderState<B>, &[u32])],
    ) -> Result<Vec<Vec<f32>>> {
        let mut tokens = Vec::new();
        let mut pos = Vec::new();
        let mut self_spans = Vec::with_capacity(seqs.len());
        let mut cross_spans = Vec::with_capacity(seqs.len());
        let mut last = Vec::with_capacity(seqs.len());
        for (st, t) in seqs.iter() {
            let n = t.len();
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
            let row0 = tokens.len();
            self_spans.push(SeqSpan {
                row0,
                n,
                pos0: st.n_past,
            });
            // the cross-attention's queries sit at the end of the audio's positions:
            // non-causal, each sees every audio key
            cross_spans.push(SeqSpan {
                row0,
                n,
                pos0: self.n_audio - n,
            });
            tokens.extend_from_slice(t);
            pos.extend((st.n_past..st.n_past + n).map(|i| i as u32));
            last.push(row0 + n - 1);
        }
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let t = || B::Tensor::default();
        let (mut x, mut p) = (t(), t());
        be.embed(cx, &self.token_embd, &self.token_embd, &tokens, &mut x)?;
        be.embed(cx, &self.pos, &self.pos, &pos, &mut p)?;
        be.add(cx, &mut x, &p);
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
            b.attn.q.add_bias(be, cx, &mut q);
            b.attn.v.add_bias(be, cx, &mut v);
            for ((st, _), span) in seqs.iter_mut().zip(&self_spans) {
                be.kv_store(cx, &mut st.self_kv[l], &k, &v, *span);
            }
            let kvs: Vec<&B::Kv> = seqs.iter().map(|(st, _)| &st.self_kv[l]).collect();
            be.attention(cx, &q, &kvs, &self_spans, &causal, &mut h);
            linear(be, cx, &b.attn.o, &h, &mut o)?;
            be.add(cx, &mut x, &o);
            let (ln, a) = b
                .cross
                .as_ref()
                .expect("decoder blocks have cross-attention");
            be.layer_norm(cx, &x, &ln.w, &ln.b, EPS, &mut h);
            linear(be, cx, &a.q, &h, &mut q)?;
            let cross: Vec<&B::Kv> = vec![&audio.cross_kv[l]; seqs.len()];
            be.attention(cx, &q, &cross, &cross_spans, &full, &mut h);
            linear(be, cx, &a.o, &h, &mut o)?;
            be.add(cx, &mut x, &o);
            be.layer_norm(cx, &x, &b.mlp_ln.w, &b.mlp_ln.b, EPS, &mut h);
            linear(be, cx, &b.mlp_up, &h, &mut up)?;
            be.activate(cx, &mut up, Act::Gelu);
            linear(be, cx, &b.mlp_down, &up, &mut o)?;
            be.add(cx, &mut x, &o);
        }
        for (st, t) in seqs.iter_mut() {
            st.n_past += t.len();
        }
        // each sequence's last row only
        if last.len() != tokens.len() {
            be.gather_rows(cx, &x, &last, &mut h);
            std::mem::swap(&mut x, &mut h);
        }
        be.layer_norm(cx, &x, &self.ln_w, &self.ln_b, EPS, &mut h);
        let mut logits = t();
        be.matmul(cx, &mut [(&self.token_embd, &mut logits)], &h)?;
        let mut out = Vec::new();
        be.download(cx, &logits, &mut out);
        let nv = out.len() / last.len();
        Ok(out.chunks_exact(nv).map(<[f32]>::to_vec).collect())
    }
}

fn linear<B: Backend>(
    be: &B,
    cx: &mut B::Ctx,
    l: &Linear,
    x: &B::Tensor,
    out: &mut B::Tensor,
) -> Result<()> {
    l.forward(be, cx, x, out, false)
}
