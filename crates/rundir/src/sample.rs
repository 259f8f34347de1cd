//! One row of `samples.csv` and what a case's samples say about the host's state.

use crate::RunError;
use crate::csvio::{Line, opt};
use crate::key::CaseKey;

/// One row of `samples.csv`: one criterion sample of a case, `iters` calls in `total_ns`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub key: CaseKey,
    /// The execution (process) that took it, from 1.
    pub execution: u32,
    pub iters: u64,
    pub total_ns: f64,
    /// The host-speed control right before this sample: the dispatch floor's per-call
    /// time in ns (empty where it was not measured).
    pub control_ns: Option<f64>,
    /// The build-independent host-speed control right before this sample: a fixed piece
    /// of CPU work that never calls torch, in ns (empty where it was not measured: runs
    /// before it existed). A new build cannot move it; the host's own speed does.
    pub host_ns: Option<f64>,
    /// The host's and GPU's state over the sample, where the platform tells it.
    pub state: SampleState,
    /// In a paired run (`opbench ab`), the pair this sample belongs to: the base's and the
    /// candidate's samples of one case with the same index were taken back to back
    /// (empty in runs of separate executions; added 2026-12-03).
    pub pair: Option<u32>,
}

/// The [`SampleState`] fields a worker measures on its host and sends with each sample
/// (the GPU's come from NVML on opbench's side): `opbench peer` passes them to
/// scripts/peer.py (`--state-keys`), which reports these and no others.
pub const WORKER_STATE_KEYS: [&str; 7] = [
    "cpu_ns",
    "nivcsw",
    "steal",
    "host_after_ns",
    "slowest_ns",
    "control_after_ns",
    "typical_ns",
];

/// The host's and the GPU's state over one sample (columns added 2026-12-01; empty where
/// the platform does not tell, and in older runs). It travels between a worker and
/// `opbench ab` as JSON (every field optional).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SampleState {
    /// The process's CPU time during the sample (ns; user + system, every thread).
    pub cpu_ns: Option<f64>,
    /// The process's involuntary context switches during the sample.
    pub nivcsw: Option<u64>,
    /// The machine's steal ticks during the sample (`/proc/stat`).
    pub steal: Option<u64>,
    /// The GPU right after the sample: SM clock (MHz), utilization (%), temperature (°C)
    /// and the throttling reasons (NVML's bitmask less the benign ones; 0 for none).
    pub sm_mhz: Option<u32>,
    pub gpu_util: Option<u32>,
    pub gpu_temp: Option<u32>,
    pub throttle: Option<u64>,
    /// The build-independent host control again, right after the sample (ns): a slow
    /// burst that begins during the sample shows here, not in `host_ns` before it.
    pub host_after_ns: Option<f64>,
    /// The slowest stretch of the sample's own calls, per call (ns): a host-timed sample's
    /// calls are timed in up to [`STRETCHES`] stretches of equal count (a clock read between
    /// stretches, none inside a call). A burst that begins and ends inside the sample, which
    /// the controls before and after it cannot see, shows here.
    pub slowest_ns: Option<f64>,
    /// The dispatch floor's control again, right after the sample (ns per call; beside
    /// `control_ns` before it; added 2026-12-02). With it, the torch control is what
    /// [`SampleFlag::HostSlow`] reads: a torch call moves with the build, but within one
    /// case and execution it reads the host's state, and on the H200 it caught more of the
    /// slow samples than the build-independent controls (docs/findings.md 9).
    pub control_after_ns: Option<f64>,
    /// The median stretch of the sample's own calls, per call (ns; beside `slowest_ns`,
    /// added 2026-12-02): the sample's own pace, which a burst inside it does not move — a
    /// sample whose time per call runs well over it was slow in part of its calls only.
    /// scripts/peer.py's generate() samples (one call of many new tokens) are timed per
    /// token: a stretch is one token (its forward and generate()'s loop after it).
    pub typical_ns: Option<f64>,
}

/// How many stretches a host-timed sample's calls are timed in ([`SampleState::slowest_ns`]).
pub const STRETCHES: u64 = 32;

