//! A run copied into `results/<date>-<device>-<backend>-torch<ver>[-<tag>]/` with a README
//! of the command, versions and device, its CSVs, fits and report (`opbench publish`).
//!
//! Published runs are never rewritten: publishing to an existing name is an error. A run
//! is published only whole and valid (env.json, results.csv with at least one ok row, and
//! readable samples.csv); it is written into a temporary folder beside the destination and
//! renamed into place, so a failure leaves nothing behind.
//!
//! After each run, `results/README.md` is rewritten from the env.json of every published run:
//! a table of date, device, backend, torch, runtime and tag, so a reader sees the history
//! at a glance (`opbench history results/` finds its change points).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rundir::{Env, Run, write_fits};

use crate::fit::fit_run;
use crate::{AnalysisError, slug};

/// What to publish, and how.
#[derive(Debug, Clone)]
pub struct Publication {
    /// The run directory.
    pub run: PathBuf,
    /// Where published runs live.
    pub results: PathBuf,
    /// The exact command(s) that made the run (default: rebuilt from env.json).
    pub command: Option<String>,
    /// What a user compares against this run for: one line, in the README and the index.
    pub purpose: String,
    /// Notes for the README.
    pub notes: Option<String>,
    /// Appended to the published name as `-<tag>`.
    pub tag: Option<String>,
}

/// `<date>-<device>-<backend>-torch<ver>` from env.json.
pub fn published_name(env: &Env) -> String {
    let date = env.started_at.get(..10).unwrap_or("undated");
    let (backend, device) = (env.backend_name(), env.device_label());
    let torch = if env.libtorch_version.is_empty() {
        "unknown"
    } else {
        env.libtorch_version.as_str()
    };
    format!("{date}-{}-{backend}-torch{}", slug(device), slug(torch))
}

/// Publish a run; returns the published folder.
pub fn publish(p: &Publication) -> Result<PathBuf, AnalysisError> {
    let run = Run::load(&p.run)?;
    let Some(env) = run.env.clone() else {
        return Err(AnalysisError::Input(format!(
            "{}: no env.json: a run is published with its environment",
            p.run.display()
        )));
    };
    if run.ok_rows().next().is_none() {
        return Err(AnalysisError::Input(format!(
            "{}: no ok row: nothing to publish",
            p.run.display()
        )));
    }
    if let Some((k, v)) = env.settings.iter().find(|(k, v)| {
        rundir::PLANT_SETTINGS.contains(&k.as_str())
            && k.as_str() != "plant_scope"
            && v.as_str() != "0"
    }) {
        return Err(AnalysisError::Input(format!(
            "{}: planted slowdown {k}={v} in env.json: a calibration run, not a measurement; \
             keep it as a test fixture",
            p.run.display()
        )));
    }
    run.samples()?;
    let mut name = published_name(&env);
    if let Some(tag) = &p.tag {
        let ok = !tag.is_empty()
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if !ok {
            return Err(AnalysisError::Input(format!(
                "--tag `{tag}`: use letters, digits, `.` and `-` only"
            )));
        }
        name = format!("{name}-{tag}");
    }
    let dest = p.results.join(&name);
    if dest.exists() {
        return Err(AnalysisError::Input(format!(
            "{}: already published; published runs are never rewritten",
            dest.display()
        )));
    }
    std::fs::create_dir_all(&p.results).map_err(|e| AnalysisError::output(&p.results, e))?;
    let staging = p.results.join(format!(".{name}.partial"));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| AnalysisError::output(&staging, e))?;
    }
    let staged = stage(&run, &env, &name, &dest, &staging, p);
    match staged {
        Ok(()) => std::fs::rename(&staging, &dest).map_err(|e| AnalysisError::output(&dest, e))?,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    }
    write_index(&p.results)?;
    Ok(dest)
}

/// How a published README states the run's purpose (the index reads it back).
const PURPOSE: &str = "Purpose: ";

/// The purpose line of a published run's README, if it has one.
fn purpose_of(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("README.md")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(PURPOSE))
        .map(|p| p.replace('|', "/"))
}

