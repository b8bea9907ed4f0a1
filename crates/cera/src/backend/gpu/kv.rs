//! KV caches on the device and attention over them.
//!
//! A cache side is one buffer of u32 words, head-major: `[head][position][row]`, a row being
//! `head_dim` f32, `head_dim / 2` packed f16 pairs (rounded to nearest even on store, as the
//! CPU rounds), or Q8_0 blocks of 9 words (the f16 scale in the first, 32 signed bytes in the
//! other eight), stored after the Walsh–Hadamard rotation the spec asks for (the query is
//! rotated like the keys, and the output un-rotated like the values, so attention needs no
//! inverse per key). Snapshots use the layout of [`KvCache::saved_len`] (per head, the first
//! `n` rows in the type's bytes): f32 and f16 rows are that already, Q8_0 blocks are repacked
//! from 36 bytes to 34 on the way.

use super::kernels::{Bind, fbits};
use super::kv_slab::{KvPool, Side};
use super::{Gpu, GpuCtx, GpuTensor};
use crate::backend::kvtype as codec;
use crate::backend::{AttentionParams, KvCache, KvSpec, KvType, RopeConfig, Rotation, SeqSpan};
use crate::error::{Error, Result};
use std::sync::Arc;

/// Head sizes the attention shader holds a query of (and value rows it accumulates).
const MAX_HEAD: usize = 512;

/// Whether the GPU caches hold `spec` at these head sizes.
pub(super) fn supported(spec: KvSpec, d: usize, dv: usize) -> bool {
    let side = |t: KvType, w: usize| match t {
        KvType::F32 => true,
        KvType::F16 => w.is_multiple_of(2),
        KvType::Q8_0 => w.is_multiple_of(32),
        _ => false,
    };
    side(spec.k, d) && side(spec.v, dv) && d <= MAX_HEAD && dv <= MAX_HEAD
}

/// One attention layer's keys and values of one sequence, on the device.
pub struct GpuKv {
    /// Each side a slot of a slab shared with the same layer of other sequences.
    pub(super) k: Side,
    pub(super) v: Side,
    pool: Arc<KvPool>,
    /// The sequence's attention layer this cache is (`None`: made outside a sequence's
    /// layers): its copies go to that layer's slabs where they have room.
    layer: Option<usize>,
    /// The rotations keys and values are stored after (block size 0: none).
    k_rot: Rotation,
    v_rot: Rotation,
    spec: KvSpec,
    n_ctx: usize,
    n_kv_head: usize,
    head_dim: usize,
    head_dim_v: usize,
}

/// u32 words of one row of `w` elements of `t`.
fn words(t: KvType, w: usize) -> usize {
    match t {
        KvType::F16 => w / 2,
        KvType::Q8_0 => w / 32 * 9,
        _ => w,
    }
}

/// The shaders' code for a cache type.
fn type_code(t: KvType) -> u32 {
    match t {
        KvType::F16 => 1,
        KvType::Q8_0 => 2,
        _ => 0,
    }
}

/// One side's rows from the device layout to the snapshot layout (`KvType::row_bytes`).
fn to_saved(t: KvType, dev: &[u8], out: &mut Vec<u8>) {
    match t {
        KvType::Q8_0 => {
            for blk in dev.chunks_exact(36) {
                out.extend_from_slice(&blk[..2]);
                out.extend_from_slice(&blk[4..]);
            }
        }
        _ => out.extend_from_slice(dev),
    }
}

/// The inverse of [`to_saved`].
fn from_saved(t: KvType, saved: &[u8], out: &mut Vec<u8>) {
    match t {
        KvType::Q8_0 => {
            for blk in saved.chunks_exact(34) {
                out.extend_from_slice(&blk[..2]);
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(&blk[2..]);
            }
        }
        _ => out.extend_from_slice(saved),
    }
}

