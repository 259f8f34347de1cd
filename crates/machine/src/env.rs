//! The environment fingerprint written to `env.json` and printed by `opbench env`.

use std::collections::BTreeMap;

use crate::device::{Backend, Device, gpu_backend, gpu_count, load_gpu_library};

use crate::gpu_facts::{self, GpuFacts};

/// The tch this binary was built with (from the workspace's Cargo.lock, by build.rs).
pub const TCH_VERSION: &str = env!("OPBENCH_TCH_VERSION");

/// Variables that change which kernels ROCm / PyTorch pick, or how fast they run; recorded
/// when set.
const KERNEL_VARS: &[&str] = &[
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_BLAS_PREFER_HIPBLASLT",
    "TORCH_BLAS_PREFER_CUBLASLT",
    "TORCH_ROCM_FA_PREFER_CK",
    "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "PYTORCH_NO_HIP_MEMORY_CACHING",
    "AMD_SERIALIZE_KERNEL",
    "AMD_SERIALIZE_COPY",
    "CUDA_LAUNCH_BLOCKING",
    "HIP_LAUNCH_BLOCKING",
    "HIP_FORCE_DEV_KERNARG",
    "GPU_MAX_HW_QUEUES",
    "ROCM_PATH",
    "HIP_PATH",
    "CUBLAS_WORKSPACE_CONFIG",
    "OMP_NUM_THREADS",
];
/// Families of such variables (issue 71's knobs): the HSA runtime (`HSA_OVERRIDE_GFX_VERSION`
/// among them), HIP's (`HIP_FORCE_DEV_KERNARG`), rocBLAS, hipBLASLt, MIOpen, PyTorch's own
/// (`TORCH_*`, `PYTORCH_*`: TunableOp, the allocators, the GEMM library), ATen's CPU dispatch
/// (`ATEN_CPU_CAPABILITY`), the CUDA driver's (`CUDA_*`), cuBLAS and cuBLASLt, OpenMP and MKL.
const KERNEL_VAR_PREFIXES: &[&str] = &[
    "HSA_",
    "HIP_",
    "ROCBLAS_",
    "HIPBLASLT_",
    "MIOPEN_",
    "TORCH_",
    "PYTORCH_",
    "ATEN_",
    "CUDA_",
    "CUBLAS_",
    "CUBLASLT_",
    "OMP_",
    "MKL_",
];

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
    // versionCUDART() throws on ROCm (no CUDART_VERSION there): HIP's comes from the HIP
    // runtime itself
    let runtime_version = facts.runtime_version.clone().or_else(|| {
        atenx::runtime_version()
            .filter(|_| gpu_count() > 0 && gpu_backend() == Backend::Cuda)
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10))
    });
    EnvInfo {
        schema_version: rundir::SCHEMA_VERSION,
        run_id: run_id.to_string(),
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        git_revision: settings::var("OPBENCH_GIT_REV")
            .unwrap_or_else(|| env!("OPBENCH_GIT_REV").to_string()),
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
        env: kernel_vars(std::env::vars()),
        torch_settings: torch_settings(facts.runtime_path.as_deref()),
        settings: BTreeMap::new(),
        build_config: atenx::show_config(),
        host_state: {
            // the GPU's clock, load, heat and throttling as the process starts (its end is
            // added by the last process of the run or execution)
            let mut h = host_state();
            h.extend(crate::state::state_entries(
                "start",
                gpu.and_then(crate::state::probe_for).as_ref(),
            ));
            h
        },
        busy: None,
    }
}

