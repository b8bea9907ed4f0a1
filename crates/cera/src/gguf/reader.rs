//! GGUF reader: memory-mapped or from a byte buffer, with every count, offset and size checked
//! against the data before it is trusted.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::value::{Array, Value, ValueType};
use crate::error::{Error, Result};
use crate::quant::GgmlType;

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most four dimensions.
pub const MAX_DIMS: usize = 4;
/// Arrays nested deeper than this are rejected (real files nest at most once).
const MAX_ARRAY_DEPTH: usize = 8;

/// Where the bytes live.
pub(super) enum Source {
    Mmap(memmap2::Mmap),
    Bytes(Vec<u8>),
}

impl Source {
    /// A file's bytes: memory-mapped, or read into memory on WebAssembly, where WASI has no
    /// mmap (so the wasm32-wasip1 tests can open models by path).
    pub(super) fn map(file: &File, path: &Path) -> Result<Source> {
        if cfg!(target_family = "wasm") {
            let mut bytes = Vec::new();
            (&*file)
                .read_to_end(&mut bytes)
                .map_err(|e| Error::io(path, e))?;
            return Ok(Source::Bytes(bytes));
        }
        // SAFETY: the mapping is read-only; as with every mmap-based loader, a file changed
        // underneath us by another process is outside what we can defend against.
        let mmap = unsafe { memmap2::Mmap::map(file) }.map_err(|e| Error::io(path, e))?;
        Ok(Source::Mmap(mmap))
    }

    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Source::Mmap(m) => m,
            Source::Bytes(b) => b,
        }
    }
}

/// One tensor's description from the header.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    pub ty: GgmlType,
    /// Dimensions in ggml order: `shape[0]` is the contiguous (row) dimension.
    pub shape: Vec<u64>,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    /// Bytes of data.
    pub size: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Elements per row (`shape[0]`) and number of rows (the product of the rest).
    pub fn rows(&self) -> (u64, u64) {
        let ne0 = self.shape.first().copied().unwrap_or(1);
        (ne0, self.shape.iter().skip(1).product())
    }
}

/// A parsed GGUF file. Metadata is decoded eagerly (it is small); tensor data stays in the
/// mapping or buffer and is borrowed from it.
pub struct GgufFile {
    source: Source,
    path: Option<PathBuf>,
    pub version: u32,
    pub alignment: u64,
    /// Offset of the tensor data section.
    pub data_offset: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, Value)>,
    meta_index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// The other files of a split GGUF (`name-00002-of-00003.gguf`, ...), each mapped at a
    /// virtual base offset after the files before it: tensor offsets of a split model are
    /// in that one address space, so nothing above the reader knows the model is split.
    pub(super) parts: Vec<Part>,
}

