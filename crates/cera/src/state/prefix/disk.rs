//! The prefix cache's disk tier: one file per entry under `DIR/<namespace>/`, written
//! atomically, with a checksum over the whole file. At start the directory is indexed from the
//! files' headers (tokens and snapshot positions); an entry's body is read, and its checksum
//! checked, only when it is used. A file that is not an entry, is of another version, sits in
//! the wrong namespace or fails its checksum is skipped with a warning and never loaded.
//!
//! ```text
//! magic "CERAPFX\0", version u32, fingerprint 16 bytes, key/value type u8 u8,
//! tokens (u32 list), convolution snapshot positions (u32 list), body (bytes), checksum 16 bytes
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::Namespace;
use crate::state::codec::{Reader, Writer};
use crate::state::snapshot::{kv_spec_from_ids, kv_spec_ids};
use crate::state::{Fingerprint, atomic_write};

const MAGIC: &[u8; 8] = b"CERAPFX\0";
const VERSION: u32 = 1;
pub(crate) const EXT: &str = "cpfx";

/// What the index knows of an entry on disk.
pub(crate) struct DiskEntry {
    pub ns: Namespace,
    pub tokens: Vec<u32>,
    pub conv_pos: Vec<usize>,
    pub path: PathBuf,
    pub size: u64,
    pub mtime: std::time::SystemTime,
}

pub(crate) fn ns_dir(root: &Path, ns: &Namespace) -> PathBuf {
    root.join(format!(
        "{}-{}{}",
        ns.fingerprint, ns.kv_types.0, ns.kv_types.1
    ))
}

/// The file an entry of these tokens gets.
pub(crate) fn entry_path(root: &Path, ns: &Namespace, tokens: &[u32]) -> PathBuf {
    let mut h = Sha256::new();
    for t in tokens {
        h.update(t.to_le_bytes());
    }
    let d = h.finalize();
    let name: String = d[..12].iter().map(|b| format!("{b:02x}")).collect();
    ns_dir(root, ns).join(format!("{name}.{EXT}"))
}

pub(crate) fn write(
    root: &Path,
    ns: &Namespace,
    tokens: &[u32],
    conv_pos: &[usize],
    body: &[u8],
) -> crate::Result<(PathBuf, u64)> {
    let dir = ns_dir(root, ns);
    std::fs::create_dir_all(&dir).map_err(|e| crate::Error::io(&dir, e))?;
    let mut w = Writer::default();
    w.raw(MAGIC);
    w.u32(VERSION);
    w.raw(&ns.fingerprint.0);
    w.u8(ns.kv_types.0);
    w.u8(ns.kv_types.1);
    w.u32s(tokens);
    let pos: Vec<u32> = conv_pos.iter().map(|&p| p as u32).collect();
    w.u32s(&pos);
    w.bytes(body);
    let sum = crate::state::checksum(&w.buf);
    w.raw(&sum);
    let path = entry_path(root, ns, tokens);
    atomic_write(&path, &w.buf)?;
    Ok((path, w.buf.len() as u64))
}

