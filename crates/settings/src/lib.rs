//! Every `OPBENCH_*` variable opbench knows, in one table ([`ALL`]): its name, default,
//! who reads it and what it means. The Rust crates read these variables only through
//! [`var`] and [`var_os`], which refuse a name the table lacks; `opbench settings` prints
//! the table, and the README's configuration table is checked against [`markdown`] by a
//! test. Python and shell scripts read some too (their [`Reader`]); a test checks that
//! every `OPBENCH_` name in the repository's sources is in the table.

use std::ffi::OsString;

/// Who reads a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The bench binaries (the harness), in every process.
    Bench,
    /// `scripts/bench` / `scripts/test` (scripts/run.py).
    Scripts,
    /// `scripts/calibrate`.
    Calibrate,
    /// The build (build.rs and `env!`), not the running program.
    Build,
}

impl Reader {
    pub fn as_str(self) -> &'static str {
        match self {
            Reader::Bench => "bench",
            Reader::Scripts => "scripts",
            Reader::Calibrate => "calibrate",
            Reader::Build => "build",
        }
    }
}

/// What a variable is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A user's setting, listed in the README.
    User,
    /// A test knob (planted slowdowns for calibrating compare); never in a publication.
    Knob,
    /// Set by scripts/run.py or scripts/calibrate for the processes they start; a user
    /// does not set it.
    Plumbing,
    /// Fixed when the binaries are built.
    Build,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::User => "user",
            Kind::Knob => "knob",
            Kind::Plumbing => "plumbing",
            Kind::Build => "build",
        }
    }
}

/// One `OPBENCH_*` variable.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    pub name: &'static str,
    /// The value in effect when unset, in words.
    pub default: &'static str,
    pub readers: &'static [Reader],
    pub kind: Kind,
    pub meaning: &'static str,
}

use Kind::{Build, Knob, Plumbing, User};
use Reader::{Bench, Calibrate, Scripts};

const fn s(
    name: &'static str,
    default: &'static str,
    readers: &'static [Reader],
    kind: Kind,
    meaning: &'static str,
) -> Setting {
    Setting {
        name,
        default,
        readers,
        kind,
        meaning,
    }
}

