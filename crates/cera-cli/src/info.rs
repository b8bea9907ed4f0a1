//! `cera info`: the CPU features and the kernel tier in use.

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_: Args) -> anyhow::Result<()> {
    let t = cera::kernels::KernelTable::get();
    println!("cera {}", env!("CARGO_PKG_VERSION"));
    // only this host's tiers: the other architecture's names would not apply
    let names: Vec<_> = cera::kernels::CpuTier::supported()
        .into_iter()
        .map(|t| t.name())
        .collect();
    println!(
        "kernel tier: {} (CERA_CPU_TIER={} forces a lower one)",
        t.tier().name(),
        names.join("|")
    );
    println!(
        "threads available: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("models cache: {}", cera::fetch::models_dir().display());
    Ok(())
}
