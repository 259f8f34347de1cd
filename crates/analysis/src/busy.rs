//! Whether a run's machine was busy with other work: the share of each op's samples that
//! carry a flag of the host's state ([`HOST_FLAGS`]: CPU time stolen, involuntary switches
//! over one per 4 ms, a slow host control around the sample, a stretch of its own calls
//! stalled). On a quiet machine few do (docs/findings.md: the flags mark ≤ 10% of the
//! samples that ran at their case's pace); with other work on the cores a process runs in
//! time slices, and its samples stall and are switched out.
//!
//! A run is busy when, for some op, more than [`BUSY_SHARE`] of its samples carry one.
//! scripts/bench prints the line at a run's end and records it in env.json (`busy`);
//! `predict` and `compare` open with it.

use std::collections::BTreeMap;

use rundir::{Run, SampleFlag};

use crate::AnalysisError;

/// More than this share of an op's samples flagged makes the machine busy.
pub const BUSY_SHARE: f64 = 0.5;

/// The flags that read the host's state (not the GPU's, nor a level between executions).
pub const HOST_FLAGS: [SampleFlag; 4] = [
    SampleFlag::Steal,
    SampleFlag::Switched,
    SampleFlag::HostSlow,
    SampleFlag::Stalled,
];

/// One op's samples and how many carry a host flag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Taken {
    pub samples: usize,
    pub taken: usize,
}

impl Taken {
    fn share(self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            self.taken as f64 / self.samples as f64
        }
    }
}

/// The ops whose samples were mostly taken from them, with their counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    pub ops: BTreeMap<String, Taken>,
}

impl Busy {
    /// The line predict, compare and scripts/bench print: what was busy, and what to do.
    pub fn line(&self, run_dir: &std::path::Path) -> String {
        let parts: Vec<String> = self
            .ops
            .iter()
            .map(|(op, t)| format!("{} of {} {op}", t.taken, t.samples))
            .collect();
        let id = run_dir
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        // three short lines (output stays under 160 columns): what, why it matters, what to do
        format!(
            "busy machine: {} samples stalled, were switched out or stolen, or ran beside a \
             slow host\n  (other work on the cores?): these times are not this machine's\n  \
             measure again when it is idle, into a new run: OPBENCH_RUN={id}-idle and the same \
             scripts/bench arguments",
            parts
                .chunks(4)
                .map(|c| c.join(", "))
                .collect::<Vec<_>>()
                .join(",\n  ")
        )
    }
}

/// The run's busy ops, or `None` where no op's samples were mostly taken (or none records
/// the OS's counters). Errors: samples.csv unreadable.
pub fn judge(run: &Run) -> Result<Option<Busy>, AnalysisError> {
    let mut per_op: BTreeMap<String, Taken> = BTreeMap::new();
    for (key, samples) in run.samples()? {
        let medians = rundir::case_medians(&samples);
        for (e, of) in rundir::by_execution(&samples) {
            let m = medians[&e].within_execution();
            for s in of {
                if !s.records_state() {
                    continue;
                }
                let t = per_op.entry(key.op.to_string()).or_default();
                t.samples += 1;
                let flags = s.flags(&m);
                if flags.iter().any(|f| HOST_FLAGS.contains(f)) {
                    t.taken += 1;
                }
            }
        }
    }
    per_op.retain(|_, t| t.share() > BUSY_SHARE);
    Ok((!per_op.is_empty()).then_some(Busy { ops: per_op }))
}

/// [`judge`]'s line for a run directory: the one env.json records where scripts/bench
/// wrote it, else judged from the samples now (`None`: not busy, or no samples).
pub fn line_for(run: &Run) -> Option<String> {
    if let Some(b) = run
        .env
        .as_ref()
        .and_then(|e| e.busy.clone())
        .filter(|b| !b.is_empty())
    {
        return Some(b);
    }
    judge(run).ok().flatten().map(|b| b.line(&run.dir))
}
