//! Where libtorch's GPU library and the ROCm libraries it needs are looked for: one plan,
//! made from folders and files alone, so each OS's rules are tested on fake trees anywhere.
//!
//! Three layouts of a ROCm torch are told apart ([`RocmLayout`]):
//! - the official wheel bundles the HIP runtime, rocBLAS and MIOpen in `torch/lib`, and
//!   `libtorch_hip.so` finds them through its own `$ORIGIN` run path;
//! - a TheRock (rocm-sdk) wheel keeps them in sibling packages of site-packages,
//!   `_rocm_sdk_core` and `_rocm_sdk_libraries_<family>`, under `lib/` on Linux and `bin/`
//!   on Windows. Python's torch loads them first (`rocm_sdk.initialize_process`); a Rust
//!   process must do the same, or `libtorch_hip.so` does not load;
//! - an SDK installed on the system (`HIP_PATH`, `ROCM_PATH`: `bin/` on Windows).
//!
//! On Windows the process's DLL search is set to the application folder, System32 and
//! [`SearchPlan::dll_dirs`] (`SetDefaultDllDirectories`), so PATH no longer counts: every
//! folder a DLL may come from must be in that list, and the GPU library is looked up in
//! those folders by file, never left to a search by name that cannot say why it failed.
//! This module never touches tch and loads nothing.

use std::path::{Path, PathBuf};

/// Whose loader rules a plan follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    Linux,
    Windows,
    Macos,
}

impl Os {
    /// The OS this was built for.
    pub const HOST: Os = if cfg!(windows) {
        Os::Windows
    } else if cfg!(target_os = "macos") {
        Os::Macos
    } else {
        Os::Linux
    };

    /// libtorch's GPU libraries, CUDA's first.
    pub fn gpu_library_names(self) -> &'static [&'static str] {
        match self {
            Os::Linux => &["libtorch_cuda.so", "libtorch_hip.so"],
            Os::Windows => &["torch_cuda.dll", "torch_hip.dll"],
            Os::Macos => &[],
        }
    }

    /// The folder of a ROCm package that holds its shared libraries.
    fn rocm_lib_folder(self) -> &'static str {
        match self {
            Os::Windows => "bin",
            Os::Linux | Os::Macos => "lib",
        }
    }

    /// The variable whose folders the loader searches by name.
    pub fn path_variable(self) -> &'static str {
        match self {
            Os::Windows => "PATH",
            Os::Linux => "LD_LIBRARY_PATH",
            Os::Macos => "DYLD_LIBRARY_PATH",
        }
    }
}

/// The ROCm libraries, by short name, in the order they are loaded before libtorch's GPU
/// library on Linux (the HIP runtime and its compiler first; then the libraries ATen calls).
/// On Linux `lib<name>.so*`; on Windows `<name>*.dll` (`amdhip64_7.dll`).
pub const ROCM_PRELOAD: &[&str] = &[
    "amd_comgr",
    "amdhip64",
    "hiprtc",
    "rocm_smi64",
    "roctx64",
    "rocprofiler-register",
    "rocblas",
    "hipblas",
    "hipblaslt",
    "rocsolver",
    "hipsolver",
    "rocsparse",
    "hipsparse",
    "hipsparselt",
    "rocfft",
    "hipfft",
    "rocrand",
    "hiprand",
    "MIOpen",
];

/// What a plan is made from: the torch build's lib folder and the environment's folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchInput {
    pub os: Os,
    /// `torch/lib` of the torch the build used.
    pub torch_lib: Option<PathBuf>,
    /// `HIP_PATH` and `ROCM_PATH`, where set.
    pub sdk_roots: Vec<PathBuf>,
    /// The folders of [`Os::path_variable`].
    pub path_dirs: Vec<PathBuf>,
}

impl SearchInput {
    /// This process's: `torch_lib` and the variables of the environment.
    pub fn from_env(torch_lib: Option<PathBuf>) -> SearchInput {
        let os = Os::HOST;
        let sdk_roots = ["HIP_PATH", "ROCM_PATH"]
            .iter()
            .filter_map(std::env::var_os)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .collect();
        let path_dirs = std::env::var_os(os.path_variable())
            .map(|v| std::env::split_paths(&v).collect())
            .unwrap_or_default();
        SearchInput {
            os,
            torch_lib,
            sdk_roots,
            path_dirs,
        }
    }
}

