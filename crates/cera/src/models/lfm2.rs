//! `lfm2` and `lfm2moe` (Liquid AI LFM2 / LFM2.5): a hybrid of gated short convolutions and
//! grouped-query attention, pre-norm, SwiGLU FFN; `lfm2moe` replaces the FFN of every layer after
//! `leading_dense_block_count` with a routed mixture of experts.
//!
//! Layer types come from `{arch}.attention.head_count_kv`, a per-layer array: 0 marks a
//! convolution layer. The tensors must agree (a convolution layer has `shortconv.*` and no
//! attention, an attention layer the reverse); a mismatch is a load error.
//!
//! Convolution layer (`l` = `shortconv.l_cache` taps, state of `l - 1` inputs in the session):
//!   B, C, x = split(in_proj · h);  y = C ⊙ conv(B ⊙ x);  out_proj · y
//! Attention layer: Q/K/V, per-head RMS norms of Q and K, NeoX RoPE, causal attention (within
//! `attention.sliding_window` when that is set), `attn_output`.
//! The final norm is the tensor the converter names `token_embd_norm`; the output is tied to
//! the token embedding unless `output.weight` exists.
//!
//! `dense_2` (LFM2-ColBert's projection of pooled sentence embeddings) only applies to embedding
//! output in llama.cpp, never to logits; Cera has no embedding output, so a file carrying it is
//! loaded for generation and the projection is not used.

use std::sync::Arc;

use super::common::BaseHparams;
use super::common::shortconv::ConvState;
use super::loader::TensorLoader;
use super::names::{self as n, Arch, layer_tensor, tensor};
use super::rope_config;
use super::step::{
    LogitsPost, SeqInput, Workspace, XBuf, dumping, logits_out, project, rope_attend,
};
use crate::backend::moe::{Gating, MoeWeights};
use crate::backend::{Act, AttentionParams, Backend, KvSpec, RopeConfig, RopeKind, Weight};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::keys::{arch as k, arch_key};

#[derive(Clone, Debug)]
pub struct Lfm2Config {
    pub arch: Arch,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub head_dim: usize,
    /// Per layer; 0 for convolution layers.
    pub n_head_kv: Vec<usize>,
    pub rms_eps: f32,
    /// Convolution taps per channel (`shortconv.l_cache`).
    pub l_cache: usize,
    pub rope: RopeConfig,
    /// Attention layers see only this many most recent positions.
    pub window: Option<usize>,
    /// Leading layers with a dense FFN (all of them for `lfm2`).
    pub n_dense_lead: usize,
}

/// A gated short convolution. Shapes in ggml order `[in, out]`.
pub struct ShortConv {
    /// `[n_embd, 3*n_embd]`: B, C and x, in that order
    pub in_proj: Weight,
    /// `[l_cache, n_embd]`: per channel, taps oldest first
    pub kernel: Vec<f32>,
    /// `[n_embd, n_embd]`
    pub out_proj: Weight,
}

pub struct Attention {
    /// `[n_embd, n_head*head_dim]`, `[n_embd, n_kv*head_dim]` (twice)
    pub wq: Weight,
    pub wk: Weight,
    pub wv: Weight,
    /// `[head_dim]` each
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    /// `[n_head*head_dim, n_embd]`
    pub wo: Weight,
}

pub enum Mixer {
    Conv(ShortConv),
    Attention(Attention),
}

pub enum Ffn {
    /// `[n_embd, n_ff]`, `[n_embd, n_ff]`, `[n_ff, n_embd]`
    Dense {
        gate: Weight,
        up: Weight,
        down: Weight,
    },
    Moe(MoeWeights),
}

pub struct Layer {
    /// `[n_embd]` (llama.cpp's `operator_norm`)
    pub attn_norm: Vec<f32>,
    pub mixer: Mixer,
    /// `[n_embd]`
    pub ffn_norm: Vec<f32>,
    pub ffn: Ffn,
}

pub struct Lfm2 {
    pub cfg: Lfm2Config,
    /// `[n_embd, n_vocab]`
    pub token_embd: Weight,
    /// `[n_embd]` (`token_embd_norm`)
    pub output_norm: Vec<f32>,
    /// `[n_embd, n_vocab]`; the token embedding when tied
    pub output: Weight,
    pub layers: Vec<Layer>,
}

