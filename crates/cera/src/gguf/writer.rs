//! GGUF writer: any metadata and tensors, aligned, version 3. Used by tests, random-weight model
//! generation, LoRA files and conversions.

use std::io::Write;
use std::path::Path;

use super::reader::{DEFAULT_ALIGNMENT, GGUF_MAGIC};
use super::value::{Array, Value};
use crate::error::{Error, Result};
use crate::quant::GgmlType;

struct PendingTensor {
    name: String,
    ty: GgmlType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then writes them in one go.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

fn write_str(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn write_array_body(w: &mut impl Write, a: &Array) -> std::io::Result<()> {
    w.write_all(&a.elem_type().id().to_le_bytes())?;
    w.write_all(&(a.len() as u64).to_le_bytes())?;
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                w.write_all(&x.to_le_bytes())?;
            }
        };
    }
    match a {
        Array::U8(v) => w.write_all(v)?,
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => each!(v.iter().map(|&b| b as u8)),
        Array::String(v) => {
            for s in v {
                write_str(w, s)?;
            }
        }
        Array::Array(v) => {
            for inner in v {
                write_array_body(w, inner)?;
            }
        }
    }
    Ok(())
}

fn write_value_body(w: &mut impl Write, v: &Value) -> std::io::Result<()> {
    match v {
        Value::U8(x) => w.write_all(&[*x]),
        Value::I8(x) => w.write_all(&x.to_le_bytes()),
        Value::U16(x) => w.write_all(&x.to_le_bytes()),
        Value::I16(x) => w.write_all(&x.to_le_bytes()),
        Value::U32(x) => w.write_all(&x.to_le_bytes()),
        Value::I32(x) => w.write_all(&x.to_le_bytes()),
        Value::F32(x) => w.write_all(&x.to_le_bytes()),
        Value::U64(x) => w.write_all(&x.to_le_bytes()),
        Value::I64(x) => w.write_all(&x.to_le_bytes()),
        Value::F64(x) => w.write_all(&x.to_le_bytes()),
        Value::Bool(x) => w.write_all(&[*x as u8]),
        Value::String(s) => write_str(w, s),
        Value::Array(a) => write_array_body(w, a),
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a metadata value (replacing an earlier value of the same key, keeping its place).
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) -> &mut Self {
        let key = key.into();
        let value = value.into();
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
        self
    }

    /// Adds a tensor from raw bytes already in `ty`'s layout. `shape` is in ggml order.
    pub fn add_tensor_raw(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        shape: &[u64],
        data: Vec<u8>,
    ) -> Result<&mut Self> {
        let name = name.into();
        let err = |reason: String| Error::GgufTensor {
            tensor: name.clone(),
            reason,
        };
        if shape.is_empty() || shape.len() > super::reader::MAX_DIMS {
            return Err(err(format!("{} dimensions", shape.len())));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(Error::GgufDuplicateTensor(name));
        }
        let n: u64 = shape.iter().product();
        let block = ty.block_elems().unwrap_or(0) as u64;
        if block == 0 || !shape[0].is_multiple_of(block) {
            return Err(err(format!(
                "row length {} does not fit {ty} blocks",
                shape[0]
            )));
        }
        let want = ty
            .bytes_for(n)
            .ok_or_else(|| err(format!("shape {shape:?} does not fit {ty} blocks")))?;
        if want != data.len() as u64 {
            return Err(err(format!(
                "{} bytes given, {ty} {shape:?} needs {want}",
                data.len()
            )));
        }
        self.tensors.push(PendingTensor {
            name,
            ty,
            shape: shape.to_vec(),
            data,
        });
        Ok(self)
    }

    /// Adds a tensor from f32 values, quantized to `ty` with the reference quantizer.
    pub fn add_tensor_f32(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        shape: &[u64],
        values: &[f32],
    ) -> Result<&mut Self> {
        let data = crate::quant::quantize_to_vec(ty, values)?;
        self.add_tensor_raw(name, ty, shape, data)
    }

    /// Serialises the file.
    pub fn write_to(&self, w: &mut impl Write) -> Result<()> {
        let specs: Vec<TensorSpec> = self
            .tensors
            .iter()
            .map(|t| TensorSpec {
                name: t.name.clone(),
                ty: t.ty,
                shape: t.shape.clone(),
            })
            .collect();
        let (head, alignment) = header(&self.metadata, &specs)?;
        let io = |e| Error::io("<gguf writer>", e);
        w.write_all(&head).map_err(io)?;
        for t in &self.tensors {
            w.write_all(&t.data).map_err(io)?;
            w.write_all(&pad(t.data.len() as u64, alignment))
                .map_err(io)?;
        }
        Ok(())
    }

    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.write_to(&mut v)?;
        Ok(v)
    }

    /// Writes to `path` through a temporary file renamed into place.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let tmp = path.with_extension("gguf.partial");
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?);
        self.write_to(&mut f)?;
        f.flush().map_err(|e| Error::io(&tmp, e))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
    }
}