/// Every variable, users' first in the order the README lists them.
pub const ALL: &[Setting] = &[
    s(
        "OPBENCH_MODEL",
        "`qwen3-0.6b`",
        &[Bench],
        User,
        "model(s), comma-separated: a shapes/ name, a path to a Hugging Face config.json (Llama, Mistral, Qwen2, Qwen3; Gemma and Phi-3 are read but not composed), or `all` (every dense Qwen3 size); `qwen3-30b-a3b` adds `cargo bench -p moe` and the MoE step",
    ),
    s(
        "OPBENCH_DEVICE",
        "`all`",
        &[Bench, Scripts],
        User,
        "`cpu`, `gpu` or `all` visible devices",
    ),
    s(
        "OPBENCH_GPU",
        "`0`",
        &[Bench],
        User,
        "which GPU `gpu`/`all` means",
    ),
    s(
        "OPBENCH_DTYPE",
        "grid's",
        &[Bench],
        User,
        "restrict dtypes (`f32,f16,bf16`); the grid runs f16+bf16 on GPUs, f32 on the CPU",
    ),
    s(
        "OPBENCH_PROFILE",
        "`default`",
        &[Bench, Scripts],
        User,
        "grid profile in `shapes/grid.toml`; `quick` is small enough for 2 CPU cores",
    ),
    s(
        "OPBENCH_MODES",
        "`pipelined,synced`, and on the CPU `pipelined_cold`; `--against` on a GPU: `pipelined,graph,device`",
        &[Bench, Scripts],
        User,
        "timing modes; also `pipelined_cold`, and on a GPU `device`, `device_cold`, `graph`, `graph_cold`",
    ),
    s(
        "OPBENCH_OUT",
        "`<workspace>/target/opbench`",
        &[Bench, Scripts, Calibrate],
        User,
        "where `runs/<run_id>/` goes",
    ),
    s(
        "OPBENCH_RUN",
        "timestamp",
        &[Bench, Scripts, Calibrate],
        User,
        "run id",
    ),
    s(
        "OPBENCH_SAMPLES",
        "`20`",
        &[Bench],
        User,
        "samples per case (≥ 10)",
    ),
    s(
        "OPBENCH_EXECUTIONS",
        "`1`",
        &[Scripts],
        User,
        "scripts/bench: measure every case in N separate processes, then merge",
    ),
    s(
        "OPBENCH_SEED",
        "clock",
        &[Bench, Scripts, Calibrate],
        User,
        "seed of the shuffled case order (recorded in env.json)",
    ),
    s(
        "OPBENCH_CONTROL",
        "`1`",
        &[Bench],
        User,
        "`0`: no host-speed controls before each sample",
    ),
    s(
        "OPBENCH_WARMUP_MS",
        "`100`",
        &[Bench],
        User,
        "warm-up per case",
    ),
    s(
        "OPBENCH_MEASURE_MS",
        "`400`",
        &[Bench],
        User,
        "measurement time per case",
    ),
    s(
        "OPBENCH_THREADS",
        "libtorch's",
        &[Bench],
        User,
        "CPU threads (1 to 4 × the cores)",
    ),
    s(
        "OPBENCH_CPUS",
        "any; `opbench ab`: the last half of the cores, the same for both sides",
        &[Bench],
        User,
        "the CPUs a bench process runs on, as `taskset -c` lists them (`3`, `2-3`); Linux and Windows",
    ),
    s(
        "OPBENCH_CALL_CAP_MS",
        "`1000`",
        &[Bench],
        User,
        "a case whose first two calls each take longer is a `skipped` row (`0`: no cap; never applied to the floor and ceilings)",
    ),
    s(
        "OPBENCH_MAX_MIN",
        "`15`",
        &[Scripts],
        User,
        "scripts/bench: without `OPBENCH_PROFILE`, run `quick` when the default grid's estimate is longer",
    ),
    s(
        "OPBENCH_PEER",
        "`1`; `0` with `-p` or a filter",
        &[Scripts],
        User,
        "scripts/bench: `0` skips `opbench peer` (the HF transformers peer), and its workers in `--against`",
    ),
    s(
        "OPBENCH_TRACE",
        "unset",
        &[Bench, Scripts],
        User,
        "`kineto` (or `1`) or `logs`: scripts/bench adds a trace pass after timing (traces.csv, kernels.csv); a bench binary with it set traces instead of timing",
    ),
    s(
        "OPBENCH_L2_BYTES",
        "the runtime's (CPU: sysfs on Linux), else 256 MiB",
        &[Bench],
        User,
        "the last-level cache `device_cold` flushes and the cold modes' copies of the state pass twice",
    ),
    s(
        "OPBENCH_SHAPES",
        "`shapes/` found upward",
        &[Bench],
        User,
        "folder of model files and `grid.toml` (copies are embedded in the binaries); a missing folder or grid is an error",
    ),
    s(
        "OPBENCH_PYTHON",
        "the active venv, else a cached one",
        &[Scripts],
        User,
        "scripts/bench, scripts/test: the Python whose torch to build against (it must import torch)",
    ),
    s(
        "OPBENCH_TORCH_VERSION",
        "`2.11.0`",
        &[Scripts],
        User,
        "scripts/setup: the torch the cached venv installs (2.9 – 2.15)",
    ),
    s(
        "OPBENCH_VENV",
        "`~/.cache/opbench/venv-torch<version>`",
        &[Scripts],
        User,
        "scripts/setup: where that venv lives",
    ),
    s(
        "OPBENCH_PLANT_NS",
        "unset",
        &[Bench],
        Knob,
        "test knob: spin this long on the host inside every timed call, for calibrating compare",
    ),
    s(
        "OPBENCH_PLANT_PCT",
        "unset",
        &[Bench, Calibrate],
        Knob,
        "test knob: spin this percentage of each call's own host time after it",
    ),
    s(
        "OPBENCH_PLANT_SCOPE",
        "`op`",
        &[Bench, Calibrate],
        Knob,
        "with a host plant: `op` slows the timed case's calls, `torch` every torch call the process times (the dispatch floor's control too), as a build whose every call is dearer",
    ),
    s(
        "OPBENCH_PLANT_DEVICE_PCT",
        "unset",
        &[Bench, Calibrate],
        Knob,
        "test knob: a spin kernel (`at::cuda::sleep`) of this share of the calls' device time, in the `device` mode",
    ),
    s(
        "OPBENCH_PLANT_LAUNCH_NS",
        "unset",
        &[Bench, Calibrate],
        Knob,
        "test knob: this many device ns a stream-launched call in the `device` mode (graph replays are not planted), as a build that adds work to each launch",
    ),
    s(
        "OPBENCH_TIMING_CPU",
        "unset; `opbench ab`: the last of `OPBENCH_CPUS`, the same for both sides",
        &[Bench],
        Plumbing,
        "in an `opbench ab` worker, the one CPU a GPU case's sample runs its thread on (the other side's ran there a moment before); `any`: wherever the scheduler puts it",
    ),
    s(
        "OPBENCH_EXECUTION",
        "unset",
        &[Bench, Scripts, Calibrate],
        Plumbing,
        "which execution (process, from 1) of a run this is: rows go to `executions/<i>/`",
    ),
    s(
        "OPBENCH_PLAN_FILE",
        "unset",
        &[Bench, Scripts],
        Plumbing,
        "list mode: where the bench appends `crate,key,seconds,skipped` lines for the plan",
    ),
    s(
        "OPBENCH_PLAN_CASES",
        "unset",
        &[Bench, Scripts],
        Plumbing,
        "progress: case keys the plan holds",
    ),
    s(
        "OPBENCH_PLAN_BASE",
        "unset",
        &[Bench, Scripts],
        Plumbing,
        "progress: rows the run held when the plan was made",
    ),
    s(
        "OPBENCH_PLAN_START",
        "unset",
        &[Bench, Scripts],
        Plumbing,
        "progress: when the bench started (seconds since the epoch)",
    ),
    s(
        "OPBENCH_TORCH",
        "unset",
        &[Scripts],
        Plumbing,
        "scripts/env.sh, run.py: the torch version the workspace is built against",
    ),
    s(
        "OPBENCH_TCH",
        "unset",
        &[Scripts],
        Plumbing,
        "the tch version matching it",
    ),
    s(
        "OPBENCH_BIN",
        "unset",
        &[Scripts],
        Plumbing,
        "scripts/bench --knobs: a folder of bench-<crate> executables and opbench built elsewhere, for a machine without cargo (docs/experiments/knobs-2026-12-06/run.sh)",
    ),
    s(
        "OPBENCH_WS",
        "unset",
        &[Scripts],
        Plumbing,
        "the cargo workspace for that tch (the repository, or a generated copy)",
    ),
    s(
        "OPBENCH_TORCH_PYTHON",
        "unset",
        &[Scripts],
        Plumbing,
        "that torch's Python",
    ),
    s(
        "OPBENCH_GIT_REV",
        "the build's revision",
        &[Bench, Reader::Build],
        Build,
        "the git revision env.json records; set at run time only for binaries built elsewhere",
    ),
    s(
        "OPBENCH_TCH_VERSION",
        "the build's tch",
        &[Reader::Build],
        Build,
        "the tch version compiled in (env.json `tch_version`)",
    ),
    s(
        "OPBENCH_LIBTORCH_LIB",
        "the build's libtorch",
        &[Reader::Build],
        Build,
        "libtorch's lib folder compiled in, to load the GPU library at run time",
    ),
    s(
        "OPBENCH_HARNESS_LIBTORCH_LIB",
        "the build's libtorch",
        &[Reader::Build],
        Build,
        "the harness's `links` metadata passing that folder to the op crates' build.rs",
    ),
];