impl GpuKv {
    /// The cache of attention layer `layer` (`None`: not a sequence's layer) of a new
    /// sequence.
    pub(super) fn new(
        gpu: &Gpu,
        layer: Option<usize>,
        spec: KvSpec,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> GpuKv {
        assert!(
            supported(spec, head_dim, head_dim_v),
            "GPU KV cache of {}/{} at head sizes {head_dim}/{head_dim_v} (callers check \
             Backend::kv_supported)",
            spec.k.name(),
            spec.v.name()
        );
        let kb = (n_ctx * n_kv_head * words(spec.k, head_dim) * 4) as u64;
        let vb = (n_ctx * n_kv_head * words(spec.v, head_dim_v) * 4) as u64;
        GpuKv {
            k: gpu.kv_pool.take(layer, 0, kb),
            v: gpu.kv_pool.take(layer, 1, vb),
            pool: Arc::clone(&gpu.kv_pool),
            layer,
            k_rot: Rotation::for_side(spec.k, head_dim, spec.rotate, true),
            v_rot: Rotation::for_side(spec.v, head_dim_v, spec.rotate, false),
            spec,
            n_ctx,
            n_kv_head,
            head_dim,
            head_dim_v,
        }
    }

    fn kw(&self) -> usize {
        words(self.spec.k, self.head_dim)
    }

    fn vw(&self) -> usize {
        words(self.spec.v, self.head_dim_v)
    }
}

impl Clone for GpuKv {
    fn clone(&self) -> Self {
        GpuKv {
            k: self.pool.copy(&self.k, self.layer, 0),
            v: self.pool.copy(&self.v, self.layer, 1),
            pool: Arc::clone(&self.pool),
            layer: self.layer,
            k_rot: self.k_rot,
            v_rot: self.v_rot,
            spec: self.spec,
            n_ctx: self.n_ctx,
            n_kv_head: self.n_kv_head,
            head_dim: self.head_dim,
            head_dim_v: self.head_dim_v,
        }
    }
}

impl KvCache for GpuKv {
    fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    fn bytes(&self) -> usize {
        (self.k.bytes() + self.v.bytes()) as usize
    }
    fn spec(&self) -> KvSpec {
        self.spec
    }
    fn dims(&self) -> (usize, usize, usize) {
        (self.n_kv_head, self.head_dim, self.head_dim_v)
    }
}

/// (block size, 1/√block as f32 bits) of a rotation, for the shaders.
fn rot_params(r: &Rotation) -> [u32; 2] {
    let s = if r.n > 0 {
        1.0 / (r.n as f32).sqrt()
    } else {
        1.0
    };
    [r.n as u32, s.to_bits()]
}

/// RoPE of `q` (`n_head` heads) and `k` (`kv`'s heads), and `k`, `v` stored in `kv` at `s`'s
/// positions, in one dispatch: where `s` is every row (one sequence's step) and both cache
/// sides are f32 or f16. `k` is left unrotated (only the cache is read after). Returns
/// whether it ran; the caller does the two ops apart otherwise.
#[allow(clippy::too_many_arguments)]
pub(super) fn rope_store(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    q: &mut GpuTensor,
    n_head: usize,
    k: &GpuTensor,
    v: &GpuTensor,
    kv: &mut GpuKv,
    s: SeqSpan,
    pos: &[usize],
    cfg: &RopeConfig,
) -> bool {
    let h = kv.n_kv_head;
    let d = kv.head_dim;
    let half = cfg.n_rot / 2;
    let plain = |t: KvType| matches!(t, KvType::F32 | KvType::F16);
    if !(plain(kv.spec.k) && plain(kv.spec.v))
        || s.row0 != 0
        || s.n != k.rows
        || q.rows != k.rows
        || pos.len() != k.rows
        || half == 0
        || cfg.n_rot > d
        || n_head * d > q.cols
        || h * d > k.cols
        || h * kv.head_dim_v > v.cols
        || v.rows != k.rows
        || s.pos0 + s.n > kv.n_ctx
    {
        return false;
    }
    if s.n == 0 {
        return true;
    }
    let table = super::ops::rope_table(gpu, cx, cfg, pos);
    let tq = q.rows * n_head * half;
    let tk = s.n * h * kv.kw();
    let tv = s.n * h * kv.vw();
    let params = [
        tq as u32,
        tk as u32,
        tv as u32,
        n_head as u32,
        d as u32,
        half as u32,
        u32::from(cfg.kind == crate::backend::RopeKind::Neox),
        q.cols as u32,
        s.row0 as u32,
        s.pos0 as u32,
        h as u32,
        kv.n_ctx as u32,
        kv.kw() as u32,
        type_code(kv.spec.k),
        k.cols as u32,
        kv.head_dim_v as u32,
        kv.vw() as u32,
        type_code(kv.spec.v),
        v.cols as u32,
    ];
    gpu.dispatch(
        cx,
        "rope_store",
        "",
        None,
        &params,
        &[
            Bind::Whole(q.buf()),
            Bind::Whole(k.buf()),
            Bind::Whole(v.buf()),
            table.bind(),
            kv.k.bind(),
            kv.v.bind(),
        ],
        (tq + tk + tv).div_ceil(256) as u32,
    );
    true
}

/// `kv_store.wgsl`'s parameters: (words of keys, of values), (first row, first position).
fn store_params(
    kv: &GpuKv,
    (tk, tv): (usize, usize),
    (row0, pos0): (usize, usize),
    k: &GpuTensor,
    v: &GpuTensor,
) -> [u32; 14] {
    [
        tk as u32,
        tv as u32,
        row0 as u32,
        pos0 as u32,
        kv.n_kv_head as u32,
        kv.n_ctx as u32,
        kv.head_dim as u32,
        kv.kw() as u32,
        type_code(kv.spec.k),
        k.cols as u32,
        kv.head_dim_v as u32,
        kv.vw() as u32,
        type_code(kv.spec.v),
        v.cols as u32,
    ]
}

pub(super) fn store(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    kv: &mut GpuKv,
    k: &GpuTensor,
    v: &GpuTensor,
    s: SeqSpan,
) {
    assert!(
        s.pos0 + s.n <= kv.n_ctx,
        "kv_store: positions {}..{} past the cache of {}",
        s.pos0,
        s.pos0 + s.n,
        kv.n_ctx
    );
    let h = kv.n_kv_head;
    for (src, d) in [(k, kv.head_dim), (v, kv.head_dim_v)] {
        assert!(
            src.cols >= h * d && s.row0 + s.n <= src.rows,
            "kv_store: rows"
        );
    }
    if s.n == 0 {
        return;
    }
    // f32/f16 sides: one dispatch for both (words of a side: 0 when it is Q8_0)
    let plain = |ty: KvType, d: usize| {
        if ty == KvType::Q8_0 {
            0
        } else {
            s.n * h * words(ty, d)
        }
    };
    let (tk, tv) = (
        plain(kv.spec.k, kv.head_dim),
        plain(kv.spec.v, kv.head_dim_v),
    );
    if tk + tv > 0 {
        gpu.dispatch(
            cx,
            "kv_store",
            STORE_DEFS,
            None,
            &store_params(kv, (tk, tv), (s.row0, s.pos0), k, v),
            &[
                Bind::Whole(k.buf()),
                Bind::Whole(v.buf()),
                kv.k.bind(),
                kv.v.bind(),
            ],
            (tk + tv).div_ceil(256) as u32,
        );
    }
    for (src, buf, ty, d, rot) in [
        (k, &kv.k, kv.spec.k, kv.head_dim, kv.k_rot),
        (v, &kv.v, kv.spec.v, kv.head_dim_v, kv.v_rot),
    ] {
        if ty != KvType::Q8_0 {
            continue;
        }
        // a workgroup per (token, head) row: rotate, then quantize its blocks
        let [rn, rs] = rot_params(&rot);
        gpu.dispatch(
            cx,
            "kv_store_q8",
            "",
            None,
            &[
                s.row0 as u32,
                s.pos0 as u32,
                h as u32,
                d as u32,
                kv.n_ctx as u32,
                src.cols as u32,
                rn,
                rs,
            ],
            &[Bind::Whole(src.buf()), buf.bind()],
            (s.n * h) as u32,
        );
    }
}

pub(super) fn attention(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    q: &GpuTensor,
    kv: &[&GpuKv],
    spans: &[SeqSpan],
    p: &AttentionParams,
    out: &mut GpuTensor,
) {
    assert_eq!(kv.len(), spans.len(), "attention: one cache per sequence");
    assert!(
        p.head_dim <= MAX_HEAD && p.head_dim_v <= MAX_HEAD,
        "attention: head size past {MAX_HEAD}"
    );
    assert!(q.cols >= p.n_head * p.head_dim, "attention: query width");
    gpu.shape_to(out, q.rows, p.n_head * p.head_dim_v);
    let mut part = std::mem::take(&mut cx.attn_part);
    if kv.len() > 1 && attend_seqs(gpu, cx, q, kv, spans, p, &mut part, out) {
        cx.attn_part = part;
        return;
    }
    for (c, s) in kv.iter().zip(spans) {
        assert_eq!(
            (c.head_dim, c.head_dim_v, c.n_kv_head),
            (p.head_dim, p.head_dim_v, p.n_kv_head),
            "attention: cache dims"
        );
        assert!(
            s.pos0 + s.n <= c.n_ctx,
            "attention: positions past the cache"
        );
        if s.n == 0 {
            continue;
        }
        let common = attn_common(q, c, s, p, out);
        if let Some(defs) = tile_defs(gpu, c, s) {
            gpu.dispatch(
                cx,
                "attention_tile",
                defs,
                None,
                &common,
                &[
                    Bind::Whole(q.buf()),
                    c.k.bind(),
                    c.v.bind(),
                    Bind::Whole(out.buf()),
                ],
                (s.n.div_ceil(TILE_ROWS) * p.n_head) as u32,
            );
            continue;
        }
        attend_rows(gpu, cx, q, c, s, p, &common, None, &mut part, out);
    }
    cx.attn_part = part;
}

/// The table of a decode step's sequences for one dispatch over all their caches of a layer
/// (`kv[i]` holds `spans[i]`, one token each at row i), where they can share it: the same
/// types and shapes, each side a slot of the same slab (see `kv_slab`). Per sequence
/// (position, first key word, first value word, 0), staged once per step while layers' caches
/// sit alike. `None` where they cannot: the caller goes sequence by sequence.
fn seq_table(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    kv: &[&GpuKv],
    spans: &[SeqSpan],
) -> Option<super::kernels::Slot> {
    let c = kv.first()?;
    let alike = |o: &GpuKv| {
        o.spec == c.spec
            && (o.n_ctx, o.n_kv_head, o.head_dim, o.head_dim_v)
                == (c.n_ctx, c.n_kv_head, c.head_dim, c.head_dim_v)
            && o.k.shares_slab(&c.k)
            && o.v.shares_slab(&c.v)
    };
    let one_token = |(i, s): (usize, &SeqSpan)| s.n == 1 && s.row0 == i && s.pos0 < c.n_ctx;
    if kv.len() < 2
        || kv.len() != spans.len()
        || !kv.iter().all(|o| alike(o))
        || !spans.iter().enumerate().all(one_token)
    {
        return None;
    }
    let mut table = [0u32; 4 * 32];
    let mut long = Vec::new();
    let words: &mut [u32] = if kv.len() <= 32 {
        &mut table[..4 * kv.len()]
    } else {
        long.resize(4 * kv.len(), 0);
        &mut long
    };
    for ((w, o), s) in words.chunks_exact_mut(4).zip(kv).zip(spans) {
        w[0] = s.pos0 as u32;
        w[1] = o.k.word0();
        w[2] = o.v.word0();
    }
    if let Some((t, slot)) = &cx.seq_table
        && t[..] == words[..]
    {
        return Some(slot.clone());
    }
    let slot = gpu
        .stage(cx, &[super::kernels::bytes_of(words)])
        .pop()
        .expect("one slot");
    cx.seq_table = Some((words.to_vec(), slot.clone()));
    Some(slot)
}

/// [`store`] of one token of each of several sequences (`kv[i]` holds `spans[i]`) in one
/// dispatch, where their caches share slabs and both sides are f32 or f16 (see
/// [`seq_table`]). Returns whether it stored them.
pub(super) fn store_seqs(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    kv: &[&GpuKv],
    k: &GpuTensor,
    v: &GpuTensor,
    spans: &[SeqSpan],
) -> bool {
    let Some(c) = kv.first() else {
        return false;
    };
    let plain = |t: KvType| matches!(t, KvType::F32 | KvType::F16);
    let (h, n) = (c.n_kv_head, kv.len());
    if !(plain(c.spec.k) && plain(c.spec.v))
        || k.cols < h * c.head_dim
        || v.cols < h * c.head_dim_v
        || k.rows < n
        || v.rows < n
    {
        return false;
    }
    let Some(table) = seq_table(gpu, cx, kv, spans) else {
        return false;
    };
    let (tk, tv) = (n * h * c.kw(), n * h * c.vw());
    gpu.dispatch(
        cx,
        "kv_store",
        STORE_SEQS_DEFS,
        None,
        &store_params(c, (tk, tv), (0, 0), k, v),
        &[
            Bind::Whole(k.buf()),
            Bind::Whole(v.buf()),
            c.k.bind_slab(),
            c.v.bind_slab(),
            table.bind(),
        ],
        (tk + tv).div_ceil(256) as u32,
    );
    true
}

/// [`attention`] of one query row of each of several sequences over their caches in one
/// dispatch (and one combine where keys split), where the caches share slabs (see
/// [`seq_table`]) and attention is causal. Returns whether it ran.
#[allow(clippy::too_many_arguments)]
fn attend_seqs(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    q: &GpuTensor,
    kv: &[&GpuKv],
    spans: &[SeqSpan],
    p: &AttentionParams,
    part: &mut GpuTensor,
    out: &mut GpuTensor,
) -> bool {
    let Some(c) = kv.first() else {
        return false;
    };
    let n = kv.len();
    if !p.causal
        || q.rows < n
        || (c.head_dim, c.head_dim_v, c.n_kv_head) != (p.head_dim, p.head_dim_v, p.n_kv_head)
    {
        return false;
    }
    let Some(table) = seq_table(gpu, cx, kv, spans) else {
        return false;
    };
    let all = SeqSpan {
        row0: 0,
        n,
        pos0: 0,
    };
    let common = attn_common(q, c, &all, p, out);
    let rows = n * p.n_head;
    let keys = spans.iter().map(|s| s.pos0 + 1).max().unwrap_or(1);
    let (n_split, chunk) = split_keys(rows, keys, p.window);
    gpu.shape_to(part, rows * n_split, p.head_dim_v + 2);
    let vrot = rot_params(&c.v_rot);
    let params = [
        &common[..],
        &rot_params(&c.k_rot),
        &vrot,
        &[n_split as u32, chunk as u32, 0, 0],
    ]
    .concat();
    gpu.dispatch(
        cx,
        "attention",
        ATTN_SEQS_DEFS,
        None,
        &params,
        &[
            Bind::Whole(q.buf()),
            c.k.bind_slab(),
            c.v.bind_slab(),
            Bind::Whole(out.buf()),
            Bind::Whole(part.buf()),
            table.bind(),
        ],
        (rows * n_split) as u32,
    );
    if n_split > 1 {
        combine(gpu, cx, 0, rows, n_split, p, vrot, part, out);
    }
    true
}

/// `attention_combine.wgsl` over the `n_split` partial results of `rows` query rows (rows of
/// `out` from `row0`).
#[allow(clippy::too_many_arguments)]
fn combine(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    row0: usize,
    rows: usize,
    n_split: usize,
    p: &AttentionParams,
    vrot: [u32; 2],
    part: &GpuTensor,
    out: &GpuTensor,
) {
    gpu.dispatch(
        cx,
        "attention_combine",
        "",
        None,
        &[
            row0 as u32,
            p.n_head as u32,
            p.head_dim_v as u32,
            n_split as u32,
            out.cols as u32,
            vrot[0],
            vrot[1],
        ],
        &[Bind::Whole(part.buf()), Bind::Whole(out.buf())],
        rows as u32,
    );
}

/// The parameters both attention shaders begin with (their `P`s' first 18 fields).
fn attn_common(
    q: &GpuTensor,
    c: &GpuKv,
    s: &SeqSpan,
    p: &AttentionParams,
    out: &GpuTensor,
) -> [u32; 18] {
    [
        s.row0 as u32,
        s.n as u32,
        s.pos0 as u32,
        p.n_head as u32,
        p.n_kv_head as u32,
        p.head_dim as u32,
        p.head_dim_v as u32,
        c.kw() as u32,
        c.vw() as u32,
        type_code(c.spec.k),
        type_code(c.spec.v),
        c.n_ctx as u32,
        fbits(p.scale),
        fbits(p.softcap.unwrap_or(0.0)),
        p.window.unwrap_or(0) as u32,
        u32::from(p.causal),
        q.cols as u32,
        out.cols as u32,
    ]
}

/// A decode step of one sequence in one dispatch (`attention.wgsl` with FRESH): RoPE of its
/// query and key as they are read, its key and value stored in `kv`, its attention into
/// `out`; where the step is one row, both cache sides f32 or f16 (even head sizes) without
/// rotation, and the rotation within the head. `q` and `k` are left as they were. Returns
/// whether it ran (only where the backend fuses it: [`Gpu::fuses_attention`]): the caller
/// does `rope_store` and the attention apart otherwise.
#[allow(clippy::too_many_arguments)]
pub(super) fn rope_store_attend(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    kv: &GpuKv,
    s: SeqSpan,
    pos: &[usize],
    cfg: &RopeConfig,
    p: &AttentionParams,
    out: &mut GpuTensor,
) -> bool {
    let off = !gpu.fuses_attention();
    let plain = |t: KvType, d: usize| match t {
        KvType::F32 => true,
        KvType::F16 => d.is_multiple_of(2),
        _ => false,
    };
    let (h, d, dv) = (kv.n_kv_head, kv.head_dim, kv.head_dim_v);
    let half = cfg.n_rot / 2;
    if off
        || !(plain(kv.spec.k, d) && plain(kv.spec.v, dv))
        || kv.k_rot.n != 0
        || kv.v_rot.n != 0
        || (s.row0, s.n, q.rows, k.rows, v.rows, pos.len()) != (0, 1, 1, 1, 1, 1)
        || half == 0
        || cfg.n_rot > d
        || (d, dv, h) != (p.head_dim, p.head_dim_v, p.n_kv_head)
        || d > MAX_HEAD
        || dv > MAX_HEAD
        || h == 0
        || !p.n_head.is_multiple_of(h)
        || q.cols < p.n_head * d
        || k.cols < h * d
        || v.cols < h * dv
        || s.pos0 + 1 > kv.n_ctx
    {
        return false;
    }
    let table = super::ops::rope_table(gpu, cx, cfg, pos);
    gpu.shape_to(out, 1, p.n_head * dv);
    let common = attn_common(q, kv, &s, p, out);
    let mut part = std::mem::take(&mut cx.attn_part);
    let fresh = Fresh {
        k,
        v,
        table: &table,
        half,
        neox: cfg.kind == crate::backend::RopeKind::Neox,
    };
    attend_rows(gpu, cx, q, kv, &s, p, &common, Some(fresh), &mut part, out);
    cx.attn_part = part;
    true
}

/// `attention.wgsl`'s defs: the caches read only.
const ATTN_DEFS: &str = "const FRESH: bool = false;\n\
    @group(0) @binding(2) var<storage, read> kc: array<u32>;\n\
    @group(0) @binding(3) var<storage, read> vc: array<u32>;\n\
    var<private> kf: array<f32, 1>;\nvar<private> vf: array<f32, 1>;\n\
    var<private> cs: array<vec2<f32>, 1>;\n\
    fn put_k(i: u32, x: u32) {}\nfn put_v(i: u32, x: u32) {}\n\
    fn slot(t: u32) -> vec3<u32> { return vec3<u32>(p.pos0 + t, 0u, 0u); }";

/// `attention.wgsl`'s defs for a decode step of several sequences whose caches are slots of
/// shared buffers (see `kv_slab`): query row t is sequence t's, its position and first cache
/// words in the table `seqs`.
pub(super) const ATTN_SEQS_DEFS: &str = "const FRESH: bool = false;\n\
    @group(0) @binding(2) var<storage, read> kc: array<u32>;\n\
    @group(0) @binding(3) var<storage, read> vc: array<u32>;\n\
    @group(0) @binding(6) var<storage, read> seqs: array<vec4<u32>>;\n\
    var<private> kf: array<f32, 1>;\nvar<private> vf: array<f32, 1>;\n\
    var<private> cs: array<vec2<f32>, 1>;\n\
    fn put_k(i: u32, x: u32) {}\nfn put_v(i: u32, x: u32) {}\n\
    fn slot(t: u32) -> vec3<u32> { return seqs[t].xyz; }";

/// `kv_store.wgsl`'s defs for one sequence's rows.
const STORE_DEFS: &str = "fn slot(t: u32) -> vec3<u32> { return vec3<u32>(p.pos0 + t, 0u, 0u); }";

/// `kv_store.wgsl`'s defs for a token of each of several sequences whose caches are slots of
/// shared buffers: token t's position and first cache words in the table `seqs`.
pub(super) const STORE_SEQS_DEFS: &str = "@group(0) @binding(5) var<storage, read> seqs: array<vec4<u32>>;\n\
    fn slot(t: u32) -> vec3<u32> { return seqs[t].xyz; }";

/// `attention.wgsl`'s defs for a decode step whose key and value are stored by the same
/// dispatch (`FRESH`: see the shader).
const ATTN_FRESH_DEFS: &str = "const FRESH: bool = true;\n\
    @group(0) @binding(2) var<storage, read_write> kc: array<u32>;\n\
    @group(0) @binding(3) var<storage, read_write> vc: array<u32>;\n\
    @group(0) @binding(6) var<storage, read> kf: array<f32>;\n\
    @group(0) @binding(7) var<storage, read> vf: array<f32>;\n\
    @group(0) @binding(8) var<storage, read> cs: array<vec2<f32>>;\n\
    fn put_k(i: u32, x: u32) { kc[i] = x; }\nfn put_v(i: u32, x: u32) { vc[i] = x; }\n\
    fn slot(t: u32) -> vec3<u32> { return vec3<u32>(p.pos0 + t, 0u, 0u); }";

/// A decode step's own key and value for [`attend_rows`] to rotate and store: the QKV
/// product's rows, the RoPE table, its half of rotated dims and whether NeoX pairs.
struct Fresh<'a> {
    k: &'a GpuTensor,
    v: &'a GpuTensor,
    table: &'a super::kernels::Slot,
    half: usize,
    neox: bool,
}

