//! The dense decoder stack shared by llama, qwen2/3, granite, gemma2/3, phi3 and olmo2: each
//! architecture file reads its hyperparameters, declares its tensors and fills a
//! [`DecoderConfig`]; the forward pass is written once, here, against the backend ops, for a
//! step of any number of sequences.

use crate::backend::{Act, AttentionParams, Backend, KvSpec, RopeConfig, Weight};
use crate::error::Result;
use crate::models::step::{
    Buf, LogitsPost, SeqInput, Workspace, XBuf, dump, dumping, logits_out, project, rope_attend,
};

/// Where the RMS norms sit around attention and the FFN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPlacement {
    /// `x + f(norm(x))` (llama, qwen, phi3, granite).
    Pre,
    /// `x + post_norm(f(norm(x)))` (gemma2, gemma3).
    Sandwich,
    /// `x + post_norm(f(x))` (olmo2).
    Post,
}

/// Normalisation of Q and K before RoPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    None,
    /// RMS norm over each head (qwen3, gemma3); weights of `head_dim`.
    PerHead,
    /// RMS norm over all heads together (olmo2); weights of `n_head * head_dim`.
    Full,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnAct {
    /// `silu(gate) * up`
    SwiGlu,
    /// `gelu(gate) * up` (gemma)
    GeGlu,
}

#[derive(Clone, Debug)]
pub struct DecoderConfig {
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    pub n_ff: usize,
    pub rms_eps: f32,
    pub norm: NormPlacement,
    pub qk_norm: QkNorm,
    pub ffn_act: FfnAct,
    /// Per layer: KV heads, RoPE, sliding window.
    pub n_head_kv: Vec<usize>,
    pub rope: Vec<RopeConfig>,
    pub window: Vec<Option<usize>>,
    /// Multiplies the token embeddings (gemma: sqrt(n_embd); granite: embedding_scale).
    pub embed_scale: f32,
    /// Multiplies each block's output before the residual add (granite).
    pub residual_scale: f32,
    /// Multiplies q·k.
    pub attn_scale: f32,
    pub attn_softcap: Option<f32>,
    pub final_softcap: Option<f32>,
    /// Divides the logits (granite's `logit_scale`).
    pub logit_divisor: f32,
}

impl DecoderConfig {
    /// A llama-like stack (pre-norm, SwiGLU, no multipliers, 1/sqrt(head_dim) attention scale,
    /// full attention, the same RoPE in every layer) that architectures then adjust.
    pub fn new(hp: &super::BaseHparams, rope: RopeConfig) -> DecoderConfig {
        DecoderConfig {
            n_vocab: hp.n_vocab,
            n_embd: hp.n_embd,
            n_head: hp.n_head,
            head_dim: hp.head_dim,
            head_dim_v: hp.head_dim_v,
            n_ff: hp.n_ff,
            rms_eps: hp.rms_eps,
            norm: NormPlacement::Pre,
            qk_norm: QkNorm::None,
            ffn_act: FfnAct::SwiGlu,
            n_head_kv: hp.n_head_kv.clone(),
            rope: vec![rope; hp.n_layer],
            window: vec![None; hp.n_layer],
            embed_scale: 1.0,
            residual_scale: 1.0,
            attn_scale: 1.0 / (hp.head_dim as f32).sqrt(),
            attn_softcap: None,
            final_softcap: None,
            logit_divisor: 1.0,
        }
    }
}

/// One layer's weights. Shapes in ggml order `[in, out]`.
pub struct LayerWeights {
    /// `[n_embd]`; absent for post-norm models
    pub attn_norm: Option<Vec<f32>>,
    /// `[n_embd, n_head*head_dim]`, `[n_embd, n_kv*head_dim]`, `[n_embd, n_kv*head_dim_v]`
    pub wq: Weight,
    pub wk: Weight,
    pub wv: Weight,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// `[head_dim]` (per head) or `[n_head*head_dim]` / `[n_kv*head_dim]` (full)
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    /// `[n_head*head_dim_v, n_embd]`
    pub wo: Weight,
    pub bo: Option<Vec<f32>>,
    pub attn_post_norm: Option<Vec<f32>>,
    pub ffn_norm: Option<Vec<f32>>,
    /// `[n_embd, n_ff]` each; `ffn_up` is `[n_embd, 2*n_ff]` when gate and up are fused (phi3)
    pub ffn_gate: Option<Weight>,
    pub ffn_up: Weight,
    /// `[n_ff, n_embd]`
    pub ffn_down: Weight,
    pub ffn_post_norm: Option<Vec<f32>>,
}

pub struct Decoder {
    pub cfg: DecoderConfig,
    /// `[n_embd, n_vocab]`
    pub token_embd: Weight,
    pub layers: Vec<LayerWeights>,
    /// `[n_embd]`
    pub output_norm: Vec<f32>,
    /// `[n_embd, n_vocab]`; the token embedding when tied
    pub output: Weight,
}

