//! Which GGUF of a repo a quant tag picks, as llama.cpp's `-hf org/repo[:QUANT]` picks it:
//!
//! - candidates are `*.gguf` files whose file name has none of `mmproj`, `imatrix`, `mtp-`,
//!   `eagle3-`, `dflash-`, `dspark-` (projectors, importance matrices, draft heads);
//! - the tag (case-insensitive) must appear followed by `.` or `-` (`Q4_K_M.gguf`,
//!   `Q4_K_M-00001-of-00003.gguf`); with no tag, `Q4_K_M` is tried, then `Q8_0`, then the
//!   first candidate;
//! - of a split GGUF (`name-00001-of-00003.gguf`) only the first part is a candidate, and all
//!   its parts are fetched;
//! - the first match in listing order (the Hub lists paths sorted) wins.

use super::Target;
use crate::error::{Error, Result};

/// A file of a repo at a commit, as the Hub's tree API lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoFile {
    pub path: String,
    pub size: u64,
    /// The blob name in the cache: the LFS sha256 for LFS files, else the git oid.
    pub oid: String,
    /// The LFS sha256 (what the bytes are checked against), when the file is in LFS.
    pub sha256: Option<String>,
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn is_model_gguf(path: &str) -> bool {
    let name = file_name(path);
    path.ends_with(".gguf")
        && !["mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"]
            .iter()
            .any(|s| name.contains(s))
}

/// `(prefix, index, count)` of a split GGUF part (`prefix-00002-of-00005.gguf`).
pub fn split_info(path: &str) -> Option<(&str, u32, u32)> {
    crate::gguf::split::parse_part_name(path)
}

fn first_part_or_whole(path: &str) -> bool {
    split_info(path).is_none_or(|(_, i, n)| n <= 1 || i == 1)
}

fn has_tag(path: &str, tag: &str) -> bool {
    let p = path.to_ascii_uppercase();
    let t = tag.to_ascii_uppercase();
    p.match_indices(&t)
        .any(|(i, _)| matches!(p.as_bytes().get(i + t.len()), Some(b'.') | Some(b'-')))
}

fn gguf_list(files: &[RepoFile]) -> String {
    let list: Vec<&str> = files
        .iter()
        .filter(|f| f.path.ends_with(".gguf"))
        .map(|f| f.path.as_str())
        .collect();
    if list.is_empty() {
        "the repo has no .gguf files (a safetensors repo needs `cera convert`)".to_owned()
    } else {
        format!("GGUF files: {}", list.join(", "))
    }
}

/// Top-level files a conversion reads (besides the safetensors weights).
const CHECKPOINT_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "model.safetensors.index.json",
    "modules.json",
];

fn is_weights(path: &str) -> bool {
    !path.contains('/') && path.starts_with("model") && path.ends_with(".safetensors")
}

/// A repo holding a Hugging Face checkpoint (config.json and safetensors weights) and no
/// model GGUF.
pub fn is_checkpoint(files: &[RepoFile]) -> bool {
    files.iter().any(|f| f.path == "config.json")
        && files.iter().any(|f| is_weights(&f.path))
        && !files.iter().any(|f| is_model_gguf(&f.path))
}

