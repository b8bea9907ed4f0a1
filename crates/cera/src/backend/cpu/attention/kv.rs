//! One attention layer's KV cache of one sequence: storage, snapshots to bytes (prefix cache,
//! checkpoints) and the context shift (drop a span, move the rest down, re-rotate the keys).
//!
//! Storage is by row (one head at one position): f32 and f16 as values, every other type as
//! bytes ([`KvType::row_bytes`] per row), kept in the rotated space when the side rotates.

use half::f16;

use crate::backend::RopeConfig;
use crate::backend::kvtype::{self, KvSpec, KvType, Rotation};

#[derive(Clone, Debug)]
pub(super) enum KvBuf {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// bf16, ggml blocks or TurboQuant codes: `row_bytes` per row
    Packed(Vec<u8>),
}

/// The keys or the values of a layer: `rows` rows of `d` elements of type `ty`, rotated by
/// `rot` before they are stored.
#[derive(Clone, Debug)]
pub(super) struct KvSide {
    pub(super) buf: KvBuf,
    pub(super) ty: KvType,
    pub(super) d: usize,
    pub(super) row_bytes: usize,
    pub(super) rot: Rotation,
}

/// `n` zero halves from zeroed memory. `vec![f16::ZERO; n]` writes every element (only
/// primitive types get the zeroed allocation), so a whole cache was resident from the start:
/// 94 MB of SmolLM2's 4096-token cache before its first token, most of `cera run`'s peak RSS.
/// Untouched, the pages are mapped as rows are stored.
fn zeroed_f16(n: usize) -> Vec<f16> {
    let mut v = std::mem::ManuallyDrop::new(vec![0u16; n]);
    let (ptr, len, cap) = (v.as_mut_ptr(), v.len(), v.capacity());
    // SAFETY: `f16` is `#[repr(transparent)]` over `u16` (same size and alignment) and the
    // zero bits are +0.0; the allocation moves to the new Vec, which frees it as a `u16` one
    // would be freed.
    unsafe { Vec::from_raw_parts(ptr.cast::<f16>(), len, cap) }
}

impl KvSide {
    fn new(ty: KvType, rot: Rotation, d: usize, rows: usize) -> KvSide {
        let row_bytes = ty.row_bytes(d);
        let buf = match ty {
            KvType::F32 => KvBuf::F32(vec![0.0; rows * d]),
            KvType::F16 => KvBuf::F16(zeroed_f16(rows * d)),
            _ => KvBuf::Packed(vec![0; rows * row_bytes]),
        };
        KvSide {
            buf,
            ty,
            d,
            row_bytes,
            rot,
        }
    }

    /// Stores `src` (one row, unrotated) as row `r`.
    fn store(&mut self, r: usize, src: &[f32]) {
        let d = self.d;
        match &mut self.buf {
            KvBuf::F32(v) => v[r * d..(r + 1) * d].copy_from_slice(src),
            KvBuf::F16(v) => {
                for (o, &s) in v[r * d..(r + 1) * d].iter_mut().zip(src) {
                    *o = f16::from_f32(s);
                }
            }
            KvBuf::Packed(b) => {
                let rb = self.row_bytes;
                kvtype::encode_row(self.ty, &self.rot, src, &mut b[r * rb..(r + 1) * rb]);
            }
        }
    }

    /// Rows `r..r + dst.len() / d` in the space they are stored in (rotated or not), as f32.
    pub(super) fn decode_packed(&self, r: usize, dst: &mut [f32]) {
        let n = dst.len() / self.d;
        let KvBuf::Packed(b) = &self.buf else {
            unreachable!("decode_packed on a float cache")
        };
        let rb = self.row_bytes;
        kvtype::decode_rows(self.ty, self.rot.n, self.d, &b[r * rb..(r + n) * rb], dst);
    }

    /// [`KvSide::decode_packed`] inlined into a tier's attention tile (its vector loops).
    #[inline(always)]
    pub(super) fn decode_packed_in<O: super::simd::Ops>(&self, r: usize, dst: &mut [f32]) {
        let n = dst.len() / self.d;
        let KvBuf::Packed(b) = &self.buf else {
            unreachable!("decode_packed on a float cache")
        };
        let rb = self.row_bytes;
        let src = &b[r * rb..(r + n) * rb];
        // SAFETY: `O` is the tier the tile runs under, whose features the host has
        let group = |bits: u32, p: &[u8], lut: &[f32; 16], o: &mut [f32]| unsafe {
            O::tq_group(bits, p, lut, o)
        };
        // SAFETY: as above
        let lut16 = |c: &[u8; 16], lut: &[f32; 16], o: &mut [f32]| unsafe { O::lut16(c, lut, o) };
        kvtype::decode_rows_with(self.ty, self.rot.n, self.d, src, dst, group, lut16);
    }

    /// Row `r`, unrotated, as f32.
    fn read(&self, r: usize, row: &mut [f32]) {
        let d = self.d;
        match &self.buf {
            KvBuf::F32(v) => row.copy_from_slice(&v[r * d..(r + 1) * d]),
            KvBuf::F16(v) => {
                for (o, x) in row.iter_mut().zip(&v[r * d..(r + 1) * d]) {
                    *o = x.to_f32();
                }
            }
            KvBuf::Packed(_) => {
                self.decode_packed(r, row);
                self.rot.inverse(row);
            }
        }
    }

