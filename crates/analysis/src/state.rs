//! How far a run's state flags explain its slow samples (`opbench state`; issue 31's check):
//! per timer and execution, the samples over [`SLOW`]× their case's median and how many of
//! them carry a flag ([`rundir::Sample::flags`]), the other samples and how many of those
//! do, and which flags. A flag on a slow sample says what the host or GPU was doing; a flag
//! on the others is the rule's cost (a clean sample `--host-state fast` drops).

use std::collections::BTreeMap;

pub use rundir::Timer;
use rundir::{CaseMedians, Mode, Run, Sample, SampleFlag};

use crate::AnalysisError;

/// A sample is slow over this multiple of its case's median ([`Scope`]).
pub use rundir::SLOW;

/// Every flag, in the order the table prints them.
pub const FLAGS: [SampleFlag; 6] = [
    SampleFlag::HostSlow,
    SampleFlag::HostLevel,
    SampleFlag::Stalled,
    SampleFlag::Steal,
    SampleFlag::Switched,
    SampleFlag::GpuThrottled,
];

/// The slow and the other samples of one timer in one execution, and their flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub slow: usize,
    pub slow_flagged: usize,
    pub others: usize,
    pub others_flagged: usize,
    /// Per flag of [`FLAGS`]: (slow samples, other samples) that carry it.
    pub by_flag: [(usize, usize); FLAGS.len()],
}

impl Tally {
    /// Add one case's samples of one execution, judged against `m` (their medians, with
    /// the execution's level among the case's executions: [`rundir::case_medians`]), each
    /// slow over [`SLOW`]× `reference` (the case's median time per call there, or in its
    /// fastest execution: [`Scope`]); a case whose samples record no state is not judged.
    pub fn add(&mut self, samples: &[&Sample], m: &CaseMedians, reference: f64) {
        if !samples.iter().any(|s| s.records_state()) {
            return;
        }
        for s in samples {
            let flags = s.flags(m);
            let slow = s.per_call_ns() > SLOW * reference;
            let flagged = usize::from(!flags.is_empty());
            if slow {
                self.slow += 1;
                self.slow_flagged += flagged;
            } else {
                self.others += 1;
                self.others_flagged += flagged;
            }
            for (i, f) in FLAGS.iter().enumerate() {
                if flags.contains(f) {
                    let c = &mut self.by_flag[i];
                    if slow {
                        c.0 += 1;
                    } else {
                        c.1 += 1;
                    }
                }
            }
        }
    }

    /// The share of the slow samples that carry a flag (`None` without slow samples).
    pub fn caught(&self) -> Option<f64> {
        (self.slow > 0).then(|| self.slow_flagged as f64 / self.slow as f64)
    }

    /// The share of the other samples that carry a flag (`None` without any).
    pub fn false_share(&self) -> Option<f64> {
        (self.others > 0).then(|| self.others_flagged as f64 / self.others as f64)
    }
}

/// What a sample is judged against in a [`tally`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Within its case and execution: slow over [`SLOW`]× the case's median there, flagged
    /// by what the sample and its execution's medians show (every flag but
    /// [`SampleFlag::HostLevel`]): what the flags catch of the host's bursts.
    Execution,
    /// Across the run's executions: slow over [`SLOW`]× the case's median in its fastest
    /// execution, flagged by every flag, [`SampleFlag::HostLevel`] too: what the flags catch
    /// of everything that made a sample slower than the case's fastest execution (in a run
    /// of one execution, the same as [`Scope::Execution`]).
    Run,
}

/// The run's samples in `mode`, tallied per (timer, execution), judged in `scope`. Errors:
/// samples.csv unreadable.
pub fn tally(
    run: &Run,
    mode: Mode,
    scope: Scope,
) -> Result<BTreeMap<(Timer, u32), Tally>, AnalysisError> {
    let mut out: BTreeMap<(Timer, u32), Tally> = BTreeMap::new();
    for (key, samples) in run.samples()? {
        if key.mode != mode {
            continue;
        }
        let medians = rundir::case_medians(&samples);
        for (e, of) in rundir::by_execution(&samples) {
            let (m, reference) = match scope {
                Scope::Run => (medians[&e], medians[&e].fastest_per_call()),
                Scope::Execution => (medians[&e].within_execution(), medians[&e].per_call),
            };
            let reference = reference.unwrap_or(f64::INFINITY);
            out.entry((Timer::of(&key.variant), e))
                .or_default()
                .add(&of, &m, reference);
        }
    }
    // a timer none of whose cases recorded a state was not judged
    out.retain(|_, t| t.slow + t.others > 0);
    Ok(out)
}

/// One timer's state at one batch in one execution, against the run's other executions:
/// over the cases it measured in more than one execution, the median of each case's ratio
/// of its host control (before and after each sample, pooled) and of its time per call to
/// that case's fastest execution. A flag judges a sample within its case and execution, so
/// a host that runs slow through a whole part of an execution (gen17's second execution,
/// 2026-12-02: every HF row at B = 64) leaves its samples clean; this shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Level {
    /// Cases measured in this execution and at least one other, with a control.
    pub cases: usize,
    /// The median over those cases of the control's median here / its lowest execution's.
    pub control: f64,
    /// The same of the time per call.
    pub per_call: f64,
}

/// A timer at a batch in an execution: what a [`Level`] is read for.
pub type LevelKey = (Timer, usize, u32);

/// Per (timer, batch, execution), the run's [`Level`]s in `mode`; empty for a run of one
/// execution. Errors: samples.csv unreadable.
pub fn levels(run: &Run, mode: Mode) -> Result<BTreeMap<LevelKey, Level>, AnalysisError> {
    // per key: each case's ratios of its control and of its time per call
    let mut ratios: BTreeMap<LevelKey, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (key, samples) in run.samples()? {
        if key.mode != mode {
            continue;
        }
        // each execution's levels against the case's lowest (none for a case of one)
        for (e, m) in rundir::case_medians(&samples) {
            let (Some(c), Some(t)) = (m.level, m.per_call_level) else {
                continue;
            };
            let r = ratios
                .entry((Timer::of(&key.variant), key.batch, e))
                .or_default();
            r.0.push(c);
            r.1.push(t);
        }
    }
    Ok(ratios
        .into_iter()
        .map(|(k, (c, t))| {
            let level = Level {
                cases: c.len(),
                control: stats::median(&c),
                per_call: stats::median(&t),
            };
            (k, level)
        })
        .collect())
}