/// One more file of a split GGUF.
pub(super) struct Part {
    /// Virtual offset of this file's byte 0.
    pub(super) base: u64,
    pub(super) source: Source,
    pub(super) path: PathBuf,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// A bounds-checked little-endian cursor.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let remaining = (self.data.len() - self.pos) as u64;
        if n > remaining {
            return Err(Error::GgufTruncated {
                what: what(),
                offset: self.pos as u64,
                needed: n,
                len: self.data.len() as u64,
            });
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn remaining(&self) -> u64 {
        (self.data.len() - self.pos) as u64
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().expect("took N bytes"))
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of items that each take at least `min_size` bytes; rejected before any
    /// allocation when the rest of the file could not hold that many.
    fn count(&mut self, min_size: u64, what: &dyn Fn() -> String) -> Result<u64> {
        let at = self.pos as u64;
        let n = self.u64(what)?;
        let need = n.checked_mul(min_size);
        if need.is_none_or(|need| need > self.remaining()) {
            return Err(Error::GgufCorrupt {
                what: what(),
                offset: at,
                reason: format!(
                    "count {n} cannot fit in the {} bytes left in the file",
                    self.remaining()
                ),
            });
        }
        Ok(n)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let at = self.pos as u64;
        let len = self.count(1, what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| Error::GgufCorrupt {
            what: what(),
            offset: at,
            reason: format!("string is not valid UTF-8 ({e})"),
        })
    }
}

fn read_value(c: &mut Cursor, ty: ValueType, key: &str, depth: usize) -> Result<Value> {
    let what = || format!("value of '{key}'");
    Ok(match ty {
        ValueType::U8 => Value::U8(c.array::<1>(&what)?[0]),
        ValueType::I8 => Value::I8(c.array::<1>(&what)?[0] as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(&what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(&what)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(c.array(&what)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array(&what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(&what)?)),
        ValueType::U64 => Value::U64(u64::from_le_bytes(c.array(&what)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array(&what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(&what)?)),
        ValueType::Bool => {
            let at = c.pos as u64;
            match c.array::<1>(&what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => {
                    return Err(Error::GgufCorrupt {
                        what: what(),
                        offset: at,
                        reason: format!("bool byte is {b}, expected 0 or 1"),
                    });
                }
            }
        }
        ValueType::String => Value::String(c.string(&what)?),
        ValueType::Array => Value::Array(read_array(c, key, depth + 1)?),
    })
}

fn read_array(c: &mut Cursor, key: &str, depth: usize) -> Result<Array> {
    let what = || format!("array '{key}'");
    let at = c.pos as u64;
    if depth > MAX_ARRAY_DEPTH {
        return Err(Error::GgufCorrupt {
            what: what(),
            offset: at,
            reason: format!("arrays nested deeper than {MAX_ARRAY_DEPTH}"),
        });
    }
    let type_id = c.u32(&what)?;
    let elem = ValueType::from_id(type_id).ok_or_else(|| Error::GgufValueType {
        key: format!("{key}[]"),
        type_id,
        offset: at,
    })?;
    let n = c.count(elem.min_size(), &what)? as usize;
    macro_rules! fixed {
        ($variant:ident, $t:ty, $size:literal) => {{
            let raw = c.take(n as u64 * $size, &what)?;
            Array::$variant(
                raw.chunks_exact($size)
                    .map(|b| <$t>::from_le_bytes(b.try_into().expect("chunk")))
                    .collect(),
            )
        }};
    }
    Ok(match elem {
        ValueType::U8 => Array::U8(c.take(n as u64, &what)?.to_vec()),
        ValueType::I8 => Array::I8(c.take(n as u64, &what)?.iter().map(|&b| b as i8).collect()),
        ValueType::U16 => fixed!(U16, u16, 2),
        ValueType::I16 => fixed!(I16, i16, 2),
        ValueType::U32 => fixed!(U32, u32, 4),
        ValueType::I32 => fixed!(I32, i32, 4),
        ValueType::F32 => fixed!(F32, f32, 4),
        ValueType::U64 => fixed!(U64, u64, 8),
        ValueType::I64 => fixed!(I64, i64, 8),
        ValueType::F64 => fixed!(F64, f64, 8),
        ValueType::Bool => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                match read_value(c, ValueType::Bool, key, depth)? {
                    Value::Bool(b) => v.push(b),
                    _ => unreachable!("bool reader returns bools"),
                }
            }
            Array::Bool(v)
        }
        ValueType::String => {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(c.string(&|| format!("array '{key}' element {i}"))?);
            }
            Array::String(v)
        }
        ValueType::Array => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(c, key, depth + 1)?);
            }
            Array::Array(v)
        }
    })
}

