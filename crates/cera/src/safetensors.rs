//! Reading `.safetensors` files (Hugging Face's tensor container): an 8-byte little-endian
//! header length, a JSON header mapping each tensor name to its dtype, shape and byte range,
//! then the data. Used for PEFT adapters; the file is memory-mapped and tensors are borrowed.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Element types a safetensors file can hold (those we read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dtype {
    F32,
    F16,
    BF16,
}

impl Dtype {
    fn parse(s: &str) -> Option<Dtype> {
        Some(match s {
            "F32" => Dtype::F32,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            _ => return None,
        })
    }

    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
        }
    }
}

/// One tensor's entry in the header.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    pub dtype: Dtype,
    /// Row-major (PyTorch) order: the last dimension is contiguous.
    pub shape: Vec<usize>,
    /// Byte range within the data section.
    start: usize,
    end: usize,
}

/// A parsed safetensors file.
pub struct SafeTensors {
    path: PathBuf,
    map: memmap2::Mmap,
    data_start: usize,
    /// Sorted by name, so iteration is deterministic.
    pub tensors: BTreeMap<String, TensorEntry>,
    /// Tensor names in the order the header lists them (the order converters keep).
    pub order: Vec<String>,
    /// `__metadata__`, string to string.
    pub metadata: BTreeMap<String, String>,
}

impl SafeTensors {
    /// Maps and parses `path`; a malformed header is an error naming what is wrong.
    pub fn open(path: impl AsRef<Path>) -> Result<SafeTensors> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: a read-only private mapping; see `GgufFile::open`.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let bad = |reason: String| Error::Safetensors {
            path: path.to_path_buf(),
            reason,
        };
        if map.len() < 8 {
            return Err(bad(format!(
                "{} bytes is too short for a safetensors file",
                map.len()
            )));
        }
        let n = u64::from_le_bytes(map[..8].try_into().expect("8 bytes"));
        if n > (map.len() - 8) as u64 || n > 100 << 20 {
            return Err(bad(format!(
                "header length {n} does not fit the file of {} bytes",
                map.len()
            )));
        }
        let data_start = 8 + n as usize;
        let OrderedObject(obj) = serde_json::from_slice(&map[8..data_start])
            .map_err(|e| bad(format!("header is not a JSON object: {e}")))?;
        let data_len = map.len() - data_start;
        let mut tensors = BTreeMap::new();
        let mut order = Vec::new();
        let mut metadata = BTreeMap::new();
        for (name, v) in &obj {
            if name == "__metadata__" {
                if let Some(m) = v.as_object() {
                    for (k, v) in m {
                        if let Some(s) = v.as_str() {
                            metadata.insert(k.clone(), s.to_owned());
                        }
                    }
                }
                continue;
            }
            let tbad = |reason: &str| bad(format!("tensor '{name}': {reason}"));
            let dtype = v
                .get("dtype")
                .and_then(|d| d.as_str())
                .ok_or_else(|| tbad("no dtype"))?;
            let dtype = Dtype::parse(dtype).ok_or_else(|| {
                tbad(&format!(
                    "dtype {dtype} is not supported (F32, F16, BF16 are)"
                ))
            })?;
            let shape: Vec<usize> = v
                .get("shape")
                .and_then(|s| s.as_array())
                .ok_or_else(|| tbad("no shape"))?
                .iter()
                .map(|d| d.as_u64().map(|d| d as usize))
                .collect::<Option<_>>()
                .ok_or_else(|| tbad("shape is not a list of sizes"))?;
            let offs: Vec<usize> = v
                .get("data_offsets")
                .and_then(|s| s.as_array())
                .ok_or_else(|| tbad("no data_offsets"))?
                .iter()
                .map(|d| d.as_u64().map(|d| d as usize))
                .collect::<Option<_>>()
                .ok_or_else(|| tbad("data_offsets are not sizes"))?;
            let [start, end] = offs[..] else {
                return Err(tbad("data_offsets must be [start, end]"));
            };
            let elems = shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .ok_or_else(|| tbad("shape overflows"))?;
            if start > end || end > data_len || end - start != elems * dtype.size() {
                return Err(tbad(&format!(
                    "bytes {start}..{end} do not hold {shape:?} of {dtype:?} within {data_len} data bytes"
                )));
            }
            order.push(name.clone());
            tensors.insert(
                name.clone(),
                TensorEntry {
                    dtype,
                    shape,
                    start,
                    end,
                },
            );
        }
        Ok(SafeTensors {
            path: path.to_path_buf(),
            map,
            data_start,
            tensors,
            order,
            metadata,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A tensor's bytes (little-endian, row-major).
    pub fn data(&self, t: &TensorEntry) -> &[u8] {
        &self.map[self.data_start + t.start..self.data_start + t.end]
    }
}

/// A JSON object's entries in document order (`serde_json::Map` sorts them).
struct OrderedObject(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for OrderedObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = OrderedObject;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<OrderedObject, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = m.next_entry()? {
                    v.push(e);
                }
                Ok(OrderedObject(v))
            }
        }
        d.deserialize_map(Visit)
    }
}
