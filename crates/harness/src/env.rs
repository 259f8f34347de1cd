//! The environment fingerprint written to `env.json` and printed by `opbench env`.

use std::collections::BTreeMap;

use crate::device::{Backend, Device, gpu_backend, gpu_count, load_gpu_library};
use crate::gpu_facts::{self, GpuFacts};

/// tch as pinned in the workspace (`tch = "=0.24.0"`).
pub const TCH_VERSION: &str = "0.24.0";

/// Variables that change which kernels ROCm / PyTorch pick; recorded when set.
const KERNEL_VARS: &[&str] = &[
    "HSA_OVERRIDE_GFX_VERSION",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_BLAS_PREFER_HIPBLASLT",
    "PYTORCH_TUNABLEOP_ENABLED",
    "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL",
    "ROCBLAS_LAYER",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "CUBLAS_WORKSPACE_CONFIG",
    "OMP_NUM_THREADS",
];
const KERNEL_VAR_PREFIXES: &[&str] = &["MIOPEN_", "HIPBLASLT_LOG_"];

/// The fingerprint's type: `env.json` as the `rundir` crate defines it.
pub use rundir::Env as EnvInfo;

/// Collect the fingerprint for a run over `devices`.
pub fn collect(run_id: &str, devices: &[Device]) -> EnvInfo {
    load_gpu_library();
    let gpu = devices.iter().find(|d| d.is_gpu()).copied();
    let facts = match gpu {
        Some(Device {
            backend: Backend::Cuda,
            index,
        }) => gpu_facts::cuda(index),
        Some(Device {
            backend: Backend::Hip,
            index,
        }) => gpu_facts::hip(index),
        _ => GpuFacts::default(),
    };
    let backend = gpu.map_or(Backend::Cpu, |d| d.backend);
    let runtime_version = atenx::runtime_version()
        .filter(|_| gpu_count() > 0)
        .map(|v| {
            if gpu_backend() == Backend::Cuda {
                format!("{}.{}", v / 1000, (v % 1000) / 10)
            } else {
                v.to_string()
            }
        });
    EnvInfo {
        schema_version: rundir::SCHEMA_VERSION,
        run_id: run_id.to_string(),
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        git_revision: std::env::var("OPBENCH_GIT_REV")
            .unwrap_or_else(|_| env!("OPBENCH_GIT_REV").to_string()),
        opbench_version: env!("CARGO_PKG_VERSION").to_string(),
        tch_version: TCH_VERSION.to_string(),
        libtorch_version: atenx::torch_version(),
        backend: backend.as_str().to_string(),
        devices: devices.iter().map(ToString::to_string).collect(),
        runtime_version,
        device_name: facts.name,
        arch: facts.arch,
        device_memory_bytes: facts.memory_bytes,
        sm_count: facts.sm_count,
        l2_cache_bytes: facts.l2_cache_bytes,
        peak_dram_gbps: facts.peak_dram_gbps,
        driver_version: facts.driver_version,
        gpu_library: load_gpu_library(),
        visible_gpus: gpu_count(),
        cudnn_version: atenx::cudnn_version(),
        miopen_version: atenx::miopen_version(),
        hipblaslt_version: atenx::hipblaslt_version(),
        sdp_enabled: atenx::sdp_enabled()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        cpu_model: cpu_model(),
        threads: tch::get_num_threads(),
        os: os_name(),
        env: kernel_vars(),
        settings: BTreeMap::new(),
        build_config: atenx::show_config(),
        host_state: host_state(),
    }
}

/// The host's CPU frequency governor, CPU 0's current MHz and the load average (Linux).
fn host_state() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    #[cfg(target_os = "linux")]
    {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
        };
        let cpufreq = "/sys/devices/system/cpu/cpu0/cpufreq";
        if let Some(g) = read(&format!("{cpufreq}/scaling_governor")) {
            out.insert("cpu_governor".into(), g);
        }
        if let Some(khz) =
            read(&format!("{cpufreq}/scaling_cur_freq")).and_then(|k| k.parse::<u64>().ok())
        {
            out.insert("cpu0_mhz".into(), (khz / 1000).to_string());
        } else if let Some(mhz) = read("/proc/cpuinfo").and_then(|i| {
            i.lines()
                .find_map(|l| l.strip_prefix("cpu MHz").and_then(|r| r.split_once(':')))
                .map(|(_, v)| v.trim().to_string())
        }) {
            out.insert("cpu0_mhz".into(), mhz);
        }
        if let Some(l) = read("/proc/loadavg") {
            out.insert(
                "loadavg".into(),
                l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
            );
        }
    }
    out
}

fn kernel_vars() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            KERNEL_VARS.contains(&k.as_str())
                || KERNEL_VAR_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .collect()
}

fn cpu_model() -> String {
    #[cfg(target_os = "linux")]
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        if let Some(m) = info
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
        {
            return m.1.trim().to_string();
        }
    }
    std::env::var("PROCESSOR_IDENTIFIER").unwrap_or_else(|_| "unknown".into())
}

fn os_name() -> String {
    let base = format!("{} {}", std::env::consts::OS, std::env::consts::ARCH);
    #[cfg(target_os = "linux")]
    if let Ok(rel) = std::fs::read_to_string("/etc/os-release") {
        if let Some(p) = rel.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")) {
            return format!("{base} ({})", p.trim_matches('"'));
        }
    }
    base
}
