//! `opbench publish RUN`: copy a run into `results/<date>-<device>-<backend>-torch<ver>/`
//! (with `-<tag>` appended when `--tag` is given: a second run of the same build on the
//! same day) with a README of the command, versions and device, its CSVs, fits and report.
//! Published runs are never rewritten: publishing to an existing name is an error.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::Failure;
use crate::run::Run;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run directory.
    run: PathBuf,
    /// Where published runs live.
    #[arg(long, default_value = "results")]
    results: PathBuf,
    /// The exact command(s) that made the run, for the README (default: rebuilt from env.json).
    #[arg(long)]
    command: Option<String>,
    /// Notes for the README (what a reader must know about this run).
    #[arg(long)]
    notes: Option<String>,
    /// Appended to the published name as `-<tag>`: tells apart two runs of one build, device
    /// and day (letters, digits, `.` and `-`).
    #[arg(long)]
    tag: Option<String>,
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// `<date>-<device>-<backend>-torch<ver>` from env.json.
pub fn published_name(env: &serde_json::Value) -> String {
    let date = env["started_at"]
        .as_str()
        .and_then(|s| s.get(..10))
        .unwrap_or("undated");
    let backend = env["backend"].as_str().unwrap_or("cpu");
    let device = match backend {
        "cpu" => env["cpu_model"].as_str().unwrap_or("cpu"),
        _ => env["device_name"].as_str().unwrap_or("gpu"),
    };
    let torch = env["libtorch_version"].as_str().unwrap_or("unknown");
    format!("{date}-{}-{backend}-torch{}", slug(device), slug(torch))
}

fn copy(from: &Path, to: &Path) -> Result<(), Failure> {
    std::fs::copy(from, to).map(drop).map_err(|e| Failure {
        code: 1,
        message: format!("{} -> {}: {e}", from.display(), to.display()),
    })
}

pub fn run(args: &Args) -> Result<u8, Failure> {
    let run = Run::load(&args.run)?;
    let env = run.env()?;
    let mut name = published_name(&env);
    if let Some(tag) = &args.tag {
        let ok = !tag.is_empty()
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if !ok {
            return Err(Failure::input(format!(
                "--tag `{tag}`: use letters, digits, `.` and `-` only"
            )));
        }
        name = format!("{name}-{tag}");
    }
    let dest = args.results.join(&name);
    if dest.exists() {
        return Err(Failure::input(format!(
            "{}: already published; published runs are never rewritten",
            dest.display()
        )));
    }
    // fits and report are part of a published run: make them if the run has none yet
    if !args.run.join("fits.csv").exists() {
        crate::fit_cmd::run(&args.run)?;
    }
    std::fs::create_dir_all(&dest).map_err(|e| Failure {
        code: 1,
        message: format!("{}: {e}", dest.display()),
    })?;
    let mut files = Vec::new();
    let entries = std::fs::read_dir(&args.run)
        .map_err(|e| Failure::input(format!("{}: {e}", args.run.display())))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if path.is_file() && matches!(ext, "csv" | "json" | "md" | "svg") {
            let file = entry.file_name();
            copy(&path, &dest.join(&file))?;
            files.push(file.to_string_lossy().into_owned());
        }
    }
    // the report names the folder it lives in, so make it there
    crate::report_cmd::run(&dest)?;
    for f in std::fs::read_dir(&dest).into_iter().flatten().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        if !files.contains(&name) && name != "README.md" {
            files.push(name);
        }
    }
    files.sort();
    let s = |k: &str| match &env[k] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        v => v.to_string(),
    };
    let settings = &env["settings"];
    let command = args.command.clone().unwrap_or_else(|| {
        format!(
            "OPBENCH_PROFILE={} OPBENCH_MODEL={} OPBENCH_SAMPLES={} OPBENCH_WARMUP_MS={} OPBENCH_MEASURE_MS={} scripts/bench",
            settings["profile"].as_str().unwrap_or("default"),
            settings["models"].as_str().unwrap_or("qwen3-0.6b"),
            settings["samples"].as_str().unwrap_or("20"),
            settings["warmup_ms"].as_str().unwrap_or("100"),
            settings["measure_ms"].as_str().unwrap_or("400"),
        )
    });
    let mut md = String::new();
    let _ = writeln!(md, "# {name}\n");
    let _ = writeln!(
        md,
        "An opbench run, published as measured: never edited afterwards.\n"
    );
    let _ = writeln!(md, "## Command\n\n```sh\n{command}\n```\n");
    if let Some(n) = &args.notes {
        let _ = writeln!(md, "## Notes\n\n{n}\n");
    }
    let _ = writeln!(md, "## Versions and device\n");
    for (label, key) in [
        ("run id", "run_id"),
        ("started", "started_at"),
        ("opbench git revision", "git_revision"),
        ("libtorch", "libtorch_version"),
        ("tch", "tch_version"),
        ("backend", "backend"),
        ("devices", "devices"),
        ("runtime (CUDA / HIP)", "runtime_version"),
        ("driver", "driver_version"),
        ("device", "device_name"),
        ("arch", "arch"),
        ("device memory (bytes)", "device_memory_bytes"),
        ("SMs / CUs", "sm_count"),
        ("L2 (bytes)", "l2_cache_bytes"),
        (
            "DRAM peak (GB/s, from clock and bus width)",
            "peak_dram_gbps",
        ),
        ("cuDNN", "cudnn_version"),
        ("MIOpen", "miopen_version"),
        ("hipBLASLt", "hipblaslt_version"),
        ("CPU", "cpu_model"),
        ("CPU threads", "threads"),
        ("OS", "os"),
        ("kernel-changing variables", "env"),
        ("grid and budget", "settings"),
    ] {
        let _ = writeln!(md, "- {label}: {}", s(key));
    }
    let _ = writeln!(
        md,
        "\n`env.json` holds these and libtorch's build configuration (`build_config`).\n"
    );
    let _ = writeln!(
        md,
        "## Files\n\n{}\n\n`report.md` is the place to start. Compare another run against this one with\n`opbench compare {} <your run>`.",
        files
            .iter()
            .map(|f| format!("- `{f}`"))
            .collect::<Vec<_>>()
            .join("\n"),
        dest.display()
    );
    std::fs::write(dest.join("README.md"), md).map_err(|e| Failure {
        code: 1,
        message: format!("{}: {e}", dest.display()),
    })?;
    println!("opbench: published {}", dest.display());
    Ok(0)
}