pub fn load(file: Arc<GgufFile>, arch: Arch) -> Result<Lfm2> {
    let a = arch.name();
    let hp = BaseHparams::read(&file, a)?;
    let ld = TensorLoader::new(file);
    let g = ld.file();
    let key = |s: &str| arch_key(a, s);
    let d = hp.n_embd;
    if hp.n_head * hp.head_dim != d || hp.head_dim_v != hp.head_dim {
        return Err(Error::Model(format!(
            "{a}: {} heads of {} (values {}) do not make n_embd {d}",
            hp.n_head, hp.head_dim, hp.head_dim_v
        )));
    }
    let l_cache: usize = g.get_as(&key(k::SHORTCONV_L_CACHE))?;
    if !(2..=64).contains(&l_cache) {
        return Err(Error::Model(format!(
            "{}: {l_cache} is not a usable kernel length",
            key(k::SHORTCONV_L_CACHE)
        )));
    }
    let rope = rope_config(g, a, RopeKind::Neox, hp.n_rot, hp.rope_freq_base)?;
    let window = g
        .get_opt::<usize>(&key(k::SLIDING_WINDOW))?
        .filter(|&w| w > 0);

    let n_dense_lead = match arch {
        Arch::Lfm2Moe => g
            .get_opt::<usize>(&key(k::LEADING_DENSE_BLOCK_COUNT))?
            .unwrap_or(0)
            .min(hp.n_layer),
        _ => hp.n_layer,
    };
    let moe_hp = if n_dense_lead < hp.n_layer {
        Some(MoeHparams::read(g, a, hp.n_layer)?)
    } else {
        None
    };

    let mut layers = Vec::with_capacity(hp.n_layer);
    for il in 0..hp.n_layer {
        let t = |name: &str, suffix: &str| layer_tensor(il, name, suffix);
        let n_kv = hp.n_head_kv[il];
        // the layer type is declared twice, by head_count_kv and by the tensors: both must agree
        let has_conv = ld.has(&t(n::SHORTCONV_CONV, "weight"));
        let has_attn = ld.has(&t(n::ATTN_Q, "weight")) || ld.has(&t(n::ATTN_QKV, "weight"));
        if has_conv == has_attn || has_conv != (n_kv == 0) {
            return Err(Error::Model(format!(
                "blk.{il}: {} says {} layer, but the file has {}",
                key(k::HEAD_COUNT_KV),
                if n_kv == 0 {
                    "a convolution"
                } else {
                    "an attention"
                },
                match (has_conv, has_attn) {
                    (true, true) => "both convolution and attention tensors",
                    (false, false) => "neither convolution nor attention tensors",
                    (true, false) => "convolution tensors",
                    (false, true) => "attention tensors",
                }
            )));
        }
        let mixer = if has_conv {
            Mixer::Conv(ShortConv {
                in_proj: ld.matrix(&t(n::SHORTCONV_IN_PROJ, "weight"), d, 3 * d)?,
                kernel: conv_kernel(&ld, &t(n::SHORTCONV_CONV, "weight"), l_cache, d)?,
                out_proj: ld.matrix(&t(n::SHORTCONV_OUT_PROJ, "weight"), d, d)?,
            })
        } else {
            let (qd, kd) = (d, n_kv * hp.head_dim);
            let qkv_name = t(n::ATTN_QKV, "weight");
            let (wq, wk, wv) = if ld.has(&qkv_name) {
                let qkv = ld.matrix(&qkv_name, d, qd + 2 * kd)?;
                (
                    qkv.slice_rows(0, qd, &format!("{qkv_name}[q]")),
                    qkv.slice_rows(qd, kd, &format!("{qkv_name}[k]")),
                    qkv.slice_rows(qd + kd, kd, &format!("{qkv_name}[v]")),
                )
            } else {
                (
                    ld.matrix(&t(n::ATTN_Q, "weight"), d, qd)?,
                    ld.matrix(&t(n::ATTN_K, "weight"), d, kd)?,
                    ld.matrix(&t(n::ATTN_V, "weight"), d, kd)?,
                )
            };
            Mixer::Attention(Attention {
                wq,
                wk,
                wv,
                q_norm: ld.vector(&t(n::ATTN_Q_NORM, "weight"), hp.head_dim)?,
                k_norm: ld.vector(&t(n::ATTN_K_NORM, "weight"), hp.head_dim)?,
                wo: ld.matrix(&t(n::ATTN_OUT, "weight"), d, d)?,
            })
        };
        let routed = il >= n_dense_lead;
        let has_router = ld.has(&t(n::FFN_GATE_INP, "weight"));
        if has_router != routed {
            return Err(Error::Model(format!(
                "blk.{il}: expected a {} FFN, but the file {} a router ({})",
                if routed { "routed" } else { "dense" },
                if has_router { "has" } else { "lacks" },
                t(n::FFN_GATE_INP, "weight")
            )));
        }
        let ffn = match (&moe_hp, routed) {
            (Some(m), true) => Ffn::Moe(m.load(&ld, il, d)?),
            _ => Ffn::Dense {
                gate: ld.matrix(&t(n::FFN_GATE, "weight"), d, hp.n_ff)?,
                up: ld.matrix(&t(n::FFN_UP, "weight"), d, hp.n_ff)?,
                down: ld.matrix(&t(n::FFN_DOWN, "weight"), hp.n_ff, d)?,
            },
        };
        layers.push(Layer {
            attn_norm: ld.vector(&t(n::ATTN_NORM, "weight"), d)?,
            mixer,
            ffn_norm: ld.vector(&t(n::FFN_NORM, "weight"), d)?,
            ffn,
        });
    }

    let token_embd = ld.matrix(&tensor(n::TOKEN_EMBD, "weight"), d, hp.n_vocab)?;
    let output = ld
        .matrix_opt(&tensor(n::OUTPUT, "weight"), d, hp.n_vocab)?
        .unwrap_or_else(|| token_embd.clone());
    Ok(Lfm2 {
        cfg: Lfm2Config {
            arch,
            n_vocab: hp.n_vocab,
            n_embd: d,
            n_head: hp.n_head,
            head_dim: hp.head_dim,
            n_head_kv: hp.n_head_kv.clone(),
            rms_eps: hp.rms_eps,
            l_cache,
            rope,
            window,
            n_dense_lead,
        },
        output_norm: ld.vector(&tensor(n::TOKEN_EMBD_NORM, "weight"), d)?,
        token_embd,
        output,
        layers,
    })
}