/// The torch control (`control_ns`): the dispatch floor's call back to back for at least
/// this long, right before a sample (the harness's, and scripts/peer.py's when asked)...
pub const TORCH_CONTROL_SPAN: std::time::Duration = std::time::Duration::from_micros(200);
/// ... in chunks of this many calls between clock reads.
pub const TORCH_CONTROL_CHUNK: u64 = 16;

/// Why a sample is not of the machine's usual state ([`Sample::flags`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleFlag {
    /// The hypervisor took CPU time from the machine (steal).
    Steal,
    /// The process was switched out involuntarily more than once per 4 ms.
    Switched,
    /// The host control around the sample (the mean of its ratios before and after, each to
    /// its median over the case in the execution) ran over [`HOST_SLOW`]: the torch control
    /// (`control_ns`, `control_after_ns`) where the sample records it after too (since
    /// 2026-12-02), else the build-independent one (`host_ns`, `host_after_ns`).
    HostSlow,
    /// The case ran slow through this whole execution and the host control says the host
    /// was why: against the lowest of the case's executions, its host control's median over
    /// the execution ran over [`HOST_SLOW`]× ([`CaseMedians::level`]) and its median time per
    /// call over [`SLOW`]× ([`CaseMedians::per_call_level`]); a run of several executions
    /// only. A host slow through a whole case (gen17's second execution, 2026-12-02: every
    /// HF row at B = 64 at 1.85× the first's, its control 1.85×) leaves
    /// [`SampleFlag::HostSlow`], judged within the execution, nothing to see. Within one run
    /// every execution is the same build, so a level between them is the host's; the
    /// case's fastest execution is never flagged by it.
    HostLevel,
    /// A stretch of the sample's own calls ran slower than [`STALL`]× the case's median
    /// time per call: the host stalled inside the sample. This reads the sample's own
    /// clock, so it tells an uneven sample from an even one; a build whose every call is
    /// slower makes every sample evenly slower and is not flagged by it.
    Stalled,
    /// The GPU held its clock down for power or heat *below its case's median clock* (by
    /// more than [`CLOCK_DROP`]): a throttle reason alone is not a flag, since a case whose
    /// every sample runs at the power cap (a large GEMM on the H200) is in its usual state.
    GpuThrottled,
}

impl SampleFlag {
    pub fn as_str(self) -> &'static str {
        match self {
            SampleFlag::Steal => "steal",
            SampleFlag::Switched => "switched",
            SampleFlag::HostSlow => "host-slow",
            SampleFlag::HostLevel => "host-level",
            SampleFlag::Stalled => "stalled",
            SampleFlag::GpuThrottled => "gpu-throttled",
        }
    }
}

/// How far the host control around a sample (the mean of its ratios before and after to
/// their medians) may run before its sample is flagged. Chosen with [`STALL`] on a probe of
/// the H200's host-bound calls (2026-12-01, docs/findings.md) for the build-independent
/// control, then fixed for the torch control before the runs that judged it (2026-12-02).
pub const HOST_SLOW: f64 = 1.2;

/// A time is slow over this multiple of its case's usual: a sample against its case's median
/// in its fastest execution (`opbench state`, issue 31's bars), an execution's median
/// against the fastest's ([`SampleFlag::HostLevel`]).
pub const SLOW: f64 = 1.3;

/// How much slower than the case's median time per call a stretch of a sample's calls may
/// run before its sample is flagged as stalled.
pub const STALL: f64 = 2.0;

/// How far below its case's median SM clock a throttled sample's clock must read to be
/// flagged ([`SampleFlag::GpuThrottled`]): 2% (two or three 15-MHz steps on the H200), over
/// the jitter of one reading right after the sample.
pub const CLOCK_DROP: f64 = 0.02;

/// The medians a sample's state is judged against: over its case's samples of one
/// execution, the host controls before and after (build-independent and torch), the time
/// per call and the GPU's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CaseMedians {
    pub host: Option<f64>,
    pub host_after: Option<f64>,
    pub control: Option<f64>,
    pub control_after: Option<f64>,
    pub per_call: Option<f64>,
    pub sm_mhz: Option<f64>,
    /// The host control's median over the execution's samples, before and after each
    /// pooled ([`Sample::controls`]): the execution's level.
    pub control_level: Option<f64>,
    /// `control_level` against the lowest of the case's executions ([`case_medians`]);
    /// `None` within one execution.
    pub level: Option<f64>,
    /// `per_call` against the lowest of the case's executions' ([`case_medians`]); `None`
    /// within one execution.
    pub per_call_level: Option<f64>,
}