/// The files to fetch for `target`: one, or every part of a split GGUF in order, or a
/// checkpoint's files (config.json first).
pub fn choose(repo: &str, files: &[RepoFile], target: &Target) -> Result<Vec<RepoFile>> {
    let err = |reason: String| Error::Hub {
        repo: repo.to_owned(),
        reason,
    };
    let primary = match target {
        Target::Checkpoint => {
            if !is_checkpoint(files) {
                return Err(err(
                    "not a safetensors checkpoint (config.json and model*.safetensors)".into(),
                ));
            }
            let mut chosen: Vec<RepoFile> = CHECKPOINT_FILES
                .iter()
                .filter_map(|n| files.iter().find(|f| f.path == *n).cloned())
                .collect();
            chosen.extend(files.iter().filter(|f| is_weights(&f.path)).cloned());
            return Ok(chosen);
        }
        Target::File(path) => files
            .iter()
            .find(|f| &f.path == path)
            .ok_or_else(|| err(format!("no file '{path}' ({})", gguf_list(files))))?,
        Target::Quant(tag) => {
            let tags: Vec<&str> = match tag {
                Some(t) => vec![t.as_str()],
                None => vec!["Q4_K_M", "Q8_0"],
            };
            let candidates = || {
                files
                    .iter()
                    .filter(|f| is_model_gguf(&f.path) && first_part_or_whole(&f.path))
            };
            let by_tag = tags
                .iter()
                .find_map(|t| candidates().find(|f| has_tag(&f.path, t)));
            match (by_tag, tag) {
                (Some(f), _) => f,
                (None, None) => candidates()
                    .next()
                    .ok_or_else(|| err(format!("no model GGUF ({})", gguf_list(files))))?,
                (None, Some(t)) => {
                    return Err(err(format!(
                        "no GGUF for quant '{t}' ({})",
                        gguf_list(files)
                    )));
                }
            }
        }
    };
    let Some((prefix, _, count)) = split_info(&primary.path).filter(|s| s.2 > 1) else {
        return Ok(vec![primary.clone()]);
    };
    let mut parts: Vec<(u32, &RepoFile)> = files
        .iter()
        .filter_map(|f| {
            let (p, i, n) = split_info(&f.path)?;
            (p == prefix && n == count).then_some((i, f))
        })
        .collect();
    parts.sort_by_key(|p| p.0);
    parts.dedup_by_key(|p| p.0);
    let have: Vec<u32> = parts.iter().map(|p| p.0).collect();
    if have != (1..=count).collect::<Vec<_>>() {
        let missing: Vec<String> = (1..=count)
            .filter(|i| !have.contains(i))
            .map(|i| format!("{prefix}-{i:05}-of-{count:05}.gguf"))
            .collect();
        return Err(err(format!(
            "split GGUF {prefix} is incomplete: missing {}",
            missing.join(", ")
        )));
    }
    Ok(parts.into_iter().map(|p| p.1.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[&str]) -> Vec<RepoFile> {
        paths
            .iter()
            .map(|p| RepoFile {
                path: (*p).to_owned(),
                size: 1,
                oid: String::new(),
                sha256: None,
            })
            .collect()
    }

    fn pick(paths: &[&str], tag: Option<&str>) -> Result<Vec<String>> {
        choose("o/r", &files(paths), &Target::Quant(tag.map(str::to_owned)))
            .map(|v| v.into_iter().map(|f| f.path).collect())
    }

    #[test]
    fn a_tag_picks_the_file_llama_cpp_picks() {
        let repo = [
            "README.md",
            "mmproj-model-Q8_0.gguf",
            "model-Q4_K_M.gguf",
            "model-Q4_K_S.gguf",
            "model-Q8_0.gguf",
            "model.imatrix-Q4_K_M.gguf",
        ];
        assert_eq!(pick(&repo, Some("q4_k_s")).unwrap(), ["model-Q4_K_S.gguf"]);
        assert_eq!(pick(&repo, None).unwrap(), ["model-Q4_K_M.gguf"]);
        assert_eq!(pick(&repo, Some("Q8_0")).unwrap(), ["model-Q8_0.gguf"]);
        // Q4_K must not match Q4_K_M (the tag is followed by '.' or '-').
        let e = pick(&repo, Some("Q4_K")).unwrap_err().to_string();
        assert!(
            e.contains("no GGUF for quant 'Q4_K'") && e.contains("model-Q8_0.gguf"),
            "{e}"
        );
        // No tag and neither default: the first model GGUF.
        assert_eq!(
            pick(&["a-F16.gguf", "b-Q2_K.gguf"], None).unwrap(),
            ["a-F16.gguf"]
        );
        let e = pick(&["config.json", "model.safetensors"], None).unwrap_err();
        assert!(e.to_string().contains("cera convert"), "{e}");
    }

    #[test]
    fn a_split_gguf_brings_all_its_parts_in_order() {
        let repo = [
            "Q4_K_M/m-Q4_K_M-00002-of-00003.gguf",
            "Q4_K_M/m-Q4_K_M-00001-of-00003.gguf",
            "Q4_K_M/m-Q4_K_M-00003-of-00003.gguf",
            "m-Q8_0.gguf",
        ];
        assert_eq!(
            pick(&repo, Some("Q4_K_M")).unwrap(),
            [
                "Q4_K_M/m-Q4_K_M-00001-of-00003.gguf",
                "Q4_K_M/m-Q4_K_M-00002-of-00003.gguf",
                "Q4_K_M/m-Q4_K_M-00003-of-00003.gguf"
            ]
        );
        let e = pick(&repo[..2], Some("Q4_K_M")).unwrap_err().to_string();
        assert!(
            e.contains("missing Q4_K_M/m-Q4_K_M-00003-of-00003.gguf"),
            "{e}"
        );
        assert_eq!(split_info("x-00001-of-00002.gguf"), Some(("x", 1, 2)));
        assert_eq!(split_info("x-1-of-2.gguf"), None);
    }
}
