//! Models from the Hugging Face Hub: `org/repo[:QUANT]` and `hf://org/repo/file.gguf`.
//!
//! The client speaks the Hub's HTTP API (`/api/models/{repo}/revision/{rev}` for the commit,
//! `/api/models/{repo}/tree/{commit}?recursive=true` for the files and their LFS sha256,
//! `/{repo}/resolve/{commit}/{path}` for the bytes, with HTTP ranges to resume) and stores what
//! it fetches in the Hub's own cache layout, so `huggingface_hub` and llama.cpp reuse our files
//! and we reuse theirs:
//!
//! ```text
//! $HF_HUB_CACHE (default $HF_HOME/hub, ~/.cache/huggingface/hub)
//! └── models--org--repo/
//!     ├── blobs/<sha256 or git oid>          the bytes, once per content
//!     ├── refs/<revision>                    the commit a branch or tag pointed at
//!     └── snapshots/<commit>/<path>          a relative symlink to ../../blobs/<oid>
//! ```
//!
//! Environment, as `huggingface_hub` reads it: `HF_ENDPOINT`, `HF_TOKEN` (else the token file
//! under `HF_HOME`), `HF_HOME`, `HF_HUB_CACHE`, `HF_HUB_OFFLINE=1` (cache only). Which GGUF a
//! quant tag picks follows llama.cpp's `-hf` rules ([`select`]).

mod cache;
mod http;
pub mod select;

use std::path::PathBuf;

use crate::error::{Error, Result};

pub use cache::{cached_commit, repo_dir};
pub use select::RepoFile;

/// Where the Hub is and how to reach it. [`HubConfig::from_env`] reads the variables
/// `huggingface_hub` reads.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HubConfig {
    /// The Hub's base URL, without a trailing slash (`HF_ENDPOINT`, default
    /// `https://huggingface.co`).
    pub endpoint: String,
    /// A user access token sent as `Authorization: Bearer` (`HF_TOKEN`, else `$HF_HOME/token`).
    pub token: Option<String>,
    /// The cache root holding `models--org--repo` folders.
    pub cache_dir: PathBuf,
    /// Never touch the network (`HF_HUB_OFFLINE=1`): only what the cache holds.
    pub offline: bool,
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE")
}

impl HubConfig {
    pub fn from_env() -> HubConfig {
        let home_dir = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        let hf_home = env_nonempty("HF_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                env_nonempty("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| home_dir.join(".cache"))
                    .join("huggingface")
            });
        let cache_dir = env_nonempty("HF_HUB_CACHE")
            .or_else(|| env_nonempty("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token = env_nonempty("HF_TOKEN")
            .or_else(|| {
                let path = env_nonempty("HF_TOKEN_PATH")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| hf_home.join("token"));
                std::fs::read_to_string(path).ok()
            })
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        HubConfig {
            endpoint: env_nonempty("HF_ENDPOINT")
                .unwrap_or_else(|| "https://huggingface.co".to_owned())
                .trim_end_matches('/')
                .to_owned(),
            token,
            cache_dir,
            offline: env_nonempty("HF_HUB_OFFLINE").is_some_and(|v| truthy(&v)),
        }
    }
}

/// What to fetch from a repo: the GGUF a quant tag picks, or one file by its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `org/repo:Q4_K_M` (or no tag: Q4_K_M, then Q8_0, then the first GGUF).
    Quant(Option<String>),
    /// `hf://org/repo/path/file.gguf`.
    File(String),
    /// The files a safetensors checkpoint needs for `cera convert` (config, tokenizer,
    /// weights).
    Checkpoint,
}

/// A model on the Hub: `org/repo[@revision][:QUANT]` or `hf://org/repo[@revision]/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRef {
    pub repo: String,
    /// A branch, tag or commit (default `main`).
    pub revision: String,
    pub target: Target,
}

