//! `cera info`: the CPU features and the kernel tier in use.

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_: Args) -> anyhow::Result<()> {
    let t = cera::kernels::KernelTable::get();
    println!("cera {}", env!("CARGO_PKG_VERSION"));
    println!(
        "kernel tier: {:?} (CERA_CPU_TIER=scalar|avx2|avx512 forces a lower one)",
        t.tier()
    );
    println!(
        "threads available: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("models cache: {}", cera::fetch::models_dir().display());
    Ok(())
}
