//! CTranslate2's `model.bin` (faster-whisper's format), read as the variables it holds.
//!
//! Layout (little-endian): a `u32` format version; the spec's name (a string: `u16` length
//! counting a trailing NUL, then the bytes); the spec's revision (`u32`); the variable count
//! (`u32`), then per variable its name (a string), rank (`u8`), dimensions (`u32` each), type
//! (`u8`: 0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16), byte count (`u32`) and bytes; then the
//! alias count (`u32`) and per alias two strings (the alias, the variable it names). Every
//! length is checked against what is left, so a cut or hostile file is an error naming the
//! field, never a panic or a huge allocation.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use crate::error::{Error, Result};

/// A variable's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ct2Type {
    F32,
    I8,
    I16,
    I32,
    F16,
    Bf16,
}

impl Ct2Type {
    fn from_u8(v: u8) -> Option<Ct2Type> {
        Some(match v {
            0 => Ct2Type::F32,
            1 => Ct2Type::I8,
            2 => Ct2Type::I16,
            3 => Ct2Type::I32,
            4 => Ct2Type::F16,
            5 => Ct2Type::Bf16,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Ct2Type::I8 => 1,
            Ct2Type::I16 | Ct2Type::F16 | Ct2Type::Bf16 => 2,
            Ct2Type::F32 | Ct2Type::I32 => 4,
        }
    }
}

pub(super) struct Var {
    pub name: String,
    /// Dimensions, outermost first (row-major: a `[out, in]` weight).
    pub dims: Vec<usize>,
    pub ty: Ct2Type,
    range: Range<usize>,
}

impl Var {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

/// A `model.bin`, held in memory (Whisper's are 75 MB to 3 GB; the converter reads one at a
/// time otherwise, but this format has no index to seek by).
pub(super) struct Ct2Model {
    pub spec: String,
    /// The spec's revision (Whisper's is 3; kept for specs whose layout changed with it).
    #[allow(dead_code)]
    pub revision: u32,
    pub vars: Vec<Var>,
    by_name: HashMap<String, usize>,
    bytes: Vec<u8>,
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn bad(&self, reason: String) -> Error {
        Error::Convert {
            path: self.path.to_path_buf(),
            reason: format!("model.bin: {reason}"),
        }
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        if n > self.buf.len() - self.at {
            return Err(self.bad(format!(
                "truncated: {field} at byte {} needs {n} bytes, {} left",
                self.at,
                self.buf.len() - self.at
            )));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self, field: &str) -> Result<u8> {
        Ok(self.take(1, field)?[0])
    }

    fn u16(&mut self, field: &str) -> Result<u16> {
        let b = self.take(2, field)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, field: &str) -> Result<u32> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self, field: &str) -> Result<String> {
        let n = self.u16(field)? as usize;
        let b = self.take(n, field)?;
        let b = b.strip_suffix(&[0]).unwrap_or(b);
        String::from_utf8(b.to_vec()).map_err(|_| self.bad(format!("{field} is not UTF-8")))
    }
}

impl Ct2Model {
    /// Reads `path` (a CTranslate2 `model.bin`).
    pub fn open(path: &Path) -> Result<Ct2Model> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let mut c = Cursor {
            buf: &bytes,
            at: 0,
            path,
        };
        let version = c.u32("the format version")?;
        if !(1..=6).contains(&version) {
            return Err(c.bad(format!(
                "format version {version} (this reader knows CTranslate2's 1 to 6)"
            )));
        }
        let spec = c.string("the spec name")?;
        let revision = c.u32("the spec revision")?;
        let n = c.u32("the variable count")? as usize;
        // (a variable takes at least its name's length, rank, type and byte count)
        if n > (bytes.len() - c.at) / 8 {
            return Err(c.bad(format!("{n} variables cannot fit in the file")));
        }
        let mut vars = Vec::with_capacity(n);
        for i in 0..n {
            let name = c.string(&format!("variable {i}'s name"))?;
            let rank = c.u8(&format!("{name}: rank"))? as usize;
            let mut dims = Vec::with_capacity(rank);
            for _ in 0..rank {
                dims.push(c.u32(&format!("{name}: dimensions"))? as usize);
            }
            let t = c.u8(&format!("{name}: type"))?;
            let ty = Ct2Type::from_u8(t)
                .ok_or_else(|| c.bad(format!("{name}: unknown element type {t}")))?;
            let nbytes = c.u32(&format!("{name}: byte count"))? as usize;
            let numel = dims
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .and_then(|e| e.checked_mul(ty.size()));
            if numel != Some(nbytes) {
                return Err(c.bad(format!(
                    "{name}: {nbytes} bytes for dimensions {dims:?} of {ty:?}"
                )));
            }
            let start = c.at;
            c.take(nbytes, &format!("{name}: values"))?;
            vars.push(Var {
                name,
                dims,
                ty,
                range: start..start + nbytes,
            });
        }
        let mut by_name: HashMap<String, usize> = vars
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.clone(), i))
            .collect();
        if c.at < bytes.len() {
            let n_alias = c.u32("the alias count")? as usize;
            for _ in 0..n_alias {
                let alias = c.string("an alias")?;
                let target = c.string(&format!("{alias}: the variable it names"))?;
                let i = *by_name.get(&target).ok_or_else(|| {
                    c.bad(format!(
                        "alias {alias} names {target}, which is not a variable"
                    ))
                })?;
                by_name.insert(alias, i);
            }
        }
        if c.at != bytes.len() {
            return Err(c.bad(format!(
                "{} unexpected bytes after the aliases",
                bytes.len() - c.at
            )));
        }
        Ok(Ct2Model {
            spec,
            revision,
            vars,
            by_name,
            bytes,
        })
    }

    /// The variable (or alias) `name`.
    pub fn var(&self, name: &str) -> Option<&Var> {
        self.by_name.get(name).map(|&i| &self.vars[i])
    }

    /// The values of a float variable as f32.
    pub fn f32s(&self, v: &Var) -> Result<Vec<f32>> {
        let b = &self.bytes[v.range.clone()];
        Ok(match v.ty {
            Ct2Type::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Ct2Type::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Ct2Type::Bf16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            other => {
                return Err(Error::Model(format!(
                    "{}: {other:?} values where floats are expected (an int8 CTranslate2 \
                     model: convert the float16 one)",
                    v.name
                )));
            }
        })
    }

    /// An integer scalar (a spec's setting: `encoder/num_heads`, `decoder/activation`…).
    pub fn int(&self, name: &str) -> Option<i64> {
        let v = self.var(name)?;
        let b = &self.bytes[v.range.clone()];
        if v.numel() != 1 {
            return None;
        }
        Some(match v.ty {
            Ct2Type::I8 => i64::from(b[0] as i8),
            Ct2Type::I16 => i64::from(i16::from_le_bytes([b[0], b[1]])),
            Ct2Type::I32 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&((s.len() + 1) as u16).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
        out.push(0);
    }

    /// A small file: a 2 x 3 f16 matrix, an i16 scalar, an alias.
    fn sample() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&6u32.to_le_bytes());
        string(&mut b, "WhisperSpec");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        string(&mut b, "m/weight");
        b.push(2);
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&3u32.to_le_bytes());
        b.push(4);
        b.extend_from_slice(&12u32.to_le_bytes());
        for i in 0..6 {
            b.extend_from_slice(&half::f16::from_f32(i as f32 * 0.5).to_le_bytes());
        }
        string(&mut b, "m/num_heads");
        b.push(0);
        b.push(2);
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&6i16.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        string(&mut b, "m/alias");
        string(&mut b, "m/weight");
        b
    }

    fn open(bytes: &[u8]) -> Result<Ct2Model> {
        let dir = std::env::temp_dir().join(format!("cera-ct2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("m{}.bin", bytes.len()));
        std::fs::write(&p, bytes).unwrap();
        let r = Ct2Model::open(&p);
        let _ = std::fs::remove_file(&p);
        r
    }

    #[test]
    fn reads_variables_scalars_and_aliases() {
        let m = open(&sample()).unwrap();
        assert_eq!((m.spec.as_str(), m.revision), ("WhisperSpec", 3));
        let w = m.var("m/alias").unwrap();
        assert_eq!(w.dims, [2, 3]);
        assert_eq!(m.f32s(w).unwrap(), [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
        assert_eq!(m.int("m/num_heads"), Some(6));
        assert!(m.f32s(m.var("m/num_heads").unwrap()).is_err());
    }

    #[test]
    fn hostile_files_are_named() {
        let b = sample();
        for cut in [3, 10, 30, 45, b.len() - 2] {
            let e = open(&b[..cut]).err().unwrap().to_string();
            assert!(
                e.contains("truncated") || e.contains("cannot fit"),
                "{cut}: {e}"
            );
        }
        let mut wrong = b.clone();
        // the matrix's byte count (after the version, spec, revision, count and its name)
        let at = 4 + 2 + 12 + 4 + 4 + 2 + 9 + 1 + 8 + 1;
        wrong[at] = 13;
        let e = open(&wrong).err().unwrap().to_string();
        assert!(e.contains("13 bytes for dimensions [2, 3]"), "{e}");
        let mut ver = b;
        ver[0] = 9;
        let e = open(&ver).err().unwrap().to_string();
        assert!(e.contains("format version 9"), "{e}");
    }
}