fn valid_repo_part(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn bad_ref(spec: &str, reason: &str) -> Error {
    Error::Hub {
        repo: spec.to_owned(),
        reason: reason.to_owned(),
    }
}

impl ModelRef {
    /// `org/repo[@revision][:QUANT]`, what `--hf` takes (llama.cpp's `-hf` form).
    pub fn parse_repo(spec: &str) -> Result<ModelRef> {
        let (rest, quant) = match spec.rsplit_once(':') {
            Some((r, q)) if !q.contains('/') => (r, Some(q)),
            _ => (spec, None),
        };
        let (repo, revision) = match rest.split_once('@') {
            Some((r, rev)) => (r, rev),
            None => (rest, "main"),
        };
        let parts: Vec<&str> = repo.split('/').collect();
        if parts.len() != 2 || !parts.iter().all(|p| valid_repo_part(p)) {
            return Err(bad_ref(
                spec,
                "expected <org>/<repo>[@revision][:QUANT], e.g. bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M",
            ));
        }
        if revision.is_empty() || revision.contains("..") {
            return Err(bad_ref(spec, "empty or invalid revision after '@'"));
        }
        if let Some(q) = quant
            && (q.is_empty() || !q.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            return Err(bad_ref(
                spec,
                "the quant tag after ':' must be a type name such as Q4_K_M",
            ));
        }
        Ok(ModelRef {
            repo: repo.to_owned(),
            revision: revision.to_owned(),
            target: Target::Quant(quant.map(str::to_owned)),
        })
    }

    /// `hf://org/repo[@revision]/path/in/repo.gguf`, or `hf://org/repo[@revision][:QUANT]`.
    pub fn parse_url(url: &str) -> Result<ModelRef> {
        let rest = url
            .strip_prefix("hf://")
            .ok_or_else(|| bad_ref(url, "a Hub address starts with hf://"))?;
        let mut it = rest.splitn(3, '/');
        let (org, name, path) = (it.next(), it.next(), it.next());
        match (org, name, path) {
            (Some(o), Some(n), Some(p)) if !p.is_empty() => {
                let mut r = ModelRef::parse_repo(&format!("{o}/{n}"))?;
                if p.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
                    return Err(bad_ref(url, "the file path has an empty, '.' or '..' part"));
                }
                r.target = Target::File(p.to_owned());
                Ok(r)
            }
            (Some(o), Some(n), _) => ModelRef::parse_repo(&format!("{o}/{n}")),
            _ => Err(bad_ref(
                url,
                "expected hf://<org>/<repo>[/path/to/file.gguf]",
            )),
        }
    }

    /// Either form: `hf://...` or `org/repo[:QUANT]`.
    pub fn parse(spec: &str) -> Result<ModelRef> {
        if spec.starts_with("hf://") {
            ModelRef::parse_url(spec)
        } else {
            ModelRef::parse_repo(spec)
        }
    }
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.repo)?;
        if self.revision != "main" {
            write!(f, "@{}", self.revision)?;
        }
        match &self.target {
            Target::Quant(Some(q)) => write!(f, ":{q}"),
            Target::Quant(None) => Ok(()),
            Target::File(p) => write!(f, "/{p}"),
            Target::Checkpoint => Ok(()),
        }
    }
}

/// What a fetch from the Hub reports as it goes.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum HubProgress {
    /// The revision resolved to `commit` (or, offline, was found in the cache).
    Resolved { commit: String, offline: bool },
    /// The network failed, so the cache answered: `reason` says why.
    FellBackToCache { reason: String },
    /// Starting file `index` (0-based) of `count`: `total` bytes, `resumed` of them already
    /// there from an interrupted download.
    Start {
        file: String,
        index: usize,
        count: usize,
        total: u64,
        resumed: u64,
    },
    /// Bytes of the current file so far.
    Bytes { done: u64, total: u64 },
    /// The connection broke; trying again from byte `at`.
    Retry { at: u64, reason: String },
    /// Checking the sha256 of the current file.
    Verifying { file: String },
    /// Already in the cache.
    Cached { file: String },
    /// Converting a safetensors checkpoint to `output` (once: later runs find it cached).
    Converting { output: PathBuf, file_type: String },
}

/// Local paths of a model fetched from the Hub.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Fetched {
    /// The file to load (the first part of a split GGUF).
    pub path: PathBuf,
    /// Every file of the model (the parts of a split GGUF, in order).
    pub files: Vec<PathBuf>,
    pub commit: String,
    /// Set when the repo holds a safetensors checkpoint (no GGUF) and it was fetched: its
    /// snapshot folder. [`resolve_gguf`] converts it.
    pub checkpoint: Option<PathBuf>,
}

pub(super) fn hub_err(repo: &str, reason: impl Into<String>) -> Error {
    Error::Hub {
        repo: repo.to_owned(),
        reason: reason.into(),
    }
}