/// The convolution kernel `[l_cache, n_embd]`, as f32.
fn conv_kernel(ld: &TensorLoader, name: &str, l: usize, d: usize) -> Result<Vec<f32>> {
    ld.matrix(name, l, d)?;
    ld.file().tensor_f32(name)
}

/// The MoE hyperparameters of `lfm2moe`.
struct MoeHparams {
    n_expert: usize,
    n_used: usize,
    n_ff_exp: usize,
    gating: Gating,
}

impl MoeHparams {
    fn read(g: &GgufFile, a: &str, n_layer: usize) -> Result<MoeHparams> {
        let key = |s: &str| arch_key(a, s);
        let n_expert: usize = g.get_as(&key(k::EXPERT_COUNT))?;
        let n_used: usize = g.get_as(&key(k::EXPERT_USED_COUNT))?;
        if n_expert == 0 || n_expert > 1024 || n_used == 0 || n_used > n_expert {
            return Err(Error::Model(format!(
                "{a}: {n_used} of {n_expert} experts per token is not usable"
            )));
        }
        let n_ff_exp = *g
            .get_per_layer_u32(&key(k::EXPERT_FEED_FORWARD_LENGTH), n_layer)?
            .iter()
            .max()
            .expect("n_layer > 0") as usize;
        // llama.cpp requires the key for lfm2moe; sigmoid is what LFM2 uses
        let gating = Gating::from_gguf(g.get_as(&key(k::EXPERT_GATING_FUNC))?)?;
        Ok(MoeHparams {
            n_expert,
            n_used,
            n_ff_exp,
            gating,
        })
    }

    fn load(&self, ld: &TensorLoader, il: usize, d: usize) -> Result<MoeWeights> {
        let t = |name: &str, suffix: &str| layer_tensor(il, name, suffix);
        let (ne, ff) = (self.n_expert, self.n_ff_exp);
        let split = |w: Weight, rows: usize| -> Vec<Weight> {
            (0..ne)
                .map(|e| w.slice_rows(e * rows, rows, &format!("{}[{e}]", w.name)))
                .collect()
        };
        Ok(MoeWeights {
            gate_inp: ld.matrix(&t(n::FFN_GATE_INP, "weight"), d, ne)?,
            probs_bias: Some(ld.vector(&t(n::FFN_EXP_PROBS_B, "bias"), ne)?),
            gate: split(ld.stacked(&t(n::FFN_GATE_EXPS, "weight"), d, ff, ne)?, ff),
            up: split(ld.stacked(&t(n::FFN_UP_EXPS, "weight"), d, ff, ne)?, ff),
            down: split(ld.stacked(&t(n::FFN_DOWN_EXPS, "weight"), ff, d, ne)?, d),
            n_used: self.n_used,
            gating: self.gating,
            // LFM2's graph always normalizes and never scales
            norm_weights: true,
            weights_scale: 1.0,
            packed_all: Default::default(),
        })
    }
}

