//! Weights on the device and the ops that read them: the matrix product (a GEMV for a few
//! tokens, a tiled GEMM for more) and the embedding lookup. Both dequantize in registers with
//! the format's `wload4`, reading the blocks as the GGUF file stores them.

use std::sync::{Arc, Weak};

use super::kernels::{Bind, bytes_of, quant_source};
use super::{Gpu, GpuCtx, GpuTensor};
use crate::backend::Weight;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// Tokens up to which the product runs as a GEMV (each workgroup one weight row, all tokens):
/// the weights are read once per step either way, and below this the GEMM's tiles are empty.
const GEMV_MAX_TOKENS: usize = 8;

/// One binding's worth of a weight's rows.
pub(super) struct Part {
    buf: wgpu::Buffer,
    row0: usize,
    rows: usize,
}

/// A weight resident on the device.
pub(super) struct GpuWeight {
    /// Keeps the file's address (part of the cache key) from being reused while cached.
    _file: Weak<GgufFile>,
    parts: Vec<Part>,
    row_bytes: usize,
}

/// The device copy of `w`, uploaded on first use.
fn resident(gpu: &Gpu, w: &Weight) -> Result<Arc<GpuWeight>> {
    if quant_source(w.ty).is_none() {
        return Err(Error::Gpu(format!(
            "tensor {} has type {}, which the GPU kernels do not read (use --device cpu)",
            w.name, w.ty
        )));
    }
    let key = w.resident_key();
    if let Some(r) = gpu.weights.lock().expect("weights").get(&key) {
        return Ok(Arc::clone(r));
    }
    let rb = w.row_bytes();
    let data = w.data();
    // rows per binding: the adapter's binding limit, in whole rows
    let per = ((gpu.info.max_binding as usize) / rb.max(1)).max(1);
    let mut parts = Vec::new();
    let mut r0 = 0;
    while r0 < w.rows {
        let n = per.min(w.rows - r0);
        let buf = gpu.buffer_with(&data[r0 * rb..(r0 + n) * rb], wgpu::BufferUsages::STORAGE);
        parts.push(Part {
            buf,
            row0: r0,
            rows: n,
        });
        r0 += n;
    }
    let gw = Arc::new(GpuWeight {
        _file: w.file_handle(),
        parts,
        row_bytes: rb,
    });
    gpu.weights
        .lock()
        .expect("weights")
        .insert(key, Arc::clone(&gw));
    Ok(gw)
}

/// `out = x · wᵀ`.
pub(super) fn matmul(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    w: &Weight,
    x: &GpuTensor,
    out: &mut GpuTensor,
) -> Result<()> {
    if x.cols != w.cols {
        return Err(Error::QuantShape {
            ty: w.ty,
            reason: format!("{}: input rows of {}, expected {}", w.name, x.cols, w.cols),
        });
    }
    let gw = resident(gpu, w)?;
    let t = x.rows;
    gpu.shape_to(out, t, w.rows);
    if t == 0 {
        return Ok(());
    }
    for part in &gw.parts {
        let binds = [
            Bind::Whole(&part.buf),
            Bind::Whole(x.buf()),
            Bind::Whole(out.buf()),
        ];
        let head = [
            w.cols as u32,
            part.rows as u32,
            gw.row_bytes as u32,
            t as u32,
            w.rows as u32,
            part.row0 as u32,
        ];
        if t <= GEMV_MAX_TOKENS {
            gpu.dispatch(cx, "gemv", "", Some(w.ty), &head, &binds, part.rows as u32);
        } else {
            let groups = part.rows.div_ceil(64) * t.div_ceil(64);
            gpu.dispatch(cx, "gemm", "", Some(w.ty), &head, &binds, groups as u32);
        }
    }
    Ok(())
}

/// `out[t] = table[tokens[t]]`.
pub(super) fn embed(
    gpu: &Gpu,
    cx: &mut GpuCtx,
    table: &Weight,
    tokens: &[u32],
    out: &mut GpuTensor,
) -> Result<()> {
    if let Some(&id) = tokens.iter().find(|&&id| id as usize >= table.rows) {
        return Err(Error::TokenOutOfRange {
            id,
            n_vocab: table.rows,
        });
    }
    let gw = resident(gpu, table)?;
    gpu.shape_to(out, tokens.len(), table.cols);
    for part in &gw.parts {
        // (output row, row within the part) of the tokens this part holds
        let pairs: Vec<u32> = tokens
            .iter()
            .enumerate()
            .filter(|(_, id)| (part.row0..part.row0 + part.rows).contains(&(**id as usize)))
            .flat_map(|(t, &id)| [t as u32, id - part.row0 as u32])
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let n = (pairs.len() / 2) as u32;
        let params = [table.cols as u32, gw.row_bytes as u32, n, n, 0, 0, 0, 0];
        let slots = gpu.stage(cx, &[bytes_of(&params), bytes_of(&pairs)]);
        gpu.dispatch_staged(
            cx,
            "embed",
            "",
            Some(table.ty),
            &slots[0],
            &[
                Bind::Whole(&part.buf),
                slots[1].bind(),
                Bind::Whole(out.buf()),
            ],
            n,
        );
    }
    Ok(())
}