impl CaseMedians {
    /// The medians of `samples` (one case, one execution).
    pub fn of(samples: &[&Sample]) -> Self {
        let of = |f: &dyn Fn(&Sample) -> Option<f64>| {
            let v: Vec<f64> = samples.iter().filter_map(|s| f(s)).collect();
            (!v.is_empty()).then(|| stats::median(&v))
        };
        CaseMedians {
            host: of(&|s| s.host_ns),
            host_after: of(&|s| s.state.host_after_ns),
            control: of(&|s| s.control_ns),
            control_after: of(&|s| s.state.control_after_ns),
            per_call: of(&|s| Some(s.per_call_ns())),
            sm_mhz: of(&|s| s.state.sm_mhz.map(f64::from)),
            control_level: {
                let torch = Sample::reads_torch_control(samples.iter().copied());
                let v: Vec<f64> = samples.iter().flat_map(|s| s.controls(torch)).collect();
                (!v.is_empty()).then(|| stats::median(&v))
            },
            level: None,
            per_call_level: None,
        }
    }

    /// The case's median time per call in its fastest execution (`per_call` over its
    /// [`CaseMedians::per_call_level`]; within one execution, its own).
    pub fn fastest_per_call(&self) -> Option<f64> {
        self.per_call
            .map(|t| t / self.per_call_level.unwrap_or(1.0))
    }

    /// These medians as judged within their execution alone: without the levels against
    /// the case's other executions (so no [`SampleFlag::HostLevel`]).
    pub fn within_execution(&self) -> Self {
        CaseMedians {
            level: None,
            per_call_level: None,
            ..*self
        }
    }
}

/// How many of a case's samples are flagged ([`Sample::flags`]), each judged against its
/// execution's medians; `None` where no sample records a state.
pub fn flagged(samples: &[Sample]) -> Option<u32> {
    flag_each(samples).map(|f| f.iter().filter(|&&x| x).count() as u32)
}

/// Whether each of a case's samples is flagged, in order (each judged against the medians
/// of its case within its execution, and that execution's level against the case's
/// others: [`case_medians`]); `None` where no sample records a state.
pub fn flag_each(samples: &[Sample]) -> Option<Vec<bool>> {
    if !samples.iter().any(Sample::records_state) {
        return None;
    }
    let medians = case_medians(samples);
    Some(
        samples
            .iter()
            .map(|s| !s.flags(&medians[&s.execution]).is_empty())
            .collect(),
    )
}

/// A case's [`CaseMedians`] per execution, each with its [`CaseMedians::level`]: the
/// execution's host control (its median over the case's samples, before and after each)
/// against the lowest of the case's executions (`None` for a case of one execution).
pub fn case_medians(samples: &[Sample]) -> std::collections::BTreeMap<u32, CaseMedians> {
    let mut out: std::collections::BTreeMap<u32, CaseMedians> = by_execution(samples)
        .into_iter()
        .map(|(e, of)| (e, CaseMedians::of(&of)))
        .collect();
    let lowest = |f: fn(&CaseMedians) -> Option<f64>| {
        out.values().filter_map(f).fold(f64::INFINITY, f64::min)
    };
    let (control, per_call) = (lowest(|m| m.control_level), lowest(|m| m.per_call));
    let compared = out.values().filter(|m| m.control_level.is_some()).count();
    if compared >= 2 && control > 0.0 {
        for m in out.values_mut() {
            m.level = m.control_level.map(|c| c / control);
            m.per_call_level = m.per_call.map(|t| t / per_call);
        }
    }
    out
}

/// A case's samples per execution, in execution order (each execution's in file order): what
/// its state is judged within.
pub fn by_execution(samples: &[Sample]) -> std::collections::BTreeMap<u32, Vec<&Sample>> {
    let mut out: std::collections::BTreeMap<u32, Vec<&Sample>> = Default::default();
    for s in samples {
        out.entry(s.execution).or_default().push(s);
    }
    out
}