/// `attention.wgsl` for one sequence's rows (a workgroup per query row and key chunk), then
/// `attention_combine.wgsl` where the keys were split. `common`: the parameters both attention
/// shaders begin with.
#[allow(clippy::too_many_arguments)]
fn attend_rows(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    q: &GpuTensor,
    c: &GpuKv,
    s: &SeqSpan,
    p: &AttentionParams,
    common: &[u32],
    fresh: Option<Fresh<'_>>,
    part: &mut GpuTensor,
    out: &mut GpuTensor,
) {
    let rows = s.n * p.n_head;
    let vrot = rot_params(&c.v_rot);
    let (n_split, chunk) = split_keys(rows, s.pos0 + s.n, p.window);
    gpu.shape_to(part, rows * n_split, p.head_dim_v + 2);
    let (half, neox) = fresh
        .as_ref()
        .map_or((0, false), |f| (f.half as u32, f.neox));
    let params = [
        common,
        &rot_params(&c.k_rot),
        &vrot,
        &[n_split as u32, chunk as u32, half, u32::from(neox)],
    ]
    .concat();
    let binds = [
        Bind::Whole(q.buf()),
        c.k.bind(),
        c.v.bind(),
        Bind::Whole(out.buf()),
        Bind::Whole(part.buf()),
    ];
    let groups = (rows * n_split) as u32;
    match &fresh {
        None => gpu.dispatch(cx, "attention", ATTN_DEFS, None, &params, &binds, groups),
        Some(f) => {
            let [b0, b1, b2, b3, b4] = binds;
            let all = [
                b0,
                b1,
                b2,
                b3,
                b4,
                Bind::Whole(f.k.buf()),
                Bind::Whole(f.v.buf()),
                f.table.bind(),
            ];
            gpu.dispatch(
                cx,
                "attention",
                ATTN_FRESH_DEFS,
                None,
                &params,
                &all,
                groups,
            )
        }
    }
    if n_split > 1 {
        combine(gpu, cx, s.row0, rows, n_split, p, vrot, part, out);
    }
}