/// How this torch reaches its ROCm libraries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RocmLayout {
    /// TheRock's packages: `_rocm_sdk_core` and any `_rocm_sdk_libraries_*` beside torch.
    TheRock { folders: Vec<PathBuf> },
    /// The HIP runtime is in torch's own lib folder (the official wheels).
    Bundled,
    /// No ROCm libraries beside torch (a CUDA or CPU torch, or an SDK on the system).
    None,
}

/// One place the GPU library is tried: a file found in a folder, or a bare name left to
/// the loader's own search (the ld.so cache) because no folder holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub path: PathBuf,
    /// Whether the file was seen; a bare name that does not load is the CPU-only case.
    pub found: bool,
}

/// Where to look, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPlan {
    pub os: Os,
    /// `torch/lib` of the torch the build used (the input's).
    pub torch_lib: Option<PathBuf>,
    pub layout: RocmLayout,
    /// Windows: the folders added to the DLL search, in order.
    pub dll_dirs: Vec<PathBuf>,
    /// Linux: ROCm libraries loaded by full path before the GPU library.
    pub preload: Vec<PathBuf>,
    /// libtorch's GPU library: each file found, then each name found nowhere.
    pub candidates: Vec<Candidate>,
}

impl SearchPlan {
    pub fn new(input: &SearchInput) -> SearchPlan {
        let os = input.os;
        let layout = rocm_layout(os, input.torch_lib.as_deref());
        let mut dll_dirs = Vec::new();
        let mut preload = Vec::new();
        if os == Os::Windows {
            dll_dirs.extend(input.torch_lib.iter().cloned());
            if let RocmLayout::TheRock { folders } = &layout {
                dll_dirs.extend(folders.iter().cloned());
            }
            dll_dirs.extend(input.sdk_roots.iter().map(|r| r.join("bin")));
            dll_dirs.retain(|d| d.is_dir());
            dedup(&mut dll_dirs);
        } else if let RocmLayout::TheRock { folders } = &layout {
            for name in ROCM_PRELOAD {
                for f in folders {
                    preload.extend(library_files(os, f, name));
                }
            }
        }
        // the folders the GPU library may be in: torch's first, then the loader's
        let mut folders: Vec<PathBuf> = input.torch_lib.iter().cloned().collect();
        if os == Os::Windows {
            folders.extend(dll_dirs.iter().cloned());
        }
        folders.extend(input.path_dirs.iter().cloned());
        dedup(&mut folders);
        let mut candidates = Vec::new();
        for name in os.gpu_library_names() {
            let files: Vec<PathBuf> = folders
                .iter()
                .map(|d| d.join(name))
                .filter(|p| p.is_file())
                .collect();
            if files.is_empty() {
                candidates.push(Candidate {
                    path: PathBuf::from(name),
                    found: false,
                });
            }
            candidates.extend(
                files
                    .into_iter()
                    .map(|path| Candidate { path, found: true }),
            );
        }
        // files first: a found file that fails is the error to report
        candidates.sort_by_key(|c| !c.found);
        if os == Os::Windows {
            // a GPU library found on PATH needs its own folder (torch's) in the search
            dll_dirs.extend(
                candidates
                    .iter()
                    .filter(|c| c.found)
                    .filter_map(|c| c.path.parent().map(Path::to_path_buf)),
            );
            dedup(&mut dll_dirs);
        }
        SearchPlan {
            os,
            torch_lib: input.torch_lib.clone(),
            layout,
            dll_dirs,
            preload,
            candidates,
        }
    }

    /// Where the HIP runtime would come from: the preloaded or bundled file, else names.
    pub fn hip_runtime_candidates(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .preload
            .iter()
            .filter(|p| file_name(p).contains("amdhip64"))
            .cloned()
            .collect();
        let mut dirs: Vec<PathBuf> = self.torch_lib.iter().cloned().collect();
        dirs.extend(self.dll_dirs.iter().cloned());
        for d in &dirs {
            out.extend(library_files(self.os, d, "amdhip64"));
        }
        let names: &[&str] = match self.os {
            Os::Windows => &["amdhip64_7.dll", "amdhip64_6.dll", "amdhip64.dll"],
            Os::Linux => &[
                "libamdhip64.so.7",
                "libamdhip64.so.6",
                "libamdhip64.so.5",
                "libamdhip64.so",
            ],
            Os::Macos => &[],
        };
        out.extend(names.iter().map(PathBuf::from));
        dedup(&mut out);
        out
    }
}

