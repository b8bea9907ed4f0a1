//! `cera pull` and `cera models`.

use cera::fetch;

use crate::common::{human_bytes, progress_printer};

#[derive(clap::Args)]
pub struct PullArgs {
    /// Catalog name or alias (see `cera models`), or a Hub address `hf://ORG/REPO[:QUANT]` /
    /// `hf://ORG/REPO[@REV]/FILE.gguf`; the default model when omitted (or --hf's).
    name: Option<String>,
}

#[derive(clap::Args)]
pub struct ListArgs {}

pub fn pull(a: PullArgs) -> anyhow::Result<()> {
    let from_hub = match &a.name {
        Some(n) => n.starts_with("hf://"),
        None => crate::common::hub_flags_given(),
    };
    if from_hub {
        println!(
            "{}",
            crate::common::resolve_model(a.name.as_deref())?.display()
        );
        return Ok(());
    }
    let entry = match &a.name {
        Some(n) => fetch::lookup(n)?,
        None => fetch::default_model(),
    };
    let path = fetch::pull(entry, &mut progress_printer())?;
    println!("{}", path.display());
    Ok(())
}

pub fn list(_: ListArgs) -> anyhow::Result<()> {
    println!("cache: {}", fetch::models_dir().display());
    let cached = fetch::list_cached()?;
    if cached.is_empty() {
        println!("  (no models cached)");
    }
    for m in &cached {
        let name = m.entry.map(|e| e.name).unwrap_or("-");
        println!(
            "  {:<40} {:>11}  {}",
            name,
            human_bytes(m.size),
            m.path.display()
        );
    }
    println!("\ncatalog (cera pull NAME):");
    for (i, e) in fetch::catalog().iter().enumerate() {
        let state = if e.cached().is_some() {
            "cached"
        } else {
            "not cached"
        };
        let def = if i == 0 { " (default)" } else { "" };
        println!("  {:<40} {:>11}  {state}{def}", e.name, human_bytes(e.size));
        println!("      {}; aliases: {}", e.description, e.aliases.join(", "));
    }
    Ok(())
}