/// The host's CPU frequency governor, CPU 0's current MHz, the load average and the boot id
/// (Linux).
fn host_state() -> BTreeMap<String, String> {
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))] // filled on Linux only
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
        // which boot of which machine: two runs with the same boot id were measured in
        // one boot (one lease, one VM), which `opbench compare` needs to know
        if let Some(b) = read("/proc/sys/kernel/random/boot_id") {
            out.insert("boot_id".into(), b);
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

/// Settings libtorch has in effect, whatever set them.
fn torch_settings(hip_runtime: Option<&str>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("blas_backend".into(), atenx::blas_backend().to_string());
    out.insert(
        "rocm_fa_backend".into(),
        atenx::rocm_fa_backend().to_string(),
    );
    if let Some(p) = hip_runtime {
        out.insert("hip_runtime".into(), p.to_string());
    }
    let errors = crate::device::gpu_library_errors();
    if !errors.is_empty() {
        out.insert("gpu_library_errors".into(), errors.join("; "));
    }
    out
}

/// The variables of `vars` that change kernels or timings.
pub fn kernel_vars(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    vars.filter(|(k, _)| {
        KERNEL_VARS.contains(&k.as_str()) || KERNEL_VAR_PREFIXES.iter().any(|p| k.starts_with(p))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_the_variables_that_change_kernels_and_no_others() {
        let vars = [
            ("TORCH_BLAS_PREFER_HIPBLASLT", "0"),
            ("PYTORCH_TUNABLEOP_ENABLED", "1"),
            ("PYTORCH_TUNABLEOP_FILENAME", "tuned.csv"),
            ("HSA_OVERRIDE_GFX_VERSION", "10.3.0"),
            ("ROCBLAS_LAYER", "2"),
            ("HIPBLASLT_LOG_MASK", "32"),
            ("MIOPEN_ENABLE_LOGGING_CMD", "1"),
            ("AMD_SERIALIZE_KERNEL", "3"),
            ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
            ("HIP_PATH", "C:\\Program Files\\AMD\\ROCm\\6.4"),
            ("ATEN_CPU_CAPABILITY", "default"),
            ("HIP_FORCE_DEV_KERNARG", "1"),
            ("CUDA_MODULE_LOADING", "EAGER"),
            ("MKL_NUM_THREADS", "1"),
            ("HOME", "/root"),
            ("PATH", "/usr/bin"),
            ("OPBENCH_SAMPLES", "10"),
        ];
        let got = kernel_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        assert_eq!(got.len(), vars.len() - 3, "{got:?}");
        assert_eq!(got["TORCH_BLAS_PREFER_HIPBLASLT"], "0");
        assert_eq!(got["PYTORCH_TUNABLEOP_FILENAME"], "tuned.csv");
        assert_eq!(got["ATEN_CPU_CAPABILITY"], "default");
        assert!(!got.contains_key("HOME") && !got.contains_key("OPBENCH_SAMPLES"));
    }
}

/// The CPU's last-level cache in bytes, from sysfs (Linux; the highest cache level of CPU
/// 0), or `None` where it cannot be read.
pub fn cpu_last_level_cache() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
        let mut best: Option<(u32, u64)> = None;
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let read = |f: &str| std::fs::read_to_string(entry.path().join(f)).ok();
            let (Some(level), Some(size)) = (read("level"), read("size")) else {
                continue;
            };
            let Ok(level) = level.trim().parse::<u32>() else {
                continue;
            };
            let Some(bytes) = parse_cache_size(size.trim()) else {
                continue;
            };
            if best.is_none_or(|(l, _)| level > l) {
                best = Some((level, bytes));
            }
        }
        best.map(|(_, b)| b)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// sysfs's cache size: `32K`, `1024K`, `32M` or a plain byte count.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_cache_size(s: &str) -> Option<u64> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let mult = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32K"), Some(32 << 10));
        assert_eq!(parse_cache_size("105M"), Some(105 << 20));
        assert_eq!(parse_cache_size("4096"), Some(4096));
        assert_eq!(parse_cache_size("12X"), None);
        assert_eq!(parse_cache_size(""), None);
        if cfg!(target_os = "linux") {
            // where sysfs has caches, the last level is at least a megabyte
            if let Some(b) = cpu_last_level_cache() {
                assert!(b >= 1 << 20, "{b}");
            }
        }
    }
}
