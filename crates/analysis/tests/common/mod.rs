//! What the analysis tests share: the committed fixtures, loaded where they lie (the readers
//! open their gzip'd `results.csv.gz` and `samples.csv.gz` and write nothing).
#![allow(clippy::unwrap_used, dead_code)]

use std::path::Path;

use analysis::predict::{HostModel, Query};
use rundir::{DType, DeviceId, Mode, Phase, Run};
use shapes::{ModelConfig, StepProfile};

/// The run under `tests/fixtures/<rel>`, or, where that folder holds a file `published`,
/// the published run it names (a path from the repository's root): a fixture that is a
/// published run is kept once, in results/.
pub fn fixture(rel: &str) -> Run {
    Run::load(&fixture_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(rel),
    ))
    .unwrap()
}

/// The CPU run of 2026-12-01 with the peer's stack rows (one execution on the 2-core VM),
/// published in results/: the fixture folder that names it.
pub const CPU_STACK: &str = "stack-2026-12-01";

/// What would help for `q` ([`analysis::help::levers`]) with the run's own bandwidth bound
/// and the knobs measured in pairs.
pub fn levers(
    run: &Run,
    fits: &analysis::fit::Fits,
    q: &Query,
    pred: &analysis::predict::Prediction,
    knobs: &[analysis::knob::KnobPair],
) -> Vec<analysis::help::Lever> {
    let bound = analysis::help::bandwidth_bound(run, q, pred);
    analysis::help::levers(run, fits, q, pred, &bound, knobs)
}

/// Where the fixture folder `dir` keeps its run: itself, or the published run its
/// `published` file names.
pub fn fixture_dir(dir: &Path) -> std::path::PathBuf {
    match std::fs::read_to_string(dir.join("published")) {
        Ok(rel) => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel.trim()),
        Err(_) => dir.to_path_buf(),
    }
}

/// A pipelined query on the CPU in f32, priced as measured; others differ from it in a field
/// or three.
pub fn cpu_query(
    cfg: &ModelConfig,
    phase: Phase,
    batch: usize,
    ctx: usize,
    profile: StepProfile,
) -> Query<'_> {
    Query {
        model: cfg,
        batch,
        ctx,
        phase,
        profile,
        device: DeviceId::CPU,
        dtype: DType::F32,
        mode: Mode::Pipelined,
        host: HostModel::AsMeasured,
    }
}

/// The H200 transformers query of the published runs (B = 1, L = 1024, f16 on cuda:0),
/// with the host model predict picks for `run`.
pub fn h200_transformers<'a>(run: &Run, cfg: &'a ModelConfig) -> Query<'a> {
    let q = Query {
        device: "cuda:0".parse().expect("cuda:0 is a device id"),
        dtype: DType::F16,
        ..cpu_query(cfg, Phase::Decode, 1, 1024, StepProfile::Transformers)
    };
    Query {
        host: HostModel::default_for(run, &q),
        ..q
    }
}

/// A fixture's two executions (`state-2026-12-02/<generation>/{1,2}`) merged into one run,
/// as `scripts/steps-gpu` leaves it (the directory lives as long as the first).
pub fn merged(generation: &str) -> (tempfile::TempDir, Run) {
    let tmp = tempfile::tempdir().unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/state-2026-12-02")
        .join(generation);
    for e in ["1", "2"] {
        let to = tmp.path().join(rundir::layout::EXECUTIONS).join(e);
        std::fs::create_dir_all(&to).unwrap();
        for f in ["env.json", "results.csv.gz", "samples.csv.gz"] {
            std::fs::copy(src.join(e).join(f), to.join(f)).unwrap();
        }
    }
    analysis::merge::merge(tmp.path()).unwrap();
    let run = Run::load(tmp.path()).unwrap();
    (tmp, run)
}

/// A run directory at `dir` of one H200 process (run id `r`), for runs a test writes.
pub fn h200_writer(dir: &Path) -> rundir::RunWriter {
    let env = rundir::Env {
        run_id: "r".into(),
        started_at: "2026-12-01T10:00:00Z".into(),
        backend: "cuda".into(),
        devices: vec!["cuda:0".into()],
        device_name: Some("NVIDIA H200".into()),
        libtorch_version: "2.11.0".into(),
        ..rundir::Env::default()
    };
    rundir::RunWriter::at(dir, "r", &env).unwrap()
}

/// The peer's decode row `site` at `batch` (the transformers profile's shape, H200, f16).
/// An op crate's `aten` case at B = 1: qwen3-0.6b decode, f16, `cuda:0`, pipelined.
pub fn op_key(op: rundir::OpKind, site: &str) -> rundir::CaseKey {
    rundir::SeriesKey {
        op,
        variant: "aten".into(),
        site: site.into(),
        model: "qwen3-0.6b".into(),
        phase: Phase::Decode,
        q_len: 1,
        kv_len: None,
        dtype: DType::F16,
        device: "cuda:0".parse().unwrap(),
        mode: Mode::Pipelined,
    }
    .at(1)
}

pub fn peer_key(site: &str, batch: usize) -> rundir::CaseKey {
    rundir::SeriesKey {
        op: rundir::OpKind::Decode,
        variant: "transformers".into(),
        site: site.into(),
        model: "qwen3-0.6b".into(),
        phase: Phase::Decode,
        q_len: 1,
        kv_len: Some(1025),
        dtype: DType::F16,
        device: "cuda:0".parse().unwrap(),
        mode: Mode::Pipelined,
    }
    .at(batch)
}

/// What `op`'s calls cost in the step `pred`, each call's cost read by `per_call` (its
/// `per_call_ns`, `host_ns`, …), summed over the calls.
pub fn op_ns(
    pred: &analysis::predict::Prediction,
    op: rundir::OpKind,
    per_call: fn(&analysis::predict::Component) -> f64,
) -> f64 {
    pred.components
        .iter()
        .filter(|c| c.op == Some(op))
        .map(|c| c.calls as f64 * per_call(c))
        .sum()
}
