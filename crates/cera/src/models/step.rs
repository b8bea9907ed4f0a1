//! One forward step over several sequences: what each sequence brings ([`SeqInput`]), the
//! step's working buffers ([`Workspace`]) and the pieces every architecture shares (the step
//! plan, the per-layer list of caches, logits out).

use super::SeqState;
use crate::backend::{AttentionParams, Backend, Device, RopeConfig, SeqSpan, Weight};
use crate::error::{Error, Result};
use crate::lora::LoraSet;

/// Which of a sequence's rows in a step produce logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Logits {
    /// None (a prefill chunk that is not the prompt's last).
    None,
    /// The last token's (decode, the end of a prompt).
    Last,
    /// Every token's (verifying drafted tokens, perplexity).
    All,
}

impl Logits {
    fn rows(self, n: usize) -> usize {
        match self {
            Logits::None => 0,
            Logits::Last => 1,
            Logits::All => n,
        }
    }
}

/// One sequence's part of a step: its state, its tokens at positions `pos0..`, and which rows
/// want logits.
pub struct SeqInput<'a, B: Backend = Device> {
    pub state: &'a mut SeqState<B>,
    /// One id per position; where `embd` is given, ids that stand for its rows in the
    /// context (looked up nowhere).
    pub tokens: &'a [u32],
    /// `[tokens.len(), n_embd]`: the positions' input rows themselves (an image's or an audio
    /// clip's embeddings, in the model's input space) instead of token lookups.
    pub embd: Option<&'a [f32]>,
    pub pos0: usize,
    pub logits: Logits,
    /// The LoRA adapters this sequence applies (none: the base model).
    pub lora: &'a LoraSet,
}

/// Rows of a step that apply one set of adapters (`None`: every row).
type LoraGroup = (LoraSet, Option<Vec<usize>>);

/// Which rows of a step apply which adapters, and the buffers their deltas use.
pub(crate) struct StepLora<B: Backend> {
    /// Per distinct set of adapters: the set and its rows, in step order.
    groups: Vec<LoraGroup>,
    /// The groups again for the rows that want logits (indices into those rows).
    out_groups: Vec<LoraGroup>,
    bufs: LoraBufs<B>,
    /// A group's tokens (embedding deltas).
    tok_buf: Vec<u32>,
}

/// `[rows, in]` a group's input rows.
struct LoraBufs<B: Backend> {
    xs: B::Tensor,
}

impl<B: Backend> Default for StepLora<B> {
    fn default() -> Self {
        StepLora {
            groups: Vec::new(),
            out_groups: Vec::new(),
            bufs: LoraBufs {
                xs: Default::default(),
            },
            tok_buf: Vec::new(),
        }
    }
}

impl<B: Backend> StepLora<B> {
    /// Groups the sequences by their adapter sets.
    fn plan(&mut self, seqs: &[SeqInput<'_, B>], spans: &[SeqSpan], n: usize, out_rows: &[usize]) {
        self.groups.clear();
        self.out_groups.clear();
        for (s, span) in seqs.iter().zip(spans) {
            if s.lora.is_empty() {
                continue;
            }
            let rows = span.row0..span.row0 + span.n;
            match self.groups.iter_mut().find(|(g, _)| g.same_as(s.lora)) {
                Some((_, r)) => r.get_or_insert_with(Vec::new).extend(rows),
                None => self.groups.push((s.lora.clone(), Some(rows.collect()))),
            }
        }
        for (set, rows) in &self.groups {
            let rows = rows.as_deref().expect("filled above");
            // positions among the logits rows (both lists ascend)
            let at: Vec<usize> = out_rows
                .iter()
                .enumerate()
                .filter(|(_, r)| rows.binary_search(r).is_ok())
                .map(|(i, _)| i)
                .collect();
            if !at.is_empty() {
                self.out_groups.push((set.clone(), Some(at)));
            }
        }
        // one set over every row needs no gathering
        for (groups, len) in [
            (&mut self.groups, n),
            (&mut self.out_groups, out_rows.len()),
        ] {
            if let [(_, rows)] = &mut groups[..]
                && rows.as_ref().is_some_and(|r| r.len() == len)
            {
                *rows = None;
            }
        }
    }
}

impl<B: Backend> crate::backend::MoeLora for StepLora<B> {
    fn n_groups(&self) -> usize {
        self.groups.len()
    }

