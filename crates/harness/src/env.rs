//! The environment fingerprint written to `env.json` and printed by `opbench env`.

use std::collections::BTreeMap;

use serde::Serialize;

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

/// Everything a reader needs to judge a run.
#[derive(Debug, Clone, Serialize)]
pub struct EnvInfo {
    pub run_id: String,
    pub started_at: String,
    pub git_revision: String,
    pub opbench_version: String,
    pub tch_version: String,
    pub libtorch_version: String,
    /// `cpu`, `cuda` or `hip`: the GPU backend when the run has a GPU device.
    pub backend: String,
    /// Devices this run measures (`cpu`, `cuda:0`).
    pub devices: Vec<String>,
    /// CUDA runtime (`13.0`) or HIP runtime version of libtorch's GPU library.
    pub runtime_version: Option<String>,
    pub device_name: Option<String>,
    pub arch: Option<String>,
    pub device_memory_bytes: Option<u64>,
    pub sm_count: Option<u32>,
    pub l2_cache_bytes: Option<u64>,
    pub peak_dram_gbps: Option<f64>,
    pub driver_version: Option<String>,
    pub gpu_library: Option<String>,
    pub visible_gpus: usize,
    pub cudnn_version: Option<i64>,
    pub miopen_version: Option<i64>,
    pub hipblaslt_version: Option<i64>,
    /// Global SDP switches of the ATen context.
    pub sdp_enabled: BTreeMap<String, bool>,
    pub cpu_model: String,
    /// libtorch's intra-op CPU threads.
    pub threads: i32,
    pub os: String,
    /// Kernel-changing variables that are set.
    pub env: BTreeMap<String, String>,
    /// The grid profile and timing budget of the run (empty for `opbench env`).
    pub settings: BTreeMap<String, String>,
    /// `at::show_config()`: how libtorch was built.
    pub build_config: String,
}

impl EnvInfo {
    /// Collect the fingerprint for a run over `devices`.
    pub fn collect(run_id: &str, devices: &[Device]) -> Self {
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
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
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
