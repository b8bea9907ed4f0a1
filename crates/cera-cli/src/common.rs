//! Helpers shared by subcommands: model resolution with progress (the catalog, local paths and
//! the Hugging Face Hub), size formatting.

use std::path::PathBuf;
use std::sync::OnceLock;

use cera::fetch::{self, Progress};
use cera::hub::{self, HubConfig, HubProgress};

use crate::progress::ByteProgress;

/// Prints catalog fetch progress on stderr (a bar on a terminal, a line per quarter in a log).
pub fn progress_printer() -> impl FnMut(Progress) {
    let mut bar = ByteProgress::new();
    move |p| match p {
        Progress::Downloading {
            package,
            index,
            count,
        } => {
            bar.finish();
            eprintln!("cera: downloading {package} ({}/{count})", index + 1);
        }
        Progress::Extracting { done, total } => {
            if done == 0 || bar.is_idle() {
                bar.start("extracting", total, done);
            } else {
                bar.update(done);
            }
        }
        Progress::Verifying => {
            bar.finish();
            eprintln!("cera: verifying sha256");
        }
        Progress::Done { path } => eprintln!("cera: model ready at {}", path.display()),
        _ => {}
    }
}

/// Prints Hub fetch progress on stderr.
pub fn hub_progress_printer() -> impl FnMut(HubProgress) {
    let mut bar = ByteProgress::new();
    move |p| match p {
        HubProgress::Resolved { commit, offline } => {
            let how = if offline {
                " (offline: from the cache)"
            } else {
                ""
            };
            bar.line(&format!(
                "revision is commit {}{how}",
                &commit[..12.min(commit.len())]
            ));
        }
        HubProgress::FellBackToCache { reason } => {
            bar.line(&format!(
                "the Hub is not reachable ({reason}); using the cache"
            ));
        }
        HubProgress::Start {
            file,
            index,
            count,
            total,
            resumed,
        } => {
            let of = if count > 1 {
                format!(" ({}/{count})", index + 1)
            } else {
                String::new()
            };
            if resumed > 0 {
                eprintln!(
                    "cera: resuming {file}{of} at {} of {}",
                    human_bytes(resumed),
                    human_bytes(total)
                );
            } else {
                eprintln!("cera: downloading {file}{of}, {}", human_bytes(total));
            }
            bar.start("downloading", total, resumed);
        }
        HubProgress::Bytes { done, .. } => bar.update(done),
        HubProgress::Retry { at, reason } => {
            bar.line(&format!("{reason}; retrying from byte {at}"));
        }
        HubProgress::Verifying { file } => {
            bar.finish();
            eprintln!("cera: verifying the sha256 of {file}");
        }
        HubProgress::Cached { file } => eprintln!("cera: {file} is in the cache"),
        HubProgress::Converting { output, file_type } => eprintln!(
            "cera: the repo is a safetensors checkpoint; converting it to {file_type} once, into {}",
            output.display()
        ),
        _ => {}
    }
}

/// `--hf ORG/REPO[:QUANT]` and `--hf-file PATH`, given before or after the subcommand.
#[derive(Clone, Debug, Default)]
pub struct HubArgs {
    pub repo: Option<String>,
    pub file: Option<String>,
}

static HUB_ARGS: OnceLock<HubArgs> = OnceLock::new();

pub fn set_hub_args(a: HubArgs) {
    let _ = HUB_ARGS.set(a);
}

/// Whether `--hf` or `--hf-file` was given.
pub fn hub_flags_given() -> bool {
    HUB_ARGS
        .get()
        .is_some_and(|a| a.repo.is_some() || a.file.is_some())
}

/// The Hub reference `--hf`/`--hf-file` name, if any.
fn hub_ref_from_flags() -> anyhow::Result<Option<hub::ModelRef>> {
    let Some(a) = HUB_ARGS.get() else {
        return Ok(None);
    };
    match (&a.repo, &a.file) {
        (None, None) => Ok(None),
        (None, Some(_)) => anyhow::bail!("--hf-file needs --hf ORG/REPO to say which repo"),
        (Some(r), None) => Ok(Some(hub::ModelRef::parse_repo(r)?)),
        (Some(r), Some(f)) => {
            let mut m = hub::ModelRef::parse_repo(r)?;
            if !matches!(m.target, hub::Target::Quant(None)) {
                anyhow::bail!("give either a quant tag in --hf ({r}) or --hf-file, not both");
            }
            m.target = hub::Target::File(f.clone());
            Ok(Some(m))
        }
    }
}

/// Fetches (or finds in the cache) a model on the Hub and returns the file to load.
pub fn resolve_hub(r: &hub::ModelRef) -> anyhow::Result<PathBuf> {
    let cfg = HubConfig::from_env();
    let fetched = hub::resolve_gguf(r, &cfg, &mut hub_progress_printer())?;
    Ok(fetched.path)
}

/// For `cera convert --hf ORG/REPO`: the checkpoint's snapshot folder, fetched when needed,
/// and the repo id.
pub fn hub_checkpoint() -> anyhow::Result<Option<(PathBuf, String)>> {
    let Some(mut r) = hub_ref_from_flags()? else {
        return Ok(None);
    };
    if !matches!(r.target, hub::Target::Quant(None)) {
        anyhow::bail!(
            "--hf {r}: convert takes the whole repo (give the type with --outtype, not a tag or --hf-file)"
        );
    }
    r.target = hub::Target::Checkpoint;
    let cfg = HubConfig::from_env();
    let f = hub::resolve(&r, &cfg, &mut hub_progress_printer())?;
    Ok(f.checkpoint.map(|d| (d, r.repo)))
}

/// `-m` as given (a path, a catalog name or `hf://org/repo[:QUANT]`), `--hf`, or the default
/// model; fetched when needed.
pub fn resolve_model(arg: Option<&str>) -> anyhow::Result<PathBuf> {
    let from_flags = hub_ref_from_flags()?;
    match (arg, from_flags) {
        (Some(m), Some(r)) => {
            anyhow::bail!("-m {m} and --hf {r} both name a model: give one of them")
        }
        (None, Some(r)) => return resolve_hub(&r),
        (Some(m), None) if m.starts_with("hf://") => {
            return resolve_hub(&hub::ModelRef::parse_url(m)?);
        }
        _ => {}
    }
    if arg.is_none() {
        let def = fetch::default_model();
        if def.cached().is_none() {
            eprintln!(
                "cera: no -m given; fetching the default model {} ({})",
                def.name, def.description
            );
        }
    }
    Ok(fetch::resolve_model(arg, &mut progress_printer())?)
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

pub fn human_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2} B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.2} M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.2} K", n as f64 / 1e3),
        n => n.to_string(),
    }
}

/// `cera: KV cache K q4_0 / V q4_0 (rotated), 4096 positions: 13.5 MiB, 3456 bytes per token`.
pub fn print_kv_cache(session: &cera::session::Session) {
    eprintln!(
        "cera: KV cache {}, {} positions: {:.1} MiB, {:.0} bytes per token",
        session.kv_spec(),
        session.n_ctx(),
        session.kv_cache_bytes() as f64 / (1024.0 * 1024.0),
        session.kv_bytes_per_token()
    );
}

/// Says on stderr what runs the model when it is not the CPU, or why `--device auto` fell back
/// to it.
pub fn report_device(engine: &cera::engine::Engine) {
    if let Some(why) = engine.device_fallback() {
        eprintln!("device: CPU (no usable GPU: {why})");
    } else if engine.backend_name() != "CPU" {
        eprintln!("device: {}", engine.device_description());
    }
}