    /// Appends rows `r..r + n` as little-endian bytes (packed types: as stored).
    fn save(&self, r: usize, n: usize, out: &mut Vec<u8>) {
        let d = self.d;
        #[cfg(target_endian = "little")]
        if let Some(b) = self.float_bytes(r * d, n * d) {
            out.extend_from_slice(b);
            return;
        }
        match &self.buf {
            KvBuf::F32(v) => {
                for x in &v[r * d..(r + n) * d] {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            KvBuf::F16(v) => {
                for x in &v[r * d..(r + n) * d] {
                    out.extend_from_slice(&x.to_bits().to_le_bytes());
                }
            }
            KvBuf::Packed(b) => {
                out.extend_from_slice(&b[r * self.row_bytes..(r + n) * self.row_bytes])
            }
        }
    }

    /// Reads rows `r..r + n` from `src` (exactly `n * row_bytes` bytes).
    fn load(&mut self, r: usize, n: usize, src: &[u8]) {
        let d = self.d;
        #[cfg(target_endian = "little")]
        if let Some(b) = self.float_bytes_mut(r * d, n * d) {
            b.copy_from_slice(src);
            return;
        }
        match &mut self.buf {
            KvBuf::F32(v) => {
                for (x, b) in v[r * d..(r + n) * d].iter_mut().zip(src.chunks_exact(4)) {
                    *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            KvBuf::F16(v) => {
                for (x, b) in v[r * d..(r + n) * d].iter_mut().zip(src.chunks_exact(2)) {
                    *x = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
                }
            }
            KvBuf::Packed(b) => {
                b[r * self.row_bytes..(r + n) * self.row_bytes].copy_from_slice(src)
            }
        }
    }

    /// Elements `at..at + n` of a float cache as their bytes: on a little-endian machine that
    /// is the saved layout itself, so snapshots are one copy.
    #[cfg(target_endian = "little")]
    fn float_bytes(&self, at: usize, n: usize) -> Option<&[u8]> {
        match &self.buf {
            // SAFETY: f32 and f16 (a transparent u16) are plain bytes with no padding; the
            // slice bounds are checked by the indexing
            KvBuf::F32(v) => {
                let s = &v[at..at + n];
                Some(unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), n * 4) })
            }
            KvBuf::F16(v) => {
                let s = &v[at..at + n];
                Some(unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), n * 2) })
            }
            KvBuf::Packed(_) => None,
        }
    }

    #[cfg(target_endian = "little")]
    fn float_bytes_mut(&mut self, at: usize, n: usize) -> Option<&mut [u8]> {
        match &mut self.buf {
            // SAFETY: as in `float_bytes`; every bit pattern is a valid f32 or f16
            KvBuf::F32(v) => {
                let s = &mut v[at..at + n];
                Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), n * 4) })
            }
            KvBuf::F16(v) => {
                let s = &mut v[at..at + n];
                Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), n * 2) })
            }
            KvBuf::Packed(_) => None,
        }
    }

    /// Moves rows `from..from + n` to `to..to + n` (`to < from`).
    fn move_down(&mut self, from: usize, to: usize, n: usize) {
        let d = self.d;
        match &mut self.buf {
            KvBuf::F32(v) => v.copy_within(from * d..(from + n) * d, to * d),
            KvBuf::F16(v) => v.copy_within(from * d..(from + n) * d, to * d),
            KvBuf::Packed(b) => {
                let rb = self.row_bytes;
                b.copy_within(from * rb..(from + n) * rb, to * rb)
            }
        }
    }
}

/// One layer's keys and values, head-major: per KV head, `n_ctx` rows of `head_dim` values,
/// so decoding reads each head's keys and values as two contiguous streams.
#[derive(Clone, Debug)]
pub struct KvLayer {
    pub(super) k: KvSide,
    pub(super) v: KvSide,
    pub(super) spec: KvSpec,
    pub(super) n_kv_head: usize,
    pub(super) n_ctx: usize,
}

