//! Model architectures. Each family has one file declaring its hyperparameters and tensors;
//! shared blocks live in `common/`; names and keys come from [`names`] and [`crate::keys`].

mod adapter;
pub mod audio;
pub mod bert;
pub mod common;
pub mod gemma2;
pub mod gemma3;
pub mod hf;
pub mod lfm2;
pub mod llama;
pub mod loader;
pub mod mmproj;
pub mod names;
pub mod olmo2;
pub mod peft;
pub mod phi3;
pub mod qwen2;
pub mod step;
pub mod vision;
pub mod whisper;

pub use mmproj::Mmproj;

use std::sync::Arc;

use crate::backend::{Backend, Cpu, Device, KvSpec, RopeConfig, RopeKind, RopeScaling, Weight};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::keys::{arch as k, arch_key};
use crate::lora::LoraSet;
use common::shortconv::ConvState;
pub use common::shortconv::{ConvSnapshot, KeptState};
pub use names::Arch;
pub use step::{Logits, SeqInput, Workspace};

/// A loaded model: immutable, shareable between sessions, the same for every backend.
pub enum Model {
    Decoder(common::Decoder),
    /// `lfm2` / `lfm2moe`: convolution and attention layers, dense or routed FFNs.
    Lfm2(lfm2::Lfm2),
    /// `bert`: an encoder (embeddings only).
    Encoder(bert::Bert),
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Model::Decoder(d) => write!(f, "Model::Decoder({} layers)", d.layers.len()),
            Model::Encoder(b) => write!(f, "Model::Encoder(bert, {} layers)", b.layers.len()),
            Model::Lfm2(m) => {
                let (conv, attn, routed) = m.layer_counts();
                write!(
                    f,
                    "Model::Lfm2({}: {conv} convolution, {attn} attention, {routed} routed)",
                    m.cfg.arch
                )
            }
        }
    }
}

/// One sequence's state in backend memory: its KV cache and, for LFM2, its convolution
/// inputs. Owned by a session; a model never keeps any.
pub struct SeqState<B: Backend = Device> {
    /// Per layer (a convolution layer's holds no heads).
    pub kv: Vec<B::Kv>,
    /// Rolling convolution inputs (LFM2); empty for attention-only models.
    pub conv: ConvState<B>,
    n_ctx: usize,
}

impl<B: Backend> Clone for SeqState<B>
where
    B::Kv: Clone,
    B::Tensor: Clone,
{
    fn clone(&self) -> Self {
        SeqState {
            kv: self.kv.clone(),
            conv: self.conv.clone(),
            n_ctx: self.n_ctx,
        }
    }
}

impl<B: Backend> SeqState<B> {
    /// Positions the cache holds.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Whether the state has a recurrent part (convolution inputs) that, unlike the KV cache,
    /// cannot be cut back to an earlier position: truncating needs a re-prefill.
    pub fn is_recurrent(&self) -> bool {
        !self.conv.is_empty()
    }

    /// Bytes of KV cache and recurrent state.
    pub fn bytes(&self) -> usize {
        use crate::backend::KvCache;
        self.kv.iter().map(|l| l.bytes()).sum::<usize>() + self.conv.bytes()
    }
}

/// A sequence's state together with the working buffers to run it alone (what a session
/// holds).
pub struct ModelState<B: Backend = Device> {
    pub seq: SeqState<B>,
    pub ws: Workspace<B>,
}

impl<B: Backend> ModelState<B> {
    pub fn is_recurrent(&self) -> bool {
        self.seq.is_recurrent()
    }

    pub fn bytes(&self) -> usize {
        self.seq.bytes()
    }
}

impl ModelState<Cpu> {
    /// For mixture-of-experts models: the smallest gap, since the last call, between the
    /// selection score of the last expert chosen and the best one left out (None: no routing).
    /// A tiny gap means rounding-level differences could have chosen other experts, which is
    /// what comparisons against another engine need to know.
    pub fn take_routing_margin(&mut self) -> Option<f32> {
        self.ws.cx.take_routing_margin()
    }
}

