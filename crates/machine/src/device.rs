//! Devices: which backend, how to label it, how to wait for it.
//!
//! One [`Device`] type and one place that knows how to synchronize it; bench code calls
//! [`Device::sync`] and never matches on the backend itself.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::hip::HipProbe;
use crate::libsearch::{SearchInput, SearchPlan};

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

/// What loading libtorch's GPU library did: the plan it followed, each ROCm library
/// preloaded and each candidate tried, with the loader's answer.
#[derive(Debug, Clone)]
pub struct GpuLibraryReport {
    pub plan: SearchPlan,
    /// `(file, Ok(()) | Err(loader's message))` for each ROCm library preloaded (Linux,
    /// TheRock).
    pub preloaded: Vec<(PathBuf, Result<(), String>)>,
    /// Each candidate tried, in order, until one loaded.
    pub tried: Vec<(PathBuf, LoadOutcome)>,
}

/// One candidate's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadOutcome {
    Loaded,
    /// A bare name that no folder holds: the CPU-only case, not an error.
    NotFound,
    /// The file exists (or the loader found the name) but did not load: the OS's message.
    Failed(String),
}

impl GpuLibraryReport {
    /// The path or name that loaded.
    pub fn loaded(&self) -> Option<&Path> {
        self.tried
            .iter()
            .find(|(_, o)| *o == LoadOutcome::Loaded)
            .map(|(p, _)| p.as_path())
    }

    /// `path: OS message` for each library that exists but did not load, preloads
    /// included.
    pub fn errors(&self) -> Vec<String> {
        let pre = self
            .preloaded
            .iter()
            .filter_map(|(p, r)| r.as_ref().err().map(|e| format!("{}: {e}", p.display())));
        let tried = self.tried.iter().filter_map(|(p, o)| match o {
            LoadOutcome::Failed(e) => Some(format!("{}: {e}", p.display())),
            _ => None,
        });
        pre.chain(tried).collect()
    }
}

static GPU_LIBRARY: OnceLock<GpuLibraryReport> = OnceLock::new();

/// torch's lib folder as the build saw it (torch-sys's on Linux and macOS, the build
/// Python's torch on Windows, where torch-sys exports none).
pub fn torch_lib_dir() -> Option<PathBuf> {
    option_env!("OPBENCH_LIBTORCH_LIB").map(PathBuf::from)
}

/// Make sure libtorch's GPU library is loaded whenever it exists.
///
/// rustc links shared libraries `--as-needed`; nothing of ours calls into
/// `libtorch_cuda.so` / `libtorch_hip.so` directly, so the linker drops them and libtorch
/// then sees no GPU at all. Loading the library registers its CUDA/HIP hooks. Where it is
/// looked for is [`SearchPlan`]'s: torch's lib folder, the loader's folders, and on Windows
/// the ROCm SDK's folders added to the DLL search first; on Linux a TheRock wheel's ROCm
/// libraries are loaded by full path first, as `rocm_sdk.initialize_process` does for
/// Python. Returns the path that loaded, `None` for a CPU-only libtorch (see
/// [`gpu_library_errors`] for why a library that exists did not load).
pub fn load_gpu_library() -> Option<String> {
    gpu_library_report()
        .loaded()
        .map(|p| p.display().to_string())
}

/// The whole report of [`load_gpu_library`] (which it runs once).
pub fn gpu_library_report() -> &'static GpuLibraryReport {
    GPU_LIBRARY.get_or_init(|| {
        let plan = SearchPlan::new(&SearchInput::from_env(torch_lib_dir()));
        load_by_plan(plan)
    })
}

/// Why GPU libraries that exist did not load (`path: OS message`), for error messages.
pub fn gpu_library_errors() -> Vec<String> {
    gpu_library_report().errors()
}

/// Follow a plan: set the DLL search (Windows), preload (Linux), then try each candidate
/// until one loads.
pub fn load_by_plan(plan: SearchPlan) -> GpuLibraryReport {
    #[cfg(windows)]
    windows_dll_dirs(&plan.dll_dirs);
    let mut preloaded = Vec::new();
    for p in &plan.preload {
        // SAFETY: ROCm's own libraries, loaded as its Python package loads them; their
        // initialisers set up their own state only. Kept for the process's life.
        let r = unsafe { open_global(p) };
        preloaded.push((p.clone(), r));
    }
    let mut tried = Vec::new();
    for c in &plan.candidates {
        // SAFETY: loading libtorch's own GPU library runs its static initialisers,
        // which only register hooks with the already-loaded libtorch_cpu.
        match unsafe { libloading::Library::new(&c.path) } {
            Ok(lib) => {
                // keep it loaded for the life of the process
                std::mem::forget(lib);
                tried.push((c.path.clone(), LoadOutcome::Loaded));
                break;
            }
            Err(e) => {
                let msg = e.to_string();
                // a bare name the loader cannot find is the CPU-only case, not an error
                let missing = msg.contains("No such file") || msg.contains("(os error 126)");
                let outcome = if !c.found && missing {
                    LoadOutcome::NotFound
                } else {
                    LoadOutcome::Failed(msg)
                };
                tried.push((c.path.clone(), outcome));
            }
        }
    }
    GpuLibraryReport {
        plan,
        preloaded,
        tried,
    }
}

