//! How far a run's state flags explain its slow samples (`opbench state`; issue 31's check):
//! per timer and execution, the samples over [`SLOW`]× their case's median and how many of
//! them carry a flag ([`rundir::Sample::flags`]), the other samples and how many of those
//! do, and which flags. A flag on a slow sample says what the host or GPU was doing; a flag
//! on the others is the rule's cost (a clean sample `--host-state fast` drops).

use std::collections::BTreeMap;

pub use rundir::Timer;
use rundir::{CaseMedians, Mode, Run, Sample, SampleFlag};

use crate::AnalysisError;

/// A sample is slow over this multiple of its case's median within its execution.
pub const SLOW: f64 = 1.3;

/// Every flag, in the order the table prints them.
pub const FLAGS: [SampleFlag; 5] = [
    SampleFlag::HostSlow,
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
    /// Add one case's samples of one execution; a case whose samples record no state is
    /// not judged.
    pub fn add(&mut self, samples: &[&Sample]) {
        if !samples.iter().any(|s| s.records_state()) {
            return;
        }
        let m = CaseMedians::of(samples);
        let Some(median) = m.per_call else {
            return;
        };
        for s in samples {
            let flags = s.flags(&m);
            let slow = s.per_call_ns() > SLOW * median;
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

/// The run's samples in `mode`, tallied per (timer, execution), each case judged within each
/// of its executions. Errors: samples.csv unreadable.
pub fn tally(run: &Run, mode: Mode) -> Result<BTreeMap<(Timer, u32), Tally>, AnalysisError> {
    let mut out: BTreeMap<(Timer, u32), Tally> = BTreeMap::new();
    for (key, samples) in run.samples()? {
        if key.mode != mode {
            continue;
        }
        for (e, of) in rundir::by_execution(&samples) {
            out.entry((Timer::of(&key.variant), e))
                .or_default()
                .add(&of);
        }
    }
    // a timer none of whose cases recorded a state was not judged
    out.retain(|_, t| t.slow + t.others > 0);
    Ok(out)
}