/// Query rows of one workgroup of `attention_tile.wgsl` (its `BQ`).
const TILE_ROWS: usize = 16;
/// Bytes of workgroup memory the tiled attention takes at most (its tiles, 25.9 KB at head
/// size 128, and the shared reduction buffers every shader declares).
const TILE_SHARED_BYTES: u32 = 29 << 10;

/// The tiled attention's defs for a sequence's step, where it runs: a prefill (a block of
/// queries or more), f32 or f16 caches without rotation, head sizes up to 128, and an adapter
/// with the workgroup memory (WebGPU guarantees 16 KB only). On the H200 a 512-token prefill's
/// attention (SmolLM2, 9 heads) took 121 us a layer as a workgroup per query row.
fn tile_defs(gpu: &Gpu, c: &GpuKv, s: &SeqSpan) -> Option<&'static str> {
    let plain = |t: KvType, d: usize| match t {
        KvType::F32 => true,
        KvType::F16 => d.is_multiple_of(2),
        _ => false,
    };
    let ok = s.n >= TILE_ROWS
        && c.k_rot.n == 0
        && c.v_rot.n == 0
        && plain(c.spec.k, c.head_dim)
        && plain(c.spec.v, c.head_dim_v)
        && gpu.device.limits().max_compute_workgroup_storage_size >= TILE_SHARED_BYTES
        && std::env::var("CERA_GPU_ATTN_TILE").map_or(true, |v| v != "0");
    match c.head_dim.max(c.head_dim_v) {
        _ if !ok => None,
        1..=64 => Some("const DM: u32 = 64u;\nconst BK: u32 = 32u;"),
        65..=128 => Some("const DM: u32 = 128u;\nconst BK: u32 = 16u;"),
        _ => None,
    }
}

