//! One attention layer's KV cache of one sequence: storage, snapshots to bytes (prefix cache,
//! checkpoints) and the context shift (drop a span, move the rest down, re-rotate the keys).

use half::f16;

use crate::backend::RopeConfig;
use crate::quant::q8_0::{self, BlockQ8_0};

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KvType {
    F32,
    #[default]
    F16,
    /// ggml's Q8_0 blocks (32 values, one f16 scale): about half of f16's memory. Needs head
    /// sizes that are multiples of 32; a cache whose heads are not keeps f16
    /// ([`KvType::for_head_dim`]).
    Q8_0,
}

impl KvType {
    /// The type a cache with heads of `head_dim` actually uses: Q8_0 only when the heads are
    /// whole blocks, f16 otherwise.
    pub fn for_head_dim(self, head_dim: usize) -> KvType {
        match self {
            KvType::Q8_0 if !head_dim.is_multiple_of(32) => KvType::F16,
            t => t,
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(KvType::F32),
            "f16" => Ok(KvType::F16),
            "q8_0" => Ok(KvType::Q8_0),
            _ => Err(format!(
                "unsupported KV cache type '{s}' (supported: f32, f16, q8_0)"
            )),
        }
    }
}

#[derive(Clone, Debug)]
pub(super) enum KvBuf {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Q8_0(Vec<BlockQ8_0>),
}

impl KvBuf {
    fn new(ty: KvType, n: usize) -> KvBuf {
        match ty {
            KvType::F32 => KvBuf::F32(vec![0.0; n]),
            KvType::F16 => KvBuf::F16(vec![f16::ZERO; n]),
            KvType::Q8_0 => {
                let zero = BlockQ8_0 {
                    d: [0; 2],
                    qs: [0; 32],
                };
                KvBuf::Q8_0(vec![zero; n.div_ceil(32)])
            }
        }
    }

    fn store(&mut self, at: usize, src: &[f32]) {
        match self {
            KvBuf::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            KvBuf::F16(v) => {
                for (d, &s) in v[at..at + src.len()].iter_mut().zip(src) {
                    *d = f16::from_f32(s);
                }
            }
            // rows are whole blocks (`KvType::for_head_dim`), quantized as ggml's CPU does
            KvBuf::Q8_0(v) => q8_0::quantize_act(src, &mut v[at / 32..(at + src.len()) / 32]),
        }
    }

    fn elem_bytes(&self) -> f64 {
        match self {
            KvBuf::F32(_) => 4.0,
            KvBuf::F16(_) => 2.0,
            KvBuf::Q8_0(_) => 34.0 / 32.0,
        }
    }
}

/// One layer's keys and values, head-major: per KV head, `n_ctx` rows of `head_dim` values,
/// so decoding reads each head's keys and values as two contiguous streams.
#[derive(Clone, Debug)]
pub struct KvLayer {
    pub(super) k: KvBuf,
    pub(super) v: KvBuf,
    pub(super) n_kv_head: usize,
    pub(super) head_dim: usize,
    pub(super) head_dim_v: usize,
    pub(super) n_ctx: usize,
}