/// A tensor of a file written by [`write_streaming`]: its data comes later.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    pub ty: GgmlType,
    /// ggml order: `shape[0]` is the row length.
    pub shape: Vec<u64>,
}

impl TensorSpec {
    fn bytes(&self) -> Result<u64> {
        let n: u64 = self.shape.iter().product();
        self.ty.bytes_for(n).ok_or_else(|| Error::GgufTensor {
            tensor: self.name.clone(),
            reason: format!("shape {:?} does not fit {} blocks", self.shape, self.ty),
        })
    }
}

fn pad(len: u64, alignment: u64) -> Vec<u8> {
    vec![0u8; (len.next_multiple_of(alignment) - len) as usize]
}

fn alignment_of(metadata: &[(String, Value)]) -> Result<u64> {
    match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some((_, v)) => v
            .as_int()
            .filter(|&a| a > 0 && (a as u64).is_power_of_two())
            .map(|a| a as u64)
            .ok_or_else(|| Error::GgufCorrupt {
                what: "general.alignment".into(),
                offset: 0,
                reason: format!("{v} is not a power of two"),
            }),
    }
}

/// The header (magic, counts, metadata, tensor infos, padding to the data) of a file holding
/// `tensors` in this order, and its alignment.
fn header(metadata: &[(String, Value)], tensors: &[TensorSpec]) -> Result<(Vec<u8>, u64)> {
    let alignment = alignment_of(metadata)?;
    let mut head = Vec::new();
    let io = |e| Error::io("<gguf writer>", e);
    head.extend_from_slice(&GGUF_MAGIC);
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        write_str(&mut head, k).map_err(io)?;
        head.extend_from_slice(&v.value_type().id().to_le_bytes());
        write_value_body(&mut head, v).map_err(io)?;
    }
    let mut offset = 0u64;
    for t in tensors {
        write_str(&mut head, &t.name).map_err(io)?;
        head.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
        for d in &t.shape {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&t.ty.id().to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        offset = (offset + t.bytes()?).next_multiple_of(alignment);
    }
    let p = pad(head.len() as u64, alignment);
    head.extend(p);
    Ok((head, alignment))
}

/// Writes a GGUF whose tensor data is produced one tensor at a time, so only one tensor is in
/// memory (conversions and quantizations of models larger than memory). `data(i)` gives the
/// bytes of `tensors[i]`, called in order. The file is written beside `path` and renamed into
/// place when complete: an error or a kill leaves no partial file under `path`.
pub fn write_streaming(
    path: &Path,
    metadata: &[(String, Value)],
    tensors: &[TensorSpec],
    mut data: impl FnMut(usize) -> Result<Vec<u8>>,
) -> Result<u64> {
    let (head, alignment) = header(metadata, tensors)?;
    let tmp = path.with_extension("gguf.partial");
    let mut run = || -> Result<u64> {
        let io = |e| Error::io(&tmp, e);
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(io)?);
        f.write_all(&head).map_err(io)?;
        let mut total = head.len() as u64;
        for (i, t) in tensors.iter().enumerate() {
            let bytes = data(i)?;
            let want = t.bytes()?;
            if bytes.len() as u64 != want {
                return Err(Error::GgufTensor {
                    tensor: t.name.clone(),
                    reason: format!(
                        "{} bytes given, {} {:?} needs {want}",
                        bytes.len(),
                        t.ty,
                        t.shape
                    ),
                });
            }
            f.write_all(&bytes).map_err(io)?;
            let p = pad(want, alignment);
            f.write_all(&p).map_err(io)?;
            total += want + p.len() as u64;
        }
        f.flush().map_err(io)?;
        f.into_inner()
            .map_err(|e| io(e.into_error()))?
            .sync_all()
            .map_err(io)?;
        std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
        Ok(total)
    };
    run().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}