/// Workgroups below which a step's attention splits each row's keys: about twice what the
/// largest GPUs run at once (132 multiprocessors on an H200).
const SPLIT_BELOW_ROWS: usize = 512;

/// How to split the keys of `rows` query rows that see up to `keys` keys each (`window`
/// limits that): (chunks per row, keys per chunk). Few rows and many keys (decoding at depth)
/// split into chunks of at least 256 keys, so the step has enough workgroups to fill the GPU.
fn split_keys(rows: usize, keys: usize, window: Option<usize>) -> (usize, usize) {
    let keys = window.map_or(keys, |w| w.min(keys)).max(1);
    if rows >= SPLIT_BELOW_ROWS || keys <= 256 {
        return (1, keys.next_multiple_of(64));
    }
    let want = SPLIT_BELOW_ROWS.div_ceil(rows);
    let n_split = want.min(keys.div_ceil(256)).clamp(1, 64);
    let chunk = keys.div_ceil(n_split).next_multiple_of(64);
    (keys.div_ceil(chunk), chunk)
}

/// Each side's whole buffer, read back (snapshots and shifts are between steps).
fn read_sides(gpu: &Gpu, kv: &GpuKv) -> [Vec<u8>; 2] {
    let mut cx = GpuCtx::default();
    [&kv.k, &kv.v].map(|b| {
        if b.bytes() == 0 {
            return Vec::new();
        }
        gpu.read_back(&mut cx, b.buf(), b.off(), b.bytes())
    })
}

