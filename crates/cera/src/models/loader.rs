//! Declares a model's tensors against the GGUF: required, optional or tied, each with the shape
//! the architecture expects. A missing required tensor or a wrong shape is an error naming it.

use std::sync::Arc;

use crate::backend::Weight;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

pub struct TensorLoader {
    file: Arc<GgufFile>,
}

impl TensorLoader {
    pub fn new(file: Arc<GgufFile>) -> TensorLoader {
        TensorLoader { file }
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The file, shared (for weights made by hand: a reshaped convolution).
    pub fn shared(&self) -> &Arc<GgufFile> {
        &self.file
    }

    fn check_shape(&self, name: &str, want: &[usize]) -> Result<()> {
        let info = self
            .file
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_owned()))?;
        let got: Vec<usize> = info.shape.iter().map(|&d| d as usize).collect();
        // trailing 1-dims are equivalent
        let trim = |v: &[usize]| {
            let mut v = v.to_vec();
            while v.len() > 1 && v.last() == Some(&1) {
                v.pop();
            }
            v
        };
        if trim(&got) != trim(want) {
            return Err(Error::GgufTensor {
                tensor: name.to_owned(),
                reason: format!("shape {got:?}, but the architecture expects {want:?}"),
            });
        }
        Ok(())
    }

    /// A required matrix with ggml shape `[cols, rows]`.
    pub fn matrix(&self, name: &str, cols: usize, rows: usize) -> Result<Weight> {
        self.check_shape(name, &[cols, rows])?;
        let info = self.file.tensor(name).expect("checked above");
        Ok(Weight::new(&self.file, info))
    }

    /// An optional matrix: absent is `None`; present with a wrong shape is an error.
    pub fn matrix_opt(&self, name: &str, cols: usize, rows: usize) -> Result<Option<Weight>> {
        if self.file.tensor(name).is_none() {
            return Ok(None);
        }
        self.matrix(name, cols, rows).map(Some)
    }

    /// A required stack of `n` matrices, ggml shape `[cols, rows, n]` (MoE experts), as one
    /// weight of `rows * n` rows; `Weight::slice_rows` gives each matrix.
    pub fn stacked(&self, name: &str, cols: usize, rows: usize, n: usize) -> Result<Weight> {
        self.check_shape(name, &[cols, rows, n])?;
        let info = self.file.tensor(name).expect("checked above");
        Ok(Weight::new(&self.file, info))
    }

    /// A required vector of `n` values, as f32.
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        self.check_shape(name, &[n])?;
        self.file.tensor_f32(name)
    }

    pub fn vector_opt(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>> {
        if self.file.tensor(name).is_none() {
            return Ok(None);
        }
        self.vector(name, n).map(Some)
    }

    pub fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_some()
    }
}
