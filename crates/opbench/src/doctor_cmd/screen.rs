//! doctor's screen: the stack (torch, libraries, GPU), what it can run (SDPA, BLAS, graphs,
//! tracer, Triton, knobs), the smoke test's table, and the next commands.

use super::{Report, RustSide, Smoke};

fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

pub(super) fn print_screen(r: &Report, rust: Option<&RustSide>) {
    println!("opbench doctor: this machine's torch stack, and what opbench can measure on it\n");
    if let Some(t) = &r.torch {
        let build = match t.build.as_str() {
            "rocm" => format!("ROCm, HIP {}", t.hip.as_deref().unwrap_or("?")),
            "cuda" => format!("CUDA {}", t.cuda.as_deref().unwrap_or("?")),
            _ => "CPU only".into(),
        };
        println!("torch      {} ({build}) on {}", t.version, t.os);
        println!("python     {} (Python {})", t.python, t.python_version);
    }
    match rust {
        Some(rs) => {
            for (i, l) in rs.library_lines.iter().enumerate() {
                println!("{}{l}", if i == 0 { "libraries  " } else { "           " });
            }
            println!("HIP        {}", rs.hip);
        }
        None => println!(
            "libraries  not checked: this opbench was built without libtorch \
             (scripts/doctor builds it with)"
        ),
    }
    if let Some(g) = &r.gpu {
        if g.available {
            let over = g
                .hsa_override
                .as_ref()
                .map(|v| format!(", HSA_OVERRIDE_GFX_VERSION={v} (the arch torch reports)"))
                .unwrap_or_default();
            println!(
                "GPU        {} of {}: {}, {}, {}{over}",
                g.index.unwrap_or(0),
                g.count,
                g.name.as_deref().unwrap_or("?"),
                g.arch.as_deref().unwrap_or("arch ?"),
                g.memory_bytes.map(gib).unwrap_or_default()
            );
        } else {
            println!("GPU        none: {}", g.why.as_deref().unwrap_or(""));
        }
        if let Some(rs) = rust {
            println!(
                "           from Rust: {} GPU(s) visible{}",
                rs.gpus,
                if rs.gpus > 0 {
                    format!(", labelled {}:N", rs.backend)
                } else {
                    String::new()
                }
            );
        }
    }
    print_abilities(r, rust);
    if let Some(s) = &r.smoke {
        print_smoke(s);
    }
    if let Some(s) = r.seconds {
        println!("           (the Python side took {s:.1} s)");
    }
}

/// What this stack can run: SDPA backends, BLAS, graphs, tracer, Triton, knobs.
fn print_abilities(r: &Report, rust: Option<&RustSide>) {
    if !r.sdpa.is_empty() {
        let cells: Vec<String> = r
            .sdpa
            .iter()
            .map(|s| format!("{} {}", s.backend, if s.ran { "ran" } else { "no" }))
            .collect();
        let on = if r.gpu.as_ref().is_some_and(|g| g.available) {
            "the GPU's kernels"
        } else {
            "torch's CPU kernels; opbench's flash, efficient and cudnn variants are the GPU's"
        };
        println!(
            "SDPA       {} (one decode token, GQA 16/8; {on})",
            cells.join(", ")
        );
        for s in r.sdpa.iter().filter(|s| !s.ran) {
            if let Some(why) = &s.reason {
                println!("           {}: {}", s.backend, clip(why, 140));
            }
        }
    }
    let gpu = r.gpu.as_ref().is_some_and(|g| g.available);
    if let Some(b) = r.blas.as_ref().filter(|_| gpu) {
        let asked = b
            .asked
            .as_ref()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| "the default".into());
        println!("BLAS       asked: {asked}; in effect: {}", b.in_effect);
    }
    if let Some(g) = &r.graph {
        let rs = rust.map(|rs| match &rs.graph {
            Ok(s) => format!("; opbench's graph mode: {s}"),
            Err(e) => format!("; opbench's graph mode: no ({e})"),
        });
        println!(
            "graphs     torch.cuda.CUDAGraph: {}{}",
            if g.ok {
                "captured, replayed, matches eager".to_string()
            } else {
                format!("no ({})", g.why.as_deref().unwrap_or("?"))
            },
            rs.unwrap_or_default()
        );
    }
    print_tools(r);
}