impl Model {
    /// Builds the model `general.architecture` names; an unsupported one is an error naming it.
    pub fn load(file: Arc<GgufFile>) -> Result<Model> {
        let arch = Arch::from_name(file.architecture()?)?;
        // every weight must be of a type we can compute with; say which one is not
        for t in &file.tensors {
            if t.shape.len() >= 2
                && t.shape[1] > 1
                && crate::kernels::KernelTable::vec_dot_type(t.ty).is_none()
            {
                return Err(Error::QuantUnsupported {
                    ty: t.ty.name(),
                    op: "matrix multiplication (tensor in this model)",
                });
            }
        }
        Ok(match arch {
            Arch::Llama | Arch::Granite => Model::Decoder(llama::load(file, arch)?),
            Arch::Qwen2 | Arch::Qwen3 => Model::Decoder(qwen2::load(file, arch)?),
            Arch::Gemma2 => Model::Decoder(gemma2::load(file)?),
            Arch::Gemma3 => Model::Decoder(gemma3::load(file)?),
            Arch::Phi3 => Model::Decoder(phi3::load(file)?),
            Arch::Olmo2 => Model::Decoder(olmo2::load(file)?),
            Arch::Lfm2 | Arch::Lfm2Moe => Model::Lfm2(lfm2::load(file, arch)?),
            Arch::Bert => Model::Encoder(bert::load(file)?),
        })
    }

    /// The projections a LoRA adapter may change: every matrix the forward pass multiplies
    /// by except token embeddings (and a tied output, which is the embedding table) and MoE
    /// routers and experts.
    pub fn lora_targets(&self) -> Vec<&Weight> {
        let mut v: Vec<&Weight> = Vec::new();
        let (token_embd, output) = match self {
            Model::Encoder(b) => return b.lora_targets(),
            Model::Decoder(d) => {
                for l in &d.layers {
                    v.extend([&l.wq, &l.wk, &l.wv, &l.wo]);
                    v.extend(l.ffn_gate.as_ref());
                    v.extend([&l.ffn_up, &l.ffn_down]);
                }
                (&d.token_embd, &d.output)
            }
            Model::Lfm2(m) => {
                for l in &m.layers {
                    match &l.mixer {
                        lfm2::Mixer::Conv(c) => v.extend([&c.in_proj, &c.out_proj]),
                        lfm2::Mixer::Attention(a) => v.extend([&a.wq, &a.wk, &a.wv, &a.wo]),
                    }
                    match &l.ffn {
                        lfm2::Ffn::Dense { gate, up, down } => v.extend([gate, up, down]),
                        lfm2::Ffn::Moe(m) => {
                            v.push(&m.gate_inp);
                            v.extend(m.gate.iter().chain(&m.up).chain(&m.down));
                        }
                    }
                }
                (&m.token_embd, &m.output)
            }
        };
        if output.name != token_embd.name {
            v.push(output);
        }
        v
    }

    /// Packs every matrix the forward pass multiplies by into the CPU kernels' layout now
    /// (otherwise each is packed at its first product). A tied output is packed too, so
    /// embedding lookups read the packed copy from the start.
    pub fn prepack(&self, cpu: &Cpu) {
        let mut ws = self.lora_targets();
        let (embd, output) = match self {
            Model::Encoder(_) => (self.token_embd(), None),
            Model::Decoder(d) => (&d.token_embd, Some(&d.output)),
            Model::Lfm2(m) => (&m.token_embd, Some(&m.output)),
        };
        if let Some(o) = output
            && o.name == embd.name
        {
            ws.push(o);
        }
        for w in ws {
            w.prepack(cpu);
        }
    }

    /// The token embeddings table (what an adapter's `token_embd.weight` pair changes).
    pub fn token_embd(&self) -> &Weight {
        match self {
            Model::Encoder(b) => &b.token_embd,
            Model::Decoder(d) => &d.token_embd,
            Model::Lfm2(m) => &m.token_embd,
        }
    }

    /// Whether the model has a reranker's classifier head.
    pub fn has_rank_head(&self) -> bool {
        matches!(self, Model::Encoder(b) if b.cls_out.is_some() || b.cls.is_some())
    }

    /// A reranker's classifier head over one first-token hidden state: its scores.
    pub fn rank_head(&self, first: &[f32]) -> Result<Vec<f32>> {
        match self {
            Model::Encoder(b) => b.rank_head(first),
            _ => Err(Error::Model("this model has no classifier head".into())),
        }
    }

    /// An encoder (embeddings only, every sequence whole in one step).
    pub fn is_encoder(&self) -> bool {
        matches!(self, Model::Encoder(_))
    }

    /// Width of the hidden states.
    pub fn n_embd(&self) -> usize {
        match self {
            Model::Encoder(b) => b.cfg.n_embd,
            Model::Decoder(d) => d.cfg.n_embd,
            Model::Lfm2(m) => m.cfg.n_embd,
        }
    }

    pub fn n_vocab(&self) -> usize {
        match self {
            Model::Encoder(b) => b.cfg.n_vocab,
            Model::Decoder(d) => d.cfg.n_vocab,
            Model::Lfm2(m) => m.cfg.n_vocab,
        }
    }

