//! Set an rpath for the harness's own test and bench binaries, and pass libtorch's lib
//! folder on to the op crates as DEP_OPBENCH_HARNESS_LIBTORCH_LIB (the machine crate bakes
//! it, the git revision and the tch version into the environment fingerprint).
include!("rpath.in.rs");

fn main() {
    libtorch_rpath("DEP_TCH_LIBTORCH_LIB");
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:libtorch_lib={dir}");
    }
}
