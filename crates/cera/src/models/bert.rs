//! `bert` (bge, MiniLM, all-MiniLM, e5 …): an encoder for embeddings. Token, token-type (row 0)
//! and absolute position embeddings are summed and LayerNormed; each layer is post-norm:
//!   x = LN(x + W_o · attention(Q, K, V))      (non-causal, within the sequence)
//!   x = LN(x + W_down · gelu(W_up · x + b_up) + b_down)
//! with biases on every projection. The output is the last layer's hidden states (there is no
//! final norm and no language-model head: a BERT model embeds, it does not generate). Keys and
//! values are kept in f32: llama.cpp attends over the step's own f32 keys without a cache.

use std::sync::Arc;

use super::common::BaseHparams;
use super::loader::TensorLoader;
use super::names::{self as n, Arch, layer_tensor, tensor};
use super::step::{SeqInput, Workspace, XBuf, attend, project};
use crate::backend::{Act, AttentionParams, Backend, KvSpec, KvType, Weight};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::keys::{arch as k, arch_key};

#[derive(Clone, Debug)]
pub struct BertConfig {
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    /// Positions the position embedding holds.
    pub n_ctx_train: usize,
    pub eps: f32,
}

/// `[in, out]` weight and its bias.
pub struct Linear {
    pub w: Weight,
    pub b: Option<Vec<f32>>,
}

pub struct BertLayer {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    /// `[n_embd]` each
    pub attn_norm_w: Vec<f32>,
    pub attn_norm_b: Vec<f32>,
    pub up: Linear,
    pub down: Linear,
    pub out_norm_w: Vec<f32>,
    pub out_norm_b: Vec<f32>,
}

pub struct Bert {
    pub cfg: BertConfig,
    /// `[n_embd, n_vocab]`
    pub token_embd: Weight,
    /// `[n_embd]`: row 0 of `token_types` (every token is of type 0)
    pub type0: Option<Vec<f32>>,
    /// `[n_embd, n_ctx_train]`
    pub pos_embd: Weight,
    pub embd_norm_w: Vec<f32>,
    pub embd_norm_b: Vec<f32>,
    pub layers: Vec<BertLayer>,
    /// A reranker's head: `tanh(cls · x + b)` `[n_embd, n_embd]`, then `cls.output`
    /// `[n_embd, n_cls_out]` (either may be absent)
    pub cls: Option<Linear>,
    pub cls_out: Option<Linear>,
}