/// Fetches the GGUF `r` names (every part of a split one) into the cache, or finds it there,
/// and returns its local paths.
pub fn resolve(
    r: &ModelRef,
    cfg: &HubConfig,
    progress: &mut dyn FnMut(HubProgress),
) -> Result<Fetched> {
    let (commit, files, online) = if cfg.offline {
        let (c, f) = offline_listing(r, cfg, "HF_HUB_OFFLINE is set")?;
        (c, f, None)
    } else {
        let client = http::Client::new(cfg)?;
        match client.commit(&r.repo, &r.revision) {
            Ok(commit) => {
                let files = client.tree(&r.repo, &commit)?;
                if commit != r.revision {
                    cache::write_ref(&cfg.cache_dir, &r.repo, &r.revision, &commit)?;
                }
                (commit, files, Some(client))
            }
            Err(http::Failure::Network(reason)) => {
                progress(HubProgress::FellBackToCache {
                    reason: reason.clone(),
                });
                let why = format!(
                    "the Hub at {} could not be reached ({reason})",
                    cfg.endpoint
                );
                let (c, f) = offline_listing(r, cfg, &why)?;
                (c, f, None)
            }
            Err(http::Failure::Other(e)) => return Err(e),
        }
    };
    progress(HubProgress::Resolved {
        commit: commit.clone(),
        offline: online.is_none(),
    });
    // a repo with a checkpoint and no GGUF: its checkpoint files, to convert
    let target = match &r.target {
        Target::Quant(_) if select::is_checkpoint(&files) => &Target::Checkpoint,
        t => t,
    };
    let chosen = select::choose(&r.repo, &files, target)?;
    let mut paths = Vec::with_capacity(chosen.len());
    for (i, f) in chosen.iter().enumerate() {
        let p = match &online {
            Some(client) => {
                fetch_file(client, cfg, &r.repo, &commit, f, i, chosen.len(), progress)?
            }
            None => {
                let p = cache::snapshot_path(&cfg.cache_dir, &r.repo, &commit, &f.path);
                if !p.exists() {
                    return Err(hub_err(
                        &r.repo,
                        format!(
                            "{} is not in the cache ({}) and the Hub is not reachable",
                            f.path,
                            p.display()
                        ),
                    ));
                }
                progress(HubProgress::Cached {
                    file: f.path.clone(),
                });
                p
            }
        };
        paths.push(p);
    }
    let checkpoint = (*target == Target::Checkpoint)
        .then(|| paths[0].parent().map(std::path::Path::to_path_buf))
        .flatten();
    Ok(Fetched {
        path: paths[0].clone(),
        files: paths,
        commit,
        checkpoint,
    })
}

/// Where [`resolve_gguf`] keeps a converted checkpoint: by repo, commit and file type.
pub fn converted_path(repo: &str, commit: &str, file_type: &str) -> PathBuf {
    crate::fetch::cera_home()
        .join("converted")
        .join(format!("models--{}", repo.replace('/', "--")))
        .join(commit)
        .join(format!("{}.gguf", file_type.to_ascii_uppercase()))
}

/// Like [`resolve`], but a safetensors repo is converted once into cera's cache (keyed by
/// repo, commit and type: the quant tag, default `Q4_K_M`) and the GGUF is returned, as
/// `cera run --hf org/repo` uses it.
pub fn resolve_gguf(
    r: &ModelRef,
    cfg: &HubConfig,
    progress: &mut dyn FnMut(HubProgress),
) -> Result<Fetched> {
    let mut f = resolve(r, cfg, progress)?;
    let Some(dir) = f.checkpoint.clone() else {
        return Ok(f);
    };
    let ty = match &r.target {
        Target::Quant(Some(q)) => q.clone(),
        _ => "Q4_K_M".to_owned(),
    };
    let opts = crate::convert::ConvertOptions {
        outtype: crate::convert::OutType::parse(&ty)?,
        model_id: Some(r.repo.clone()),
        ..Default::default()
    };
    let out = converted_path(&r.repo, &f.commit, &ty);
    if !out.is_file() {
        progress(HubProgress::Converting {
            output: out.clone(),
            file_type: ty.to_ascii_uppercase(),
        });
        let parent = out.parent().expect("a file in a folder");
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        // written beside and renamed: a killed conversion leaves nothing under `out`
        crate::convert::convert(&dir, &out, &opts)?;
    }
    f.path = out.clone();
    f.files = vec![out];
    Ok(f)
}