impl Sample {
    /// `samples.csv` columns, in file order: the case key, then these.
    const TAIL: [&'static str; 17] = [
        "execution",
        "iters",
        "total_ns",
        "control_ns",
        "host_ns",
        "cpu_ns",
        "nivcsw",
        "steal",
        "sm_mhz",
        "gpu_util",
        "gpu_temp",
        "throttle",
        "host_after_ns",
        "slowest_ns",
        "control_after_ns",
        "typical_ns",
        "pair",
    ];

    /// Columns added after schema 2 that a reader does not require (older runs lack them):
    /// every one after `control_ns`.
    const FIRST_OPTIONAL: usize = 4;

    /// What flags this sample as taken in an unusual state: steal, many involuntary
    /// switches, a slow host control around it, a stalled stretch of its own calls, a GPU
    /// throttled below its usual clock (each against `m`, its case's medians in its
    /// execution; a throttled sample without a clock to compare is flagged). Empty: clean,
    /// or nothing recorded to tell.
    pub fn flags(&self, m: &CaseMedians) -> Vec<SampleFlag> {
        let s = &self.state;
        let mut out = Vec::new();
        if s.steal.is_some_and(|t| t > 0) {
            out.push(SampleFlag::Steal);
        }
        let per_4ms = (self.total_ns / 4e6).max(1.0);
        if s.nivcsw.is_some_and(|n| n as f64 > per_4ms) {
            out.push(SampleFlag::Switched);
        }
        if self.host_control_ratio(m).is_some_and(|r| r > HOST_SLOW) {
            out.push(SampleFlag::HostSlow);
        }
        if m.level.is_some_and(|l| l > HOST_SLOW) && m.per_call_level.is_some_and(|t| t > SLOW) {
            out.push(SampleFlag::HostLevel);
        }
        if s.slowest_ns
            .zip(m.per_call)
            .is_some_and(|(x, p)| x > STALL * p)
        {
            out.push(SampleFlag::Stalled);
        }
        let below_usual = match (s.sm_mhz, m.sm_mhz) {
            (Some(x), Some(usual)) => f64::from(x) < (1.0 - CLOCK_DROP) * usual,
            _ => true,
        };
        if s.throttle.is_some_and(|t| t != 0) && below_usual {
            out.push(SampleFlag::GpuThrottled);
        }
        out
    }

    /// The host control around this sample against its case's medians (`m`): the mean of
    /// its ratios before and after (one where only one was recorded). The torch control
    /// where the sample records it after too (it caught more of the H200's slow samples,
    /// docs/findings.md 9), else the build-independent one; `None`: neither recorded.
    pub fn host_control_ratio(&self, m: &CaseMedians) -> Option<f64> {
        let ratio = |h: Option<f64>, m: Option<f64>| h.zip(m).map(|(h, m)| h / m);
        let (before, after) = if Self::reads_torch_control([self]) {
            (
                ratio(self.control_ns, m.control),
                ratio(self.state.control_after_ns, m.control_after),
            )
        } else {
            (
                ratio(self.host_ns, m.host),
                ratio(self.state.host_after_ns, m.host_after),
            )
        };
        match (before, after) {
            (Some(b), Some(a)) => Some((a + b) / 2.0),
            (b, a) => b.or(a),
        }
    }

