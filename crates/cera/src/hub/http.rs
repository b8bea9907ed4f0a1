//! The Hub's HTTP API through ureq: the commit of a revision, the file tree with LFS
//! metadata, and downloads that resume with HTTP ranges and are checked against the sha256.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::select::RepoFile;
use super::{HubConfig, HubProgress, hub_err};
use crate::error::{Error, Result};

/// Consecutive failed attempts (no byte gained) before a download gives up.
const MAX_ATTEMPTS: u32 = 5;
/// Bytes read per chunk of a download (and per progress report).
const CHUNK: usize = 1 << 18;
/// API answers (JSON) larger than this are refused.
const API_LIMIT: u64 = 64 << 20;

pub(super) enum Failure {
    /// The Hub could not be reached at all (DNS, refused, timeout): the cache may answer.
    Network(String),
    Other(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Other(e)
    }
}

/// How one attempt of a download ended, when not with the whole file.
enum Step {
    /// The connection failed or broke: try again from where the bytes stop.
    Retry(String),
    /// An answer that another attempt will not change (a status, a bad range, a disk error).
    Fatal(String),
}

pub(super) struct Client {
    agent: ureq::Agent,
    endpoint: String,
    token: Option<String>,
}

/// Percent-encodes one URL path segment (a revision such as `refs/pr/1` is one segment).
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-encodes a file path, keeping its `/` separators.
pub(super) fn encode_path(p: &str) -> String {
    p.split('/')
        .map(encode_segment)
        .collect::<Vec<_>>()
        .join("/")
}

fn is_network(e: &ureq::Error) -> bool {
    matches!(
        e,
        ureq::Error::Io(_)
            | ureq::Error::Timeout(_)
            | ureq::Error::HostNotFound
            | ureq::Error::ConnectionFailed
            | ureq::Error::BodyStalled
    )
}

fn status_reason(status: u16, has_token: bool) -> String {
    match status {
        401 if !has_token => "the Hub answered 401: the repo does not exist, or it is private or gated and needs a token (set HF_TOKEN)".to_owned(),
        401 => "the Hub answered 401: the token (HF_TOKEN) was refused, or the repo does not exist".to_owned(),
        403 => "the Hub answered 403: this token has no access (a gated repo whose terms are not accepted?)".to_owned(),
        404 => "the Hub answered 404: no such repo, revision or file".to_owned(),
        s => format!("the Hub answered HTTP {s}"),
    }
}

impl Client {
    pub(super) fn new(cfg: &HubConfig) -> Result<Client> {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(15)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            // A stalled transfer breaks out so the download can resume.
            .timeout_per_read(Some(Duration::from_secs(60)))
            .user_agent(format!("cera/{}", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Client {
            agent: config.into(),
            endpoint: cfg.endpoint.clone(),
            token: cfg.token.clone(),
        })
    }

    fn get(&self, url: &str) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
        let r = self.agent.get(url);
        match &self.token {
            Some(t) => r.header("Authorization", format!("Bearer {t}")),
            None => r,
        }
    }