/// The table's entry for `name`.
pub fn find(name: &str) -> Option<&'static Setting> {
    ALL.iter().find(|s| s.name == name)
}

/// The value of `name`, `None` when unset or not UTF-8. A name the table lacks is a bug
/// (debug builds panic); release builds read it anyway.
pub fn var(name: &str) -> Option<String> {
    debug_assert!(find(name).is_some(), "{name} is not in settings::ALL");
    std::env::var(name).ok()
}

/// As [`var`], for paths.
pub fn var_os(name: &str) -> Option<OsString> {
    debug_assert!(find(name).is_some(), "{name} is not in settings::ALL");
    std::env::var_os(name)
}

/// The markdown table of the settings of `kind`: variable, default, meaning.
pub fn markdown(kind: Kind) -> String {
    let mut out = String::from("| variable | default | meaning |\n|---|---|---|\n");
    for s in ALL.iter().filter(|s| s.kind == kind) {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            s.name, s.default, s.meaning
        ));
    }
    out
}

/// Every setting as text: name, kind, readers, default, meaning, with the variables
/// that are set marked with their values.
pub fn listing() -> String {
    let mut out = String::new();
    for kind in [User, Knob, Plumbing, Build] {
        out.push_str(&format!("{} settings:\n", kind.as_str()));
        for s in ALL.iter().filter(|s| s.kind == kind) {
            let readers: Vec<&str> = s.readers.iter().map(|r| r.as_str()).collect();
            let set = std::env::var(s.name)
                .map(|v| format!(" [set: {v}]"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {}{set}\n      default {}; read by {}\n      {}\n",
                s.name,
                s.default,
                readers.join(", "),
                s.meaning
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prefixed() {
        for (i, s) in ALL.iter().enumerate() {
            assert!(s.name.starts_with("OPBENCH_"), "{}", s.name);
            assert!(
                ALL[..i].iter().all(|t| t.name != s.name),
                "{} twice",
                s.name
            );
            assert!(!s.readers.is_empty() && !s.meaning.is_empty(), "{}", s.name);
        }
    }
}
