//! A weight as models hold it: a file-backed description (the bytes stay in the mapped GGUF
//! file), shared by every backend. Each backend makes its resident copy on first use; the
//! CPU's packed copy (`kernels::pack`'s x8 layout) lives in the weight itself
//! ([`Weight::packed`], filled by `cpu/matmul.rs`), a GPU keeps its uploads keyed by
//! [`Weight::resident_key`].

use std::sync::{Arc, OnceLock};

use crate::error::Result;
use crate::gguf::{GgufFile, TensorInfo};
use crate::kernels::pack;
use crate::quant::GgmlType;

/// The CPU's copies of a weight in the layouts its kernels read, each made on first use.
#[derive(Default)]
pub(super) struct Copies {
    /// `kernels::pack`'s x8 layout (`None` inside when the format has no packed kernel)
    pub(super) x8: OnceLock<Option<PackedBuf>>,
    /// f16 panels `[panel][cols][32]` (F16 weights in encoder products)
    pub(super) panels: OnceLock<Vec<u16>>,
}

/// A 2-D weight: `rows` outputs × `cols` inputs, row-major, in ggml blocks, borrowed from the
/// model file (no copy).
#[derive(Clone)]
pub struct Weight {
    pub(super) file: Arc<GgufFile>,
    pub(super) offset: usize,
    pub(super) len: usize,
    pub name: String,
    pub ty: GgmlType,
    /// Output features (ggml `ne[1]`, times any higher dims).
    pub rows: usize,
    /// Input features (ggml `ne[0]`).
    pub cols: usize,
    /// The x8-packed copy the GEMM kernels read (`kernels::pack`), made on first use and
    /// shared by clones; `None` inside when the format has no packed kernel.
    /// With it, the f16 panels the encoder products read (`cpu/dense.rs`:
    /// `[panel][cols][32]`), made on first use for F16 weights.
    pub(super) packed: Arc<Copies>,
    /// For a part of a fused projection ([`Weight::slice_rows`]): the whole tensor's name and
    /// the part's first row (what a LoRA adapter for the fused tensor is matched by).
    part_of: Option<Arc<(String, usize)>>,
}

impl std::fmt::Debug for Weight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Weight({} {} [{} x {}])",
            self.name, self.ty, self.rows, self.cols
        )
    }
}

impl Weight {
    pub fn new(file: &Arc<GgufFile>, info: &TensorInfo) -> Weight {
        let (cols, rows) = info.rows();
        Weight {
            file: Arc::clone(file),
            offset: info.offset as usize,
            len: info.size as usize,
            name: info.name.clone(),
            ty: info.ty,
            rows: rows as usize,
            cols: cols as usize,
            packed: Arc::default(),
            part_of: None,
        }
    }

    /// The name a LoRA adapter names this weight by: the fused tensor's for a part of one.
    pub fn lora_key(&self) -> &str {
        self.part_of.as_ref().map_or(&self.name, |p| &p.0)
    }

    /// For a part of a fused tensor: the fused tensor's name and this part's first row.
    pub fn lora_part(&self) -> Option<(usize, &str)> {
        self.part_of.as_ref().map(|p| (p.1, p.0.as_str()))
    }

    /// What identifies the bytes of this weight (its file, offset and length): the key a
    /// backend keeps its resident copy under.
    pub fn resident_key(&self) -> (usize, usize, usize) {
        (Arc::as_ptr(&self.file) as usize, self.offset, self.len)
    }

    /// A weak handle on the file: a cache holding it keeps the file's address from being
    /// reused by another file while the cached copy lives, so [`Weight::resident_key`] stays
    /// unique.
    #[cfg(feature = "gpu")]
    pub(crate) fn file_handle(&self) -> std::sync::Weak<crate::gguf::GgufFile> {
        Arc::downgrade(&self.file)
    }

    pub fn data(&self) -> &[u8] {
        self.file.slice(self.offset, self.len)
    }

    pub fn row_bytes(&self) -> usize {
        self.len / self.rows.max(1)
    }

