//! `cera inspect`: what is in a GGUF file.

use std::collections::BTreeMap;

use cera::gguf::{Array, GgufFile, TensorInfo, Value};
use cera::keys::{self, arch, arch_key};
use cera::quant::GgmlType;
use serde_json::{Value as Json, json};

use crate::common::{human_bytes, human_count, resolve_model};

#[derive(clap::Args)]
pub struct Args {
    /// Model file or catalog name; the default model when omitted.
    #[arg(short = 'm', long = "model")]
    model: Option<String>,
    /// Print one stable JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// Context length for the KV-cache estimate (default: the model's, capped at 4096).
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<u64>,
    /// Do not list tensors (text output only).
    #[arg(long)]
    no_tensors: bool,
}

/// Per-type totals.
#[derive(Default)]
struct TypeStat {
    count: usize,
    bytes: u64,
    params: u64,
}

/// Memory a run needs: the weights (mapped) plus an f16 KV cache.
struct MemoryEstimate {
    weights: u64,
    kv_cache: Option<(u64, u64)>, // (n_ctx, bytes)
    /// KV heads per layer and the key and value head sizes
    kv_dims: Option<(Vec<u32>, u64, u64)>,
}

/// KV cache bytes per token of a cache of `ty` (keys and values), as the engine lays it out
/// (a layer whose heads the type cannot hold keeps f16).
fn kv_bytes_per_token(ty: cera::backend::KvType, heads: &[u32], hk: u64, hv: u64) -> u64 {
    let row = |d: u64| ty.for_head_dim(d as usize).row_bytes(d as usize) as u64;
    heads.iter().map(|&h| h as u64 * (row(hk) + row(hv))).sum()
}

fn estimate_memory(g: &GgufFile, ctx: Option<u64>) -> MemoryEstimate {
    let weights = g.tensors.iter().map(|t| t.size).sum();
    let kv = (|| {
        let a = g.architecture().ok()?;
        let n_layer: u64 = g.get_as(&arch_key(a, arch::BLOCK_COUNT)).ok()?;
        let n_embd: u64 = g.get_as(&arch_key(a, arch::EMBEDDING_LENGTH)).ok()?;
        let n_head: u64 = g.get_as(&arch_key(a, arch::HEAD_COUNT)).ok()?;
        let kv_heads = g
            .get_per_layer_u32(&arch_key(a, arch::HEAD_COUNT_KV), n_layer as usize)
            .unwrap_or_else(|_| vec![n_head as u32; n_layer as usize]);
        let head_k: u64 = g
            .get_opt(&arch_key(a, arch::KEY_LENGTH))
            .ok()?
            .unwrap_or(n_embd / n_head.max(1));
        let head_v: u64 = g
            .get_opt(&arch_key(a, arch::VALUE_LENGTH))
            .ok()?
            .unwrap_or(head_k);
        let n_ctx_train: u64 = g
            .get_opt(&arch_key(a, arch::CONTEXT_LENGTH))
            .ok()?
            .unwrap_or(4096);
        let n_ctx = ctx.unwrap_or(n_ctx_train.min(4096));
        let per_token = kv_bytes_per_token(cera::backend::KvType::F16, &kv_heads, head_k, head_v);
        Some((
            n_ctx,
            per_token.checked_mul(n_ctx)?,
            (kv_heads, head_k, head_v),
        ))
    })();
    MemoryEstimate {
        weights,
        kv_cache: kv.as_ref().map(|k| (k.0, k.1)),
        kv_dims: kv.map(|k| k.2),
    }
}

/// The layer mix of hybrid and MoE models: LFM2's convolution / attention layers (0 KV heads
/// mark a convolution layer) and routed experts.
fn layer_summary(g: &GgufFile) -> Option<String> {
    let a = g.architecture().ok()?;
    let n_layer: usize = g.get_as(&arch_key(a, arch::BLOCK_COUNT)).ok()?;
    let mut parts = Vec::new();
    if let Ok(Some(l_cache)) = g.get_opt::<u32>(&arch_key(a, arch::SHORTCONV_L_CACHE)) {
        let kv = g
            .get_per_layer_u32(&arch_key(a, arch::HEAD_COUNT_KV), n_layer)
            .ok()?;
        let conv = kv.iter().filter(|&&h| h == 0).count();
        parts.push(format!(
            "{conv} short convolution (kernel {l_cache}), {} attention",
            n_layer - conv
        ));
    }
    if let Ok(Some(n_expert)) = g.get_opt::<u32>(&arch_key(a, arch::EXPERT_COUNT)) {
        let used: u32 = g
            .get_opt(&arch_key(a, arch::EXPERT_USED_COUNT))
            .ok()
            .flatten()
            .unwrap_or(0);
        let lead: u32 = g
            .get_opt(&arch_key(a, arch::LEADING_DENSE_BLOCK_COUNT))
            .ok()
            .flatten()
            .unwrap_or(0);
        parts.push(format!(
            "{} routed FFNs ({used} of {n_expert} experts per token), {lead} dense",
            n_layer.saturating_sub(lead as usize)
        ));
    }
    (!parts.is_empty()).then(|| format!("{n_layer}: {}", parts.join("; ")))
}

/// Whether a tensor type has a compute kernel (matrix products) in this build.
fn computable(ty: GgmlType) -> bool {
    cera::kernels::KernelTable::vec_dot_type(ty).is_some()
}