impl KvLayer {
    /// Keys and values of the same type, for `n_kv_head` heads of `head_dim` (keys) and
    /// `head_dim_v` (values).
    pub fn new(
        ty: KvType,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> KvLayer {
        Self::with_types(ty, ty, n_ctx, n_kv_head, head_dim, head_dim_v)
    }

    /// Keys of `k_ty`, values of `v_ty` (Q8_0 needs head sizes that are multiples of 32: see
    /// [`KvType::for_head_dim`]).
    pub fn with_types(
        k_ty: KvType,
        v_ty: KvType,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> KvLayer {
        assert!(k_ty != KvType::Q8_0 || head_dim.is_multiple_of(32));
        assert!(v_ty != KvType::Q8_0 || head_dim_v.is_multiple_of(32));
        KvLayer {
            k: KvBuf::new(k_ty, n_ctx * n_kv_head * head_dim),
            v: KvBuf::new(v_ty, n_ctx * n_kv_head * head_dim_v),
            n_kv_head,
            head_dim,
            head_dim_v,
            n_ctx,
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let (kd, vd) = (
            self.n_kv_head * self.head_dim,
            self.n_kv_head * self.head_dim_v,
        );
        (self.n_ctx as f64 * (kd as f64 * self.k.elem_bytes() + vd as f64 * self.v.elem_bytes()))
            as usize
    }

    /// Stores `n` tokens' keys and values at positions `pos..pos+n` (`k`, `v`: per token, the
    /// heads one after the other).
    pub fn store(&mut self, pos: usize, k: &[f32], v: &[f32]) {
        let (h, d, dv, n_ctx) = (self.n_kv_head, self.head_dim, self.head_dim_v, self.n_ctx);
        if h == 0 {
            return;
        }
        let n = k.len() / (h * d);
        assert!(k.len() == n * h * d && v.len() == n * h * dv && pos + n <= n_ctx);
        for t in 0..n {
            for g in 0..h {
                let src = &k[(t * h + g) * d..][..d];
                self.k.store((g * n_ctx + pos + t) * d, src);
                let src = &v[(t * h + g) * dv..][..dv];
                self.v.store((g * n_ctx + pos + t) * dv, src);
            }
        }
    }
}

impl KvBuf {
    fn ty(&self) -> KvType {
        match self {
            KvBuf::F32(_) => KvType::F32,
            KvBuf::F16(_) => KvType::F16,
            KvBuf::Q8_0(_) => KvType::Q8_0,
        }
    }

    /// Bytes of `n` elements (a whole number of blocks for Q8_0).
    fn bytes_of(&self, n: usize) -> usize {
        match self {
            KvBuf::F32(_) => n * 4,
            KvBuf::F16(_) => n * 2,
            KvBuf::Q8_0(_) => n / 32 * 34,
        }
    }

    /// Appends elements `at..at + n` as little-endian bytes (Q8_0: the blocks as stored).
    fn save(&self, at: usize, n: usize, out: &mut Vec<u8>) {
        #[cfg(target_endian = "little")]
        if let Some(b) = self.as_bytes(at, n) {
            out.extend_from_slice(b);
            return;
        }
        match self {
            KvBuf::F32(v) => {
                for x in &v[at..at + n] {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            KvBuf::F16(v) => {
                for x in &v[at..at + n] {
                    out.extend_from_slice(&x.to_bits().to_le_bytes());
                }
            }
            KvBuf::Q8_0(v) => {
                for b in &v[at / 32..(at + n) / 32] {
                    out.extend_from_slice(&b.d);
                    out.extend_from_slice(&b.qs);
                }
            }
        }
    }

    /// Reads elements `at..at + n` from `src` (exactly [`KvBuf::bytes_of`] `n` bytes).
    fn load(&mut self, at: usize, n: usize, src: &[u8]) {
        #[cfg(target_endian = "little")]
        if let Some(b) = self.as_bytes_mut(at, n) {
            b.copy_from_slice(src);
            return;
        }
        match self {
            KvBuf::F32(v) => {
                for (x, b) in v[at..at + n].iter_mut().zip(src.chunks_exact(4)) {
                    *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            KvBuf::F16(v) => {
                for (x, b) in v[at..at + n].iter_mut().zip(src.chunks_exact(2)) {
                    *x = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
                }
            }
            KvBuf::Q8_0(v) => {
                for (blk, b) in v[at / 32..(at + n) / 32]
                    .iter_mut()
                    .zip(src.chunks_exact(34))
                {
                    blk.d = [b[0], b[1]];
                    blk.qs.copy_from_slice(&b[2..]);
                }
            }
        }
    }

    /// Elements `at..at + n` of a float cache as their bytes: on a little-endian machine that
    /// is the saved layout itself, so snapshots are one copy.
    #[cfg(target_endian = "little")]
    fn as_bytes(&self, at: usize, n: usize) -> Option<&[u8]> {
        match self {
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
            KvBuf::Q8_0(_) => None,
        }
    }

    #[cfg(target_endian = "little")]
    fn as_bytes_mut(&mut self, at: usize, n: usize) -> Option<&mut [u8]> {
        match self {
            // SAFETY: as in `as_bytes`; every bit pattern is a valid f32 or f16
            KvBuf::F32(v) => {
                let s = &mut v[at..at + n];
                Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), n * 4) })
            }
            KvBuf::F16(v) => {
                let s = &mut v[at..at + n];
                Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), n * 2) })
            }
            KvBuf::Q8_0(_) => None,
        }
    }

    /// Moves elements `from..from + n` to `to..to + n` (`to < from`; whole blocks for Q8_0).
    fn move_down(&mut self, from: usize, to: usize, n: usize) {
        match self {
            KvBuf::F32(v) => v.copy_within(from..from + n, to),
            KvBuf::F16(v) => v.copy_within(from..from + n, to),
            KvBuf::Q8_0(v) => v.copy_within(from / 32..(from + n) / 32, to / 32),
        }
    }

    /// Element row `at..at + row.len()` as f32.
    fn read(&self, at: usize, row: &mut [f32]) {
        let n = row.len();
        match self {
            KvBuf::F32(v) => row.copy_from_slice(&v[at..at + n]),
            KvBuf::F16(v) => {
                for (o, x) in row.iter_mut().zip(&v[at..at + n]) {
                    *o = x.to_f32();
                }
            }
            KvBuf::Q8_0(v) => q8_0::dequantize(&v[at / 32..(at + n) / 32], row),
        }
    }
}