impl Decoder {
    pub fn new_kv<B: Backend>(&self, be: &B, n_ctx: usize, spec: KvSpec) -> Vec<B::Kv> {
        let (hd, hdv) = (self.cfg.head_dim, self.cfg.head_dim_v);
        self.cfg
            .n_head_kv
            .iter()
            .enumerate()
            .map(|(il, &kv)| be.new_layer_kv(il, spec.for_dims(hd, hdv), n_ctx, kv, hd, hdv))
            .collect()
    }

    /// One step over the sequences `ws` was planned for: their tokens' keys and values go to
    /// each sequence's cache, and the logits of the rows asked for to `logits`.
    pub(crate) fn forward<B: Backend>(
        &self,
        be: &B,
        ws: &mut Workspace<B>,
        seqs: &mut [SeqInput<'_, B>],
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        let c = &self.cfg;
        be.embed(
            &mut ws.cx,
            &self.token_embd,
            &self.output,
            &ws.tokens,
            &mut ws.x,
        )?;
        ws.lora
            .embed_deltas(be, &mut ws.cx, &ws.tokens, &mut ws.x)?;
        if c.embed_scale != 1.0 {
            be.scale(&mut ws.cx, &mut ws.x, c.embed_scale);
        }
        ws.inject_embeddings(be, XBuf::X);
        dump(be, ws, "embd", None, Buf::X);
        for (il, lw) in self.layers.iter().enumerate() {
            self.attention_block(be, il, lw, seqs, ws)?;
            self.ffn_block(be, il, lw, ws)?;
            dump(be, ws, "l_out", Some(il), Buf::X);
        }
        let post = LogitsPost {
            divisor: c.logit_divisor,
            softcap: c.final_softcap,
        };
        logits_out(
            be,
            ws,
            &self.output_norm,
            c.rms_eps,
            &self.output,
            post,
            logits,
        )
    }

    fn attention_block<B: Backend>(
        &self,
        be: &B,
        il: usize,
        lw: &LayerWeights,
        seqs: &mut [SeqInput<'_, B>],
        ws: &mut Workspace<B>,
    ) -> Result<()> {
        let c = &self.cfg;
        let n_kv = c.n_head_kv[il];
        let fuse = self.fuses(be, ws);
        let cx = &mut ws.cx;
        // biases go with a fused product (Qwen2's Q/K/V: three dispatches fewer per layer on
        // a GPU); otherwise they are added below
        let biases = [lw.bq.as_deref(), lw.bk.as_deref(), lw.bv.as_deref()];
        let mut biased = false;
        match &lw.attn_norm {
            Some(w) if fuse => {
                biased = true;
                be.norm_matmul_bias(
                    cx,
                    &ws.x,
                    w,
                    c.rms_eps,
                    &mut ws.h,
                    &mut [
                        (&lw.wq, &mut ws.q),
                        (&lw.wk, &mut ws.k),
                        (&lw.wv, &mut ws.v),
                    ],
                    &biases,
                )?
            }
            norm => {
                match norm {
                    Some(w) => be.rms_norm(cx, &ws.x, w, c.rms_eps, &mut ws.h),
                    None => be.copy_cols(cx, &ws.x, 0, c.n_embd, &mut ws.h),
                }
                project(
                    be,
                    cx,
                    &mut ws.lora,
                    &mut [
                        (&lw.wq, &mut ws.q),
                        (&lw.wk, &mut ws.k),
                        (&lw.wv, &mut ws.v),
                    ],
                    &ws.h,
                )?;
            }
        }
        for (buf, b) in [
            (&mut ws.q, &lw.bq),
            (&mut ws.k, &lw.bk),
            (&mut ws.v, &lw.bv),
        ] {
            if let Some(b) = b
                && !biased
            {
                be.add_bias(cx, buf, b);
            }
        }
        match c.qk_norm {
            QkNorm::None => {}
            QkNorm::PerHead | QkNorm::Full => match (&lw.q_norm, &lw.k_norm) {
                (Some(wq), Some(wk)) => {
                    be.rms_norm_pair(cx, &mut ws.q, wq, &mut ws.k, wk, c.rms_eps);
                }
                (wq, wk) => {
                    if let Some(w) = wq {
                        be.rms_norm_inplace(cx, &mut ws.q, w, c.rms_eps);
                    }
                    if let Some(w) = wk {
                        be.rms_norm_inplace(cx, &mut ws.k, w, c.rms_eps);
                    }
                }
            },
        }
        let params = AttentionParams {
            n_head: c.n_head,
            n_kv_head: n_kv,
            head_dim: c.head_dim,
            head_dim_v: c.head_dim_v,
            scale: c.attn_scale,
            softcap: c.attn_softcap,
            window: c.window[il],
            causal: true,
        };
        rope_attend(be, il, seqs, ws, &c.rope[il], &params);
        dump(be, ws, "kqv_out", Some(il), Buf::Att);
        if lw.bo.is_none() && self.fused_residual(be, lw.attn_post_norm.as_deref(), ws) {
            be.matmul_add(&mut ws.cx, &lw.wo, &ws.att, &mut ws.x)?;
            return Ok(());
        }
        project(
            be,
            &mut ws.cx,
            &mut ws.lora,
            &mut [(&lw.wo, &mut ws.o)],
            &ws.att,
        )?;
        if let Some(b) = &lw.bo {
            be.add_bias(&mut ws.cx, &mut ws.o, b);
        }
        dump(be, ws, "attn_out", Some(il), Buf::O);
        self.residual(be, lw.attn_post_norm.as_deref(), ws);
        dump(be, ws, "ffn_inp", Some(il), Buf::X);
        Ok(())
    }

    /// Whether the step uses the backend's fused ops ([`Backend::fuses_ops`]): not with
    /// adapters (their deltas read the parts) or dumps (which print the parts).
    fn fuses<B: Backend>(&self, be: &B, ws: &Workspace<B>) -> bool {
        be.fuses_ops() && ws.lora.is_empty() && !dumping()
    }

    /// Whether a block's output projection can add to the residual stream itself
    /// ([`Backend::matmul_add`]): fused ops, no post norm, no residual scale.
    fn fused_residual<B: Backend>(
        &self,
        be: &B,
        post_norm: Option<&[f32]>,
        ws: &Workspace<B>,
    ) -> bool {
        self.fuses(be, ws) && post_norm.is_none() && self.cfg.residual_scale == 1.0
    }

    /// `x += residual_scale * post_norm(o)`.
    fn residual<B: Backend>(&self, be: &B, post_norm: Option<&[f32]>, ws: &mut Workspace<B>) {
        let c = &self.cfg;
        if let Some(w) = post_norm {
            be.rms_norm_inplace(&mut ws.cx, &mut ws.o, w, c.rms_eps);
        }
        if c.residual_scale != 1.0 {
            be.scale(&mut ws.cx, &mut ws.o, c.residual_scale);
        }
        be.add(&mut ws.cx, &mut ws.x, &ws.o);
    }

    fn ffn_block<B: Backend>(
        &self,
        be: &B,
        il: usize,
        lw: &LayerWeights,
        ws: &mut Workspace<B>,
    ) -> Result<()> {
        let c = &self.cfg;
        let fuse = self.fuses(be, ws);
        let cx = &mut ws.cx;
        match (&lw.ffn_norm, &lw.ffn_gate) {
            (Some(w), Some(gate_w)) if fuse => be.norm_matmul(
                cx,
                &ws.x,
                w,
                c.rms_eps,
                &mut ws.h,
                &mut [(gate_w, &mut ws.gate), (&lw.ffn_up, &mut ws.up)],
            )?,
            _ => self.ffn_in(be, il, lw, ws)?,
        }
        let act = match c.ffn_act {
            FfnAct::SwiGlu => Act::Silu,
            FfnAct::GeGlu => Act::Gelu,
        };
        dump(be, ws, "ffn_gate", Some(il), Buf::Gate);
        dump(be, ws, "ffn_up", Some(il), Buf::Up);
        if self.fused_residual(be, lw.ffn_post_norm.as_deref(), ws) {
            return be.glu_matmul_add(
                &mut ws.cx,
                &mut ws.gate,
                &ws.up,
                act,
                &lw.ffn_down,
                &mut ws.x,
            );
        }
        be.glu(&mut ws.cx, &mut ws.gate, &ws.up, act);
        dump(be, ws, "ffn_swiglu", Some(il), Buf::Gate);
        project(
            be,
            &mut ws.cx,
            &mut ws.lora,
            &mut [(&lw.ffn_down, &mut ws.o)],
            &ws.gate,
        )?;
        dump(be, ws, "ffn_out", Some(il), Buf::O);
        self.residual(be, lw.ffn_post_norm.as_deref(), ws);
        Ok(())
    }

    /// The FFN's input norm and its gate and up projections, as parts.
    fn ffn_in<B: Backend>(
        &self,
        be: &B,
        il: usize,
        lw: &LayerWeights,
        ws: &mut Workspace<B>,
    ) -> Result<()> {
        let c = &self.cfg;
        let cx = &mut ws.cx;
        match &lw.ffn_norm {
            Some(w) => be.rms_norm(cx, &ws.x, w, c.rms_eps, &mut ws.h),
            None => be.copy_cols(cx, &ws.x, 0, c.n_embd, &mut ws.h),
        }
        dump(be, ws, "ffn_norm", Some(il), Buf::H);
        let ff = c.n_ff;
        let cx = &mut ws.cx;
        match &lw.ffn_gate {
            Some(gate_w) => {
                project(
                    be,
                    cx,
                    &mut ws.lora,
                    &mut [(gate_w, &mut ws.gate), (&lw.ffn_up, &mut ws.up)],
                    &ws.h,
                )?;
            }
            None => {
                // fused [gate; up] rows: the first n_ff outputs are the gate; `o` holds both
                // for a moment (it is free until the down projection)
                project(be, cx, &mut ws.lora, &mut [(&lw.ffn_up, &mut ws.o)], &ws.h)?;
                be.copy_cols(cx, &ws.o, 0, ff, &mut ws.gate);
                be.copy_cols(cx, &ws.o, ff, ff, &mut ws.up);
            }
        }
        Ok(())
    }
}