pub fn load(file: Arc<GgufFile>) -> Result<Bert> {
    let a = Arch::Bert.name();
    let hp = BaseHparams::read(&file, a)?;
    let ld = TensorLoader::new(file);
    let g = ld.file();
    let key = |s: &str| arch_key(a, s);
    if g.get_opt::<bool>(&key(k::CAUSAL))? == Some(true) {
        return Err(Error::Model(format!(
            "{}: a causal BERT is not supported",
            key(k::CAUSAL)
        )));
    }
    let d = hp.n_embd;
    if hp.n_head * hp.head_dim != d || hp.n_head_kv.iter().any(|&h| h != hp.n_head) {
        return Err(Error::Model(format!(
            "bert: {} heads of {} do not make n_embd {d} (or KV heads differ)",
            hp.n_head, hp.head_dim
        )));
    }
    let eps: f32 = g.get_opt(&key(k::LAYER_NORM_EPS))?.unwrap_or(1e-12);
    let lin = |name: &str, cols: usize, rows: usize, il: usize| -> Result<Linear> {
        Ok(Linear {
            w: ld.matrix(&layer_tensor(il, name, "weight"), cols, rows)?,
            b: ld.vector_opt(&layer_tensor(il, name, "bias"), rows)?,
        })
    };
    let layers = (0..hp.n_layer)
        .map(|il| {
            if ld.has(&layer_tensor(il, n::ATTN_QKV, "weight")) {
                return Err(Error::Model(format!(
                    "{}: fused QKV in a BERT model is not supported",
                    layer_tensor(il, n::ATTN_QKV, "weight")
                )));
            }
            let v = |name: &str| ld.vector(&layer_tensor(il, name, "weight"), d);
            let b = |name: &str| ld.vector(&layer_tensor(il, name, "bias"), d);
            Ok(BertLayer {
                q: lin(n::ATTN_Q, d, d, il)?,
                k: lin(n::ATTN_K, d, d, il)?,
                v: lin(n::ATTN_V, d, d, il)?,
                o: lin(n::ATTN_OUT, d, d, il)?,
                attn_norm_w: v(n::ATTN_OUT_NORM)?,
                attn_norm_b: b(n::ATTN_OUT_NORM)?,
                up: lin(n::FFN_UP, d, hp.n_ff, il)?,
                down: lin(n::FFN_DOWN, hp.n_ff, d, il)?,
                out_norm_w: v(n::LAYER_OUT_NORM)?,
                out_norm_b: b(n::LAYER_OUT_NORM)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if ld.has(&layer_tensor(0, n::FFN_GATE, "weight")) {
        return Err(Error::Model(
            "bert with a gated FFN (ffn_gate) is not supported".into(),
        ));
    }
    let type0 = match g.tensor(&tensor(n::TOKEN_TYPES, "weight")) {
        Some(t) if t.shape.first() == Some(&(d as u64)) => {
            let all = g.tensor_f32(&t.name)?;
            Some(all[..d].to_vec())
        }
        Some(t) => {
            return Err(Error::Model(format!(
                "{}: shape {:?}, expected [{d}, n_types]",
                t.name, t.shape
            )));
        }
        None => None,
    };
    let pos = tensor(n::POS_EMBD, "weight");
    let pos_info = g
        .tensor(&pos)
        .ok_or_else(|| Error::MissingTensor(pos.clone()))?;
    let n_pos = pos_info.shape.get(1).copied().unwrap_or(0) as usize;
    let pos_embd = ld.matrix(&pos, d, n_pos)?;
    let head = |name: &str, rows: Option<usize>| -> Result<Option<Linear>> {
        let wn = tensor(name, "weight");
        let Some(info) = g.tensor(&wn) else {
            return Ok(None);
        };
        let rows = rows.unwrap_or(info.shape.get(1).copied().unwrap_or(1) as usize);
        Ok(Some(Linear {
            w: ld.matrix(&wn, d, rows)?,
            b: ld.vector_opt(&tensor(name, "bias"), rows)?,
        }))
    };
    let cls = head(n::CLS, Some(d))?;
    let cls_out = head(n::CLS_OUT, None)?;
    Ok(Bert {
        cfg: BertConfig {
            n_vocab: hp.n_vocab,
            n_embd: d,
            n_head: hp.n_head,
            head_dim: hp.head_dim,
            n_ff: hp.n_ff,
            n_ctx_train: n_pos.min(hp.n_ctx_train.max(1)),
            eps,
        },
        token_embd: ld.matrix(&tensor(n::TOKEN_EMBD, "weight"), d, hp.n_vocab)?,
        type0,
        pos_embd,
        embd_norm_w: ld.vector(&tensor(n::TOKEN_EMBD_NORM, "weight"), d)?,
        embd_norm_b: ld.vector(&tensor(n::TOKEN_EMBD_NORM, "bias"), d)?,
        layers,
        cls,
        cls_out,
    })
}

impl Bert {
    /// Keys and values in f32 whatever the cache type asked for (see the module docs).
    pub fn new_kv<B: Backend>(&self, be: &B, n_ctx: usize, _spec: KvSpec) -> Vec<B::Kv> {
        let hd = self.cfg.head_dim;
        let spec = KvSpec::same(KvType::F32);
        self.layers
            .iter()
            .map(|_| be.new_kv(spec, n_ctx, self.cfg.n_head, hd, hd))
            .collect()
    }

    /// Hidden states of the rows asked for into `out`. Every sequence must come whole in one
    /// step (its tokens attend to each other, later ones included).
    pub(crate) fn forward<B: Backend>(
        &self,
        be: &B,
        ws: &mut Workspace<B>,
        seqs: &mut [SeqInput<'_, B>],
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let c = &self.cfg;
        if !ws.hidden {
            return Err(Error::Model(
                "bert is an embedding model: it has no language-model head to generate with".into(),
            ));
        }
        for s in seqs.iter() {
            if s.pos0 != 0 {
                return Err(Error::Model(format!(
                    "bert: a sequence must be embedded in one step (this one continues at \
                     position {}); raise the batch size",
                    s.pos0
                )));
            }
        }
        if let Some(&p) = ws.pos.iter().find(|&&p| p >= c.n_ctx_train) {
            return Err(Error::ContextOverflow {
                n_ctx: c.n_ctx_train,
                needed: p + 1,
            });
        }
        let n = ws.n();
        // x = LN(tok[t] + type0 + pos[p])
        be.embed(
            &mut ws.cx,
            &self.token_embd,
            &self.token_embd,
            &ws.tokens,
            &mut ws.h,
        )?;
        ws.lora
            .embed_deltas(be, &mut ws.cx, &ws.tokens, &mut ws.h)?;
        ws.inject_embeddings(be, XBuf::H);
        let pos: Vec<u32> = ws.pos.iter().map(|&p| p as u32).collect();
        be.embed(&mut ws.cx, &self.pos_embd, &self.pos_embd, &pos, &mut ws.o)?;
        be.add(&mut ws.cx, &mut ws.h, &ws.o);
        if let Some(t) = &self.type0 {
            be.add_bias(&mut ws.cx, &mut ws.h, t);
        }
        be.layer_norm(
            &mut ws.cx,
            &ws.h,
            &self.embd_norm_w,
            &self.embd_norm_b,
            c.eps,
            &mut ws.x,
        );
        let params = AttentionParams {
            n_head: c.n_head,
            n_kv_head: c.n_head,
            head_dim: c.head_dim,
            head_dim_v: c.head_dim,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            softcap: None,
            window: None,
            causal: false,
        };
        for (il, l) in self.layers.iter().enumerate() {
            let cx = &mut ws.cx;
            project(
                be,
                cx,
                &mut ws.lora,
                &mut [
                    (&l.q.w, &mut ws.q),
                    (&l.k.w, &mut ws.k),
                    (&l.v.w, &mut ws.v),
                ],
                &ws.x,
            )?;
            for (t, lin) in [(&mut ws.q, &l.q), (&mut ws.k, &l.k), (&mut ws.v, &l.v)] {
                if let Some(b) = &lin.b {
                    be.add_bias(cx, t, b);
                }
            }
            attend(be, il, seqs, ws, &params);
            let cx = &mut ws.cx;
            project(be, cx, &mut ws.lora, &mut [(&l.o.w, &mut ws.o)], &ws.att)?;
            if let Some(b) = &l.o.b {
                be.add_bias(cx, &mut ws.o, b);
            }
            be.add(cx, &mut ws.o, &ws.x);
            be.layer_norm(cx, &ws.o, &l.attn_norm_w, &l.attn_norm_b, c.eps, &mut ws.x);
            project(be, cx, &mut ws.lora, &mut [(&l.up.w, &mut ws.up)], &ws.x)?;
            if let Some(b) = &l.up.b {
                be.add_bias(cx, &mut ws.up, b);
            }
            be.activate(cx, &mut ws.up, Act::Gelu);
            project(be, cx, &mut ws.lora, &mut [(&l.down.w, &mut ws.o)], &ws.up)?;
            if let Some(b) = &l.down.b {
                be.add_bias(cx, &mut ws.o, b);
            }
            be.add(cx, &mut ws.o, &ws.x);
            be.layer_norm(cx, &ws.o, &l.out_norm_w, &l.out_norm_b, c.eps, &mut ws.x);
        }
        // the rows asked for, as they are (no final norm)
        out.clear();
        if ws.out_rows.len() == n {
            be.download(&mut ws.cx, &ws.x, out);
        } else if !ws.out_rows.is_empty() {
            be.gather_rows(&mut ws.cx, &ws.x, &ws.out_rows, &mut ws.hn);
            be.download(&mut ws.cx, &ws.hn, out);
        }
        Ok(())
    }

    /// The classifier head over one first-token hidden state (host f32, as ggml's
    /// `mul_mat` with the weights dequantized; the sums in f64).
    pub fn rank_head(&self, x: &[f32]) -> Result<Vec<f32>> {
        let apply = |lin: &Linear, x: &[f32]| -> Result<Vec<f32>> {
            let mut row = vec![0f32; lin.w.cols];
            (0..lin.w.rows)
                .map(|r| {
                    lin.w.row_f32(r, &mut row)?;
                    let dot: f64 = row.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum();
                    Ok(dot as f32 + lin.b.as_ref().map_or(0.0, |b| b[r]))
                })
                .collect()
        };
        let mut h = x.to_vec();
        if let Some(c) = &self.cls {
            h = apply(c, &h)?.into_iter().map(f32::tanh).collect();
        }
        if let Some(c) = &self.cls_out {
            h = apply(c, &h)?;
        }
        Ok(h)
    }

    /// The projections LoRA may adapt.
    pub fn lora_targets(&self) -> Vec<&Weight> {
        self.layers
            .iter()
            .flat_map(|l| [&l.q.w, &l.k.w, &l.v.w, &l.o.w, &l.up.w, &l.down.w])
            .collect()
    }
}
