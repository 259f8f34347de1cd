//! The HIP runtime, asked directly: is a ROCm runtime here, which version, and does it see
//! an AMD GPU. This answers "a ROCm runtime is here, but no AMD GPU" apart from what
//! libtorch says, and it needs no libtorch: the runtime (`libamdhip64.so.*`,
//! `amdhip64_*.dll`) is opened by itself and three of its C functions are called.

use std::ffi::{CStr, c_char, c_int};
use std::fmt;
use std::path::PathBuf;

/// `hipErrorNoDevice`, as hip_runtime_api.h numbers it.
pub const HIP_ERROR_NO_DEVICE: i32 = 100;

/// What asking the HIP runtime gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HipProbe {
    /// No HIP runtime opened: each name or file tried, with the loader's message.
    Absent { tried: Vec<String> },
    /// A runtime opened but lacks the functions asked for.
    Broken { library: String, error: String },
    /// A runtime answered.
    Present(HipRuntime),
}

/// A HIP runtime's answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HipRuntime {
    pub library: String,
    /// `hipRuntimeGetVersion`: HIP's `major * 10^7 + minor * 10^5 + patch`.
    pub runtime_version: Option<i32>,
    pub driver_version: Option<i32>,
    /// `hipGetDeviceCount`: the count, or the error's code and name.
    pub devices: Result<i32, (i32, String)>,
}

impl HipRuntime {
    /// GPUs it sees (0 on an error such as `hipErrorNoDevice`).
    pub fn device_count(&self) -> i32 {
        self.devices.as_ref().copied().unwrap_or(0)
    }
}

impl fmt::Display for HipProbe {
    /// One line: what is here, and whether it sees a GPU.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HipProbe::Absent { tried } => write!(
                f,
                "no HIP runtime ({} tried: {})",
                tried.len(),
                tried.first().map(String::as_str).unwrap_or("nothing")
            ),
            HipProbe::Broken { library, error } => {
                write!(f, "{library} opened but is not a HIP runtime: {error}")
            }
            HipProbe::Present(rt) => {
                let ver = rt.runtime_version.map(crate::gpu_facts::hip_version);
                let ver = ver.as_deref().unwrap_or("version unknown");
                match &rt.devices {
                    Ok(n) if *n > 0 => {
                        write!(f, "HIP runtime {ver} ({}): {n} AMD GPU(s)", rt.library)
                    }
                    Ok(_) => write!(
                        f,
                        "a ROCm runtime is here (HIP {ver}, {}), but no AMD GPU",
                        rt.library
                    ),
                    Err((code, name)) => write!(
                        f,
                        "a ROCm runtime is here (HIP {ver}, {}), but no AMD GPU: \
                         hipGetDeviceCount said {name} ({code})",
                        rt.library
                    ),
                }
            }
        }
    }
}

type IntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
type ErrName = unsafe extern "C" fn(c_int) -> *const c_char;

/// Open the first of `candidates` that loads (files or names) and ask it.
pub fn probe(candidates: &[PathBuf]) -> HipProbe {
    let mut tried = Vec::new();
    for c in candidates {
        // SAFETY: the HIP runtime's initialisers only set up its own state; it is kept
        // loaded for the process's life (HIP does not support being unloaded).
        let lib = match unsafe { libloading::Library::new(c) } {
            Ok(lib) => lib,
            Err(e) => {
                tried.push(format!("{}: {e}", c.display()));
                continue;
            }
        };
        let library = c.display().to_string();
        // SAFETY: the signatures are hip_runtime_api.h's; each is called with a valid
        // out-pointer.
        let out = unsafe {
            let count = lib.get::<IntOut>(b"hipGetDeviceCount\0");
            let (Ok(count), Ok(rt), Ok(drv)) = (
                count,
                lib.get::<IntOut>(b"hipRuntimeGetVersion\0"),
                lib.get::<IntOut>(b"hipDriverGetVersion\0"),
            ) else {
                return HipProbe::Broken {
                    library,
                    error: "no hipGetDeviceCount, hipRuntimeGetVersion or hipDriverGetVersion"
                        .into(),
                };
            };
            let name = lib.get::<ErrName>(b"hipGetErrorName\0").ok();
            let ask = |f: &IntOut| {
                let mut v: c_int = -1;
                let rc = f(&mut v);
                (rc, v)
            };
            let (rc_rt, rt) = ask(&rt);
            let (rc_drv, drv) = ask(&drv);
            let (rc, n) = ask(&count);
            let devices = if rc == 0 {
                Ok(n)
            } else {
                let text = name
                    .map(|f| f(rc))
                    .filter(|p| !p.is_null())
                    .map(|p| CStr::from_ptr(p).to_string_lossy().into_owned())
                    .unwrap_or_else(|| format!("error {rc}"));
                Err((rc, text))
            };
            HipRuntime {
                library,
                runtime_version: (rc_rt == 0).then_some(rt),
                driver_version: (rc_drv == 0 && drv > 0).then_some(drv),
                devices,
            }
        };
        std::mem::forget(lib);
        return HipProbe::Present(out);
    }
    HipProbe::Absent { tried }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing to open: absent, each try named.
    #[test]
    fn absent_runtime_names_what_was_tried() {
        let t = tempfile::tempdir().unwrap();
        let fake = t.path().join("libamdhip64.so.7");
        std::fs::write(&fake, b"not a library").unwrap();
        let p = probe(&[fake.clone(), PathBuf::from("libamdhip64-no-such.so")]);
        let HipProbe::Absent { tried } = &p else {
            panic!("{p:?}")
        };
        assert_eq!(tried.len(), 2);
        assert!(
            tried[0].starts_with(&fake.display().to_string()),
            "{tried:?}"
        );
        assert!(
            p.to_string().starts_with("no HIP runtime (2 tried: "),
            "{p}"
        );
    }

    /// A library without HIP's functions is not taken for a runtime.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_library_that_is_not_hip() {
        let p = probe(&[PathBuf::from("libm.so.6")]);
        assert!(matches!(p, HipProbe::Broken { .. }), "{p:?}");
    }

    /// The answer a real HIP runtime gives on a machine with no AMD GPU (Debian's
    /// `libamdhip64-5`, which scripts/test installs): here, a version, no device. Without
    /// the package, the answer is "absent", each name tried.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_real_hip_runtime_without_a_gpu() {
        let debian = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5");
        let names: Vec<PathBuf> = ["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let p = probe(&names);
        if !debian.exists() && !std::path::Path::new("/opt/rocm").exists() {
            assert!(
                matches!(&p, HipProbe::Absent { tried } if tried.len() == 3),
                "{p:?}"
            );
            return;
        }
        let HipProbe::Present(rt) = &p else {
            panic!(
                "{} is installed, but no HIP runtime answered: {p}",
                debian.display()
            )
        };
        assert!(rt.runtime_version.is_some_and(|v| v > 0), "{rt:?}");
        if std::path::Path::new("/dev/kfd").exists() {
            return; // a machine with an AMD GPU: its count is its own
        }
        assert_eq!(rt.device_count(), 0, "{rt:?}");
        let line = p.to_string();
        assert!(
            line.contains("a ROCm runtime is here") && line.contains("but no AMD GPU"),
            "{line}"
        );
        if let Err((code, _)) = &rt.devices {
            assert_eq!(*code, HIP_ERROR_NO_DEVICE, "{rt:?}");
        }
    }
}
