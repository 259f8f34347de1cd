//! Run ids. The run directory itself (its schema, writer and readers) is the `rundir`
//! crate's; the harness re-exports what it writes with.

pub use rundir::{CaseKey, ResultRow, RunWriter, Sample, SeriesKey};

/// A run id from the current time, `YYYYMMDDTHHMMSSZ`.
pub fn timestamp_id(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format(rundir::layout::RUN_ID_FORMAT).to_string()
}

/// The default run id: the start time of the `cargo` process that launched us when there is
/// one (so every bench binary of one `cargo bench --workspace` lands in one run), else now.
pub fn default_run_id() -> String {
    launcher_start_time()
        .map(timestamp_id)
        .unwrap_or_else(|| timestamp_id(chrono::Utc::now()))
}

#[cfg(target_os = "linux")]
fn launcher_start_time() -> Option<chrono::DateTime<chrono::Utc>> {
    // Only under cargo (which sets CARGO for the programs it runs): the parent is then the
    // cargo process shared by all bench binaries of one invocation.
    std::env::var_os("CARGO")?;
    let ppid = std::os::unix::process::parent_id();
    let stat = std::fs::read_to_string(format!("/proc/{ppid}/stat")).ok()?;
    // field 22 (starttime, clock ticks since boot) counted after the ")" closing comm
    let after = stat.rsplit_once(')')?.1;
    let ticks: i64 = after.split_whitespace().nth(19)?.parse().ok()?;
    // boot time in whole seconds, so every process computes the same instant
    let btime: i64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // USER_HZ is 100 on every Linux ABI Rust targets
    let started = chrono::DateTime::from_timestamp(btime + ticks / 100, 0)?;
    Some(started)
}

#[cfg(not(target_os = "linux"))]
fn launcher_start_time() -> Option<chrono::DateTime<chrono::Utc>> {
    // Elsewhere set OPBENCH_RUN (scripts/bench does) to group several bench binaries.
    None
}
