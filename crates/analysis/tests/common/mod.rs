//! What the analysis tests share: the committed fixtures, loaded where they lie (the readers
//! open their gzip'd `results.csv.gz` and `samples.csv.gz` and write nothing).
#![allow(clippy::unwrap_used, dead_code)]

use std::path::Path;

use analysis::predict::{HostModel, Query};
use rundir::{DType, DeviceId, Mode, Phase, Run};
use shapes::{ModelConfig, StepProfile};

/// The run under `tests/fixtures/<rel>`.
pub fn fixture(rel: &str) -> Run {
    Run::load(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(rel),
    )
    .unwrap()
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
