//! What the analysis tests share: the committed fixtures, loaded where they lie (the readers
//! open their gzip'd `results.csv.gz` and `samples.csv.gz` and write nothing).
#![allow(clippy::unwrap_used, dead_code)]

use std::path::Path;

use rundir::Run;

/// The run under `tests/fixtures/<rel>`.
pub fn fixture(rel: &str) -> Run {
    Run::load(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(rel),
    )
    .unwrap()
}
