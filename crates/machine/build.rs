//! Bake the libtorch lib folder (for loading the GPU library at run time; torch-sys's, or
//! on Windows, where it exports none, the build Python's), the git
//! revision and the tch version into the machine's facts, and give its test binaries an
//! rpath to libtorch.
include!("../harness/rpath.in.rs");

fn main() {
    libtorch_rpath("DEP_TCH_LIBTORCH_LIB");
    // torch-sys exports its lib folder on Linux and macOS only; on Windows the build
    // Python's torch/lib is the one it linked
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")
        .ok()
        .map(std::path::PathBuf::from)
        .or_else(|| torch_dir_from_python().map(|d| d.join("lib")));
    if let Some(dir) = lib {
        println!("cargo:rustc-env=OPBENCH_LIBTORCH_LIB={}", dir.display());
    }
    let manifest =
        std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let git_dir = manifest.join("../../.git");
    for f in ["HEAD", "index"] {
        println!("cargo:rerun-if-changed={}", git_dir.join(f).display());
    }
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(&manifest)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(&manifest)
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    let rev = if rev.is_empty() {
        "unknown".to_string()
    } else if dirty {
        format!("{rev}-dirty")
    } else {
        rev
    };
    println!("cargo:rustc-env=OPBENCH_GIT_REV={rev}");
    println!(
        "cargo:rustc-env=OPBENCH_TCH_VERSION={}",
        tch_version(&manifest)
    );
}

/// The tch version in the workspace's Cargo.lock: the nearest one above the manifest,
/// looked up lexically (scripts/run.py builds other torch versions through a symlinked
/// `crates/`).
fn tch_version(manifest: &std::path::Path) -> String {
    for dir in manifest.ancestors() {
        let lock = dir.join("Cargo.lock");
        if let Ok(text) = std::fs::read_to_string(&lock) {
            println!("cargo:rerun-if-changed={}", lock.display());
            let mut lines = text.lines();
            while let Some(l) = lines.next() {
                if l.trim() == "name = \"tch\"" {
                    if let Some(v) = lines
                        .next()
                        .and_then(|v| v.trim().strip_prefix("version = "))
                    {
                        return v.trim_matches('"').to_string();
                    }
                }
            }
            break;
        }
    }
    "unknown".into()
}