impl KvLayer {
    /// Element types of the keys and the values.
    pub fn types(&self) -> (KvType, KvType) {
        (self.k.ty(), self.v.ty())
    }

    /// `(n_kv_head, head_dim, head_dim_v)`.
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.n_kv_head, self.head_dim, self.head_dim_v)
    }

    /// Bytes [`KvLayer::save`] writes for `n` positions.
    pub fn saved_len(&self, n: usize) -> usize {
        self.n_kv_head * (self.k.bytes_of(n * self.head_dim) + self.v.bytes_of(n * self.head_dim_v))
    }

    /// Appends positions `0..n` (keys of every head, then values of every head) as stored, so a
    /// restore is bit-exact.
    pub fn save(&self, n: usize, out: &mut Vec<u8>) {
        assert!(n <= self.n_ctx);
        let (h, d, dv, n_ctx) = (self.n_kv_head, self.head_dim, self.head_dim_v, self.n_ctx);
        out.reserve(self.saved_len(n));
        for g in 0..h {
            self.k.save(g * n_ctx * d, n * d, out);
        }
        for g in 0..h {
            self.v.save(g * n_ctx * dv, n * dv, out);
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
        let (h, d, dv, n_ctx) = (self.n_kv_head, self.head_dim, self.head_dim_v, self.n_ctx);
        let (kb, vb) = (self.k.bytes_of(n * d), self.v.bytes_of(n * dv));
        for g in 0..h {
            self.k.load(g * n_ctx * d, n * d, &src[g * kb..][..kb]);
        }
        let src = &src[h * kb..];
        for g in 0..h {
            self.v.load(g * n_ctx * dv, n * dv, &src[g * vb..][..vb]);
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
        let (h, d, dv, n_ctx) = (self.n_kv_head, self.head_dim, self.head_dim_v, self.n_ctx);
        let n_move = n_past - keep - n_discard;
        if h == 0 || n_discard == 0 {
            return;
        }
        for g in 0..h {
            let (kb, vb) = (g * n_ctx * d, g * n_ctx * dv);
            self.k
                .move_down(kb + (keep + n_discard) * d, kb + keep * d, n_move * d);
            self.v
                .move_down(vb + (keep + n_discard) * dv, vb + keep * dv, n_move * dv);
        }
        if let Some(rope) = rope {
            self.rotate(keep, keep + n_move, -(n_discard as i64), rope);
        }
    }

    /// Rotates the keys at positions `from..to` by `delta` positions with `rope`.
    pub fn rotate(&mut self, from: usize, to: usize, delta: i64, rope: &RopeConfig) {
        let (h, d, n_ctx) = (self.n_kv_head, self.head_dim, self.n_ctx);
        let mut cs = vec![(0.0f32, 0.0f32); rope.n_rot / 2];
        rope.cos_sin(delta, &mut cs);
        let mut row = vec![0.0f32; d];
        for g in 0..h {
            for p in from..to {
                let at = (g * n_ctx + p) * d;
                self.k.read(at, &mut row);
                rope.apply(&mut row, 1, d, &cs);
                self.k.store(at, &row);
            }
        }
    }
}