pub(super) fn save(gpu: &Gpu, kv: &GpuKv, n: usize, out: &mut Vec<u8>) {
    assert!(n <= kv.n_ctx, "kv_save: {n} positions of {}", kv.n_ctx);
    let sides = read_sides(gpu, kv);
    for ((bytes, w), ty) in sides
        .iter()
        .zip([kv.kw(), kv.vw()])
        .zip([kv.spec.k, kv.spec.v])
    {
        let rb = w * 4;
        for g in 0..kv.n_kv_head {
            to_saved(ty, &bytes[g * kv.n_ctx * rb..][..n * rb], out);
        }
    }
}

pub(super) fn load(gpu: &Gpu, kv: &mut GpuKv, n: usize, src: &[u8]) -> Result<()> {
    let want = kv.saved_len(n);
    if n > kv.n_ctx || src.len() != want {
        return Err(Error::Model(format!(
            "restoring a KV cache layer: {} bytes for {n} positions, expected {want} (cache \
             of {})",
            src.len(),
            kv.n_ctx
        )));
    }
    let mut at = 0;
    let mut dev = Vec::new();
    for (buf, w, ty, d) in [
        (&kv.k, kv.kw(), kv.spec.k, kv.head_dim),
        (&kv.v, kv.vw(), kv.spec.v, kv.head_dim_v),
    ] {
        let (rb, srb) = (w * 4, ty.row_bytes(d));
        for g in 0..kv.n_kv_head {
            let len = n * srb;
            if len > 0 {
                dev.clear();
                from_saved(ty, &src[at..at + len], &mut dev);
                gpu.queue
                    .write_buffer(buf.buf(), buf.off() + (g * kv.n_ctx * rb) as u64, &dev);
            }
            at += len;
        }
    }
    gpu.queue.submit([]);
    Ok(())
}

