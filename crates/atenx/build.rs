//! Compile cpp/atenx.cpp against the libtorch headers torch-sys found.
//!
//! torch-sys (links = "tch") exports its lib dir to direct dependents as
//! DEP_TCH_LIBTORCH_LIB; the headers live beside it in `../include`. Where it exports none
//! (Windows), the headers come from the torch package of the Python torch-sys uses;
//! LIBTORCH_INCLUDE overrides both.
use std::path::PathBuf;

include!("../harness/rpath.in.rs");

fn main() {
    libtorch_rpath("DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-changed=cpp/atenx.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH_INCLUDE");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")
        .ok()
        .map(PathBuf::from);
    // LIBTORCH_INCLUDE, else beside torch-sys's lib folder, else the user's Python's torch
    // (torch-sys exports no lib folder on Windows)
    let from_python = || torch_dir_from_python().map(|d| d.join("include"));
    let include = match std::env::var("LIBTORCH_INCLUDE") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => match lib
            .as_ref()
            .map(|l| l.join("../include"))
            .filter(|i| i.is_dir())
        {
            Some(inc) => inc,
            None => match from_python() {
                Some(inc) => inc,
                None => {
                    eprintln!(
                        "atenx: cannot find libtorch's headers: torch-sys exported no lib folder, \
                         LIBTORCH_INCLUDE is not set, and no python (PYTHON, python3, python) imports \
                         torch. Run scripts/setup, or set LIBTORCH_INCLUDE to torch's include folder."
                    );
                    std::process::exit(1);
                }
            },
        },
    };
    let msvc = std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("msvc");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .file("cpp/atenx.cpp");
    if msvc {
        build.flag("/std:c++17").flag("/EHsc");
    } else {
        // torch 2.x wheels use the C++11 ABI; LIBTORCH_CXX11_ABI=0 for an old libtorch
        let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into());
        build
            .flag("-std=c++17")
            .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"));
    }
    build.compile("atenx");
    println!(
        "cargo:rustc-env=ATENX_CUDAGRAPH_FINGERPRINT={}",
        cuda_graph_fingerprint(&include)
    );
    if let Some(lib) = lib {
        // pass it on so crates below us can set an rpath
        println!("cargo:libtorch_lib={}", lib.display());
    }
}

/// A fingerprint of `at::cuda::CUDAGraph`'s declaration in the headers built against: FNV-1a
/// over the struct's lines with comments and blank lines dropped and whitespace trimmed, so
/// that a changed member or signature changes it while a reworded comment does not.
/// `none` when the header is missing.
fn cuda_graph_fingerprint(include: &std::path::Path) -> String {
    let header = include.join("ATen/cuda/CUDAGraph.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let Ok(text) = std::fs::read_to_string(&header) else {
        return "none".into();
    };
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("struct TORCH_CUDA_CPP_API CUDAGraph") {
            inside = true;
        }
        if !inside || line.is_empty() || line.starts_with("//") {
            continue;
        }
        for b in line.bytes().chain([b'\n']) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        if line == "};" {
            break;
        }
    }
    if inside {
        format!("{hash:016x}")
    } else {
        "none".into()
    }
}
