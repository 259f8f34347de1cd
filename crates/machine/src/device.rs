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

/// What [`load_gpu_library`] found: the library that loaded, or why each candidate did not.
#[derive(Debug, Clone)]
struct GpuLibrary {
    loaded: Option<String>,
    /// `name: OS message` for each candidate that exists but did not load.
    errors: Vec<String>,
}

static GPU_LIBRARY: OnceLock<GpuLibrary> = OnceLock::new();

/// Make sure libtorch's GPU library is loaded whenever it exists.
///
/// rustc links shared libraries `--as-needed`; nothing of ours calls into
/// `libtorch_cuda.so` / `libtorch_hip.so` directly, so the linker drops them and libtorch
/// then sees no GPU at all. Loading the library registers its CUDA/HIP hooks. Tries the
/// libtorch folder the build used, then the loader's search path (LD_LIBRARY_PATH, PATH on
/// Windows). Returns the path or name that loaded, `None` for a CPU-only libtorch (see
/// [`gpu_library_errors`] for why a library that exists did not load).
///
/// On Windows, torch's lib folder and the ROCm SDK's `bin` folders (`HIP_PATH`,
/// `ROCM_PATH`) are first added to the DLL search path, as `torch/__init__.py` and
/// `_rocm_init` do for Python, so `torch_hip.dll` finds `amdhip64_*.dll`, rocBLAS and MIOpen.
pub fn load_gpu_library() -> Option<String> {
    GPU_LIBRARY.get_or_init(find_gpu_library).loaded.clone()
}

/// Why GPU libraries that exist did not load (`name: OS message`), for error messages.
pub fn gpu_library_errors() -> Vec<String> {
    GPU_LIBRARY.get_or_init(find_gpu_library).errors.clone()
}

fn find_gpu_library() -> GpuLibrary {
    let names: &[&str] = if cfg!(windows) {
        &["torch_cuda.dll", "torch_hip.dll"]
    } else if cfg!(target_os = "macos") {
        &[]
    } else {
        &["libtorch_cuda.so", "libtorch_hip.so"]
    };
    let lib_dir = option_env!("OPBENCH_LIBTORCH_LIB").map(std::path::PathBuf::from);
    #[cfg(windows)]
    windows_dll_dirs(lib_dir.as_deref());
    let mut candidates: Vec<(String, bool)> = Vec::new();
    if let Some(dir) = &lib_dir {
        candidates.extend(names.iter().map(|n| {
            let p = dir.join(n);
            let exists = p.is_file();
            (p.display().to_string(), exists)
        }));
    }
    // by name: whether it exists is only known by trying
    candidates.extend(names.iter().map(|n| (n.to_string(), true)));
    let mut errors = Vec::new();
    for (c, exists) in candidates {
        if !exists {
            continue;
        }
        // SAFETY: loading libtorch's own GPU library runs its static initialisers,
        // which only register hooks with the already-loaded libtorch_cpu.
        match unsafe { libloading::Library::new(&c) } {
            Ok(lib) => {
                // keep it loaded for the life of the process
                std::mem::forget(lib);
                return GpuLibrary {
                    loaded: Some(c),
                    errors,
                };
            }
            Err(e) => {
                let msg = e.to_string();
                // a name the loader cannot find is the CPU-only case, not an error
                let missing = msg.contains("No such file") || msg.contains("(os error 126)");
                if !missing || c.contains(std::path::MAIN_SEPARATOR) {
                    errors.push(format!("{c}: {msg}"));
                }
            }
        }
    }
    GpuLibrary {
        loaded: None,
        errors,
    }
}

/// Add torch's lib folder and the ROCm SDK's bin folders to the DLL search path.
#[cfg(windows)]
fn windows_dll_dirs(lib_dir: Option<&std::path::Path>) {
    use std::os::windows::ffi::OsStrExt;
    #[link(name = "kernel32")]
    unsafe extern "system" {
        fn SetDefaultDllDirectories(flags: u32) -> i32;
        fn AddDllDirectory(dir: *const u16) -> *mut std::ffi::c_void;
    }
    // LOAD_LIBRARY_SEARCH_DEFAULT_DIRS: application dir, System32 and added directories
    const DEFAULT_DIRS: u32 = 0x0000_1000;
    let mut dirs: Vec<std::path::PathBuf> = lib_dir.into_iter().map(Into::into).collect();
    for var in ["HIP_PATH", "ROCM_PATH"] {
        if let Some(root) = std::env::var_os(var) {
            dirs.push(std::path::PathBuf::from(root).join("bin"));
        }
    }
    // SAFETY: documented Win32 calls with NUL-terminated wide strings that outlive them.
    unsafe {
        SetDefaultDllDirectories(DEFAULT_DIRS);
        for d in dirs.iter().filter(|d| d.is_dir()) {
            let wide: Vec<u16> = d.as_os_str().encode_wide().chain(Some(0)).collect();
            AddDllDirectory(wide.as_ptr());
        }
    }
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
            let why = gpu_library_errors();
            let why = if why.is_empty() {
                String::new()
            } else {
                format!("; failed to load: {}", why.join("; "))
            };
            return Err(format!(
                "OPBENCH_DEVICE=gpu but GPU {gpu_index} is not visible \
                 ({n} visible; libtorch GPU library: {lib}{why})"
            ));
        }
    }
    Ok(out)
}
