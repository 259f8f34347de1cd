//! Set an rpath for the harness's own test and bench binaries, and pass libtorch's lib
//! folder on to the op crates as DEP_OPBENCH_HARNESS_LIBTORCH_LIB (the machine crate bakes
//! it, the git revision and the tch version into the environment fingerprint). Also
//! TIMING_METHOD_HASH: a hash of the timing code, comments left out, that every run
//! records (`timing_method`), so that runs timed by different code are known apart.
include!("rpath.in.rs");

/// The sources whose code decides what a sample's time is.
const TIMING_SOURCES: &[&str] = &[
    "src/devtime.rs",
    "src/graph.rs",
    "src/cold.rs",
    "src/hostspeed.rs",
    "src/timing/sample.rs",
    "src/timing/measure.rs",
];

/// FNV-1a over the sources' lines that are code (comments and blank lines left out).
fn timing_method() -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for path in TIMING_SOURCES {
        println!("cargo:rerun-if-changed={path}");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with("//") {
                continue;
            }
            for b in line.bytes().chain([b'\n']) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    format!("{:012x}", h >> 16)
}

fn main() {
    libtorch_rpath("DEP_TCH_LIBTORCH_LIB");
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:libtorch_lib={dir}");
    }
    println!("cargo:rustc-env=TIMING_METHOD_HASH={}", timing_method());
}