/// Rewrite `results/README.md`: one line per published run (a folder with env.json), newest
/// first. Returns its path.
pub fn write_index(results: &Path) -> Result<PathBuf, AnalysisError> {
    let mut rows: Vec<(String, String)> = Vec::new();
    let entries = std::fs::read_dir(results).map_err(|e| AnalysisError::output(results, e))?;
    for entry in entries.flatten() {
        let dir = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !dir.join(rundir::layout::ENV).is_file() {
            continue;
        }
        let env: Option<Env> = std::fs::read_to_string(dir.join(rundir::layout::ENV))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let line = match env {
            Some(env) => {
                let base = published_name(&env);
                let tag = name
                    .strip_prefix(base.as_str())
                    .map_or("", |t| t.trim_start_matches('-'));
                let (backend, device) = (env.backend_name(), env.device_label());
                format!(
                    "| {} | [{name}]({name}/README.md) | {device} | {backend} | {} | {} | {} |",
                    env.started_at.get(..10).unwrap_or("-"),
                    env.libtorch_version,
                    env.runtime_version.as_deref().unwrap_or("-"),
                    purpose_of(&dir).unwrap_or_else(|| format!("({tag})")),
                )
            }
            None => format!("| - | [{name}]({name}/) | env.json unreadable | | | | |"),
        };
        rows.push((name, line));
    }
    // newest first: names begin with the date
    rows.sort_by(|a, b| b.0.cmp(&a.0));
    let mut md = String::from(
        "# Published runs\n\n\
         Reference runs to compare a build against, one per machine and build. Each folder was \
         published with `opbench publish` and is never edited afterwards: its README holds the \
         command that reproduces it from this repository, and the versions. `opbench publish` \
         rewrites this table. `opbench compare RUN YOURS` compares yours with one; `opbench \
         history results/` orders the runs by build per machine and finds where each case \
         changed.\n\n\
         | date | run | device | backend | torch | runtime | purpose |\n|---|---|---|---|---|---|---|\n",
    );
    for (_, line) in rows {
        md += &line;
        md.push('\n');
    }
    let path = results.join("README.md");
    std::fs::write(&path, md).map_err(|e| AnalysisError::output(&path, e))?;
    Ok(path)
}

/// Fill `staging` with what `dest` will hold.
fn stage(
    run: &Run,
    env: &Env,
    name: &str,
    dest: &Path,
    staging: &Path,
    p: &Publication,
) -> Result<(), AnalysisError> {
    std::fs::create_dir_all(staging).map_err(|e| AnalysisError::output(staging, e))?;
    let mut files = Vec::new();
    let entries = std::fs::read_dir(&p.run).map_err(|e| AnalysisError::output(&p.run, e))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if path.is_file() && matches!(ext, "csv" | "json" | "md" | "svg" | "gz") {
            let file = entry.file_name();
            std::fs::copy(&path, staging.join(&file))
                .map_err(|e| AnalysisError::output(&path, e))?;
            files.push(file.to_string_lossy().into_owned());
        }
    }
    // fits and report are part of a published run: made fresh from the published rows
    let fits: Vec<_> = fit_run(run).fitted.iter().map(|f| f.row()).collect();
    write_fits(&staging.join(rundir::layout::FITS), &fits)?;
    crate::report::write_report(staging)?;
    // the report names the folder it lives in: the published one, not the staging one
    let report = staging.join("report.md");
    let text = std::fs::read_to_string(&report).map_err(|e| AnalysisError::output(&report, e))?;
    std::fs::write(
        &report,
        text.replace(&staging.display().to_string(), &dest.display().to_string()),
    )
    .map_err(|e| AnalysisError::output(&report, e))?;
    for f in std::fs::read_dir(staging).into_iter().flatten().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        if !files.contains(&name) && name != "README.md" {
            files.push(name);
        }
    }
    files.sort();
    let readme = readme(env, name, dest, &files, p);
    let path = staging.join("README.md");
    std::fs::write(&path, readme).map_err(|e| AnalysisError::output(&path, e))
}

fn readme(env: &Env, name: &str, dest: &Path, files: &[String], p: &Publication) -> String {
    let setting = |k: &str, default: &str| {
        env.settings
            .get(k)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    };
    let command = p.command.clone().unwrap_or_else(|| {
        format!(
            "OPBENCH_PROFILE={} OPBENCH_MODEL={} OPBENCH_SAMPLES={} OPBENCH_WARMUP_MS={} OPBENCH_MEASURE_MS={} scripts/bench",
            setting("profile", "default"),
            setting("models", "qwen3-0.6b"),
            setting("samples", "20"),
            setting("warmup_ms", "100"),
            setting("measure_ms", "400"),
        )
    });
    let json = serde_json::to_value(env).unwrap_or_default();
    let s = |k: &str| match &json[k] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        v => v.to_string(),
    };
    let mut md = String::new();
    let _ = writeln!(md, "# {name}\n");
    let _ = writeln!(md, "{PURPOSE}{}\n", p.purpose.trim());
    let _ = writeln!(
        md,
        "An opbench run, published as measured: never edited afterwards.\n"
    );
    let _ = writeln!(md, "## Command\n\n```sh\n{command}\n```\n");
    if let Some(n) = &p.notes {
        let _ = writeln!(md, "## Notes\n\n{n}\n");
    }
    let _ = writeln!(md, "## Versions and device\n");
    for (label, key) in [
        ("run id", "run_id"),
        ("started", "started_at"),
        ("run-directory schema", "schema_version"),
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
    md
}