/// Load a library for the process's life with its symbols global (`RTLD_GLOBAL`, as
/// ctypes' preload does), so that a later library needing its SONAME gets this one.
///
/// # Safety
/// Runs the library's initialisers.
unsafe fn open_global(p: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: as the caller promises
        let lib =
            unsafe { Library::open(Some(p), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| e.to_string())?;
        std::mem::forget(lib);
        Ok(())
    }
    #[cfg(not(unix))]
    {
        // SAFETY: as the caller promises
        let lib = unsafe { libloading::Library::new(p) }.map_err(|e| e.to_string())?;
        std::mem::forget(lib);
        Ok(())
    }
}

/// Set the DLL search to the application folder, System32 and `dirs`.
#[cfg(windows)]
fn windows_dll_dirs(dirs: &[PathBuf]) {
    use std::os::windows::ffi::OsStrExt;
    #[link(name = "kernel32")]
    unsafe extern "system" {
        fn SetDefaultDllDirectories(flags: u32) -> i32;
        fn AddDllDirectory(dir: *const u16) -> *mut std::ffi::c_void;
    }
    // LOAD_LIBRARY_SEARCH_DEFAULT_DIRS: application dir, System32 and added directories
    const DEFAULT_DIRS: u32 = 0x0000_1000;
    // SAFETY: documented Win32 calls with NUL-terminated wide strings that outlive them.
    unsafe {
        SetDefaultDllDirectories(DEFAULT_DIRS);
        for d in dirs {
            let wide: Vec<u16> = d.as_os_str().encode_wide().chain(Some(0)).collect();
            AddDllDirectory(wide.as_ptr());
        }
    }
}

/// The HIP runtime, asked directly (where this torch's plan says it is, else by name).
pub fn hip_runtime() -> HipProbe {
    let report = gpu_library_report();
    crate::hip::probe(&report.plan.hip_runtime_candidates())
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
            return Err(format!(
                "OPBENCH_DEVICE=gpu but GPU {gpu_index} is not visible ({n} visible; {}); \
                 `scripts/doctor` says why",
                gpu_library_summary(gpu_library_report())
            ));
        }
    }
    Ok(out)
}

/// One clause on the GPU library: what loaded, or each file that failed with the OS's
/// message, or that none exists (a CPU-only torch).
pub fn gpu_library_summary(r: &GpuLibraryReport) -> String {
    let errors = r.errors();
    match r.loaded() {
        Some(p) if errors.is_empty() => format!("libtorch GPU library: {}", p.display()),
        Some(p) => format!(
            "libtorch GPU library: {} (failed first: {})",
            p.display(),
            errors.join("; ")
        ),
        None if errors.is_empty() => format!(
            "no libtorch GPU library exists ({} looked for in {}): a CPU-only torch",
            r.plan.os.gpu_library_names().join(", "),
            r.plan
                .torch_lib
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|| format!("the {} folders", r.plan.os.path_variable()))
        ),
        None => format!(
            "the libtorch GPU library exists but did not load: {}",
            errors.join("; ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libsearch::{Candidate, Os, RocmLayout};

    fn plan(candidates: Vec<Candidate>) -> SearchPlan {
        SearchPlan {
            torch_lib: None,
            os: Os::HOST,
            layout: RocmLayout::None,
            dll_dirs: Vec::new(),
            preload: Vec::new(),
            candidates,
        }
    }

    /// A GPU library that exists but does not load is an error with its path and the
    /// OS's message, never "none found"; a name no folder holds is the CPU-only case.
    #[test]
    fn a_library_that_exists_but_fails_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let bad = t.path().join(Os::HOST.gpu_library_names()[1]);
        std::fs::write(&bad, b"not a shared library").unwrap();
        let r = load_by_plan(plan(vec![
            Candidate {
                path: bad.clone(),
                found: true,
            },
            Candidate {
                path: "libtorch_no_such_gpu_library.so".into(),
                found: false,
            },
        ]));
        assert!(r.loaded().is_none());
        assert_eq!(r.tried[1].1, LoadOutcome::NotFound);
        let errors = r.errors();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with(&bad.display().to_string()),
            "{errors:?}"
        );
        assert!(
            errors[0].len() > bad.display().to_string().len() + 2,
            "{errors:?}"
        );
        let line = gpu_library_summary(&r);
        assert!(line.contains("exists but did not load"), "{line}");
        assert!(line.contains(&bad.display().to_string()), "{line}");
        // nothing exists: the CPU-only clause
        let none = load_by_plan(plan(vec![Candidate {
            path: "libtorch_no_such_gpu_library.so".into(),
            found: false,
        }]));
        assert!(gpu_library_summary(&none).contains("a CPU-only torch"));
    }

    /// A preload that fails is reported with its path; the plan goes on.
    #[test]
    fn a_failed_preload_is_reported() {
        let t = tempfile::tempdir().unwrap();
        let bad = t.path().join("libamdhip64.so.7");
        std::fs::write(&bad, b"x").unwrap();
        let mut p = plan(Vec::new());
        p.preload = vec![bad.clone()];
        let r = load_by_plan(p);
        assert!(r.preloaded[0].1.is_err());
        assert!(r.errors()[0].starts_with(&bad.display().to_string()));
    }
}
