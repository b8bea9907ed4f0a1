//! Sequence state to bytes and back: the KV cache's first `n` positions of every layer (in the
//! cache's own element type, so a restore is bit-exact) and convolution snapshots.
//!
//! Per layer: key type and value type (u8), KV heads, head size of keys and of values (u32),
//! then the layer's bytes ([`crate::backend::KvCache::saved_len`]). A convolution snapshot:
//! its position, then per layer a presence byte and the values.

use super::codec::{Reader, Writer};
use crate::backend::{Backend, KvCache, KvSpec, KvType};
use crate::error::Result;
use crate::models::ConvSnapshot;

/// The two type bytes of a KV spec: the keys' and the values' type ids, the rotation in the key
/// byte's top bit (so states written before rotation existed read as unrotated).
pub(crate) fn kv_spec_ids(s: KvSpec) -> (u8, u8) {
    (s.k.id() | if s.rotate { 0x80 } else { 0 }, s.v.id())
}

pub(crate) fn kv_spec_from_ids(k: u8, v: u8) -> Option<KvSpec> {
    let (kt, vt) = (KvType::from_id(k & 0x7f)?, KvType::from_id(v)?);
    let spec = KvSpec::new(kt, vt).with_rotation(k & 0x80 != 0);
    // a rotation bit on types that cannot rotate is not something we wrote
    (spec.rotate == (k & 0x80 != 0)).then_some(spec)
}

/// Appends positions `0..n` of every layer.
pub(crate) fn write_kv<B: Backend>(be: &B, kv: &[B::Kv], n: usize, w: &mut Writer) {
    w.u32(kv.len() as u32);
    w.buf
        .reserve(kv.iter().map(|l| l.saved_len(n) + 24).sum::<usize>());
    for l in kv {
        let (kt, vt) = kv_spec_ids(l.spec());
        let (h, d, dv) = l.dims();
        w.u8(kt);
        w.u8(vt);
        w.u32(h as u32);
        w.u32(d as u32);
        w.u32(dv as u32);
        // the length, then the bytes straight into the writer
        let len = l.saved_len(n);
        w.u64(len as u64);
        let at = w.buf.len();
        be.kv_save(l, n, &mut w.buf);
        debug_assert_eq!(w.buf.len() - at, len);
    }
}

/// Reads what [`write_kv`] wrote into caches of the same layout; every difference (layers,
/// types, heads) is an error naming the layer and both values.
pub(crate) fn read_kv<B: Backend>(
    be: &B,
    kv: &mut [B::Kv],
    n: usize,
    r: &mut Reader,
) -> Result<()> {
    let n_layers = r.u32("layer count")? as usize;
    if n_layers != kv.len() {
        return Err(r.error(format!(
            "{n_layers} cache layers saved, the model has {}",
            kv.len()
        )));
    }
    for (il, l) in kv.iter_mut().enumerate() {
        let kt = r.u8("key type")?;
        let vt = r.u8("value type")?;
        let Some(saved) = kv_spec_from_ids(kt, vt) else {
            return Err(r.error(format!("layer {il}: unknown KV cache type ids {kt}/{vt}")));
        };
        let dims = (
            r.u32("KV heads")? as usize,
            r.u32("key head size")? as usize,
            r.u32("value head size")? as usize,
        );
        if saved != l.spec() {
            return Err(r.error(format!(
                "layer {il}: the KV cache is {saved} in the saved state, {} in this session",
                l.spec()
            )));
        }
        if dims != l.dims() {
            return Err(r.error(format!(
                "layer {il}: KV heads × head sizes are {dims:?} in the saved state, {:?} in the \
                 model",
                l.dims()
            )));
        }
        if n > l.n_ctx() {
            return Err(r.error(format!(
                "{n} saved positions do not fit this session's context of {}",
                l.n_ctx()
            )));
        }
        let bytes = r.bytes("KV cache bytes")?;
        be.kv_load(l, n, bytes)
            .map_err(|e| r.error(format!("layer {il}: {e}")))?;
    }
    Ok(())
}

pub(crate) fn write_conv(s: &ConvSnapshot, w: &mut Writer) {
    w.u64(s.pos as u64);
    w.u32(s.layers.len() as u32);
    for l in &s.layers {
        match l {
            None => w.u8(0),
            Some(v) => {
                w.u8(1);
                w.f32s(v);
            }
        }
    }
}

pub(crate) fn read_conv(r: &mut Reader) -> Result<ConvSnapshot> {
    let pos = r.len("convolution state position", u32::MAX as usize)?;
    let n = r.u32("convolution layer count")? as usize;
    if n > r.remaining() {
        return Err(r.error(format!("{n} convolution layers cannot fit the data left")));
    }
    let mut layers = Vec::with_capacity(n);
    for il in 0..n {
        layers.push(match r.u8("convolution layer flag")? {
            0 => None,
            1 => Some(r.f32s("convolution state")?),
            f => return Err(r.error(format!("convolution layer {il}: bad flag {f}"))),
        });
    }
    Ok(ConvSnapshot { pos, layers })
}