    /// Rows `start..start + n` as a weight of their own, sharing the same bytes (the Q, K and V
    /// parts of a fused `attn_qkv`).
    pub fn slice_rows(&self, start: usize, n: usize, name: &str) -> Weight {
        assert!(
            start + n <= self.rows,
            "{}: rows {start}+{n} of {}",
            self.name,
            self.rows
        );
        let rb = self.row_bytes();
        Weight {
            file: Arc::clone(&self.file),
            offset: self.offset + start * rb,
            len: n * rb,
            name: name.to_owned(),
            ty: self.ty,
            rows: n,
            cols: self.cols,
            packed: Arc::default(),
            part_of: Some(Arc::new(match &self.part_of {
                Some(p) => (p.0.clone(), p.1 + start),
                None => (self.name.clone(), start),
            })),
        }
    }

    /// The same bytes seen as `cols` × `rows` (a convolution kernel as the matrix over a
    /// window's values); the element count must match and `cols` hold whole blocks.
    pub fn reshaped(&self, cols: usize, rows: usize, name: &str) -> Result<Weight> {
        let bs = self.ty.block_elems().unwrap_or(1);
        if cols * rows != self.cols * self.rows || cols == 0 || !cols.is_multiple_of(bs) {
            return Err(crate::error::Error::GgufTensor {
                tensor: name.to_owned(),
                reason: format!(
                    "{} x {} {} values do not make {cols} x {rows} (rows of whole {bs}-value \
                     blocks)",
                    self.cols, self.rows, self.ty
                ),
            });
        }
        Ok(Weight {
            file: Arc::clone(&self.file),
            offset: self.offset,
            len: self.len,
            name: self.name.clone(),
            ty: self.ty,
            rows,
            cols,
            packed: Arc::default(),
            part_of: None,
        })
    }

    /// Row `r` dequantized into `out` (embedding lookup). Once the matrix has been packed (a
    /// tied output), the row is read back from the packed copy, a block at a time: reading the
    /// file would fault its pages back in, and the kernel maps each fault's neighbours too, so
    /// scattered lookups would soon make the whole file tensor resident again.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) -> Result<()> {
        let rb = self.row_bytes();
        if let Some(Some(p)) = self.packed.x8.get() {
            let bb = self
                .ty
                .block_bytes()
                .expect("packed formats are block formats");
            let bc = pack::block_cols(self.ty);
            let mut blk = [0u8; 256];
            assert!(bb <= blk.len() && out.len() == self.cols);
            for (b, o) in out.chunks_exact_mut(bc).enumerate() {
                pack::unpack_block(self.ty, self.cols, p, r, b, &mut blk[..bb]);
                crate::quant::dequantize(self.ty, &blk[..bb], o)?;
            }
            return Ok(());
        }
        crate::quant::dequantize(self.ty, &self.data()[r * rb..(r + 1) * rb], out)
    }

    /// The whole tensor as f32 (for small tensors: norms, biases).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        crate::quant::dequantize_to_vec(self.ty, self.data(), self.rows * self.cols)
    }
}

/// The memory of a packed weight: on Linux an anonymous mapping asking for transparent huge
/// pages (`madvise` mode, the default on many distributions, gives them only on request), so
/// a decode step's stream through every weight crosses 2 MiB pages, not 4 KiB ones (fewer TLB
/// misses; on this project's 2-core VM it measured no change by itself: Llama-3.2-1B's shape
/// decoded at 28.1 and 28.4 t/s, the prefetch distance being what bound it). Elsewhere, or
/// where the mapping fails, a plain allocation.
pub(crate) enum PackedBuf {
    #[cfg(target_os = "linux")]
    Map(memmap2::MmapMut, usize),
    Vec(Vec<u8>),
}

impl PackedBuf {
    /// `len` zero bytes (untouched pages: they are faulted in as the packing writes them).
    pub(crate) fn zeroed(len: usize) -> PackedBuf {
        // (an empty anonymous mapping is an error)
        #[cfg(target_os = "linux")]
        if len > 0
            && let Ok(map) = memmap2::MmapMut::map_anon(len)
        {
            // advice only: without huge pages the mapping works the same
            let _ = map.advise(memmap2::Advice::HugePage);
            return PackedBuf::Map(map, len);
        }
        PackedBuf::Vec(vec![0; len])
    }

    pub(super) fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            #[cfg(target_os = "linux")]
            PackedBuf::Map(m, _) => m.as_mut_ptr(),
            PackedBuf::Vec(v) => v.as_mut_ptr(),
        }
    }
}

impl std::ops::Deref for PackedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            #[cfg(target_os = "linux")]
            PackedBuf::Map(m, len) => &m[..*len],
            PackedBuf::Vec(v) => v,
        }
    }
}