/// TheRock's folders beside `torch_lib` (`site-packages/torch/lib`), or what torch/lib holds.
fn rocm_layout(os: Os, torch_lib: Option<&Path>) -> RocmLayout {
    let Some(lib) = torch_lib else {
        return RocmLayout::None;
    };
    if let Some(site) = lib.parent().and_then(Path::parent) {
        let mut folders = Vec::new();
        let core = site.join("_rocm_sdk_core").join(os.rocm_lib_folder());
        if core.is_dir() {
            folders.push(core);
        }
        let mut libs: Vec<PathBuf> = std::fs::read_dir(site)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| file_name(p).starts_with("_rocm_sdk_libraries"))
            .map(|p| p.join(os.rocm_lib_folder()))
            .filter(|p| p.is_dir())
            .collect();
        libs.sort();
        folders.extend(libs);
        if !folders.is_empty() {
            return RocmLayout::TheRock { folders };
        }
    }
    if library_files(os, lib, "amdhip64").is_empty() {
        RocmLayout::None
    } else {
        RocmLayout::Bundled
    }
}

/// The files of library `name` in `dir`: `lib<name>.so` and its versions on Linux (the
/// most specific name last), `<name>.dll` / `<name>_<N>.dll` on Windows.
fn library_files(os: Os, dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            let f = file_name(p);
            match os {
                Os::Windows => {
                    let lower = f.to_ascii_lowercase();
                    let stem = lower.strip_suffix(".dll").unwrap_or("");
                    let n = name.to_ascii_lowercase();
                    stem == n
                        || stem
                            .strip_prefix(&n)
                            .and_then(|r| r.strip_prefix('_').or(Some(r)))
                            .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
                }
                Os::Linux | Os::Macos => f
                    .strip_prefix(&format!("lib{name}.so"))
                    .is_some_and(|r| r.is_empty() || r.starts_with('.')),
            }
        })
        .collect();
    out.sort();
    // one file per library: the SONAME-like one (`libamdhip64.so.7`), not every alias
    if os != Os::Windows {
        let short = out
            .iter()
            .filter(|p| file_name(p).matches('.').count() == 2)
            .cloned()
            .collect::<Vec<_>>();
        if !short.is_empty() {
            return short;
        }
        out.truncate(1);
    }
    out
}

fn file_name(p: &Path) -> &str {
    p.file_name().and_then(|f| f.to_str()).unwrap_or("")
}