fn type_stats(g: &GgufFile) -> BTreeMap<GgmlType, TypeStat> {
    let mut m: BTreeMap<GgmlType, TypeStat> = BTreeMap::new();
    for t in &g.tensors {
        let s = m.entry(t.ty).or_default();
        s.count += 1;
        s.bytes += t.size;
        s.params += t.n_elements();
    }
    m
}

fn shape_str(t: &TensorInfo) -> String {
    let dims: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(", "))
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let path = resolve_model(a.model.as_deref())?;
    let g = GgufFile::open(&path)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&g, &path.display().to_string(), a.ctx_size))?
        );
        return Ok(());
    }
    let stats = type_stats(&g);
    let params: u64 = g.tensors.iter().map(|t| t.n_elements()).sum();
    let mem = estimate_memory(&g, a.ctx_size);
    println!("file:          {}", path.display());
    println!(
        "size:          {} ({} bytes)",
        human_bytes(g.file_size()),
        g.file_size()
    );
    println!("GGUF version:  {}", g.version);
    println!("architecture:  {}", g.architecture().unwrap_or("(none)"));
    if let Ok(name) = g.get_str(keys::GENERAL_NAME) {
        println!("name:          {name}");
    }
    if let Some(layers) = layer_summary(&g) {
        println!("layers:        {layers}");
    }
    println!("alignment:     {}", g.alignment);
    println!("parameters:    {} ({params})", human_count(params));
    println!("tensors:       {}", g.tensors.len());
    print!(
        "memory:        {} weights (mapped)",
        human_bytes(mem.weights)
    );
    match mem.kv_cache {
        Some((n_ctx, kv)) => println!(
            " + {} KV cache (f16, n_ctx {n_ctx}) = {}",
            human_bytes(kv),
            human_bytes(mem.weights + kv)
        ),
        None => println!(),
    }
    if let Some((heads, hk, hv)) = &mem.kv_dims {
        use cera::backend::KvType;
        let per: Vec<String> = KvType::ALL
            .iter()
            .filter(|&&t| t != KvType::F32)
            .map(|&t| format!("{t} {}", kv_bytes_per_token(t, heads, *hk, *hv)))
            .collect();
        println!("KV bytes/token: {} (-ctk/-ctv)", per.join(", "));
    }

    println!("\nmetadata ({} keys):", g.metadata.len());
    let width = g.metadata.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in &g.metadata {
        println!("  {k:<width$} {:<14} = {v}", v.type_desc());
    }

    println!("\ntensor types:");
    for (ty, s) in &stats {
        println!(
            "  {:<8} {:>5} tensors {:>12} params {:>11}",
            ty.name(),
            s.count,
            s.params,
            human_bytes(s.bytes)
        );
    }
    for (ty, s) in &stats {
        if !computable(*ty) {
            println!(
                "  warning: {} tensor(s) of type {ty} cannot be computed with yet (no kernel for {ty})",
                s.count
            );
        }
    }

    if !a.no_tensors {
        println!("\ntensors:");
        let nw = g.tensors.iter().map(|t| t.name.len()).max().unwrap_or(0);
        for t in &g.tensors {
            println!(
                "  {:<nw$} {:<8} {:<22} {:>12} bytes  @ {}",
                t.name,
                t.ty.name(),
                shape_str(t),
                t.size,
                t.offset
            );
        }
    }
    Ok(())
}

fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(s) => json!(s),
        Value::Array(a) => array_json(a),
    }
}

/// Arrays longer than 16 elements keep their first 16 and their length.
fn array_json(a: &Array) -> Json {
    const SHOWN: usize = 16;
    let head: Vec<Json> = (0..a.len().min(SHOWN))
        .map(|i| value_json(&a.get(i).expect("index below len")))
        .collect();
    json!({
        "elem_type": a.elem_type().name(),
        "len": a.len(),
        "truncated": a.len() > SHOWN,
        "values": head,
    })
}

fn to_json(g: &GgufFile, path: &str, ctx: Option<u64>) -> Json {
    let stats = type_stats(g);
    let mem = estimate_memory(g, ctx);
    let params: u64 = g.tensors.iter().map(|t| t.n_elements()).sum();
    json!({
        "path": path,
        "file_size": g.file_size(),
        "version": g.version,
        "alignment": g.alignment,
        "data_offset": g.data_offset,
        "architecture": g.architecture().ok(),
        "parameters": params,
        "tensor_count": g.tensors.len(),
        "metadata": g.metadata.iter().map(|(k, v)| json!({
            "key": k, "type": v.type_desc(), "value": value_json(v),
        })).collect::<Vec<_>>(),
        "types": stats.iter().map(|(ty, s)| json!({
            "type": ty.name(), "count": s.count, "bytes": s.bytes, "params": s.params,
            "computable": computable(*ty),
        })).collect::<Vec<_>>(),
        "unsupported_types": stats.keys().filter(|t| !computable(**t)).map(|t| t.name()).collect::<Vec<_>>(),
        "memory": {
            "weights_bytes": mem.weights,
            "kv_cache_n_ctx": mem.kv_cache.map(|k| k.0),
            "kv_cache_bytes": mem.kv_cache.map(|k| k.1),
        },
        "tensors": g.tensors.iter().map(|t| json!({
            "name": t.name, "type": t.ty.name(), "shape": t.shape,
            "n_elements": t.n_elements(), "bytes": t.size, "offset": t.offset,
        })).collect::<Vec<_>>(),
    })
}
