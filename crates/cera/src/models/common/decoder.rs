//! The dense decoder stack shared by llama, qwen2/3, granite, gemma2/3, phi3 and olmo2: each
//! architecture file reads its hyperparameters, declares its tensors and fills a
//! [`DecoderConfig`]; the forward pass is written once, here, against the backend ops.

use crate::backend::{
    self, AttentionParams, Cpu, KvLayer, KvType, QuantizedActs, RopeConfig, Weight,
};
use crate::error::{Error, Result};

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

/// Per-call working buffers, owned by the session so steady-state decoding allocates nothing.
#[derive(Default)]
pub struct Scratch {
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    cs: Vec<(f32, f32)>,
    acts: QuantizedActs,
    out_rows: Vec<f32>,
}

/// `CERA_DUMP=1` prints each intermediate's sum and first values under llama.cpp's tensor names
/// (`attn_norm-0`, `Qcur-0`, `ffn_out-3`, …), to diff against `llama-eval-callback`.
fn dump(name: &str, il: Option<usize>, data: &[f32]) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ON.get_or_init(|| std::env::var_os("CERA_DUMP").is_some()) {
        return;
    }
    let sum: f64 = data.iter().map(|&x| x as f64).sum();
    let name = match il {
        Some(i) => format!("{name}-{i}"),
        None => name.to_owned(),
    };
    eprintln!(
        "{name:>16} sum = {sum:>14.6} first = {:?}",
        &data[..data.len().min(3)]
    );
    if std::env::var_os("CERA_DUMP_ROWS").is_some() {
        let n = data.len() / 5;
        for r in 0..5.min(data.len() / n.max(1)) {
            let row = &data[r * n..(r + 1) * n];
            eprintln!(
                "      [{:10.4} {:10.4} {:10.4} ... {:10.4} {:10.4} {:10.4}]",
                row[0],
                row[1],
                row[2],
                row[n - 3],
                row[n - 2],
                row[n - 1]
            );
        }
    }
}

/// `v` as exactly `n` values (grown once, then reused: decoding allocates nothing).
pub(crate) fn resize(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    v.resize(n, 0.0);
    &mut v[..n]
}

/// Looks up the embedding row of every token into `x` (`tokens.len()` rows of `token_embd`'s
/// width); an id past the vocabulary is an error naming it.
pub(crate) fn embed_tokens(
    cpu: &Cpu,
    token_embd: &Weight,
    output: &Weight,
    n_vocab: usize,
    tokens: &[u32],
    x: &mut [f32],
) -> Result<()> {
    token_embd.pack_tied(output, cpu);
    let d = token_embd.cols;
    for (t, &tok) in tokens.iter().enumerate() {
        if tok as usize >= n_vocab {
            return Err(Error::TokenOutOfRange { id: tok, n_vocab });
        }
        token_embd.row_f32(tok as usize, &mut x[t * d..(t + 1) * d])?;
    }
    Ok(())
}

impl Decoder {
    pub fn new_kv(&self, n_ctx: usize, k_ty: KvType, v_ty: KvType) -> Vec<KvLayer> {
        let (hd, hdv) = (self.cfg.head_dim, self.cfg.head_dim_v);
        self.cfg
            .n_head_kv
            .iter()
            .map(|&kv| {
                KvLayer::with_types(
                    k_ty.for_head_dim(hd),
                    v_ty.for_head_dim(hdv),
                    n_ctx,
                    kv,
                    hd,
                    hdv,
                )
            })
            .collect()
    }

    /// Runs `tokens` at positions `pos0..`, storing their keys and values in `kv`. When
    /// `all_logits` is false only the last token's logits are computed. Logits go to `logits`
    /// (rows of `n_vocab`).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        cpu: &Cpu,
        kv: &mut [KvLayer],
        tokens: &[u32],
        pos0: usize,
        all_logits: bool,
        sc: &mut Scratch,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        let c = &self.cfg;
        let n = tokens.len();
        let d = c.n_embd;
        let x = resize(&mut sc.x, n * d);
        embed_tokens(cpu, &self.token_embd, &self.output, c.n_vocab, tokens, x)?;
        if c.embed_scale != 1.0 {
            backend::scale_inplace(x, c.embed_scale);
        }
        dump("embd", None, x);

        for (il, lw) in self.layers.iter().enumerate() {
            self.attention_block(cpu, il, lw, &mut kv[il], n, pos0, sc)?;
            self.ffn_block(cpu, il, lw, n, sc)?;
            dump("l_out", Some(il), &sc.x[..n * d]);
        }