/// The header part of a file: `Err(reason)` when it is not a usable entry.
fn read_header(path: &Path) -> Result<(Namespace, Vec<u32>, Vec<usize>, u64), String> {
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let size = f.metadata().map_err(|e| e.to_string())?.len();
    // magic, version, fingerprint, types, token count
    let mut head = [0u8; 8 + 4 + 16 + 2 + 8];
    f.read_exact(&mut head)
        .map_err(|_| "too short to be a prefix-cache entry".to_string())?;
    let mut r = Reader::new(&head, "");
    let bad = |e: crate::Error| e.to_string();
    if r.raw(8, "magic").map_err(bad)? != MAGIC {
        return Err("not a prefix-cache entry (bad magic)".into());
    }
    let v = r.u32("version").map_err(bad)?;
    if v != VERSION {
        return Err(format!("format version {v}, this build reads {VERSION}"));
    }
    let mut fp = [0u8; 16];
    fp.copy_from_slice(r.raw(16, "fingerprint").map_err(bad)?);
    let kv_types = (r.u8("k").map_err(bad)?, r.u8("v").map_err(bad)?);
    if kv_spec_from_ids(kv_types.0, kv_types.1).is_none() {
        return Err(format!("unknown KV types {kv_types:?}"));
    }
    let n = r.u64("tokens").map_err(bad)?;
    if n.saturating_mul(4) > size {
        return Err(format!("{n} tokens cannot fit a file of {size} bytes"));
    }
    let mut tb = vec![0u8; n as usize * 4 + 8];
    f.read_exact(&mut tb)
        .map_err(|_| "truncated in the token list".to_string())?;
    let tokens: Vec<u32> = tb[..n as usize * 4]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut nb = [0u8; 8];
    nb.copy_from_slice(&tb[n as usize * 4..]);
    let np = u64::from_le_bytes(nb);
    if np > n + 1 {
        return Err(format!("{np} snapshot positions for {n} tokens"));
    }
    let mut pb = vec![0u8; np as usize * 4];
    f.read_exact(&mut pb)
        .map_err(|_| "truncated in the snapshot positions".to_string())?;
    let conv_pos = pb
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    Ok((
        Namespace {
            fingerprint: Fingerprint(fp),
            kv_types,
        },
        tokens,
        conv_pos,
        size,
    ))
}

/// Indexes `root`: every entry file of every namespace. Unusable files come back as warnings.
pub(crate) fn scan(root: &Path) -> (Vec<DiskEntry>, Vec<String>) {
    let (mut out, mut warn) = (Vec::new(), Vec::new());
    let Ok(dirs) = std::fs::read_dir(root) else {
        return (out, warn);
    };
    for d in dirs.flatten() {
        let dpath = d.path();
        if !dpath.is_dir() {
            continue;
        }
        let Ok(files) = std::fs::read_dir(&dpath) else {
            continue;
        };
        for f in files.flatten() {
            let path = f.path();
            if path.extension().and_then(|e| e.to_str()) != Some(EXT) {
                continue;
            }
            match read_header(&path) {
                Ok((ns, tokens, conv_pos, size)) => {
                    if ns_dir(root, &ns) != dpath {
                        warn.push(format!(
                            "prefix cache: skipping {}: its header names another namespace",
                            path.display()
                        ));
                        continue;
                    }
                    let mtime = f
                        .metadata()
                        .and_then(|m| m.modified())
                        .unwrap_or(std::time::UNIX_EPOCH);
                    out.push(DiskEntry {
                        ns,
                        tokens,
                        conv_pos,
                        path,
                        size,
                        mtime,
                    });
                }
                Err(why) => warn.push(format!("prefix cache: skipping {}: {why}", path.display())),
            }
        }
    }
    (out, warn)
}

/// Reads an entry's body, checking the checksum and that the header is still what the index
/// says.
pub(crate) fn read_body(e: &DiskEntry) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(&e.path).map_err(|err| err.to_string())?;
    if bytes.len() < 16 {
        return Err("truncated".into());
    }
    let (data, sum) = bytes.split_at(bytes.len() - 16);
    if crate::state::checksum(data).as_slice() != sum {
        return Err("checksum mismatch: the file is truncated or corrupted".into());
    }
    let what = e.path.display().to_string();
    let mut r = Reader::new(data, &what);
    let parse = |r: &mut Reader| -> crate::Result<Vec<u8>> {
        r.raw(8 + 4, "magic and version")?;
        let fp = r.raw(16, "fingerprint")?;
        let kt = r.u8("key type")?;
        let vt = r.u8("value type")?;
        if fp != e.ns.fingerprint.0 || (kt, vt) != e.ns.kv_types {
            return Err(r.error("the header changed since the index was read"));
        }
        if r.u32s("tokens")? != e.tokens {
            return Err(r.error("the tokens changed since the index was read"));
        }
        r.u32s("snapshot positions")?;
        let body = r.bytes("body")?.to_vec();
        r.finish()?;
        Ok(body)
    };
    parse(&mut r).map_err(|err| err.to_string())
}

pub(crate) fn kv_ids(s: crate::backend::KvSpec) -> (u8, u8) {
    kv_spec_ids(s)
}