impl GgufFile {
    /// Memory-maps and parses a GGUF file (on WebAssembly, reads it: see `Source::map`).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let mut g = Self::parse(Source::map(&file, path)?)?;
        g.path = Some(path.to_path_buf());
        super::split::attach_parts(g, path)
    }

    /// Parses a GGUF image held in memory (no file system needed, e.g. for WASM).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        let g = Self::parse(Source::Bytes(bytes))?;
        super::split::refuse_split_in_memory(&g)?;
        Ok(g)
    }

    pub(super) fn parse(source: Source) -> Result<GgufFile> {
        let data = source.bytes();
        let mut c = Cursor { data, pos: 0 };
        let magic: [u8; 4] = c.array(&|| "magic".into())?;
        if magic != GGUF_MAGIC {
            return Err(Error::GgufMagic { found: magic });
        }
        let version = c.u32(&|| "version".into())?;
        if version != 2 && version != 3 {
            if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
                return Err(Error::GgufCorrupt {
                    what: "version".into(),
                    offset: 4,
                    reason: "big-endian GGUF files are not supported".into(),
                });
            }
            return Err(Error::GgufVersion(version));
        }
        // Each tensor info takes at least 8 (name) + 4 (n_dims) + 4 (type) + 8 (offset) bytes;
        // each key/value at least 8 (key) + 4 (type) + 1.
        let n_tensors = c.count(24, &|| "tensor count".into())? as usize;
        let n_kv = c.count(13, &|| "metadata count".into())? as usize;

        let mut metadata = Vec::with_capacity(n_kv);
        let mut meta_index = HashMap::with_capacity(n_kv);
        for i in 0..n_kv {
            let key = c.string(&|| format!("metadata key #{i}"))?;
            let at = c.pos as u64;
            let type_id = c.u32(&|| format!("type of '{key}'"))?;
            let ty = ValueType::from_id(type_id).ok_or_else(|| Error::GgufValueType {
                key: key.clone(),
                type_id,
                offset: at,
            })?;
            let value = read_value(&mut c, ty, &key, 0)?;
            if meta_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(Error::GgufDuplicateKey(key));
            }
            metadata.push((key, value));
        }

        let alignment = match meta_index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_int() {
                Some(a) if a > 0 && (a as u64).is_power_of_two() && a <= 1 << 30 => a as u64,
                _ => {
                    return Err(Error::GgufCorrupt {
                        what: "general.alignment".into(),
                        offset: 0,
                        reason: format!("{v} is not a power of two"),
                    });
                }
            },
        };

        let mut raw_infos = Vec::with_capacity(n_tensors);
        let mut tensor_index = HashMap::with_capacity(n_tensors);
        for i in 0..n_tensors {
            let name = c.string(&|| format!("tensor #{i} name"))?;
            let what = || format!("tensor '{name}' info");
            let at = c.pos as u64;
            let n_dims = c.u32(&what)? as usize;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(Error::GgufCorrupt {
                    what: what(),
                    offset: at,
                    reason: format!("{n_dims} dimensions (1 to {MAX_DIMS} allowed)"),
                });
            }
            let mut shape = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                shape.push(c.u64(&what)?);
            }
            let type_id = c.u32(&what)?;
            let rel_offset = c.u64(&what)?;
            if tensor_index.insert(name.clone(), raw_infos.len()).is_some() {
                return Err(Error::GgufDuplicateTensor(name));
            }
            raw_infos.push((name, shape, type_id, rel_offset));
        }

        let data_offset = (c.pos as u64).next_multiple_of(alignment);
        let file_len = data.len() as u64;
        let mut tensors = Vec::with_capacity(n_tensors);
        for (name, shape, type_id, rel_offset) in raw_infos {
            let tensor_err = |reason: String| Error::GgufTensor {
                tensor: name.clone(),
                reason,
            };
            let ty = GgmlType::from_id(type_id).ok_or_else(|| Error::GgufTensorType {
                tensor: name.clone(),
                type_id,
            })?;
            let (block_elems, _) = ty.block().ok_or_else(|| {
                tensor_err(format!(
                    "type {ty} (id {type_id}) was retired from ggml; re-quantize the model"
                ))
            })?;
            let n_elems = shape
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .filter(|&n| n < i64::MAX as u64)
                .ok_or_else(|| tensor_err(format!("shape {shape:?} overflows")))?;
            if shape[0] % block_elems as u64 != 0 {
                return Err(tensor_err(format!(
                    "row length {} is not a multiple of the {ty} block size {block_elems}",
                    shape[0]
                )));
            }
            let size = ty
                .bytes_for(n_elems)
                .ok_or_else(|| tensor_err(format!("byte size of shape {shape:?} overflows")))?;
            if rel_offset % alignment != 0 {
                return Err(tensor_err(format!(
                    "data offset {rel_offset} is not a multiple of the alignment {alignment}"
                )));
            }
            let offset = data_offset
                .checked_add(rel_offset)
                .ok_or_else(|| tensor_err(format!("data offset {rel_offset} overflows")))?;
            if offset.checked_add(size).is_none_or(|end| end > file_len) {
                return Err(tensor_err(format!(
                    "data at offset {offset} with {size} bytes runs past the end of the file ({file_len} bytes)"
                )));
            }
            tensors.push(TensorInfo {
                name,
                ty,
                shape,
                offset,
                size,
            });
        }

        Ok(GgufFile {
            source,
            path: None,
            version,
            alignment,
            data_offset,
            metadata,
            meta_index,
            tensors,
            tensor_index,
            parts: Vec::new(),
        })
    }

    /// Adds the tensors of another part at virtual base `base` (split GGUFs).
    pub(super) fn push_part(&mut self, part: GgufFile, base: u64, path: PathBuf) -> Result<()> {
        for mut t in part.tensors {
            t.offset += base;
            if self.tensor_index.contains_key(&t.name) {
                return Err(Error::GgufDuplicateTensor(t.name));
            }
            self.tensor_index.insert(t.name.clone(), self.tensors.len());
            self.tensors.push(t);
        }
        self.parts.push(Part {
            base,
            source: part.source,
            path,
        });
        Ok(())
    }

    /// The files of this model: one, or every part of a split GGUF in order.
    pub fn paths(&self) -> Vec<&Path> {
        self.path
            .as_deref()
            .into_iter()
            .chain(self.parts.iter().map(|p| p.path.as_path()))
            .collect()
    }

    /// The source holding virtual offset `offset`, and that source's base.
    fn source_at(&self, offset: u64) -> (&Source, u64) {
        match self.parts.iter().rev().find(|p| p.base <= offset) {
            Some(p) => (&p.source, p.base),
            None => (&self.source, 0),
        }
    }

    /// `len` bytes at virtual offset `offset` (a split model's offsets run through its parts;
    /// a range never crosses from one file into the next, as tensors do not).
    pub fn slice(&self, offset: usize, len: usize) -> &[u8] {
        let (src, base) = self.source_at(offset as u64);
        let at = offset - base as usize;
        &src.bytes()[at..at + len]
    }

    /// The path this file was opened from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The whole file image (of the first file, for a split GGUF).
    pub fn bytes(&self) -> &[u8] {
        self.source.bytes()
    }

    /// Tells the OS that `len` bytes at `offset` of a memory-mapped file will not be read for a
    /// while (a tensor whose data was copied, e.g. repacked for the kernels), so its pages leave
    /// the process's resident set. A later read maps them in again from the file. No-op for
    /// files held in memory.
    pub fn release_range(&self, offset: usize, len: usize) {
        let (src, base) = self.source_at(offset as u64);
        let offset = offset - base as usize;
        // (no paging advice where memmap2 has none: WebAssembly maps nothing)
        #[cfg(unix)]
        if let Source::Mmap(m) = src
            && offset.checked_add(len).is_some_and(|e| e <= m.len())
        {
            // SAFETY: the mapping is private and read-only, so dropping its pages loses
            // nothing: later reads fault the same file contents back in.
            let _ = unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
            };
        }
        #[cfg(not(unix))]
        let _ = (src, offset, len);
    }

    /// Bytes of the model's files (all parts of a split GGUF).
    pub fn file_size(&self) -> u64 {
        self.bytes().len() as u64
            + self
                .parts
                .iter()
                .map(|p| p.source.bytes().len() as u64)
                .sum::<u64>()
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// A tensor's raw bytes (bounds were checked at parse time).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        self.slice(info.offset as usize, info.size as usize)
    }

    /// A tensor dequantized to f32.
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let info = self
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_owned()))?;
        crate::quant::dequantize_to_vec(info.ty, self.tensor_data(info), info.n_elements() as usize)
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }
}