    fn api_json(
        &self,
        repo: &str,
        url: &str,
    ) -> std::result::Result<(serde_json::Value, Option<String>), Failure> {
        let mut resp = self
            .get(url)
            .header("Accept", "application/json")
            .call()
            .map_err(|e| {
                if is_network(&e) {
                    Failure::Network(e.to_string())
                } else {
                    Failure::Other(hub_err(repo, format!("{url}: {e}")))
                }
            })?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(Failure::Other(hub_err(
                repo,
                status_reason(status, self.token.is_some()),
            )));
        }
        let next = resp
            .headers()
            .get("link")
            .and_then(|v| v.to_str().ok())
            .and_then(next_link);
        let text = resp
            .body_mut()
            .with_config()
            .limit(API_LIMIT)
            .read_to_string()
            .map_err(|e| {
                Failure::Other(hub_err(repo, format!("{url}: reading the answer: {e}")))
            })?;
        let v = serde_json::from_str(&text).map_err(|e| {
            Failure::Other(hub_err(repo, format!("{url}: the answer is not JSON: {e}")))
        })?;
        Ok((v, next))
    }

    /// The commit a branch, tag or commit id names.
    pub(super) fn commit(
        &self,
        repo: &str,
        revision: &str,
    ) -> std::result::Result<String, Failure> {
        let url = format!(
            "{}/api/models/{repo}/revision/{}",
            self.endpoint,
            encode_segment(revision)
        );
        let (v, _) = self.api_json(repo, &url)?;
        let sha = v.get("sha").and_then(|s| s.as_str()).unwrap_or_default();
        if !super::cache::is_commit(sha) {
            return Err(Failure::Other(hub_err(
                repo,
                format!("{url}: no commit id ('sha') in the answer"),
            )));
        }
        Ok(sha.to_owned())
    }

    /// Every file at `commit` (following the API's pagination), with sizes and LFS sha256.
    pub(super) fn tree(&self, repo: &str, commit: &str) -> Result<Vec<RepoFile>> {
        let mut url = Some(format!(
            "{}/api/models/{repo}/tree/{commit}?recursive=true",
            self.endpoint
        ));
        let mut out = Vec::new();
        while let Some(u) = url.take() {
            let (v, next) = self.api_json(repo, &u).map_err(|f| match f {
                Failure::Network(r) => hub_err(repo, format!("{u}: {r}")),
                Failure::Other(e) => e,
            })?;
            let items = v
                .as_array()
                .ok_or_else(|| hub_err(repo, format!("{u}: the file tree is not a list")))?;
            for it in items {
                if it.get("type").and_then(|t| t.as_str()) != Some("file") {
                    continue;
                }
                let (Some(path), Some(size)) = (
                    it.get("path").and_then(|p| p.as_str()),
                    it.get("size").and_then(|s| s.as_u64()),
                ) else {
                    return Err(hub_err(
                        repo,
                        format!("{u}: a file entry without path or size"),
                    ));
                };
                if path
                    .split('/')
                    .any(|c| c.is_empty() || c == "." || c == "..")
                {
                    return Err(hub_err(
                        repo,
                        format!("{u}: refusing the file path '{path}'"),
                    ));
                }
                let lfs = it.get("lfs");
                let sha256 = lfs
                    .and_then(|l| l.get("oid").or_else(|| l.get("sha256")))
                    .and_then(|o| o.as_str())
                    .map(str::to_owned);
                let oid = sha256
                    .clone()
                    .or_else(|| it.get("oid").and_then(|o| o.as_str()).map(str::to_owned))
                    .unwrap_or_default();
                let valid_oid = |o: &str| {
                    (o.len() == 40 || o.len() == 64) && o.bytes().all(|b| b.is_ascii_hexdigit())
                };
                if !valid_oid(&oid) {
                    return Err(hub_err(repo, format!("{u}: '{path}' has no valid oid")));
                }
                out.push(RepoFile {
                    path: path.to_owned(),
                    size,
                    oid,
                    sha256,
                });
            }
            url = next;
        }
        Ok(out)
    }

    /// Downloads `f` into `blob` through `blob.incomplete`, resuming what an earlier attempt
    /// left and retrying a cut connection; checks size and LFS sha256 before the rename.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn download(
        &self,
        repo: &str,
        url: &str,
        f: &RepoFile,
        blob: &Path,
        index: usize,
        count: usize,
        progress: &mut dyn FnMut(HubProgress),
    ) -> Result<()> {
        let dir = blob.parent().expect("blob paths have a parent");
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let part = dir.join(format!(
            "{}.incomplete",
            blob.file_name().unwrap().to_string_lossy()
        ));
        let mut have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        if have > f.size {
            have = 0;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&part)
            .map_err(|e| Error::io(&part, e))?;
        file.set_len(have).map_err(|e| Error::io(&part, e))?;
        let mut hasher = Sha256::new();
        if have > 0 && f.sha256.is_some() {
            hash_prefix(&mut file, have, &mut hasher).map_err(|e| Error::io(&part, e))?;
        }
        use std::io::Seek;
        file.seek(std::io::SeekFrom::Start(have))
            .map_err(|e| Error::io(&part, e))?;
        progress(HubProgress::Start {
            file: f.path.clone(),
            index,
            count,
            total: f.size,
            resumed: have,
        });
        let mut failures = 0u32;
        let mut buf = vec![0u8; CHUNK];
        while have < f.size {
            let mut req = self.get(url).header("Accept-Encoding", "identity");
            if have > 0 {
                req = req.header("Range", format!("bytes={have}-"));
            }
            let outcome: std::result::Result<(), Step> = (|| {
                let resp = req.call().map_err(|e| {
                    if is_network(&e) {
                        Step::Retry(e.to_string())
                    } else {
                        Step::Fatal(e.to_string())
                    }
                })?;
                let status = resp.status().as_u16();
                match status {
                    200 if have > 0 => {
                        // The server ignored the range: start over.
                        have = 0;
                        hasher = Sha256::new();
                        file.set_len(0).map_err(|e| Step::Fatal(e.to_string()))?;
                        file.seek(std::io::SeekFrom::Start(0))
                            .map_err(|e| Step::Fatal(e.to_string()))?;
                    }
                    200 => {}
                    206 => {
                        let start = resp
                            .headers()
                            .get("content-range")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.strip_prefix("bytes "))
                            .and_then(|v| v.split('-').next())
                            .and_then(|v| v.parse::<u64>().ok());
                        if start != Some(have) {
                            return Err(Step::Fatal(format!(
                                "the server resumed at {start:?}, not at byte {have}"
                            )));
                        }
                    }
                    s => return Err(Step::Fatal(status_reason(s, self.token.is_some()))),
                }
                let mut body = resp.into_body().into_reader();
                loop {
                    let n = match body.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => n,
                        Err(e) => {
                            return Err(Step::Retry(format!(
                                "the transfer broke at byte {have}: {e}"
                            )));
                        }
                    };
                    if have + n as u64 > f.size {
                        return Err(Step::Fatal(format!(
                            "the server sent more than the {} bytes the tree lists",
                            f.size
                        )));
                    }
                    file.write_all(&buf[..n])
                        .map_err(|e| Step::Fatal(format!("writing {}: {e}", part.display())))?;
                    if f.sha256.is_some() {
                        hasher.update(&buf[..n]);
                    }
                    have += n as u64;
                    failures = 0;
                    progress(HubProgress::Bytes {
                        done: have,
                        total: f.size,
                    });
                }
                if have < f.size {
                    return Err(Step::Retry(format!(
                        "the connection closed at byte {have} of {}",
                        f.size
                    )));
                }
                Ok(())
            })();
            match outcome {
                Ok(()) => {}
                Err(Step::Fatal(msg)) => {
                    return Err(hub_err(repo, format!("{}: {msg}", f.path)));
                }
                Err(Step::Retry(msg)) => {
                    failures += 1;
                    if failures >= MAX_ATTEMPTS {
                        return Err(hub_err(
                            repo,
                            format!(
                                "{}: giving up after {MAX_ATTEMPTS} attempts ({msg}); run again to resume from byte {have}",
                                f.path
                            ),
                        ));
                    }
                    progress(HubProgress::Retry {
                        at: have,
                        reason: msg,
                    });
                    std::thread::sleep(Duration::from_millis(300 * u64::from(failures)));
                }
            }
        }
        file.sync_all().map_err(|e| Error::io(&part, e))?;
        drop(file);
        if let Some(want) = &f.sha256 {
            progress(HubProgress::Verifying {
                file: f.path.clone(),
            });
            let got = crate::fetch::hex(&hasher.finalize());
            if !got.eq_ignore_ascii_case(want) {
                let _ = std::fs::remove_file(&part);
                return Err(hub_err(
                    repo,
                    format!(
                        "{}: sha256 mismatch (the Hub lists {want}, the download has {got}); nothing was kept",
                        f.path
                    ),
                ));
            }
        }
        std::fs::rename(&part, blob).map_err(|e| Error::io(blob, e))
    }
}

fn hash_prefix(file: &mut std::fs::File, len: u64, h: &mut Sha256) -> std::io::Result<()> {
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut r = file.take(len);
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        h.update(&buf[..n]);
    }
}

/// The `rel="next"` address of a `Link` header (the Hub paginates long trees this way).
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_owned()
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_paths_are_read_and_written_as_the_hub_does() {
        assert_eq!(
            next_link("<https://h/api/x?cursor=abc>; rel=\"next\""),
            Some("https://h/api/x?cursor=abc".into())
        );
        assert_eq!(next_link("<https://h/a>; rel=\"prev\""), None);
        assert_eq!(encode_segment("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(encode_path("sub dir/m+1.gguf"), "sub%20dir/m%2B1.gguf");
    }
}