    /// Per layer, the RoPE its keys were rotated with (`None`: a layer without attention), for
    /// the context shift.
    pub fn layer_ropes(&self) -> Vec<Option<&RopeConfig>> {
        match self {
            Model::Decoder(d) => d
                .cfg
                .rope
                .iter()
                .zip(&d.cfg.n_head_kv)
                .map(|(r, &h)| (h > 0).then_some(r))
                .collect(),
            Model::Lfm2(m) => m
                .layers
                .iter()
                .map(|l| match l.mixer {
                    lfm2::Mixer::Attention(_) => Some(&m.cfg.rope),
                    lfm2::Mixer::Conv(_) => None,
                })
                .collect(),
            Model::Encoder(b) => b.layers.iter().map(|_| None).collect(),
        }
    }

    /// A fresh sequence state on backend `be`: KV cache of `n_ctx` positions of the types
    /// `spec` asks for (per layer, as its head sizes allow).
    pub fn new_seq<B: Backend>(&self, be: &B, n_ctx: usize, spec: KvSpec) -> SeqState<B> {
        match self {
            Model::Decoder(d) => SeqState {
                kv: d.new_kv(be, n_ctx, spec),
                conv: ConvState::default(),
                n_ctx,
            },
            Model::Lfm2(m) => SeqState {
                kv: m.new_kv(be, n_ctx, spec),
                conv: m.new_conv_state(be),
                n_ctx,
            },
            Model::Encoder(b) => SeqState {
                kv: b.new_kv(be, n_ctx, spec),
                conv: ConvState::default(),
                n_ctx,
            },
        }
    }

    /// A fresh CPU sequence state with its own working buffers.
    pub fn new_state(&self, n_ctx: usize, spec: KvSpec) -> ModelState<Cpu> {
        // the state's memory does not depend on the pool: any CPU backend makes the same
        let cpu = Cpu::new(1);
        ModelState {
            seq: self.new_seq(&cpu, n_ctx, spec),
            ws: Workspace::default(),
        }
    }

    /// One step over several sequences: each [`SeqInput`] brings its state, its tokens at
    /// its positions and which of its rows want logits. Every weight is read once for all of
    /// them; attention and recurrent state stay per sequence. The logits rows go to `logits`
    /// in input order (per sequence: none, its last token, or all its tokens). Validates
    /// everything (positions, context room, token ids) before touching any state.
    pub fn forward_batch<B: Backend>(
        &self,
        be: &B,
        ws: &mut Workspace<B>,
        seqs: &mut [SeqInput<'_, B>],
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        ws.hidden = false;
        self.step(be, ws, seqs, logits)
    }

    /// [`Model::forward_batch`] returning, for the rows asked for, the output of the final
    /// norm (`n_embd` values per row: the hidden states embeddings are pooled from) instead
    /// of logits.
    pub fn forward_batch_hidden<B: Backend>(
        &self,
        be: &B,
        ws: &mut Workspace<B>,
        seqs: &mut [SeqInput<'_, B>],
        hidden: &mut Vec<f32>,
    ) -> Result<()> {
        ws.hidden = true;
        let r = self.step(be, ws, seqs, hidden);
        ws.hidden = false;
        r
    }

    fn step<B: Backend>(
        &self,
        be: &B,
        ws: &mut Workspace<B>,
        seqs: &mut [SeqInput<'_, B>],
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        ws.plan(seqs, self.n_vocab(), self.n_embd())?;
        for s in seqs.iter_mut() {
            s.state.conv.begin(be, &mut ws.cx, s.pos0)?;
        }
        match self {
            Model::Decoder(d) => d.forward(be, ws, seqs, logits)?,
            Model::Lfm2(m) => m.forward(be, ws, seqs, logits)?,
            Model::Encoder(b) => b.forward(be, ws, seqs, logits)?,
        }
        for s in seqs.iter_mut() {
            s.state.conv.advance(s.pos0, s.tokens.len());
        }
        Ok(())
    }

    /// Runs one sequence's `tokens` at positions `pos0..` on backend `be`; logits for the last
    /// token (or all) go to `logits`.
    pub fn forward<B: Backend>(
        &self,
        be: &B,
        st: &mut ModelState<B>,
        tokens: &[u32],
        pos0: usize,
        all_logits: bool,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        self.forward_with(be, st, tokens, pos0, all_logits, &LoraSet::NONE, logits)
    }

    /// [`Model::forward`] with the LoRA adapters `lora` applied.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_with<B: Backend>(
        &self,
        be: &B,
        st: &mut ModelState<B>,
        tokens: &[u32],
        pos0: usize,
        all_logits: bool,
        lora: &LoraSet,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        self.forward_input(be, st, tokens, None, pos0, all_logits, lora, logits)
    }

    /// [`Model::forward_with`] of positions whose input rows may be given (`embd`,
    /// `[tokens.len(), n_embd]`; `tokens` then stand for them).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_input<B: Backend>(
        &self,
        be: &B,
        st: &mut ModelState<B>,
        tokens: &[u32],
        embd: Option<&[f32]>,
        pos0: usize,
        all_logits: bool,
        lora: &LoraSet,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        let mut seq = [SeqInput {
            state: &mut st.seq,
            tokens,
            embd,
            pos0,
            logits: if all_logits {
                Logits::All
            } else {
                Logits::Last
            },
            lora,
        }];
        self.forward_batch(be, &mut st.ws, &mut seq, logits)
    }
}

impl Model {
    /// The input rows the token path gives `tokens` (`[n, n_embd]` into `out`): what the
    /// first layer reads for them, the embedding lookup with any scale the architecture
    /// applies (no adapters). An embedding input of these rows computes what the tokens do.
    pub fn input_rows<B: Backend>(
        &self,
        be: &B,
        ws: &mut Workspace<B>,
        tokens: &[u32],
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let n_vocab = self.n_vocab();
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::TokenOutOfRange { id: bad, n_vocab });
        }
        match self {
            Model::Decoder(d) => {
                be.embed(&mut ws.cx, &d.token_embd, &d.output, tokens, &mut ws.x)?;
                if d.cfg.embed_scale != 1.0 {
                    be.scale(&mut ws.cx, &mut ws.x, d.cfg.embed_scale);
                }
            }
            Model::Lfm2(m) => be.embed(&mut ws.cx, &m.token_embd, &m.output, tokens, &mut ws.x)?,
            Model::Encoder(b) => {
                be.embed(&mut ws.cx, &b.token_embd, &b.token_embd, tokens, &mut ws.x)?
            }
        }
        be.download(&mut ws.cx, &ws.x, out);
        Ok(())
    }
}