fn dedup(v: &mut Vec<PathBuf>) {
    let mut seen = std::collections::HashSet::new();
    v.retain(|p| seen.insert(p.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap_or(p)).ok();
        std::fs::write(p, b"fake").ok();
    }

    fn input(os: Os, torch_lib: &Path) -> SearchInput {
        SearchInput {
            os,
            torch_lib: Some(torch_lib.to_path_buf()),
            sdk_roots: Vec::new(),
            path_dirs: Vec::new(),
        }
    }

    /// TheRock on Linux: the HIP runtime and the libraries are loaded by full path from
    /// `_rocm_sdk_core/lib` and `_rocm_sdk_libraries_*/lib` before `libtorch_hip.so`.
    #[test]
    fn therock_linux_preloads_its_packages() {
        let t = tempfile::tempdir().unwrap();
        let site = t.path().join("site-packages");
        let lib = site.join("torch/lib");
        touch(&lib.join("libtorch_hip.so"));
        touch(&lib.join("libtorch_cpu.so"));
        let core = site.join("_rocm_sdk_core/lib");
        for f in [
            "libamdhip64.so",
            "libamdhip64.so.7",
            "libamdhip64.so.7.1.25424",
            "libamd_comgr.so.3",
            "libhiprtc.so.7",
        ] {
            touch(&core.join(f));
        }
        let fam = site.join("_rocm_sdk_libraries_gfx103X_dgpu/lib");
        touch(&fam.join("librocblas.so.5"));
        touch(&fam.join("libMIOpen.so.1"));
        touch(&fam.join("librocblas_extra.so.5")); // another library, not rocblas
        let plan = SearchPlan::new(&input(Os::Linux, &lib));
        assert_eq!(
            plan.layout,
            RocmLayout::TheRock {
                folders: vec![core.clone(), fam.clone()]
            }
        );
        assert_eq!(
            plan.preload,
            vec![
                core.join("libamd_comgr.so.3"),
                core.join("libamdhip64.so.7"),
                core.join("libhiprtc.so.7"),
                fam.join("librocblas.so.5"),
                fam.join("libMIOpen.so.1"),
            ]
        );
        assert!(plan.dll_dirs.is_empty());
        assert_eq!(
            plan.candidates,
            vec![
                Candidate {
                    path: lib.join("libtorch_hip.so"),
                    found: true
                },
                Candidate {
                    path: "libtorch_cuda.so".into(),
                    found: false
                },
            ]
        );
        assert_eq!(
            plan.hip_runtime_candidates()[0],
            core.join("libamdhip64.so.7")
        );
    }

    /// TheRock on Windows: its `bin` folders join torch's lib folder and the SDK's in the
    /// DLL search (PATH no longer counts once it is set); nothing is preloaded.
    #[test]
    fn therock_windows_adds_its_bin_folders() {
        let t = tempfile::tempdir().unwrap();
        let site = t.path().join("Lib/site-packages");
        let lib = site.join("torch/lib");
        touch(&lib.join("torch_hip.dll"));
        touch(&lib.join("c10.dll"));
        let core = site.join("_rocm_sdk_core/bin");
        touch(&core.join("amdhip64_7.dll"));
        touch(&core.join("amd_comgr0701.dll"));
        let fam = site.join("_rocm_sdk_libraries_gfx103X_dgpu/bin");
        touch(&fam.join("rocblas.dll"));
        let sdk = t.path().join("AMD/ROCm/6.4");
        std::fs::create_dir_all(sdk.join("bin")).unwrap();
        let path_dir = t.path().join("elsewhere");
        touch(&path_dir.join("torch_cuda.dll"));
        let mut inp = input(Os::Windows, &lib);
        inp.sdk_roots = vec![sdk.clone(), t.path().join("no-such-sdk")];
        inp.path_dirs = vec![path_dir.clone()];
        let plan = SearchPlan::new(&inp);
        assert_eq!(
            plan.dll_dirs,
            vec![
                lib.clone(),
                core.clone(),
                fam.clone(),
                sdk.join("bin"),
                path_dir.clone()
            ]
        );
        assert!(plan.preload.is_empty());
        // files found anywhere the loader looks, by full path: never a bare name
        assert_eq!(
            plan.candidates,
            vec![
                Candidate {
                    path: path_dir.join("torch_cuda.dll"),
                    found: true
                },
                Candidate {
                    path: lib.join("torch_hip.dll"),
                    found: true
                },
            ]
        );
        assert_eq!(
            plan.hip_runtime_candidates()[0],
            core.join("amdhip64_7.dll")
        );
    }

    /// The official wheel bundles the runtime in torch/lib: nothing to preload, and its
    /// own run path finds it. A CUDA torch has no ROCm layout at all.
    #[test]
    fn official_wheels_and_cuda() {
        let t = tempfile::tempdir().unwrap();
        let lib = t.path().join("site-packages/torch/lib");
        touch(&lib.join("libtorch_hip.so"));
        touch(&lib.join("libamdhip64.so"));
        let plan = SearchPlan::new(&input(Os::Linux, &lib));
        assert_eq!(plan.layout, RocmLayout::Bundled);
        assert!(plan.preload.is_empty());
        assert_eq!(plan.candidates[0].path, lib.join("libtorch_hip.so"));
        let t2 = tempfile::tempdir().unwrap();
        let lib2 = t2.path().join("site-packages/torch/lib");
        touch(&lib2.join("libtorch_cuda.so"));
        let plan = SearchPlan::new(&input(Os::Linux, &lib2));
        assert_eq!(plan.layout, RocmLayout::None);
        assert_eq!(
            plan.candidates,
            vec![
                Candidate {
                    path: lib2.join("libtorch_cuda.so"),
                    found: true
                },
                Candidate {
                    path: "libtorch_hip.so".into(),
                    found: false
                },
            ]
        );
        // the Windows official layout: torch/lib alone
        let t3 = tempfile::tempdir().unwrap();
        let lib3 = t3.path().join("torch/lib");
        touch(&lib3.join("torch_hip.dll"));
        touch(&lib3.join("amdhip64_6.dll"));
        let plan = SearchPlan::new(&input(Os::Windows, &lib3));
        assert_eq!(plan.layout, RocmLayout::Bundled);
        assert_eq!(plan.dll_dirs, vec![lib3.clone()]);
    }

    /// A build that knows no lib folder (torch-sys exports none on Windows) still finds
    /// the GPU library in the loader's folders, by file.
    #[test]
    fn no_lib_folder_uses_the_loader_folders() {
        let t = tempfile::tempdir().unwrap();
        touch(&t.path().join("torch_hip.dll"));
        let plan = SearchPlan::new(&SearchInput {
            os: Os::Windows,
            torch_lib: None,
            sdk_roots: Vec::new(),
            path_dirs: vec![t.path().to_path_buf()],
        });
        assert!(
            plan.candidates
                .iter()
                .any(|c| c.found && c.path == t.path().join("torch_hip.dll"))
        );
    }
}
