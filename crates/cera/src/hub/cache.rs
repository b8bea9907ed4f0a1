//! The Hub's cache layout (`models--org--repo/{blobs,refs,snapshots}`), shared with
//! `huggingface_hub` and llama.cpp: a file is stored once as a blob named by its LFS sha256 (or
//! git oid) and appears in each snapshot as a relative symlink to it.

use std::path::{Path, PathBuf};

use super::select::RepoFile;
use crate::error::{Error, Result};

/// `cache/models--org--repo`.
pub fn repo_dir(cache: &Path, repo: &str) -> PathBuf {
    cache.join(format!("models--{}", repo.replace('/', "--")))
}

pub(super) fn blob_path(cache: &Path, repo: &str, oid: &str) -> PathBuf {
    repo_dir(cache, repo).join("blobs").join(oid)
}

pub(super) fn snapshot_path(cache: &Path, repo: &str, commit: &str, file: &str) -> PathBuf {
    let mut p = repo_dir(cache, repo).join("snapshots").join(commit);
    for part in file.split('/') {
        p.push(part);
    }
    p
}

pub(super) fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The commit `revision` resolves to in the cache: `refs/<revision>`'s content, or the
/// revision itself when it is a commit with a snapshot.
pub fn cached_commit(cache: &Path, repo: &str, revision: &str) -> Option<String> {
    let dir = repo_dir(cache, repo);
    if is_commit(revision) && dir.join("snapshots").join(revision).is_dir() {
        return Some(revision.to_owned());
    }
    let mut refp = dir.join("refs");
    for part in revision.split('/') {
        refp.push(part);
    }
    let c = std::fs::read_to_string(refp).ok()?;
    let c = c.trim();
    (is_commit(c) && dir.join("snapshots").join(c).is_dir()).then(|| c.to_owned())
}

pub(super) fn write_ref(cache: &Path, repo: &str, revision: &str, commit: &str) -> Result<()> {
    let mut p = repo_dir(cache, repo).join("refs");
    for part in revision.split('/') {
        p.push(part);
    }
    if std::fs::read_to_string(&p).is_ok_and(|c| c.trim() == commit) {
        return Ok(());
    }
    let parent = p.parent().expect("refs paths have a parent");
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    crate::state::atomic_write(&p, commit.as_bytes())
}

/// Every file of a cached snapshot (for offline selection), with sizes from the blobs.
pub(super) fn snapshot_files(cache: &Path, repo: &str, commit: &str) -> Result<Vec<RepoFile>> {
    let root = repo_dir(cache, repo).join("snapshots").join(commit);
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let rd = std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?;
        for entry in rd {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let p = entry.path();
            // `metadata` follows the symlink: a dangling link (blob removed) is skipped.
            let Ok(md) = std::fs::metadata(&p) else {
                continue;
            };
            if md.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p
                .strip_prefix(&root)
                .expect("walked under root")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push(RepoFile {
                path: rel,
                size: md.len(),
                oid: String::new(),
                sha256: None,
            });
        }
    }
    // Listing order matters for the choice (the Hub lists paths sorted).
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Makes `snap` point at `blob`: a relative symlink where the platform has them (what
/// `huggingface_hub` writes), else a copy.
pub(super) fn link_snapshot(blob: &Path, snap: &Path) -> Result<()> {
    let parent = snap.parent().expect("snapshot paths have a parent");
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    if std::fs::symlink_metadata(snap).is_ok() {
        std::fs::remove_file(snap).map_err(|e| Error::io(snap, e))?;
    }
    #[cfg(unix)]
    {
        let target = relative_to(blob, parent);
        std::os::unix::fs::symlink(&target, snap).map_err(|e| Error::io(snap, e))?;
    }
    #[cfg(not(unix))]
    {
        std::fs::copy(blob, snap).map_err(|e| Error::io(snap, e))?;
    }
    Ok(())
}

/// `target` as a path relative to the folder `from` (both under the same repo folder).
#[cfg(unix)]
fn relative_to(target: &Path, from: &Path) -> PathBuf {
    let t: Vec<_> = target.components().collect();
    let f: Vec<_> = from.components().collect();
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut p = PathBuf::new();
    for _ in common..f.len() {
        p.push("..");
    }
    for c in &t[common..] {
        p.push(c);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn snapshot_links_are_relative_like_huggingface_hubs() {
        let blob = Path::new("/c/models--a--b/blobs/abc");
        assert_eq!(
            relative_to(blob, Path::new("/c/models--a--b/snapshots/0123")),
            PathBuf::from("../../blobs/abc")
        );
        assert_eq!(
            relative_to(blob, Path::new("/c/models--a--b/snapshots/0123/sub/dir")),
            PathBuf::from("../../../../blobs/abc")
        );
    }

    #[test]
    fn cache_paths_follow_the_hub_layout() {
        let c = Path::new("/h");
        assert_eq!(repo_dir(c, "org/x"), PathBuf::from("/h/models--org--x"));
        assert_eq!(
            snapshot_path(c, "org/x", "c0ffee", "a/b.gguf"),
            PathBuf::from("/h/models--org--x/snapshots/c0ffee/a/b.gguf")
        );
    }
}
