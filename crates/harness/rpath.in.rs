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
