//! `cera info`: the CPU features and the kernel tier in use, and the GPU adapters.

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
    let topo = cera::runtime::topology::CpuTopology::get();
    println!(
        "CPU cores usable: {} logical, {} physical{}; default threads: {} (-t overrides; \
         CERA_DECODE_THREADS pins one-token steps)",
        topo.logical,
        topo.physical,
        if topo.heterogeneous {
            format!(", {} of the fastest class", topo.performance)
        } else {
            String::new()
        },
        topo.default_threads()
    );
    println!("models cache: {}", cera::fetch::models_dir().display());
    gpus();
    Ok(())
}

#[cfg(feature = "gpu")]
fn gpus() {
    let all = cera::backend::gpu::adapters();
    if all.is_empty() {
        println!("GPU adapters: none (install a Vulkan driver; --device auto runs on the CPU)");
    }
    for a in all {
        let yes = |b: bool| if b { "yes" } else { "no" };
        println!(
            "GPU adapter {}: {} ({}, {}, {}); f16 {}, subgroups {}, cooperative matrices {}{}, \
             immediates {} bytes, largest binding {} MiB (CERA_GPU={} picks it)",
            a.index,
            a.name,
            a.api,
            a.device_type,
            a.driver,
            yes(a.f16),
            yes(a.subgroups),
            yes(a.coop_matrix),
            if a.coop_shapes.is_empty() {
                String::new()
            } else {
                format!(" ({})", a.coop_shapes.join(", "))
            },
            a.immediates,
            a.max_binding >> 20,
            a.index
        );
    }
}

#[cfg(not(feature = "gpu"))]
fn gpus() {
    println!("GPU adapters: this build has no GPU backend (feature `gpu`)");
}
