//! Whether a run's machine was busy with other work: the share of each op's samples that
//! the OS says were taken from it (switched out involuntarily more than once per 4 ms, or
//! CPU time stolen by the hypervisor: [`SampleFlag::Switched`], [`SampleFlag::Steal`]).
//! These two flags are absolute, unlike the host control's, which is judged against the
//! case's own median and so cannot see a machine that was slow the whole run through.
//!
//! A run is busy when, for some op, more than [`BUSY_SHARE`] of its samples carry one of
//! them. scripts/bench prints the line at a run's end and records it in env.json
//! (`busy`); `predict` and `compare` open with it.

use std::collections::BTreeMap;

use rundir::{Run, SampleFlag};

use crate::AnalysisError;

/// More than this share of an op's samples taken from it makes the machine busy.
pub const BUSY_SHARE: f64 = 0.5;

/// One op's samples and how many the OS took time from.
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
        format!(
            "busy machine: {} samples were switched out or stolen (other work on the cores), \
             so these times are not this machine's; measure again when it is idle \
             (OPBENCH_RUN={id}-idle scripts/bench ...)",
            parts.join(", ")
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
                if s.state.nivcsw.is_none() && s.state.steal.is_none() {
                    continue;
                }
                let t = per_op.entry(key.op.to_string()).or_default();
                t.samples += 1;
                let flags = s.flags(&m);
                if flags.contains(&SampleFlag::Switched) || flags.contains(&SampleFlag::Steal) {
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