/// One file of a repo by its path (what `huggingface_hub.hf_hub_download` does).
pub fn download(
    repo: &str,
    revision: &str,
    path: &str,
    cfg: &HubConfig,
    progress: &mut dyn FnMut(HubProgress),
) -> Result<PathBuf> {
    let r = ModelRef {
        repo: repo.to_owned(),
        revision: revision.to_owned(),
        target: Target::File(path.to_owned()),
    };
    Ok(resolve(&r, cfg, progress)?.path)
}

fn offline_listing(r: &ModelRef, cfg: &HubConfig, why: &str) -> Result<(String, Vec<RepoFile>)> {
    let commit = cache::cached_commit(&cfg.cache_dir, &r.repo, &r.revision).ok_or_else(|| {
        hub_err(
            &r.repo,
            format!(
                "{why}, and revision '{}' is not in the cache at {}",
                r.revision,
                repo_dir(&cfg.cache_dir, &r.repo).display()
            ),
        )
    })?;
    let files = cache::snapshot_files(&cfg.cache_dir, &r.repo, &commit)?;
    Ok((commit, files))
}

#[allow(clippy::too_many_arguments)]
fn fetch_file(
    client: &http::Client,
    cfg: &HubConfig,
    repo: &str,
    commit: &str,
    f: &RepoFile,
    index: usize,
    count: usize,
    progress: &mut dyn FnMut(HubProgress),
) -> Result<PathBuf> {
    let snap = cache::snapshot_path(&cfg.cache_dir, repo, commit, &f.path);
    if snap.exists() && std::fs::metadata(&snap).is_ok_and(|m| m.len() == f.size) {
        progress(HubProgress::Cached {
            file: f.path.clone(),
        });
        return Ok(snap);
    }
    let blob = cache::blob_path(&cfg.cache_dir, repo, &f.oid);
    if !blob.exists() || std::fs::metadata(&blob).is_ok_and(|m| m.len() != f.size) {
        let url = format!(
            "{}/{}/resolve/{}/{}",
            cfg.endpoint,
            repo,
            commit,
            http::encode_path(&f.path)
        );
        client.download(repo, &url, f, &blob, index, count, progress)?;
    } else {
        progress(HubProgress::Cached {
            file: f.path.clone(),
        });
    }
    cache::link_snapshot(&blob, &snap)?;
    Ok(snap)
}

/// The local path of a model reference, fetched when needed (a convenience for front ends).
pub fn resolve_spec(
    spec: &str,
    cfg: &HubConfig,
    progress: &mut dyn FnMut(HubProgress),
) -> Result<PathBuf> {
    Ok(resolve(&ModelRef::parse(spec)?, cfg, progress)?.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_specs_parse_as_llama_cpp_reads_them() {
        let r = ModelRef::parse("bartowski/SmolLM2-GGUF:Q4_K_M").unwrap();
        assert_eq!(r.repo, "bartowski/SmolLM2-GGUF");
        assert_eq!(r.revision, "main");
        assert_eq!(r.target, Target::Quant(Some("Q4_K_M".into())));
        let r = ModelRef::parse("org/repo@v1.0").unwrap();
        assert_eq!(r.revision, "v1.0");
        assert_eq!(r.target, Target::Quant(None));
        let r = ModelRef::parse("hf://org/repo@abc/sub/dir/m-Q8_0.gguf").unwrap();
        assert_eq!(r.repo, "org/repo");
        assert_eq!(r.revision, "abc");
        assert_eq!(r.target, Target::File("sub/dir/m-Q8_0.gguf".into()));
        assert_eq!(r.to_string(), "org/repo@abc/sub/dir/m-Q8_0.gguf");
        let r = ModelRef::parse("hf://org/repo:q4_0").unwrap();
        assert_eq!(r.target, Target::Quant(Some("q4_0".into())));
        for bad in [
            "justone",
            "a/b/c",
            "../x",
            "org/repo:",
            "org/repo@",
            "hf://org",
            "hf://org/repo/../../etc/passwd",
            "org/re po",
            "org/repo:Q4 K",
        ] {
            let e = ModelRef::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
