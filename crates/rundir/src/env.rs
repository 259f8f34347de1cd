//! `env.json`: the environment fingerprint of a run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Everything a reader needs to judge a run. The harness fills it in (`EnvInfo::collect`);
/// readers get every field with a default, so older and partial files still load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Env {
    /// [`crate::SCHEMA_VERSION`] of the writer; absent (read as 1) before schema 2.
    pub schema_version: u32,
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
    /// What libtorch has in effect, whatever set it: `blas_backend` (the GEMM library ATen
    /// prefers), `rocm_fa_backend`, and on ROCm `hip_runtime` (the path of the HIP runtime
    /// the process loaded).
    pub torch_settings: BTreeMap<String, String>,
    /// The grid profile and timing budget of the run (empty for `opbench env`).
    pub settings: BTreeMap<String, String>,
    /// `at::show_config()`: how libtorch was built.
    pub build_config: String,
    /// The host's state when the run started, where the OS tells it (Linux): CPU frequency
    /// governor, current MHz of CPU 0, load average. Host time depends on it.
    pub host_state: BTreeMap<String, String>,
    /// What made the machine busy during the run, where it was (scripts/bench writes it at
    /// the run's end: `analysis::busy`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy: Option<String>,
}

impl Env {
    /// Pretty JSON, as written to env.json.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// `cpu`, `cuda` or `hip`: the backend, `cpu` where none is recorded.
    pub fn backend_name(&self) -> &str {
        if self.backend.is_empty() {
            "cpu"
        } else {
            &self.backend
        }
    }

    /// What the run measured on: the GPU's name (`gpu` if unknown), or on a CPU run the CPU
    /// model.
    pub fn device_label(&self) -> &str {
        match self.backend_name() {
            "cpu" => &self.cpu_model,
            _ => self.device_name.as_deref().unwrap_or("gpu"),
        }
    }

    /// The run's schema version: the recorded one, 1 where none is recorded.
    pub fn schema(&self) -> u32 {
        self.schema_version.max(1)
    }
}