/// The tracer, Triton and the knobs for this arch.
fn print_tools(r: &Report) {
    if let Some(t) = &r.tracer {
        println!(
            "tracer     {}",
            match (t.kineto, t.gpu_activity) {
                (true, true) => "kineto with GPU activity: OPBENCH_TRACE=kineto names kernels",
                (true, false) =>
                    "kineto, CPU only: OPBENCH_TRACE=logs (the libraries' own logs) for GPU work",
                _ => "none (torch built without kineto): OPBENCH_TRACE=logs only",
            }
        );
    }
    // a Python package the stack may lack: its version, or why it does not import
    let importable = |prefix: &str, t: &Option<super::Importable>, yes: &str, no: &str| {
        if let Some(t) = t {
            let v = |o: &Option<String>| o.clone().unwrap_or_else(|| "?".into());
            let said = if t.importable {
                format!("{} {yes}", v(&t.version))
            } else {
                format!("not importable ({}): {no}", v(&t.why))
            };
            println!("{prefix} {said}");
        }
    };
    importable(
        "HF         transformers",
        &r.transformers,
        "importable: the peer measures generate() (--profile transformers)",
        "no generate() number (the ops and the step still measure)",
    );
    importable(
        "triton    ",
        &r.triton,
        "importable: torch.compile can make GPU kernels",
        "no torch.compile on the GPU",
    );
    if let Some(k) = &r.knobs {
        if let Some(e) = &k.error {
            println!("knobs      {}: {}", k.file, clip(e, 100));
        } else {
            let on: Vec<&str> = k
                .knobs
                .iter()
                .filter(|k| k.applies)
                .map(|k| k.name.as_str())
                .collect();
            println!(
                "knobs      {}: {} apply: {}",
                k.file,
                on.len(),
                on.join(", ")
            );
            for n in k.knobs.iter().filter(|k| !k.applies) {
                println!(
                    "           {} skipped: {}",
                    n.name,
                    n.why.as_deref().unwrap_or("")
                );
            }
        }
    }
}

fn print_smoke(s: &Smoke) {
    println!(
        "smoke test a decode step's ops at Qwen3-0.6B's shapes, {} {}, each once under the profiler{}:",
        s.device,
        s.dtype,
        if s.traced {
            ""
        } else {
            " (no GPU activity traced: kernels unknown)"
        }
    );
    let what = if s.device == "cpu" {
        "aten ops"
    } else {
        "kernels"
    };
    println!(
        "  {:<22} {:<8} {:<6} {:<7} {what}",
        "op", "ran on", "syncs", "to host"
    );
    for o in &s.ops {
        if let Some(e) = &o.error {
            println!("  {:<22} FAILED   {}", o.op, clip(e, 100));
            continue;
        }
        let kernels = if o.kernels.is_empty() {
            "-".to_string()
        } else {
            o.kernels
                .iter()
                .map(|k| clip(k, 48))
                .collect::<Vec<_>>()
                .join("; ")
        };
        println!(
            "  {:<22} {:<8} {:<6} {:<7} {}",
            o.op,
            o.ran_on.as_deref().unwrap_or("?"),
            o.syncs.len(),
            o.to_host,
            clip(&kernels, 110)
        );
    }
    let gpu = s.device != "cpu";
    let fell_back: Vec<&str> = s
        .ops
        .iter()
        .filter(|o| gpu && o.error.is_none())
        .filter(|o| o.ran_on.as_deref() == Some("cpu") || (s.traced && o.kernels.is_empty()))
        .map(|o| o.op.as_str())
        .collect();
    let synced: Vec<&str> = s
        .ops
        .iter()
        .filter(|o| !o.syncs.is_empty() || o.to_host > 0)
        .map(|o| o.op.as_str())
        .collect();
    if gpu {
        println!(
            "           on the CPU or no kernel: {}; host syncs or copies: {} (sampling's .item() is expected)",
            if fell_back.is_empty() {
                "none".into()
            } else {
                fell_back.join(", ")
            },
            if synced.is_empty() {
                "none".into()
            } else {
                synced.join(", ")
            }
        );
    }
}

pub(super) fn print_next(r: &Report, ok: bool) {
    println!("next");
    if !ok {
        println!("  fix the line above, then scripts/doctor again (README: On an AMD card)");
        return;
    }
    let gpu = r.gpu.as_ref().is_some_and(|g| g.available);
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "opbench".into());
    println!("  scripts/bench                       # every op crate, all visible devices");
    if gpu {
        println!("  OPBENCH_DEVICE=gpu scripts/bench    # the GPU alone");
    }
    let hf = r.transformers.as_ref();
    if hf.is_some_and(|t| t.importable) {
        println!("  {exe} predict RUN --batch 1 --profile transformers   # generate()'s token");
    } else {
        println!("  {exe} predict RUN --batch 1   # where a step's time goes");
        let py = r.torch.as_ref().map_or("python", |t| t.python.as_str());
        println!(
            "  {py} -m pip install transformers   # for generate()'s number ({})",
            hf.and_then(|t| t.why.as_deref())
                .unwrap_or("not importable")
        );
    }
    println!("  scripts/bench --knobs               # which settings would help");
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}
