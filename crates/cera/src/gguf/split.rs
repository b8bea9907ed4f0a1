//! Split GGUFs (llama.cpp's `gguf-split` layout): a model stored as
//! `name-00001-of-0000N.gguf` ... `name-0000N-of-0000N.gguf`, each a whole GGUF holding some of
//! the tensors, the first also holding the model's metadata. Every part carries `split.no`
//! (0-based), `split.count` and `split.tensors.count` (the total).
//!
//! Opening the first part opens them all; the reader lays the parts one after another in a
//! virtual offset space, so the rest of the engine sees one model.

use std::path::{Path, PathBuf};

use super::reader::{GgufFile, Source};
use super::{GgufWriter, Value};
use crate::error::{Error, Result};

pub const KEY_NO: &str = "split.no";
pub const KEY_COUNT: &str = "split.count";
pub const KEY_TENSORS: &str = "split.tensors.count";

fn corrupt(path: &Path, reason: String) -> Error {
    Error::GgufCorrupt {
        what: format!("split GGUF {}", path.display()),
        offset: 0,
        reason,
    }
}

/// `(prefix, index, count)` of a split part's name or path (`prefix-00002-of-00005.gguf`).
pub fn parse_part_name(path: &str) -> Option<(&str, u32, u32)> {
    let stem = path.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, index) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(count) || !digits(index) {
        return None;
    }
    Some((prefix, index.parse().ok()?, count.parse().ok()?))
}

/// The path of part `no` (1-based) of `count` next to `first`, from its file name
/// (`prefix-00001-of-00003.gguf`).
pub fn part_path(first: &Path, no: u32, count: u32) -> Option<PathBuf> {
    let name = first.file_name()?.to_str()?;
    let (prefix, _, n) = parse_part_name(name)?;
    if n != count {
        return None;
    }
    Some(first.with_file_name(format!("{prefix}-{no:05}-of-{count:05}.gguf")))
}

fn split_count(g: &GgufFile) -> Result<u32> {
    Ok(g.get_opt::<u32>(KEY_COUNT)?.unwrap_or(1))
}

/// Opens the other parts when `g` (opened from `path`) is the first of a split GGUF.
pub(super) fn attach_parts(mut g: GgufFile, path: &Path) -> Result<GgufFile> {
    let count = split_count(&g)?;
    if count <= 1 {
        return Ok(g);
    }
    let no = g.get_opt::<u32>(KEY_NO)?.unwrap_or(0);
    if no != 0 {
        let first = part_path(path, 1, count)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "the -00001-of- file".into());
        return Err(corrupt(
            path,
            format!(
                "this is part {} of {count}: open the first part, {first}",
                no + 1
            ),
        ));
    }
    let total = g.get_opt::<u64>(KEY_TENSORS)?;
    let mut base = g.bytes().len() as u64;
    for i in 2..=count {
        let p = part_path(path, i, count).ok_or_else(|| {
            corrupt(
                path,
                format!(
                    "split.count is {count} but the file name is not NAME-00001-of-{count:05}.gguf, so the other parts cannot be found"
                ),
            )
        })?;
        let file = std::fs::File::open(&p).map_err(|e| {
            Error::io(
                &p,
                std::io::Error::new(
                    e.kind(),
                    format!("part {i} of {count} of a split GGUF: {e}"),
                ),
            )
        })?;
        let part = GgufFile::parse(Source::map(&file, &p)?)?;
        let (pn, pc) = (part.get_opt::<u32>(KEY_NO)?, split_count(&part)?);
        if pn != Some(i - 1) || pc != count {
            return Err(corrupt(
                &p,
                format!(
                    "expected split.no {} of {count}, found {} of {pc}",
                    i - 1,
                    pn.map_or("none".to_owned(), |n| n.to_string())
                ),
            ));
        }
        let len = part.bytes().len() as u64;
        g.push_part(part, base, p)?;
        base += len;
    }
    if let Some(t) = total
        && t != g.tensors.len() as u64
    {
        return Err(corrupt(
            path,
            format!(
                "split.tensors.count says {t} tensors, the {count} parts hold {}",
                g.tensors.len()
            ),
        ));
    }
    Ok(g)
}

pub(super) fn refuse_split_in_memory(g: &GgufFile) -> Result<()> {
    let count = split_count(g)?;
    if count > 1 {
        return Err(Error::Model(format!(
            "this GGUF is part of a split model ({count} files): open the first part from a file"
        )));
    }
    Ok(())
}

/// Writes `src` as a split GGUF of parts holding at most `max_tensors` tensors each
/// (`prefix-00001-of-0000N.gguf`, ...; the metadata in the first), as llama.cpp's
/// `gguf-split --split-max-tensors` does. Returns the paths.
pub fn write_split(src: &GgufFile, prefix: &Path, max_tensors: usize) -> Result<Vec<PathBuf>> {
    let max = max_tensors.max(1);
    let chunks: Vec<_> = src.tensors.chunks(max).collect();
    let count = chunks.len().max(1) as u16;
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let mut w = GgufWriter::new();
        if i == 0 {
            for (k, v) in &src.metadata {
                if !k.starts_with("split.") {
                    w.set(k.clone(), v.clone());
                }
            }
        }
        w.set(KEY_NO, Value::U16(i as u16));
        w.set(KEY_COUNT, Value::U16(count));
        w.set(KEY_TENSORS, Value::I32(src.tensors.len() as i32));
        for t in chunk.iter() {
            w.add_tensor_raw(t.name.clone(), t.ty, &t.shape, src.tensor_data(t).to_vec())?;
        }
        let name = format!(
            "{}-{:05}-of-{count:05}.gguf",
            prefix.file_name().unwrap_or_default().to_string_lossy(),
            i + 1
        );
        let path = prefix.with_file_name(name);
        w.write_file(&path)?;
        out.push(path);
    }
    Ok(out)
}