/// The context shift, on the host: the cache is read back, shifted and its moved keys rotated
/// back (decoded, un-rotated, RoPE'd in f32, encoded again in the cache's type, as the CPU
/// does), and written back. Shifts are rare (once per context overflow), so a round trip
/// costs little.
pub(super) fn shift(
    gpu: &Gpu,
    kv: &mut GpuKv,
    keep: usize,
    n_discard: usize,
    n_past: usize,
    rope: Option<&RopeConfig>,
) {
    assert!(
        keep + n_discard <= n_past && n_past <= kv.n_ctx,
        "kv_shift: range"
    );
    let (h, d) = (kv.n_kv_head, kv.head_dim);
    let mut saved = Vec::new();
    save(gpu, kv, kv.n_ctx, &mut saved);
    let (krb, vrb) = (kv.spec.k.row_bytes(d), kv.spec.v.row_bytes(kv.head_dim_v));
    let (kb, vb) = saved.split_at_mut(h * kv.n_ctx * krb);
    let mut cs = vec![(0f32, 0f32); rope.map_or(0, |r| r.n_rot / 2)];
    if let Some(r) = rope {
        r.cos_sin(-(n_discard as i64), &mut cs);
    }
    let mut x = vec![0f32; d];
    for g in 0..h {
        let (base_k, base_v) = (g * kv.n_ctx * krb, g * kv.n_ctx * vrb);
        for p in keep..n_past - n_discard {
            let from = p + n_discard;
            kb.copy_within(
                base_k + from * krb..base_k + (from + 1) * krb,
                base_k + p * krb,
            );
            vb.copy_within(
                base_v + from * vrb..base_v + (from + 1) * vrb,
                base_v + p * vrb,
            );
            if let Some(r) = rope {
                let row = &mut kb[base_k + p * krb..base_k + (p + 1) * krb];
                decode_row(kv.spec.k, &kv.k_rot, row, &mut x);
                r.apply(&mut x, 1, d, &cs);
                encode_row(kv.spec.k, &kv.k_rot, &x, row);
            }
        }
    }
    load(gpu, kv, kv.n_ctx, &saved).expect("the cache's own layout");
}