    fn group_of(&self, t: usize) -> Option<usize> {
        self.groups
            .iter()
            .position(|(_, rows)| rows.as_ref().is_none_or(|r| r.binary_search(&t).is_ok()))
    }

    fn each(
        &self,
        g: usize,
        w: &Weight,
        f: &mut dyn FnMut(&crate::backend::LowRank, f32) -> Result<()>,
    ) -> Result<()> {
        for att in self.groups[g].0.iter() {
            if let Some(pair) = att.adapter.pair(w) {
                f(pair, att.adapter.scale(pair, att.scale))?;
            }
        }
        Ok(())
    }
}

impl<B: Backend> StepLora<B> {
    /// Whether no row of the step applies an adapter.
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Adds each group's token-embedding deltas to the looked-up rows `x` of the step's
    /// `tokens`.
    pub(crate) fn embed_deltas(
        &mut self,
        be: &B,
        cx: &mut B::Ctx,
        tokens: &[u32],
        x: &mut B::Tensor,
    ) -> Result<()> {
        for (set, rows) in &self.groups {
            for att in set.iter() {
                let Some(pair) = att.adapter.embedding_pair() else {
                    continue;
                };
                let s = att.adapter.scale(pair, att.scale);
                match rows {
                    None => be.lora_embed(cx, x, tokens, None, pair, s)?,
                    Some(r) => {
                        self.tok_buf.clear();
                        self.tok_buf.extend(r.iter().map(|&i| tokens[i]));
                        be.lora_embed(cx, x, &self.tok_buf, Some(r), pair, s)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// `out = x · wᵀ` for each `(w, out)` as [`Backend::matmul`], plus each attached adapter's
/// `s · B(A·x)` on the rows of the sequences that attached it (added after the product and
/// before any bias, as llama.cpp orders it). `x` holds every row of the step.
pub(crate) fn project<B: Backend>(
    be: &B,
    cx: &mut B::Ctx,
    lo: &mut StepLora<B>,
    ops: &mut [(&Weight, &mut B::Tensor)],
    x: &B::Tensor,
) -> Result<()> {
    project_groups(be, cx, &lo.groups, &mut lo.bufs, ops, x)
}

/// Deltas of one projection list up to which the list lives on the stack.
const INLINE_DELTAS: usize = 32;

fn project_groups<B: Backend>(
    be: &B,
    cx: &mut B::Ctx,
    groups: &[LoraGroup],
    bufs: &mut LoraBufs<B>,
    ops: &mut [(&Weight, &mut B::Tensor)],
    x: &B::Tensor,
) -> Result<()> {
    // every row applies the same adapters (one sequence, or several sharing them): the
    // backend may add the deltas as part of the product
    if let [(set, None)] = groups {
        let pairs = || {
            ops.iter().enumerate().flat_map(|(i, (w, _))| {
                set.iter().filter_map(move |att| {
                    let pair = att.adapter.pair(w)?;
                    Some((i, pair, att.adapter.scale(pair, att.scale)))
                })
            })
        };
        // one pass over the adapters' pairs (each a lookup by name), on the stack when few
        let mut it = pairs();
        let Some(first) = it.next() else {
            return be.matmul(cx, ops, x);
        };
        let mut list = [first; INLINE_DELTAS];
        let mut count = 1;
        for d in it.by_ref() {
            if count == INLINE_DELTAS {
                let all: Vec<_> = list.into_iter().chain([d]).chain(it).collect();
                return be.matmul_lora(cx, ops, x, &all);
            }
            list[count] = d;
            count += 1;
        }
        return be.matmul_lora(cx, ops, x, &list[..count]);
    }
    be.matmul(cx, ops, x)?;
    add_deltas(be, cx, groups, bufs, ops, x)
}

fn add_deltas<B: Backend>(
    be: &B,
    cx: &mut B::Ctx,
    groups: &[LoraGroup],
    bufs: &mut LoraBufs<B>,
    ops: &mut [(&Weight, &mut B::Tensor)],
    x: &B::Tensor,
) -> Result<()> {
    let xs = &mut bufs.xs;
    for (set, rows) in groups {
        let mut gathered = false;
        for (w, out) in ops.iter_mut() {
            for att in set.iter() {
                let Some(pair) = att.adapter.pair(w) else {
                    continue;
                };
                let input = match rows {
                    None => x,
                    Some(r) => {
                        if !gathered {
                            be.gather_rows(cx, x, r, xs);
                            gathered = true;
                        }
                        &*xs
                    }
                };
                let s = att.adapter.scale(pair, att.scale);
                be.lora(cx, out, input, rows.as_deref(), pair, s)?;
            }
        }
    }
    Ok(())
}

/// The working buffers of a step, reused across steps so steady-state decoding allocates
/// nothing. Shapes are per step: `n` tokens of every sequence together.
pub struct Workspace<B: Backend = Device> {
    /// The backend's per-step context.
    pub cx: B::Ctx,
    /// `[n, n_embd]` residual stream; `h` the normed input of a block; `o` a block's output
    pub(crate) x: B::Tensor,
    pub(crate) h: B::Tensor,
    pub(crate) o: B::Tensor,
    /// `[n, n_head*head_dim]`, `[n, n_kv*head_dim]`, `[n, n_kv*head_dim_v]`
    pub(crate) q: B::Tensor,
    pub(crate) k: B::Tensor,
    pub(crate) v: B::Tensor,
    /// `[n, n_head*head_dim_v]`
    pub(crate) att: B::Tensor,
    /// `[n, n_ff]` each (`up` is `[n, 2*n_ff]` for a fused gate/up before it is split)
    pub(crate) gate: B::Tensor,
    pub(crate) up: B::Tensor,
    /// LFM2: `[n, 3*n_embd]` in-projection (B, C, x) and `[n, n_embd]` convolution output
    pub(crate) bcx: B::Tensor,
    pub(crate) conv: B::Tensor,
    /// `[r, n_embd]` the rows that want logits, normed; `[r, n_vocab]` their logits
    pub(crate) sel: B::Tensor,
    pub(crate) hn: B::Tensor,
    pub(crate) lg: B::Tensor,
    /// Per token of the step: id and position (host copies of the plan).
    pub(crate) tokens: Vec<u32>,
    /// Input rows given as embeddings: `(first row, rows)` per run, their values end to end
    /// (`[rows, n_embd]` each).
    pub(crate) embd_spans: Vec<(usize, usize)>,
    pub(crate) embd: Vec<f32>,
    pub(crate) pos: Vec<usize>,
    /// Per sequence: its rows.
    pub(crate) spans: Vec<SeqSpan>,
    /// The rows whose logits are returned, in output order.
    pub(crate) out_rows: Vec<usize>,
    /// The step's LoRA groups.
    pub(crate) lora: StepLora<B>,
    /// The rows asked for return their final-norm hidden states instead of logits.
    pub(crate) hidden: bool,
    /// `Some(k)`: the rows asked for return their top k logits to `top` (k pairs of (token,
    /// logit) per row, largest first) and leave `logits` empty; their whole logits stay in
    /// `lg` until the next step ([`Workspace::read_logits`]).
    pub(crate) top_k: Option<usize>,
    pub(crate) top: Vec<(u32, f32)>,
}

impl<B: Backend> Default for Workspace<B> {
    fn default() -> Self {
        Workspace {
            cx: Default::default(),
            x: Default::default(),
            embd_spans: Vec::new(),
            embd: Vec::new(),
            h: Default::default(),
            o: Default::default(),
            q: Default::default(),
            k: Default::default(),
            v: Default::default(),
            att: Default::default(),
            gate: Default::default(),
            up: Default::default(),
            bcx: Default::default(),
            conv: Default::default(),
            sel: Default::default(),
            hn: Default::default(),
            lg: Default::default(),
            tokens: Vec::new(),
            pos: Vec::new(),
            spans: Vec::new(),
            out_rows: Vec::new(),
            lora: StepLora::default(),
            hidden: false,
            top_k: None,
            top: Vec::new(),
        }
    }
}

impl<B: Backend> Workspace<B> {
    /// The whole logits of the last step's rows (after a step that returned only their top k).
    pub(crate) fn read_logits(&mut self, be: &B, out: &mut Vec<f32>) {
        be.download(&mut self.cx, &self.lg, out);
    }

    /// Lays the sequences' tokens end to end and checks them: at least one token each, room in
    /// each cache, ids in the vocabulary. Nothing is computed when a check fails.
    pub(crate) fn plan(
        &mut self,
        seqs: &[SeqInput<'_, B>],
        n_vocab: usize,
        n_embd: usize,
    ) -> Result<()> {
        if seqs.is_empty() {
            return Err(Error::Model("a step needs at least one sequence".into()));
        }
        self.tokens.clear();
        self.embd_spans.clear();
        self.embd.clear();
        self.pos.clear();
        self.spans.clear();
        self.out_rows.clear();
        for (i, s) in seqs.iter().enumerate() {
            let n = s.tokens.len();
            if n == 0 {
                return Err(Error::Model(format!(
                    "sequence {i} of the step has no tokens"
                )));
            }
            let n_ctx = s.state.n_ctx();
            if s.pos0 + n > n_ctx {
                return Err(Error::ContextOverflow {
                    n_ctx,
                    needed: s.pos0 + n,
                });
            }
            let row0 = self.tokens.len();
            match s.embd {
                None => {
                    if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= n_vocab) {
                        return Err(Error::TokenOutOfRange { id: bad, n_vocab });
                    }
                    self.tokens.extend_from_slice(s.tokens);
                }
                Some(rows) => {
                    if n_embd == 0 || rows.len() != n * n_embd {
                        return Err(Error::Model(format!(
                            "sequence {i} of the step gives {} embedding values for {n} \
                             positions of {n_embd}",
                            rows.len()
                        )));
                    }
                    // looked up and then replaced: any id in the table will do
                    self.tokens.extend(std::iter::repeat_n(0, n));
                    self.embd_spans.push((row0, n));
                    self.embd.extend_from_slice(rows);
                }
            }
            self.spans.push(SeqSpan {
                row0,
                n,
                pos0: s.pos0,
            });
            self.pos.extend(s.pos0..s.pos0 + n);
            let r = s.logits.rows(n);
            self.out_rows.extend(row0 + n - r..row0 + n);
        }
        self.lora
            .plan(seqs, &self.spans, self.tokens.len(), &self.out_rows);
        Ok(())
    }

    /// Puts the rows given as embeddings into `x` (`[n, n_embd]`, the token lookups made for
    /// every row), replacing what the lookup put there: through the host, as it is only the
    /// steps that carry media that pay for it.
    pub(crate) fn inject_embeddings(&mut self, be: &B, x: XBuf) {
        if self.embd_spans.is_empty() {
            return;
        }
        let t = match x {
            XBuf::X => &mut self.x,
            XBuf::H => &mut self.h,
        };
        let (rows, cols) = be.shape(t);
        let mut host = Vec::new();
        be.download(&mut self.cx, t, &mut host);
        let mut at = 0;
        for &(row0, n) in &self.embd_spans {
            host[row0 * cols..(row0 + n) * cols].copy_from_slice(&self.embd[at..at + n * cols]);
            at += n * cols;
        }
        be.upload(&mut self.cx, &host, rows, cols, t);
    }

    /// Tokens in the step.
    pub(crate) fn n(&self) -> usize {
        self.tokens.len()
    }
}

/// Which buffer of the workspace holds a model's input rows.
#[derive(Clone, Copy)]
pub(crate) enum XBuf {
    X,
    H,
}

/// Sequences up to which the per-layer list of caches lives on the stack.
const INLINE_SEQS: usize = 32;

/// Calls `f` with layer `il`'s cache of every sequence, in input order.
fn with_layer_kv<B: Backend, R>(
    seqs: &[SeqInput<'_, B>],
    il: usize,
    f: impl FnOnce(&[&B::Kv]) -> R,
) -> R {
    if seqs.len() <= INLINE_SEQS {
        let first = &seqs[0].state.kv[il];
        let mut list = [first; INLINE_SEQS];
        for (e, s) in list.iter_mut().zip(seqs) {
            *e = &s.state.kv[il];
        }
        f(&list[..seqs.len()])
    } else {
        let list: Vec<&B::Kv> = seqs.iter().map(|s| &s.state.kv[il]).collect();
        f(&list)
    }
}

/// Stores the step's keys and values (`ws.k`, `ws.v`) in each sequence's layer-`il` cache,
/// then writes the attention of the queries `ws.q` over those caches to `ws.att`.
pub(crate) fn attend<B: Backend>(
    be: &B,
    il: usize,
    seqs: &mut [SeqInput<'_, B>],
    ws: &mut Workspace<B>,
    p: &AttentionParams,
) {
    let cx = &mut ws.cx;
    if !with_layer_kv(seqs, il, |kv| {
        be.kv_store_seqs(cx, kv, &ws.k, &ws.v, &ws.spans)
    }) {
        for (s, span) in seqs.iter_mut().zip(&ws.spans) {
            be.kv_store(cx, &mut s.state.kv[il], &ws.k, &ws.v, *span);
        }
    }
    with_layer_kv(seqs, il, |kv| {
        be.attention(cx, &ws.q, kv, &ws.spans, p, &mut ws.att)
    });
}

/// RoPE of the step's queries and keys (`ws.q`, `ws.k`), then [`attend`]: one sequence's
/// rotation, cache store and attention go to the backend together
/// ([`Backend::rope_store_attend`]: a GPU decodes them in one dispatch). With `CERA_DUMP` the rotated Q/K/V are dumped first.
pub(crate) fn rope_attend<B: Backend>(
    be: &B,
    il: usize,
    seqs: &mut [SeqInput<'_, B>],
    ws: &mut Workspace<B>,
    rope: &RopeConfig,
    p: &AttentionParams,
) {
    if seqs.len() == 1 && !dumping() {
        be.rope_store_attend(
            &mut ws.cx,
            &mut ws.q,
            &mut ws.k,
            &ws.v,
            &mut seqs[0].state.kv[il],
            ws.spans[0],
            &ws.pos,
            rope,
            p,
            &mut ws.att,
        );
        return;
    }
    let cx = &mut ws.cx;
    be.rope_qk(
        cx,
        &mut ws.q,
        p.n_head,
        &mut ws.k,
        p.n_kv_head,
        p.head_dim,
        &ws.pos,
        rope,
    );
    dump(be, ws, "Qcur", Some(il), Buf::Q);
    dump(be, ws, "Kcur", Some(il), Buf::K);
    dump(be, ws, "Vcur", Some(il), Buf::V);
    attend(be, il, seqs, ws, p);
}

/// What follows the output projection.
pub(crate) struct LogitsPost {
    /// Divides the logits (granite's `logit_scale`).
    pub divisor: f32,
    pub softcap: Option<f32>,
}

/// The final norm and output projection for the rows that want logits, read back to `logits`.
pub(crate) fn logits_out<B: Backend>(
    be: &B,
    ws: &mut Workspace<B>,
    norm: &[f32],
    eps: f32,
    output: &Weight,
    post: LogitsPost,
    logits: &mut Vec<f32>,
) -> Result<()> {
    logits.clear();
    if ws.out_rows.is_empty() {
        // nothing to read back: the step ends here (a GPU submits what it recorded)
        be.finish(&mut ws.cx);
        return Ok(());
    }
    let n = ws.n();
    // every row, in order (a single-sequence `All`): norm the stream as it is
    let all = ws.out_rows.len() == n;
    if all {
        be.rms_norm(&mut ws.cx, &ws.x, norm, eps, &mut ws.hn);
    } else {
        be.gather_rows(&mut ws.cx, &ws.x, &ws.out_rows, &mut ws.sel);
        be.rms_norm(&mut ws.cx, &ws.sel, norm, eps, &mut ws.hn);
    }
    dump(be, ws, "result_norm", None, Buf::Hn);
    if ws.hidden {
        // embeddings: the normed hidden states are the output (llama.cpp's `result_norm`)
        be.download(&mut ws.cx, &ws.hn, logits);
        return Ok(());
    }
    let lo = &mut ws.lora;
    project_groups(
        be,
        &mut ws.cx,
        &lo.out_groups,
        &mut lo.bufs,
        &mut [(output, &mut ws.lg)],
        &ws.hn,
    )?;
    if post.divisor != 1.0 {
        be.scale(&mut ws.cx, &mut ws.lg, 1.0 / post.divisor);
    }
    if let Some(cap) = post.softcap {
        be.softcap(&mut ws.cx, &mut ws.lg, cap);
    }
    match ws.top_k {
        Some(k) => {
            ws.top.clear();
            let k = k.min(be.shape(&ws.lg).1);
            be.top_k(&mut ws.cx, &ws.lg, k, &mut ws.top);
        }
        None => be.download(&mut ws.cx, &ws.lg, logits),
    }
    Ok(())
}

/// Which workspace buffer [`dump`] prints.
#[derive(Clone, Copy)]
pub(crate) enum Buf {
    X,
    H,
    O,
    Q,
    K,
    V,
    Att,
    Gate,
    Up,
    Hn,
}

/// Whether [`dump`] prints (`CERA_DUMP` is set): fused ops then run as their parts, so
/// that each part's output can be printed.
pub(crate) fn dumping() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("CERA_DUMP").is_some())
}

/// `CERA_DUMP=1` prints each intermediate's sum and first values under llama.cpp's tensor names
/// (`attn_norm-0`, `Qcur-0`, `ffn_out-3`, …), to diff against `llama-eval-callback`. Reads the
/// tensor back, so it is off unless asked for.
pub(crate) fn dump<B: Backend>(
    be: &B,
    ws: &mut Workspace<B>,
    name: &str,
    il: Option<usize>,
    buf: Buf,
) {
    if !dumping() {
        return;
    }
    let t = match buf {
        Buf::X => &ws.x,
        Buf::H => &ws.h,
        Buf::O => &ws.o,
        Buf::Q => &ws.q,
        Buf::K => &ws.k,
        Buf::V => &ws.v,
        Buf::Att => &ws.att,
        Buf::Gate => &ws.gate,
        Buf::Up => &ws.up,
        Buf::Hn => &ws.hn,
    };
    let mut data = Vec::new();
    be.download(&mut ws.cx, t, &mut data);
    let sum: f64 = data.iter().map(|&x| x as f64).sum();
    let name = match il {
        Some(i) => format!("{name}-{i}"),
        None => name.to_owned(),
    };
    eprintln!(
        "{name:>16} sum = {sum:>14.6} first = {:?}",
        &data[..data.len().min(3)]
    );
    if std::env::var_os("CERA_DUMP_ROWS").is_some() && data.len() >= 5 {
        let n = data.len() / 5;
        for r in 0..5 {
            let row = &data[r * n..(r + 1) * n];
            if row.len() >= 6 {
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
}