impl KvLayer {
    /// Keys and values of the same type (rotated where that applies), for `n_kv_head` heads of
    /// `head_dim` (keys) and `head_dim_v` (values).
    pub fn new(
        ty: KvType,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> KvLayer {
        Self::with_spec(KvSpec::same(ty), n_ctx, n_kv_head, head_dim, head_dim_v)
    }

    /// The layer `spec` asks for (block types need head sizes that are multiples of 32,
    /// TurboQuant multiples of 16: see [`KvType::for_head_dim`]).
    pub fn with_spec(
        spec: KvSpec,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> KvLayer {
        assert_eq!(
            spec.for_dims(head_dim, head_dim_v),
            spec,
            "KV types for heads of {head_dim}/{head_dim_v}"
        );
        let rows = n_ctx * n_kv_head;
        let rk = Rotation::for_side(spec.k, head_dim, spec.rotate, true);
        let rv = Rotation::for_side(spec.v, head_dim_v, spec.rotate, false);
        KvLayer {
            k: KvSide::new(spec.k, rk, head_dim, rows),
            v: KvSide::new(spec.v, rv, head_dim_v, rows),
            spec,
            n_kv_head,
            n_ctx,
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.n_ctx * self.n_kv_head * (self.k.row_bytes + self.v.row_bytes)
    }

    /// Stores `n` tokens' keys and values at positions `pos..pos+n` (`k`, `v`: per token, the
    /// heads one after the other).
    pub fn store(&mut self, pos: usize, k: &[f32], v: &[f32]) {
        let (h, d, dv, n_ctx) = (self.n_kv_head, self.k.d, self.v.d, self.n_ctx);
        if h == 0 {
            return;
        }
        let n = k.len() / (h * d);
        assert!(k.len() == n * h * d && v.len() == n * h * dv && pos + n <= n_ctx);
        for t in 0..n {
            for g in 0..h {
                self.k
                    .store(g * n_ctx + pos + t, &k[(t * h + g) * d..][..d]);
                self.v
                    .store(g * n_ctx + pos + t, &v[(t * h + g) * dv..][..dv]);
            }
        }
    }

    /// The types and rotation the layer stores.
    pub fn spec(&self) -> KvSpec {
        self.spec
    }

    /// Element types of the keys and the values.
    pub fn types(&self) -> (KvType, KvType) {
        (self.spec.k, self.spec.v)
    }

    /// `(n_kv_head, head_dim, head_dim_v)`.
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.n_kv_head, self.k.d, self.v.d)
    }

    /// Bytes [`KvLayer::save`] writes for `n` positions.
    pub fn saved_len(&self, n: usize) -> usize {
        self.n_kv_head * n * (self.k.row_bytes + self.v.row_bytes)
    }

    /// Appends positions `0..n` (keys of every head, then values of every head) as stored, so a
    /// restore is bit-exact.
    pub fn save(&self, n: usize, out: &mut Vec<u8>) {
        assert!(n <= self.n_ctx);
        out.reserve(self.saved_len(n));
        for g in 0..self.n_kv_head {
            self.k.save(g * self.n_ctx, n, out);
        }
        for g in 0..self.n_kv_head {
            self.v.save(g * self.n_ctx, n, out);
        }
    }

    /// Restores positions `0..n` from what [`KvLayer::save`] wrote for a layer of the same
    /// types and heads (any context size that holds `n`).
    pub fn load(&mut self, n: usize, src: &[u8]) -> Result<(), String> {
        if n > self.n_ctx {
            return Err(format!(
                "{n} positions do not fit a cache of {} positions",
                self.n_ctx
            ));
        }
        let want = self.saved_len(n);
        if src.len() != want {
            return Err(format!(
                "{} bytes for {n} positions, expected {want}",
                src.len()
            ));
        }
        let (h, n_ctx) = (self.n_kv_head, self.n_ctx);
        let (kb, vb) = (n * self.k.row_bytes, n * self.v.row_bytes);
        for g in 0..h {
            self.k.load(g * n_ctx, n, &src[g * kb..][..kb]);
        }
        let src = &src[h * kb..];
        for g in 0..h {
            self.v.load(g * n_ctx, n, &src[g * vb..][..vb]);
        }
        Ok(())
    }

    /// The context shift: drops positions `keep..keep + n_discard`, moves `keep + n_discard..
    /// n_past` down to `keep..`, and rotates the moved keys back by `n_discard` positions with
    /// `rope` (what llama.cpp's K-shift does: dequantize, rotate, store in the cache's type).
    pub fn shift(
        &mut self,
        keep: usize,
        n_discard: usize,
        n_past: usize,
        rope: Option<&RopeConfig>,
    ) {
        assert!(keep + n_discard <= n_past && n_past <= self.n_ctx);
        let (h, n_ctx) = (self.n_kv_head, self.n_ctx);
        let n_move = n_past - keep - n_discard;
        if h == 0 || n_discard == 0 {
            return;
        }
        for g in 0..h {
            let base = g * n_ctx;
            self.k
                .move_down(base + keep + n_discard, base + keep, n_move);
            self.v
                .move_down(base + keep + n_discard, base + keep, n_move);
        }
        if let Some(rope) = rope {
            self.rotate(keep, keep + n_move, -(n_discard as i64), rope);
        }
    }

    /// Rotates the keys at positions `from..to` by `delta` positions with `rope` (a rotated or
    /// quantized cache: decoded, rotated back, re-roped, stored again in its type).
    pub fn rotate(&mut self, from: usize, to: usize, delta: i64, rope: &RopeConfig) {
        let (h, d, n_ctx) = (self.n_kv_head, self.k.d, self.n_ctx);
        let mut cs = vec![(0.0f32, 0.0f32); rope.n_rot / 2];
        rope.cos_sin(delta, &mut cs);
        let mut row = vec![0.0f32; d];
        for g in 0..h {
            for p in from..to {
                let r = g * n_ctx + p;
                self.k.read(r, &mut row);
                rope.apply(&mut row, 1, d, &cs);
                self.k.store(r, &row);
            }
        }
    }
}