/// One row of a snapshot's bytes to f32, un-rotated.
fn decode_row(ty: KvType, rot: &Rotation, b: &[u8], x: &mut [f32]) {
    match ty {
        KvType::F32 => {
            for (v, c) in x.iter_mut().zip(b.chunks_exact(4)) {
                *v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        KvType::F16 => {
            for (v, c) in x.iter_mut().zip(b.chunks_exact(2)) {
                *v = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        t => {
            codec::decode_rows(t, rot.n, x.len(), b, x);
            rot.inverse(x);
        }
    }
}

/// One row of f32 to a snapshot's bytes (rotated first where the side rotates).
fn encode_row(ty: KvType, rot: &Rotation, x: &[f32], b: &mut [u8]) {
    match ty {
        KvType::F32 => {
            for (v, c) in x.iter().zip(b.chunks_exact_mut(4)) {
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        KvType::F16 => {
            for (v, c) in x.iter().zip(b.chunks_exact_mut(2)) {
                c.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes());
            }
        }
        t => codec::encode_row(t, rot, x, b),
    }
}

#[cfg(test)]
mod tests {
    use super::super::kernels::check_wgsl;
    use super::{ATTN_DEFS, ATTN_FRESH_DEFS, ATTN_SEQS_DEFS, STORE_DEFS, STORE_SEQS_DEFS};

    /// Every variant of the decode attention and the cache store validates (naga, every
    /// capability on): the fused decode's and the several sequences' included.
    #[test]
    fn attention_variants_validate() {
        check_wgsl("attention", ATTN_DEFS, None);
        check_wgsl("attention", ATTN_FRESH_DEFS, None);
        check_wgsl("attention", ATTN_SEQS_DEFS, None);
        check_wgsl("kv_store", STORE_DEFS, None);
        check_wgsl("kv_store", STORE_SEQS_DEFS, None);
    }
}
