//! Helpers shared by subcommands: model resolution with progress, size formatting.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use cera::fetch::{self, Progress};

/// Prints fetch progress on stderr: one line updated in place on a terminal; in a log (not a
/// terminal) a line per quarter, not a `\r` update per percent.
pub fn progress_printer() -> impl FnMut(Progress) {
    let mut last_pct = u64::MAX;
    let tty = std::io::stderr().is_terminal();
    move |p| match p {
        Progress::Downloading {
            package,
            index,
            count,
        } => {
            eprintln!("cera: downloading {package} ({}/{count})", index + 1);
        }
        Progress::Extracting { done, total } => {
            let pct = done * 100 / total.max(1);
            if !tty {
                let quarter = pct / 25;
                if quarter != last_pct {
                    last_pct = quarter;
                    eprintln!(
                        "cera: extracting {:3}% ({} / {})",
                        quarter * 25,
                        human_bytes(done),
                        human_bytes(total)
                    );
                }
            } else if pct != last_pct {
                last_pct = pct;
                eprint!(
                    "\rcera: extracting {pct:3}% ({} / {})",
                    human_bytes(done),
                    human_bytes(total)
                );
                let _ = std::io::stderr().flush();
            }
        }
        Progress::Verifying => eprintln!("{}cera: verifying sha256", if tty { "\n" } else { "" }),
        Progress::Done { path } => eprintln!("cera: model ready at {}", path.display()),
        _ => {}
    }
}

/// `-m` as given (path or catalog name), or the default model; fetched when needed.
pub fn resolve_model(arg: Option<&str>) -> anyhow::Result<PathBuf> {
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
