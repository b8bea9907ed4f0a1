//! KV caches on the device and attention over them.
//!
//! A cache side is one buffer of u32 words, head-major: `[head][position][row]`, a row being
//! `head_dim` f32 or `head_dim / 2` packed f16 pairs (rounded to nearest even on store, as the
//! CPU rounds). Head-major rows make a snapshot's layout ([`KvCache::saved_len`]: per head, the
//! first `n` rows) a plain copy of each head's first rows.

use super::kernels::{Bind, fbits};
use super::{Gpu, GpuCtx, GpuTensor};
use crate::backend::{AttentionParams, KvCache, KvSpec, KvType, RopeConfig, SeqSpan};
use crate::error::{Error, Result};
use crate::quant::{self, GgmlType};

/// Head sizes the attention shader holds a query of (and value rows it accumulates).
const MAX_HEAD: usize = 512;

/// Whether the GPU caches hold `spec` at these head sizes.
pub(super) fn supported(spec: KvSpec, d: usize, dv: usize) -> bool {
    let side = |t: KvType, w: usize| match t {
        KvType::F32 => true,
        KvType::F16 => w.is_multiple_of(2),
        _ => false,
    };
    side(spec.k, d) && side(spec.v, dv) && d <= MAX_HEAD && dv <= MAX_HEAD
}

/// One attention layer's keys and values of one sequence, on the device.
pub struct GpuKv {
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    dev: (wgpu::Device, wgpu::Queue),
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
        _ => w,
    }
}

impl GpuKv {
    pub(super) fn new(
        gpu: &Gpu,
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
            k: gpu.new_buffer(kb),
            v: gpu.new_buffer(vb),
            dev: (gpu.device.clone(), gpu.queue.clone()),
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
        let (d, q) = &self.dev;
        GpuKv {
            k: super::copy_buffer(d, q, &self.k),
            v: super::copy_buffer(d, q, &self.v),
            dev: self.dev.clone(),
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
        (self.k.size() + self.v.size()) as usize
    }
    fn spec(&self) -> KvSpec {
        self.spec
    }
    fn dims(&self) -> (usize, usize, usize) {
        (self.n_kv_head, self.head_dim, self.head_dim_v)
    }
}

fn is_f16(t: KvType) -> u32 {
    u32::from(t == KvType::F16)
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
    for (src, buf, ty, d) in [
        (k, &kv.k, kv.spec.k, kv.head_dim),
        (v, &kv.v, kv.spec.v, kv.head_dim_v),
    ] {
        assert!(
            src.cols >= h * d && s.row0 + s.n <= src.rows,
            "kv_store: rows"
        );
        let total = s.n * h * words(ty, d);
        if total == 0 {
            continue;
        }
        gpu.dispatch(
            cx,
            "kv_store",
            "",
            None,
            &[
                total as u32,
                s.row0 as u32,
                s.pos0 as u32,
                h as u32,
                d as u32,
                words(ty, d) as u32,
                kv.n_ctx as u32,
                is_f16(ty),
                src.cols as u32,
            ],
            &[Bind::Whole(src.buf()), Bind::Seq(buf)],
            total.div_ceil(256) as u32,
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
        gpu.dispatch(
            cx,
            "attention",
            "",
            None,
            &[
                s.row0 as u32,
                s.n as u32,
                s.pos0 as u32,
                p.n_head as u32,
                p.n_kv_head as u32,
                p.head_dim as u32,
                p.head_dim_v as u32,
                c.kw() as u32,
                c.vw() as u32,
                is_f16(c.spec.k),
                is_f16(c.spec.v),
                c.n_ctx as u32,
                fbits(p.scale),
                fbits(p.softcap.unwrap_or(0.0)),
                p.window.unwrap_or(0) as u32,
                u32::from(p.causal),
                q.cols as u32,
                out.cols as u32,
            ],
            &[
                Bind::Whole(q.buf()),
                Bind::Seq(&c.k),
                Bind::Seq(&c.v),
                Bind::Whole(out.buf()),
            ],
            (s.n * p.n_head) as u32,
        );
    }
}

/// Each side's whole buffer, read back (snapshots and shifts are between steps).
fn read_sides(gpu: &Gpu, kv: &GpuKv) -> [Vec<u8>; 2] {
    let mut cx = GpuCtx::default();
    [&kv.k, &kv.v].map(|b| gpu.read_back(&mut cx, b, 0, b.size()))
}

pub(super) fn save(gpu: &Gpu, kv: &GpuKv, n: usize, out: &mut Vec<u8>) {
    assert!(n <= kv.n_ctx, "kv_save: {n} positions of {}", kv.n_ctx);
    let sides = read_sides(gpu, kv);
    for (bytes, w) in sides.iter().zip([kv.kw(), kv.vw()]) {
        let rb = w * 4;
        for g in 0..kv.n_kv_head {
            out.extend_from_slice(&bytes[g * kv.n_ctx * rb..][..n * rb]);
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
    for (buf, w) in [(&kv.k, kv.kw()), (&kv.v, kv.vw())] {
        let rb = w * 4;
        for g in 0..kv.n_kv_head {
            let len = n * rb;
            if len > 0 {
                gpu.queue
                    .write_buffer(buf, (g * kv.n_ctx * rb) as u64, &src[at..at + len]);
            }
            at += len;
        }
    }
    gpu.queue.submit([]);
    Ok(())
}

/// The context shift, on the host: the cache is read back, shifted and rotated as the CPU
/// does (f32 arithmetic, stored again in the cache's type), and written back. Shifts are rare
/// (once per context overflow), so a round trip costs little.
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
    let [mut kb, mut vb] = read_sides(gpu, kv);
    let (krb, vrb) = (kv.kw() * 4, kv.vw() * 4);
    let mut cs = vec![(0f32, 0f32); rope.map_or(0, |r| r.n_rot / 2)];
    if let Some(r) = rope {
        r.cos_sin(-(n_discard as i64), &mut cs);
    }
    let kty = kv.spec.k;
    let ggml = |t: KvType| {
        if t == KvType::F16 {
            GgmlType::F16
        } else {
            GgmlType::F32
        }
    };
    for g in 0..h {
        for p in keep..n_past - n_discard {
            let from = p + n_discard;
            let (base_k, base_v) = (g * kv.n_ctx * krb, g * kv.n_ctx * vrb);
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
                let mut x = quant::dequantize_to_vec(ggml(kty), row, d).expect("cache row");
                r.apply(&mut x, 1, d, &cs);
                let enc = quant::quantize_to_vec(ggml(kty), &x).expect("cache row");
                row.copy_from_slice(&enc);
            }
        }
    }
    gpu.queue.write_buffer(&kv.k, 0, &kb);
    gpu.queue.write_buffer(&kv.v, 0, &vb);
    gpu.queue.submit([]);
}