impl Lfm2 {
    /// KV cache per layer: convolution layers get an empty one.
    pub fn new_kv<B: Backend>(&self, be: &B, n_ctx: usize, spec: KvSpec) -> Vec<B::Kv> {
        let hd = self.cfg.head_dim;
        let spec = spec.for_dims(hd, hd);
        self.cfg
            .n_head_kv
            .iter()
            .enumerate()
            .map(|(il, &kv)| be.new_layer_kv(il, spec, n_ctx, kv, hd, hd))
            .collect()
    }

    /// Convolution state per layer: `l_cache - 1` rows of `n_embd` for convolution layers.
    pub fn new_conv_state<B: Backend>(&self, be: &B) -> ConvState<B> {
        let shape = (self.cfg.l_cache - 1, self.cfg.n_embd);
        ConvState::new(
            be,
            self.layers.iter().map(|l| match l.mixer {
                Mixer::Conv(_) => Some(shape),
                Mixer::Attention(_) => None,
            }),
        )
    }

    /// One step over the sequences `ws` was planned for: keys and values go to each
    /// sequence's cache, convolution inputs roll through its convolution state (which
    /// [`super::Model::forward_batch`] has checked continues at its position). Logits of the
    /// rows asked for go to `logits`.
    pub(crate) fn forward<B: Backend>(
        &self,
        be: &B,
        ws: &mut Workspace<B>,
        seqs: &mut [SeqInput<'_, B>],
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        let c = &self.cfg;
        for s in seqs.iter() {
            if s.state.kv.len() != self.layers.len()
                || s.state.conv.layers.len() != self.layers.len()
            {
                return Err(Error::Model("sequence state is not this model's".into()));
            }
        }
        be.embed(
            &mut ws.cx,
            &self.token_embd,
            &self.output,
            &ws.tokens,
            &mut ws.x,
        )?;
        ws.lora
            .embed_deltas(be, &mut ws.cx, &ws.tokens, &mut ws.x)?;
        ws.inject_embeddings(be, XBuf::X);
        // the backend's fused ops (a GPU's dispatches): each block's input norm read by its
        // first product, the residual added by its last (not with adapters or dumps)
        let fuse = be.fuses_ops() && ws.lora.is_empty() && !dumping();
        for (il, layer) in self.layers.iter().enumerate() {
            let norm = fuse.then_some(&layer.attn_norm[..]);
            if !fuse {
                be.rms_norm(&mut ws.cx, &ws.x, &layer.attn_norm, c.rms_eps, &mut ws.h);
            }
            match &layer.mixer {
                Mixer::Conv(w) => self.shortconv(be, il, w, norm, seqs, ws)?,
                Mixer::Attention(w) => self.attention(be, il, w, norm, seqs, ws)?,
            }
            if !fuse {
                be.add(&mut ws.cx, &mut ws.x, &ws.o);
            }
            match &layer.ffn {
                Ffn::Dense { gate, up, down } if fuse => {
                    be.norm_matmul(
                        &mut ws.cx,
                        &ws.x,
                        &layer.ffn_norm,
                        c.rms_eps,
                        &mut ws.h,
                        &mut [(gate, &mut ws.gate), (up, &mut ws.up)],
                    )?;
                    be.glu_matmul_add(
                        &mut ws.cx,
                        &mut ws.gate,
                        &ws.up,
                        Act::Silu,
                        down,
                        &mut ws.x,
                    )?;
                }
                f => {
                    be.rms_norm(&mut ws.cx, &ws.x, &layer.ffn_norm, c.rms_eps, &mut ws.h);
                    self.ffn(be, f, ws)?;
                    be.add(&mut ws.cx, &mut ws.x, &ws.o);
                }
            }
        }
        let post = LogitsPost {
            divisor: 1.0,
            softcap: None,
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

    /// `o = out_proj · (C ⊙ conv(B ⊙ x))` for the normed input in `h`, each sequence over its
    /// own convolution state. With `norm` (fused ops), the input is `x` through that norm and
    /// the output is added to `x` instead.
    fn shortconv<B: Backend>(
        &self,
        be: &B,
        il: usize,
        w: &ShortConv,
        norm: Option<&[f32]>,
        seqs: &mut [SeqInput<'_, B>],
        ws: &mut Workspace<B>,
    ) -> Result<()> {
        let cx = &mut ws.cx;
        match norm {
            Some(g) => be.norm_matmul(
                cx,
                &ws.x,
                g,
                self.cfg.rms_eps,
                &mut ws.h,
                &mut [(&w.in_proj, &mut ws.bcx)],
            )?,
            None => project(
                be,
                cx,
                &mut ws.lora,
                &mut [(&w.in_proj, &mut ws.bcx)],
                &ws.h,
            )?,
        }
        be.reshape(&mut ws.conv, ws.tokens.len(), self.cfg.n_embd);
        for (s, span) in seqs.iter_mut().zip(&ws.spans) {
            let state = s.state.conv.layers[il]
                .as_mut()
                .expect("a convolution layer has convolution state");
            be.short_conv(cx, &ws.bcx, &w.kernel, state, *span, &mut ws.conv);
        }
        if norm.is_some() {
            return be.matmul_add(cx, &w.out_proj, &ws.conv, &mut ws.x);
        }
        project(
            be,
            cx,
            &mut ws.lora,
            &mut [(&w.out_proj, &mut ws.o)],
            &ws.conv,
        )
    }

    /// `o = attention(h)` with per-head Q/K norms and NeoX RoPE; with `norm`, as
    /// [`Lfm2::shortconv`]'s.
    fn attention<B: Backend>(
        &self,
        be: &B,
        il: usize,
        w: &Attention,
        norm: Option<&[f32]>,
        seqs: &mut [SeqInput<'_, B>],
        ws: &mut Workspace<B>,
    ) -> Result<()> {
        let c = &self.cfg;
        let n_kv = c.n_head_kv[il];
        let cx = &mut ws.cx;
        let qkv = &mut [(&w.wq, &mut ws.q), (&w.wk, &mut ws.k), (&w.wv, &mut ws.v)];
        match norm {
            Some(g) => be.norm_matmul(cx, &ws.x, g, c.rms_eps, &mut ws.h, qkv)?,
            None => project(be, cx, &mut ws.lora, qkv, &ws.h)?,
        }
        be.rms_norm_pair(cx, &mut ws.q, &w.q_norm, &mut ws.k, &w.k_norm, c.rms_eps);
        let params = AttentionParams {
            n_head: c.n_head,
            n_kv_head: n_kv,
            head_dim: c.head_dim,
            head_dim_v: c.head_dim,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            softcap: None,
            window: c.window,
            causal: true,
        };
        rope_attend(be, il, seqs, ws, &c.rope, &params);
        if norm.is_some() {
            return be.matmul_add(&mut ws.cx, &w.wo, &ws.att, &mut ws.x);
        }
        project(
            be,
            &mut ws.cx,
            &mut ws.lora,
            &mut [(&w.wo, &mut ws.o)],
            &ws.att,
        )
    }

    /// `o = ffn(h)`: SwiGLU, dense or routed (the step's tokens of every sequence grouped by
    /// expert).
    fn ffn<B: Backend>(&self, be: &B, f: &Ffn, ws: &mut Workspace<B>) -> Result<()> {
        let cx = &mut ws.cx;
        match f {
            Ffn::Dense { gate, up, down } => {
                project(
                    be,
                    cx,
                    &mut ws.lora,
                    &mut [(gate, &mut ws.gate), (up, &mut ws.up)],
                    &ws.h,
                )?;
                be.glu(cx, &mut ws.gate, &ws.up, Act::Silu);
                project(be, cx, &mut ws.lora, &mut [(down, &mut ws.o)], &ws.gate)
            }
            Ffn::Moe(m) => be.moe(cx, m, &ws.h, &ws.lora, &mut ws.o),
        }
    }

    /// Convolution layers, attention layers, routed layers.
    pub fn layer_counts(&self) -> (usize, usize, usize) {
        let conv = self
            .layers
            .iter()
            .filter(|l| matches!(l.mixer, Mixer::Conv(_)))
            .count();
        let routed = self
            .layers
            .iter()
            .filter(|l| matches!(l.ffn, Ffn::Moe(_)))
            .count();
        (conv, self.layers.len() - conv, routed)
    }
}
