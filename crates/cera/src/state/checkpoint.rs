//! The checkpoint format: a session's (or a chat's) whole state as one byte string.
//!
//! ```text
//! magic    "CERACKPT"                     8 bytes
//! version  u32 (FORMAT_VERSION)
//! kind     u32: 1 session, 2 chat
//! model    fingerprint                    16 bytes
//! kv types u8 keys, u8 values
//! n_ctx    u64   the session's context size
//! n_tokens u64   tokens in the context
//! flags    u32   bit 0: the logits are valid; bit 1: the context was shifted
//! body     tokens (u32 list), logits (f32 list), KV cache (see `snapshot.rs`),
//!          convolution state (a presence byte, then the snapshot), app data (bytes: the
//!          chat's conversation as JSON, or empty)
//! checksum of everything before it (`checksum.rs`)   16 bytes
//! ```
//!
//! All integers are little-endian. A reader checks the magic, the version, the length and the
//! checksum before anything else, so a truncated or corrupted file is refused whole; then the
//! model, the KV types and the context size, each mismatch named.

use super::Fingerprint;
use super::codec::{Reader, Writer};
use super::snapshot::{kv_spec_from_ids, kv_spec_ids};
use crate::backend::KvSpec;
use crate::error::{Error, Result};

pub const MAGIC: &[u8; 8] = b"CERACKPT";
pub const FORMAT_VERSION: u32 = 1;
/// Magic, version, kind, fingerprint, kv types, n_ctx, n_tokens, flags.
const HEADER_LEN: usize = 8 + 4 + 4 + 16 + 2 + 8 + 8 + 4;
const CHECKSUM_LEN: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    Session,
    Chat,
}

impl Kind {
    fn id(self) -> u32 {
        match self {
            Kind::Session => 1,
            Kind::Chat => 2,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Session => "session",
            Kind::Chat => "chat",
        }
    }
}

/// What a checkpoint says about itself (readable without a model: `cera inspect`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Header {
    pub version: u32,
    pub kind: Kind,
    pub fingerprint: Fingerprint,
    pub kv_types: KvSpec,
    pub n_ctx: usize,
    pub n_tokens: usize,
    pub logits_valid: bool,
    pub shifted: bool,
}

pub(crate) const FLAG_LOGITS: u32 = 1;
pub(crate) const FLAG_SHIFTED: u32 = 2;

/// Starts a checkpoint: the header, into a writer the body is appended to.
pub(crate) fn begin(h: &Header) -> Writer {
    let mut w = Writer::default();
    w.raw(MAGIC);
    w.u32(FORMAT_VERSION);
    w.u32(h.kind.id());
    w.raw(&h.fingerprint.0);
    let (kt, vt) = kv_spec_ids(h.kv_types);
    w.u8(kt);
    w.u8(vt);
    w.u64(h.n_ctx as u64);
    w.u64(h.n_tokens as u64);
    let mut flags = 0;
    if h.logits_valid {
        flags |= FLAG_LOGITS;
    }
    if h.shifted {
        flags |= FLAG_SHIFTED;
    }
    w.u32(flags);
    w
}

/// Ends a checkpoint: appends the checksum.
pub(crate) fn finish(mut w: Writer) -> Vec<u8> {
    let sum = super::checksum(&w.buf);
    w.raw(&sum);
    w.buf
}

/// Reads and checks the header (magic, version, checksum of the whole); returns it and a
/// reader positioned at the body. `what` names the source in errors.
pub(crate) fn open<'a>(bytes: &'a [u8], what: &'a str) -> Result<(Header, Reader<'a>)> {
    let err = |reason: String| Error::State {
        what: what.to_owned(),
        reason,
    };
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        let got = &bytes[..bytes.len().min(8)];
        return Err(err(format!(
            "not a Cera checkpoint (magic bytes {got:02x?}, expected \"CERACKPT\")"
        )));
    }
    if bytes.len() < HEADER_LEN + CHECKSUM_LEN {
        return Err(err(format!(
            "truncated: {} bytes, a checkpoint has at least {}",
            bytes.len(),
            HEADER_LEN + CHECKSUM_LEN
        )));
    }
    let mut r = Reader::new(&bytes[..bytes.len() - CHECKSUM_LEN], what);
    r.raw(8, "magic")?;
    let version = r.u32("version")?;
    if version != FORMAT_VERSION {
        return Err(err(format!(
            "format version {version}; this build reads version {FORMAT_VERSION}"
        )));
    }
    let (body, sum) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
    if super::checksum(body).as_slice() != sum {
        return Err(err(
            "checksum mismatch: the file is truncated or corrupted".into()
        ));
    }
    let kind = match r.u32("kind")? {
        1 => Kind::Session,
        2 => Kind::Chat,
        k => return Err(err(format!("unknown checkpoint kind {k}"))),
    };
    let mut fp = [0u8; 16];
    fp.copy_from_slice(r.raw(16, "model fingerprint")?);
    let (kt, vt) = (r.u8("key type")?, r.u8("value type")?);
    let Some(kv_types) = kv_spec_from_ids(kt, vt) else {
        return Err(err(format!("unknown KV cache type ids {kt}/{vt}")));
    };
    let n_ctx = r.len("n_ctx", u32::MAX as usize)?;
    let n_tokens = r.len("n_tokens", n_ctx)?;
    let flags = r.u32("flags")?;
    Ok((
        Header {
            version,
            kind,
            fingerprint: Fingerprint(fp),
            kv_types,
            n_ctx,
            n_tokens,
            logits_valid: flags & FLAG_LOGITS != 0,
            shifted: flags & FLAG_SHIFTED != 0,
        },
        r,
    ))
}

/// The header of a checkpoint, checked (magic, version, checksum).
pub fn read_header(bytes: &[u8]) -> Result<Header> {
    open(bytes, "checkpoint").map(|(h, _)| h)
}

/// Checks a header against the model and session it is restored into.
pub(crate) fn check_fits(
    h: &Header,
    what: &str,
    fingerprint: Fingerprint,
    kv_types: KvSpec,
    n_ctx: usize,
) -> Result<()> {
    let err = |reason: String| Error::State {
        what: what.to_owned(),
        reason,
    };
    if h.fingerprint != fingerprint {
        return Err(err(format!(
            "made with another model or other LoRA adapters (fingerprint {}; this model is {fingerprint})",
            h.fingerprint
        )));
    }
    if h.kv_types != kv_types {
        return Err(err(format!(
            "the KV cache is {} in the checkpoint, {kv_types} in this session (pass the same \
             --cache-type-k/--cache-type-v/--kv-rotate)",
            h.kv_types
        )));
    }
    if h.n_tokens > n_ctx {
        return Err(err(format!(
            "{} tokens do not fit this session's context of {n_ctx} (the checkpoint's is {})",
            h.n_tokens, h.n_ctx
        )));
    }
    Ok(())
}
