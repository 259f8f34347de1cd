//! Devices: which backend, how to label it, how to wait for it.
//!
//! One [`Device`] type and one place that knows how to synchronize it; bench code calls
//! [`Device::sync`] and never matches on the backend itself.

use std::fmt;
use std::sync::OnceLock;

pub use rundir::Backend;

/// The GPU backend of this libtorch: `Hip` on ROCm builds, `Cuda` otherwise.
pub fn gpu_backend() -> Backend {
    if tch::utils::has_hip() || atenx::has_rocm() {
        Backend::Hip
    } else {
        Backend::Cuda
    }
}

/// A device a case runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    pub backend: Backend,
    pub index: usize,
}

impl Device {
    pub const CPU: Device = Device {
        backend: Backend::Cpu,
        index: 0,
    };

    pub fn gpu(index: usize) -> Self {
        Device {
            backend: gpu_backend(),
            index,
        }
    }

    pub fn is_gpu(&self) -> bool {
        self.backend != Backend::Cpu
    }

    /// Its label in the run directory.
    pub fn id(&self) -> rundir::DeviceId {
        rundir::DeviceId {
            backend: self.backend,
            index: self.index,
        }
    }

    /// The tch device: HIP GPUs are `Cuda(i)` in PyTorch's API.
    pub fn tch(&self) -> tch::Device {
        match self.backend {
            Backend::Cpu => tch::Device::Cpu,
            Backend::Cuda | Backend::Hip => tch::Device::Cuda(self.index),
        }
    }

    /// Wait until all work queued on this device has finished (no-op on CPU, where calls
    /// complete before they return).
    pub fn sync(&self) {
        if self.is_gpu() {
            tch::Cuda::synchronize(self.index as i64);
        }
    }
}

impl fmt::Display for Device {
    /// `cpu`, `cuda:0`, `hip:0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.id().fmt(f)
    }
}

/// Which GPU library was loaded by [`load_gpu_library`], if any.
static GPU_LIBRARY: OnceLock<Option<String>> = OnceLock::new();

/// Make sure libtorch's GPU library is loaded whenever it exists.
///
/// rustc links shared libraries `--as-needed`; nothing of ours calls into
/// `libtorch_cuda.so` / `libtorch_hip.so` directly, so the linker drops them and libtorch
/// then sees no GPU at all. Loading the library registers its CUDA/HIP hooks. Tries the
/// libtorch folder the build used, then the loader's search path (LD_LIBRARY_PATH, PATH on
/// Windows). Returns the path or name that loaded, `None` for a CPU-only libtorch.
pub fn load_gpu_library() -> Option<String> {
    GPU_LIBRARY
        .get_or_init(|| {
            let names: &[&str] = if cfg!(windows) {
                &["torch_cuda.dll", "torch_hip.dll"]
            } else if cfg!(target_os = "macos") {
                &[]
            } else {
                &["libtorch_cuda.so", "libtorch_hip.so"]
            };
            let mut candidates: Vec<String> = Vec::new();
            if let Some(dir) = option_env!("OPBENCH_LIBTORCH_LIB") {
                let dir = std::path::Path::new(dir);
                candidates.extend(names.iter().map(|n| dir.join(n).display().to_string()));
            }
            candidates.extend(names.iter().map(|n| n.to_string()));
            for c in candidates {
                // SAFETY: loading libtorch's own GPU library runs its static initialisers,
                // which only register hooks with the already-loaded libtorch_cpu.
                if let Ok(lib) = unsafe { libloading::Library::new(&c) } {
                    // keep it loaded for the life of the process
                    std::mem::forget(lib);
                    return Some(c);
                }
            }
            None
        })
        .clone()
}

/// GPUs libtorch can see (after loading its GPU library).
pub fn gpu_count() -> usize {
    load_gpu_library();
    usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
}

/// Which devices to measure: `OPBENCH_DEVICE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    Cpu,
    Gpu,
    All,
}

impl DeviceChoice {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cpu" => Some(DeviceChoice::Cpu),
            "gpu" => Some(DeviceChoice::Gpu),
            "all" => Some(DeviceChoice::All),
            _ => None,
        }
    }
}

/// The devices for a choice: the CPU and/or GPU `gpu_index`. Asking for a GPU when none is
/// visible is an error, never a silent fall-back to the CPU.
pub fn select_devices(choice: DeviceChoice, gpu_index: usize) -> Result<Vec<Device>, String> {
    let mut out = Vec::new();
    if choice != DeviceChoice::Gpu {
        out.push(Device::CPU);
    }
    if choice != DeviceChoice::Cpu {
        let n = gpu_count();
        if gpu_index < n {
            out.push(Device::gpu(gpu_index));
        } else if choice == DeviceChoice::Gpu {
            let lib = load_gpu_library().unwrap_or_else(|| "none found".into());
            return Err(format!(
                "OPBENCH_DEVICE=gpu but GPU {gpu_index} is not visible \
                 ({n} visible; libtorch GPU library: {lib})"
            ));
        }
    }
    Ok(out)
}
