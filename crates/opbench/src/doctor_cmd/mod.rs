//! `opbench doctor`: one screen that says what this machine's torch stack is and what
//! opbench can measure on it, then the next commands.
//!
//! Two halves: scripts/doctor.py asks the Python's torch (build, GPU and arch, SDPA
//! backends, BLAS, graph capture, tracer, Triton, knobs by arch, a decode step's ops under
//! the profiler), and this process, when built with the `torch` feature, says what the
//! Rust side loads: libtorch's GPU library by its search plan, the HIP runtime asked
//! directly, and the GPUs libtorch sees from Rust. The Python seeing a GPU that the Rust
//! side cannot is the failure this exists to name (a Windows or TheRock torch whose
//! libraries the loader did not find). Exit 0 when what scripts/bench is asked to measure
//! works, 1 with the reason otherwise, 2 on bad input.

use std::path::PathBuf;
use std::process::Command;

use serde::Deserialize;

use crate::CliError;
use crate::peer_cmd::{default_python, script};

mod screen;
use screen::{print_next, print_screen};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Python whose torch is checked [default: the one scripts/doctor picks (OPBENCH_PYTHON,
    /// an active venv, the cached one), passed as $OPBENCH_TORCH_PYTHON; else python3]
    #[arg(long)]
    python: Option<PathBuf>,
    /// What scripts/bench would be asked to measure: cpu, gpu or all [default:
    /// $OPBENCH_DEVICE, else all]
    #[arg(long, value_parser = ["cpu", "gpu", "all"])]
    device: Option<String>,
    /// Which GPU `gpu` and `all` mean [default: $OPBENCH_GPU, else 0]
    #[arg(long)]
    gpu: Option<usize>,
    /// Only the check scripts/bench makes first: one line, exit 1 when the device asked
    /// for is not usable (no SDPA, smoke test or knobs)
    #[arg(long)]
    check: bool,
}

/// scripts/doctor.py's JSON (see its doc).
#[derive(Debug, Deserialize)]
struct Report {
    error: Option<String>,
    torch: Option<TorchFacts>,
    gpu: Option<GpuFacts>,
    blas: Option<Blas>,
    tracer: Option<Tracer>,
    triton: Option<Importable>,
    transformers: Option<Importable>,
    knobs: Option<Knobs>,
    #[serde(default)]
    sdpa: Vec<SdpaRow>,
    graph: Option<Graph>,
    smoke: Option<Smoke>,
    seconds: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct TorchFacts {
    python: String,
    python_version: String,
    version: String,
    build: String,
    hip: Option<String>,
    cuda: Option<String>,
    os: String,
}

#[derive(Debug, Deserialize)]
struct GpuFacts {
    available: bool,
    why: Option<String>,
    count: usize,
    index: Option<usize>,
    name: Option<String>,
    arch: Option<String>,
    memory_bytes: Option<u64>,
    hsa_override: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Blas {
    asked: Option<std::collections::BTreeMap<String, String>>,
    in_effect: String,
}

#[derive(Debug, Deserialize)]
struct Tracer {
    kineto: bool,
    gpu_activity: bool,
}

#[derive(Debug, Deserialize)]
/// A Python package's import: Triton, transformers.
struct Importable {
    importable: bool,
    version: Option<String>,
    why: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Knobs {
    file: String,
    error: Option<String>,
    knobs: Vec<KnobRow>,
}

#[derive(Debug, Deserialize)]
struct KnobRow {
    name: String,
    applies: bool,
    why: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SdpaRow {
    backend: String,
    ran: bool,
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Graph {
    ok: bool,
    why: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Smoke {
    device: String,
    dtype: String,
    traced: bool,
    ops: Vec<SmokeRow>,
}

#[derive(Debug, Deserialize)]
struct SmokeRow {
    op: String,
    ran_on: Option<String>,
    kernels: Vec<String>,
    syncs: Vec<String>,
    to_host: u32,
    error: Option<String>,
}

/// What the Rust side saw: `None` in a build without libtorch.
#[derive(Debug)]
struct RustSide {
    library_lines: Vec<String>,
    hip: String,
    /// GPUs libtorch sees from Rust, and the label of the first (`cuda:0`, `hip:0`).
    gpus: usize,
    backend: &'static str,
    graph: Result<String, String>,
}

#[cfg(feature = "torch")]
fn rust_side() -> Option<RustSide> {
    use harness::device;
    use harness::libsearch::RocmLayout;
    let report = device::gpu_library_report();
    let mut lines = Vec::new();
    lines.push(match &report.plan.layout {
        RocmLayout::TheRock { folders } => format!(
            "ROCm libraries: TheRock packages ({})",
            folders
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        RocmLayout::Bundled => "ROCm libraries: bundled in torch/lib (the official wheel)".into(),
        RocmLayout::None => "ROCm libraries: none beside torch".into(),
    });
    if !report.plan.dll_dirs.is_empty() {
        lines.push(format!(
            "DLL search: {}",
            report
                .plan
                .dll_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let pre_ok = report.preloaded.iter().filter(|(_, r)| r.is_ok()).count();
    if !report.preloaded.is_empty() {
        lines.push(format!(
            "preloaded {pre_ok} of {} ROCm libraries",
            report.preloaded.len()
        ));
    }
    for (p, outcome) in &report.tried {
        use device::LoadOutcome;
        let what = match outcome {
            LoadOutcome::Loaded => "loaded".to_string(),
            LoadOutcome::NotFound => "not found (none in any folder)".to_string(),
            LoadOutcome::Failed(e) => format!("FAILED: {e}"),
        };
        lines.push(format!("{}: {what}", p.display()));
    }
    for (p, r) in &report.preloaded {
        if let Err(e) = r {
            lines.push(format!("{}: FAILED: {e}", p.display()));
        }
    }
    let gpus = harness::gpu_count();
    let backend = if gpus > 0 {
        harness::device::gpu_backend().as_str()
    } else {
        "none"
    };
    let graph = if gpus > 0 {
        harness::graph::available(harness::Device::gpu(0))
            .map(|_| "at::cuda::CUDAGraph found, layout checked".to_string())
    } else {
        Err("no GPU".into())
    };
    Some(RustSide {
        library_lines: lines,
        hip: device::hip_runtime().to_string(),
        gpus,
        backend,
        graph,
    })
}

#[cfg(not(feature = "torch"))]
fn rust_side() -> Option<RustSide> {
    None
}

/// Run scripts/doctor.py in `python`.
fn ask_python(python: &PathBuf, device: &str, gpu: usize, quick: bool) -> Result<Report, String> {
    let script = script("doctor.py").map_err(|e| e.message)?;
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .args(["--device", device, "--gpu", &gpu.to_string()]);
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    serde_json::from_str(last).map_err(|e| {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        format!(
            "{} {} gave no report ({e}; exit {}): {tail}",
            python.display(),
            script.display(),
            out.status.code().unwrap_or(-1)
        )
    })
}

/// The judgement: `Ok(what can be measured)` or `Err(why not)`.
fn verdict(
    r: &Report,
    rust: Option<&RustSide>,
    device: &str,
    gpu: usize,
) -> Result<String, String> {
    if let Some(e) = &r.error {
        let py = r
            .torch
            .as_ref()
            .map_or("this Python", |t| t.python.as_str());
        return Err(format!(
            "{e} (in {py}; `scripts/doctor` finds the Python builds use, or pass --python PY)"
        ));
    }
    let py_gpu = r.gpu.as_ref().is_some_and(|g| g.available);
    let label = |b: &str| format!("{}:{gpu}", if b == "rocm" { "hip" } else { b });
    let build = r.torch.as_ref().map_or("cpu", |t| t.build.as_str());
    match rust {
        Some(rs) if py_gpu && rs.gpus <= gpu && device != "cpu" => {
            return Err(format!(
                "torch in Python sees GPU {gpu} ({}) but this opbench does not ({} visible): {}",
                r.gpu
                    .as_ref()
                    .and_then(|g| g.name.clone())
                    .unwrap_or_default(),
                rs.gpus,
                rs.library_lines
                    .iter()
                    .find(|l| l.contains("FAILED"))
                    .cloned()
                    .unwrap_or_else(|| "its GPU library was not found".into())
            ));
        }
        _ => {}
    }
    if device == "gpu" && !py_gpu {
        let why = r
            .gpu
            .as_ref()
            .and_then(|g| g.why.clone())
            .unwrap_or_default();
        let hip = rust.map(|rs| format!("; {}", rs.hip)).unwrap_or_default();
        return Err(format!(
            "OPBENCH_DEVICE=gpu but no GPU is usable: {why}{hip}"
        ));
    }
    let mut can = Vec::new();
    if device != "gpu" {
        can.push("cpu".to_string());
    }
    if device != "cpu" && py_gpu {
        can.push(match rust {
            Some(rs) if rs.gpus > gpu => format!("{}:{gpu}", rs.backend),
            _ => label(build),
        });
    }
    Ok(format!("scripts/bench can measure {}", can.join(" and ")))
}

pub fn doctor(a: &Args) -> Result<u8, CliError> {
    let python = a.python.clone().unwrap_or_else(default_python);
    let device = a
        .device
        .clone()
        .or_else(|| settings::var("OPBENCH_DEVICE"))
        .unwrap_or_else(|| "all".into());
    if !["cpu", "gpu", "all"].contains(&device.as_str()) {
        return Err(CliError::input(format!(
            "OPBENCH_DEVICE={device}: expected cpu, gpu or all"
        )));
    }
    let gpu = match a.gpu {
        Some(g) => g,
        None => match settings::var("OPBENCH_GPU") {
            Some(v) => v.parse().map_err(|_| {
                CliError::input(format!("OPBENCH_GPU={v}: expected a GPU index (0, 1, ...)"))
            })?,
            None => 0,
        },
    };
    let report = ask_python(&python, &device, gpu, a.check).map_err(|m| CliError {
        code: 1,
        message: format!("doctor: {m}"),
    })?;
    let rust = rust_side();
    let judged = verdict(&report, rust.as_ref(), &device, gpu);
    if a.check {
        return match judged {
            Ok(can) => {
                eprintln!("doctor: ok: {can}");
                Ok(0)
            }
            Err(why) => Err(CliError {
                code: 1,
                message: format!("doctor: {why} (`scripts/doctor` says more)"),
            }),
        };
    }
    print_screen(&report, rust.as_ref());
    match &judged {
        Ok(can) => println!("verdict    ok: {can}"),
        Err(why) => println!("verdict    NOT READY: {why}"),
    }
    print_next(&report, judged.is_ok());
    Ok(if judged.is_ok() { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(build: &str, gpu: bool) -> Report {
        let json = format!(
            r#"{{"error": null, "torch": {{"python": "py", "python_version": "3.11", "version": "2.9.1+rocm7.11.0a",
            "build": "{build}", "hip": "7.11", "cuda": null, "os": "Windows"}},
            "gpu": {{"available": {gpu}, "why": {why}, "count": {n}, "name": "AMD Radeon RX 6650 XT",
            "arch": "gfx1032", "memory_bytes": 8589934592, "hsa_override": null}}}}"#,
            why = if gpu { "null" } else { "\"no GPU\"" },
            n = u8::from(gpu)
        );
        serde_json::from_str(&json).unwrap()
    }

    fn rust(gpus: usize, failed: Option<&str>) -> RustSide {
        RustSide {
            library_lines: failed
                .map(|f| vec![format!("C:\\torch\\lib\\torch_hip.dll: FAILED: {f}")])
                .unwrap_or_default(),
            hip: "no HIP runtime".into(),
            gpus,
            backend: "hip",
            graph: Err("no GPU".into()),
        }
    }

    /// The motivating failure: Python's torch sees the GPU, the Rust side does not; that
    /// is NOT READY with the loader's message, whatever device was asked for but cpu.
    #[test]
    fn python_sees_a_gpu_that_rust_does_not() {
        let r = report("rocm", true);
        let rs = rust(
            0,
            Some("The specified module could not be found. (os error 126)"),
        );
        for dev in ["gpu", "all"] {
            let why = verdict(&r, Some(&rs), dev, 0).unwrap_err();
            assert!(
                why.contains("sees GPU 0") && why.contains("os error 126"),
                "{why}"
            );
        }
        assert_eq!(
            verdict(&r, Some(&rs), "cpu", 0).unwrap(),
            "scripts/bench can measure cpu"
        );
        let ok = verdict(&r, Some(&rust(1, None)), "all", 0).unwrap();
        assert_eq!(ok, "scripts/bench can measure cpu and hip:0");
    }

    /// No GPU anywhere: the CPU is measured; asking for the GPU is NOT READY, saying why.
    #[test]
    fn no_gpu() {
        let r = report("cpu", false);
        let mut rs = rust(0, None);
        rs.hip = "a ROCm runtime is here (HIP 5.2.21153), but no AMD GPU".into();
        assert_eq!(
            verdict(&r, Some(&rs), "all", 0).unwrap(),
            "scripts/bench can measure cpu"
        );
        let why = verdict(&r, Some(&rs), "gpu", 0).unwrap_err();
        assert!(
            why.contains("no GPU is usable") && why.contains("but no AMD GPU"),
            "{why}"
        );
        let broken: Report =
            serde_json::from_str(r#"{"error": "import torch failed: x"}"#).unwrap();
        assert!(verdict(&broken, None, "cpu", 0).is_err());
    }
}
