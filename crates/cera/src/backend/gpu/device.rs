//! Adapters: which GPUs wgpu sees (`cera info`), and picking one for the backend.

use crate::error::{Error, Result};

/// What an adapter is and what it can do, as `cera info` lists it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AdapterInfo {
    /// The adapter's index in [`adapters`] (what `CERA_GPU` names).
    pub index: usize,
    pub name: String,
    /// `Vulkan`, `Metal`, `Dx12`, `BrowserWebGpu`, ...
    pub api: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `Cpu` (a software rasterizer such as lavapipe), ...
    pub device_type: String,
    pub driver: String,
    /// Shader f16 arithmetic.
    pub f16: bool,
    /// Subgroup operations.
    pub subgroups: bool,
    /// Subgroup sizes the adapter may run (0 without subgroups).
    pub subgroup_min: u32,
    pub subgroup_max: u32,
    /// Cooperative matrices (experimental in wgpu).
    pub coop_matrix: bool,
    /// The cooperative matrix shapes it multiplies, as "MxNxK in→acc" (e.g. "16x16x16
    /// f16→f32", the one the prefill GEMM uses).
    pub coop_shapes: Vec<String>,
    /// The largest buffer one binding may view, in bytes (weights larger than this are split).
    pub max_binding: u64,
    /// Bytes of immediates (push constants) a pipeline may take (0: none; ops then read their
    /// parameters from a uniform buffer).
    pub immediates: u32,
}

/// `CERA_GPU_NOOP=1`: wgpu's no-op backend only, a device that records and submits but runs
/// nothing (its results are garbage): the host's own cost per step, measured apart from any
/// device (`CERA_GPU_PROFILE=1`, or a profiler on the main thread).
fn noop() -> bool {
    std::env::var_os("CERA_GPU_NOOP").is_some_and(|v| v == "1")
}

fn backends() -> wgpu::Backends {
    if noop() {
        wgpu::Backends::NOOP
    } else {
        wgpu::Backends::PRIMARY
    }
}

pub(super) fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor {
        backends: backends(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    };
    let noop = &mut desc.backend_options.noop;
    noop.enable = self::noop();
    // a desktop GPU's limits and features (the permissive defaults overflow wgpu's own tables)
    noop.limits = Some(wgpu::Limits {
        max_storage_buffer_binding_size: 1 << 31,
        max_buffer_size: 1 << 32,
        max_storage_buffers_per_shader_stage: 16,
        max_compute_workgroup_storage_size: 48 << 10,
        max_compute_invocations_per_workgroup: 1024,
        max_compute_workgroup_size_x: 1024,
        max_compute_workgroup_size_y: 1024,
        ..wgpu::Limits::default()
    });
    noop.features = Some(
        wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES,
    );
    wgpu::Instance::new(desc)
}

fn describe(index: usize, a: &wgpu::Adapter) -> AdapterInfo {
    let i = a.get_info();
    let f = a.features();
    AdapterInfo {
        index,
        name: i.name,
        api: format!("{:?}", i.backend),
        device_type: format!("{:?}", i.device_type),
        driver: [i.driver, i.driver_info]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
        f16: f.contains(wgpu::Features::SHADER_F16),
        subgroups: f.contains(wgpu::Features::SUBGROUP),
        subgroup_min: if f.contains(wgpu::Features::SUBGROUP) {
            i.subgroup_min_size
        } else {
            0
        },
        subgroup_max: if f.contains(wgpu::Features::SUBGROUP) {
            i.subgroup_max_size
        } else {
            0
        },
        coop_matrix: f.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
        coop_shapes: if f.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            a.cooperative_matrix_properties()
                .iter()
                .map(|c| {
                    let t = |t: wgpu::CooperativeScalarType| format!("{t:?}").to_lowercase();
                    format!(
                        "{}x{}x{} {}→{}",
                        c.m_size,
                        c.n_size,
                        c.k_size,
                        t(c.ab_type),
                        t(c.cr_type)
                    )
                })
                .collect()
        } else {
            Vec::new()
        },
        max_binding: a.limits().max_storage_buffer_binding_size,
        immediates: if f.contains(wgpu::Features::IMMEDIATES) {
            a.limits().max_immediate_size
        } else {
            0
        },
    }
}

fn enumerate(inst: &wgpu::Instance) -> Result<Vec<wgpu::Adapter>> {
    super::host::block_on(inst.enumerate_adapters(backends()))
}

/// Every adapter wgpu finds, in its order.
pub fn adapters() -> Vec<AdapterInfo> {
    // (on the web without a way to wait for WebGPU: none listed; opening one says why)
    enumerate(&instance())
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, a)| describe(i, a))
        .collect()
}

/// The adapter to use: `CERA_GPU=N` picks the N-th of [`adapters`]; otherwise the first
/// discrete GPU, then integrated, then virtual, then a software one (lavapipe).
pub(super) fn pick(inst: &wgpu::Instance) -> Result<(wgpu::Adapter, AdapterInfo)> {
    let all = enumerate(inst)?;
    if all.is_empty() {
        return Err(Error::Gpu(if cfg!(target_arch = "wasm32") {
            "no WebGPU adapter (navigator.gpu.requestAdapter() gave none: WebGPU is off in \
             this browser, or it has no usable GPU)"
                .into()
        } else {
            "no GPU adapter found (wgpu saw no Vulkan, Metal or DX12 device; on Linux install \
             a Vulkan driver, e.g. Mesa's mesa-vulkan-drivers)"
                .into()
        }));
    }
    if let Ok(v) = std::env::var("CERA_GPU") {
        let i: usize = v
            .parse()
            .map_err(|_| Error::Gpu(format!("CERA_GPU={v:?} is not an adapter index")))?;
        let n = all.len();
        let a = all.into_iter().nth(i).ok_or_else(|| {
            Error::Gpu(format!(
                "CERA_GPU={i}, but there are {n} adapters (see `cera info`)"
            ))
        })?;
        let info = describe(i, &a);
        return Ok((a, info));
    }
    let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    let (i, a) = all
        .into_iter()
        .enumerate()
        .min_by_key(|(i, a)| (rank(a), *i))
        .expect("not empty");
    let info = describe(i, &a);
    Ok((a, info))
}