    /// Whether the host control read for `samples` is the torch control (`control_ns`,
    /// `control_after_ns`): where any of them records it after too (since 2026-12-02);
    /// else the build-independent one (`host_ns`, `host_after_ns`). The one place that
    /// chooses, for a sample's flag and for a case's level.
    pub fn reads_torch_control<'s>(samples: impl IntoIterator<Item = &'s Sample>) -> bool {
        samples
            .into_iter()
            .any(|s| s.state.control_after_ns.is_some())
    }

    /// The host control's readings before and after this sample: the torch control's with
    /// `torch` ([`Sample::reads_torch_control`]), else the build-independent one's.
    pub fn controls(&self, torch: bool) -> impl Iterator<Item = f64> {
        let pair = if torch {
            [self.control_ns, self.state.control_after_ns]
        } else {
            [self.host_ns, self.state.host_after_ns]
        };
        pair.into_iter().flatten()
    }

    /// The columns a reader of schema ≥ 2 requires.
    pub fn v2_columns() -> Vec<&'static str> {
        Self::columns()
            .into_iter()
            .filter(|c| !Self::TAIL[Self::FIRST_OPTIONAL..].contains(c))
            .collect()
    }

    /// `samples.csv` columns, in file order.
    pub fn columns() -> Vec<&'static str> {
        let mut out = CaseKey::COLUMNS.to_vec();
        out.extend(Self::TAIL);
        out
    }

    /// The columns every schema version has.
    pub fn v1_columns() -> Vec<&'static str> {
        let mut out = CaseKey::COLUMNS.to_vec();
        out.extend(["iters", "total_ns"]);
        out
    }

    /// Whether the sample records the host's or GPU's state (runs before 2026-12-01, and
    /// the peer's difference samples, do not): a case none of whose samples does is not
    /// judged by the flags.
    pub fn records_state(&self) -> bool {
        self.host_ns.is_some() || self.state != SampleState::default()
    }

    /// Time per call.
    pub fn per_call_ns(&self) -> f64 {
        self.total_ns / self.iters as f64
    }

    pub(crate) fn record(&self) -> Vec<String> {
        let mut out = self.key.fields();
        out.extend([
            self.execution.to_string(),
            self.iters.to_string(),
            self.total_ns.to_string(),
            opt(&self.control_ns),
            opt(&self.host_ns),
            opt(&self.state.cpu_ns),
            opt(&self.state.nivcsw),
            opt(&self.state.steal),
            opt(&self.state.sm_mhz),
            opt(&self.state.gpu_util),
            opt(&self.state.gpu_temp),
            opt(&self.state.throttle),
            opt(&self.state.host_after_ns),
            opt(&self.state.slowest_ns),
            opt(&self.state.control_after_ns),
            opt(&self.state.typical_ns),
            opt(&self.pair),
        ]);
        out
    }

    /// Samples of `key` from (calls, total ns) pairs, without host controls.
    pub fn bare(key: &CaseKey, execution: u32, pairs: &[(u64, f64)]) -> Vec<Sample> {
        pairs
            .iter()
            .map(|&(iters, total_ns)| Sample {
                key: key.clone(),
                execution,
                iters,
                total_ns,
                control_ns: None,
                host_ns: None,
                state: SampleState::default(),
                pair: None,
            })
            .collect()
    }

    pub(crate) fn read(l: &Line<'_>) -> Result<Self, RunError> {
        let iters: u64 = l.req("iters")?;
        if iters == 0 {
            return Err(l.error("iters", "0: a sample times at least one call"));
        }
        let total_ns = l
            .positive("total_ns", false)?
            .ok_or_else(|| l.error("total_ns", "empty, a value is required"))?;
        let execution = l.opt("execution")?.unwrap_or(1);
        if execution == 0 {
            return Err(l.error("execution", "0: executions count from 1"));
        }
        Ok(Sample {
            key: CaseKey::read(l)?,
            execution,
            iters,
            total_ns,
            control_ns: l.positive("control_ns", false)?,
            host_ns: l.positive("host_ns", false)?,
            state: SampleState::read(l)?,
            pair: l.opt("pair")?,
        })
    }
}

impl SampleState {
    /// The state's columns of a line (samples.csv, or the peer's file); empty ones `None`.
    pub(crate) fn read(l: &Line<'_>) -> Result<Self, RunError> {
        Ok(SampleState {
            cpu_ns: l.positive("cpu_ns", true)?,
            nivcsw: l.opt("nivcsw")?,
            steal: l.opt("steal")?,
            sm_mhz: l.opt("sm_mhz")?,
            gpu_util: l.opt("gpu_util")?,
            gpu_temp: l.opt("gpu_temp")?,
            throttle: l.opt("throttle")?,
            host_after_ns: l.positive("host_after_ns", false)?,
            slowest_ns: l.positive("slowest_ns", false)?,
            control_after_ns: l.positive("control_after_ns", false)?,
            typical_ns: l.positive("typical_ns", false)?,
        })
    }
}