        // final norm and output projection, for the rows asked for
        let first = if all_logits { 0 } else { n - 1 };
        let rows = n - first;
        let xo = &sc.x[first * d..n * d];
        let hn = resize(&mut sc.out_rows, rows * d);
        backend::rms_norm(xo, &self.output_norm, c.rms_eps, hn);
        dump("result_norm", None, hn);
        logits.resize(rows * c.n_vocab, 0.0);
        cpu.matmul(&self.output, hn, rows, &mut sc.acts, logits)?;
        if c.logit_divisor != 1.0 {
            backend::scale_inplace(logits, 1.0 / c.logit_divisor);
        }
        if let Some(cap) = c.final_softcap {
            backend::softcap_inplace(logits, cap);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn attention_block(
        &self,
        cpu: &Cpu,
        il: usize,
        lw: &LayerWeights,
        kv: &mut KvLayer,
        n: usize,
        pos0: usize,
        sc: &mut Scratch,
    ) -> Result<()> {
        let c = &self.cfg;
        let d = c.n_embd;
        let n_kv = c.n_head_kv[il];
        let (qd, kd, vd) = (
            c.n_head * c.head_dim,
            n_kv * c.head_dim,
            n_kv * c.head_dim_v,
        );
        let h = resize(&mut sc.h, n * d);
        match &lw.attn_norm {
            Some(w) => backend::rms_norm(&sc.x, w, c.rms_eps, h),
            None => h.copy_from_slice(&sc.x),
        }
        let q = resize(&mut sc.q, n * qd);
        let k = resize(&mut sc.k, n * kd);
        let v = resize(&mut sc.v, n * vd);
        cpu.matmul_many(
            &mut [(&lw.wq, q), (&lw.wk, k), (&lw.wv, v)],
            h,
            n,
            &mut sc.acts,
        )?;
        let (q, k, v) = (
            &mut sc.q[..n * qd],
            &mut sc.k[..n * kd],
            &mut sc.v[..n * vd],
        );
        for (buf, b) in [(&mut *q, &lw.bq), (&mut *k, &lw.bk), (&mut *v, &lw.bv)] {
            if let Some(b) = b {
                backend::add_bias(buf, b);
            }
        }
        match c.qk_norm {
            QkNorm::None => {}
            QkNorm::PerHead | QkNorm::Full => {
                if let Some(w) = &lw.q_norm {
                    backend::rms_norm_inplace(q, w, c.rms_eps);
                }
                if let Some(w) = &lw.k_norm {
                    backend::rms_norm_inplace(k, w, c.rms_eps);
                }
            }
        }
        let rope = &c.rope[il];
        sc.cs.resize(rope.n_rot / 2, (0.0, 0.0));
        for t in 0..n {
            rope.cos_sin((pos0 + t) as i64, &mut sc.cs);
            rope.apply(&mut q[t * qd..(t + 1) * qd], c.n_head, c.head_dim, &sc.cs);
            rope.apply(&mut k[t * kd..(t + 1) * kd], n_kv, c.head_dim, &sc.cs);
        }
        dump("Qcur", Some(il), q);
        dump("Kcur", Some(il), k);
        dump("Vcur", Some(il), v);
        kv.store(pos0, k, v);
        let att = resize(&mut sc.att, n * c.n_head * c.head_dim_v);
        let params = AttentionParams {
            n_head: c.n_head,
            n_kv_head: n_kv,
            head_dim: c.head_dim,
            head_dim_v: c.head_dim_v,
            scale: c.attn_scale,
            softcap: c.attn_softcap,
            window: c.window[il],
        };
        cpu.attention(q, kv, pos0, n, &params, att);
        dump("kqv_out", Some(il), att);
        let o = resize(&mut sc.o, n * d);
        cpu.matmul(&lw.wo, att, n, &mut sc.acts, o)?;
        if let Some(b) = &lw.bo {
            backend::add_bias(o, b);
        }
        dump("attn_out", Some(il), o);
        self.residual(lw.attn_post_norm.as_deref(), sc, n);
        dump("ffn_inp", Some(il), &sc.x[..n * d]);
        Ok(())
    }

    /// `x += residual_scale * post_norm(o)`.
    fn residual(&self, post_norm: Option<&[f32]>, sc: &mut Scratch, n: usize) {
        let c = &self.cfg;
        let o = &mut sc.o[..n * c.n_embd];
        if let Some(w) = post_norm {
            backend::rms_norm_inplace(o, w, c.rms_eps);
        }
        if c.residual_scale != 1.0 {
            backend::scale_inplace(o, c.residual_scale);
        }
        backend::add_inplace(&mut sc.x[..n * c.n_embd], o);
    }

    fn ffn_block(
        &self,
        cpu: &Cpu,
        il: usize,
        lw: &LayerWeights,
        n: usize,
        sc: &mut Scratch,
    ) -> Result<()> {
        let c = &self.cfg;
        let d = c.n_embd;
        let h = resize(&mut sc.h, n * d);
        match &lw.ffn_norm {
            Some(w) => backend::rms_norm(&sc.x[..n * d], w, c.rms_eps, h),
            None => h.copy_from_slice(&sc.x[..n * d]),
        }
        dump("ffn_norm", Some(il), h);
        let ff = c.n_ff;
        match &lw.ffn_gate {
            Some(gate_w) => {
                let gate = resize(&mut sc.gate, n * ff);
                let up = resize(&mut sc.up, n * ff);
                cpu.matmul_many(&mut [(gate_w, gate), (&lw.ffn_up, up)], h, n, &mut sc.acts)?;
            }
            None => {
                // fused [gate; up] rows: the first n_ff outputs are the gate
                let both = resize(&mut sc.up, n * 2 * ff);
                cpu.matmul(&lw.ffn_up, h, n, &mut sc.acts, both)?;
                let gate = resize(&mut sc.gate, n * ff);
                for t in 0..n {
                    gate[t * ff..(t + 1) * ff].copy_from_slice(&sc.up[t * 2 * ff..t * 2 * ff + ff]);
                }
                for t in 0..n {
                    sc.up.copy_within(t * 2 * ff + ff..(t + 1) * 2 * ff, t * ff);
                }
            }
        }
        let act = match c.ffn_act {
            FfnAct::SwiGlu => backend::silu,
            FfnAct::GeGlu => backend::gelu,
        };
        dump("ffn_gate", Some(il), &sc.gate[..n * ff]);
        dump("ffn_up", Some(il), &sc.up[..n * ff]);
        backend::glu_inplace(&mut sc.gate[..n * ff], &sc.up[..n * ff], act);
        dump("ffn_swiglu", Some(il), &sc.gate[..n * ff]);
        let o = resize(&mut sc.o, n * d);
        cpu.matmul(&lw.ffn_down, &sc.gate[..n * ff], n, &mut sc.acts, o)?;
        dump("ffn_out", Some(il), o);
        self.residual(lw.ffn_post_norm.as_deref(), sc, n);
        Ok(())
    }
}