/// RoPE settings from `{arch}.rope.*`, as llama.cpp reads them: the scaling type defaults to
/// linear (a factor alone scales positions), `longrope` scales like linear (its per-dimension
/// factors are tensors the architecture loads), YaRN's correction range defaults to the
/// training context, and `rope.scaling.attn_factor` multiplies cos/sin for every type.
pub(crate) fn rope_config(
    g: &GgufFile,
    arch: &str,
    kind: RopeKind,
    n_rot: usize,
    base: f32,
) -> Result<RopeConfig> {
    let key = |s: &str| arch_key(arch, s);
    let mut cfg = RopeConfig::new(kind, n_rot, base);
    let scaling: Option<String> = g.get_opt(&key(k::ROPE_SCALING_TYPE))?;
    let factor: f32 = match g.get_opt(&key(k::ROPE_SCALING_FACTOR))? {
        Some(f) => f,
        None => g.get_opt(&key(k::ROPE_SCALE_LINEAR))?.unwrap_or(0.0),
    };
    let attn_factor: f32 = g.get_opt(&key(k::ROPE_SCALING_ATTN_FACTOR))?.unwrap_or(1.0);
    let freq_scale = if factor == 0.0 { 1.0 } else { 1.0 / factor };
    let yarn = |ext_factor: f32| -> Result<RopeScaling> {
        Ok(RopeScaling {
            ext_factor,
            attn_factor,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: match g.get_opt(&key(k::ROPE_SCALING_ORIG_CTX_LEN))? {
                Some(n) if n != 0 => n,
                _ => g.get_opt(&key(k::CONTEXT_LENGTH))?.unwrap_or(0),
            },
        })
    };
    match scaling.as_deref().unwrap_or("linear") {
        "none" => {}
        "linear" | "longrope" => cfg.freq_scale = freq_scale,
        "yarn" => {
            cfg.freq_scale = freq_scale;
            cfg.yarn = Some(yarn(1.0)?);
        }
        other => {
            return Err(Error::Model(format!(
                "{} '{other}' is not supported",
                key(k::ROPE_SCALING_TYPE)
            )));
        }
    }
    if cfg.yarn.is_none() && attn_factor != 1.0 {
        // no extrapolation mix, only the cos/sin multiplier
        cfg.yarn = Some(yarn(0.0)?);
    }
    Ok(cfg)
}
