// Shared by the build scripts of every crate whose binaries link libtorch (included with
// `include!`): give those binaries an rpath to the libtorch that the build used, so a user
// runs `cargo bench -p sdpa` with no LD_LIBRARY_PATH. Cargo does not add library folders
// outside the target dir to the loader path, and torch-sys sets no rpath on final binaries.
//
// `var` names the build-script variable that holds libtorch's lib folder.
#[allow(dead_code)]
fn libtorch_rpath(var: &str) {
    println!("cargo:rerun-if-env-changed={var}");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if let Ok(dir) = std::env::var(var) {
        if os == "linux" || os == "macos" {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}

/// The `torch` package folder of the Python that torch-sys uses (`python` when a virtualenv
/// is active, else `python3`, as torch-sys picks; `PYTHON` overrides): its `include` and
/// `lib` are libtorch's. For Windows, where torch-sys exports no lib folder.
#[allow(dead_code)]
fn torch_dir_from_python() -> Option<std::path::PathBuf> {
    println!("cargo:rerun-if-env-changed=PYTHON");
    let mut pythons: Vec<String> = std::env::var("PYTHON").into_iter().collect();
    if std::env::var_os("VIRTUAL_ENV").is_some() {
        pythons.push("python".into());
    }
    pythons.extend(["python3".into(), "python".into()]);
    pythons.into_iter().find_map(|py| {
        let out = std::process::Command::new(&py)
            .args(["-c", "import os, torch; print(os.path.dirname(torch.__file__))"])
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        let dir = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        dir.join("include").is_dir().then_some(dir)
    })
}
