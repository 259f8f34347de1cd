//! `traces.csv` and `kernels.csv` (schema 4): what the trace pass saw one call of each case
//! do. A trace is taken in its own pass, after timing, and never changes a timed row.
//!
//! The case key's `mode` is `pipelined`: traced calls run back to back, then one
//! synchronize.

use crate::RunError;
use crate::csvio::{Line, opt};
use crate::key::{Activity, CaseKey, TraceSource, TraceStatus};

/// One case's trace: counts per call, and what it says about fallbacks.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRow {
    pub key: CaseKey,
    pub status: TraceStatus,
    pub source: TraceSource,
    /// Calls traced (counts below are per call).
    pub calls: u64,
    pub kernels: f64,
    pub memcpys: f64,
    pub memsets: f64,
    /// Runtime calls that wait for the device (`*Synchronize`, blocking copies).
    pub syncs: f64,
    /// Copies from the device to the host.
    pub d2h_copies: f64,
    /// Every runtime and driver API call.
    pub runtime_calls: f64,
    /// Σ device time of kernels, copies and memsets per call (ns).
    pub device_ns: Option<f64>,
    /// The kernel with the most device time (the library's solution for a log).
    pub dominant_kernel: Option<String>,
    /// Why this GPU case looks like it fell back to the host: no kernel launched, or a copy
    /// back to the host. Empty when it did not.
    pub fallback: Option<String>,
    pub note: Option<String>,
}

/// One activity of a case's trace, aggregated by kind and name.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelRow {
    pub key: CaseKey,
    pub kind: Activity,
    pub name: String,
    /// How many per call.
    pub per_call: f64,
    /// Device time (device activities) or host time (host events) per call, ns.
    pub ns_per_call: Option<f64>,
    /// The runtime or driver call that launched it (`cuLaunchKernelEx`, ...).
    pub launcher: Option<String>,
    /// The stream it ran on.
    pub stream: Option<i64>,
    /// The ATen op it was launched from.
    pub parent_op: Option<String>,
    pub source: TraceSource,
}

impl TraceRow {
    const TAIL: [&'static str; 14] = [
        "status",
        "source",
        "calls",
        "kernels",
        "memcpys",
        "memsets",
        "syncs",
        "d2h_copies",
        "runtime_calls",
        "device_ns",
        "dominant_kernel",
        "fallback",
        "note",
        "run_id",
    ];

    /// `traces.csv` columns in file order: the case key, then the trace.
    pub fn columns() -> Vec<&'static str> {
        let mut c = CaseKey::COLUMNS.to_vec();
        c.extend(Self::TAIL);
        c
    }

    /// A row saying no trace could be taken, and why.
    pub fn unavailable(key: CaseKey, source: TraceSource, why: impl Into<String>) -> Self {
        TraceRow {
            note: Some(format!("trace unavailable: {}", why.into())),
            ..TraceRow::empty(key, TraceStatus::Unavailable, source)
        }
    }

    /// A row with no counts, to fill in (a library log has names, no counts).
    pub fn empty(key: CaseKey, status: TraceStatus, source: TraceSource) -> Self {
        TraceRow {
            key,
            status,
            source,
            calls: 0,
            kernels: 0.0,
            memcpys: 0.0,
            memsets: 0.0,
            syncs: 0.0,
            d2h_copies: 0.0,
            runtime_calls: 0.0,
            device_ns: None,
            dominant_kernel: None,
            fallback: None,
            note: None,
        }
    }

    pub(crate) fn record(&self, run_id: &str) -> Vec<String> {
        let mut r = self.key.fields();
        r.extend([
            self.status.to_string(),
            self.source.to_string(),
            self.calls.to_string(),
            self.kernels.to_string(),
            self.memcpys.to_string(),
            self.memsets.to_string(),
            self.syncs.to_string(),
            self.d2h_copies.to_string(),
            self.runtime_calls.to_string(),
            opt(&self.device_ns),
            opt(&self.dominant_kernel),
            opt(&self.fallback),
            opt(&self.note),
            run_id.to_string(),
        ]);
        r
    }

    pub(crate) fn read(l: &Line<'_>) -> Result<Self, RunError> {
        let count = |c: &'static str| -> Result<f64, RunError> {
            l.positive(c, true)?
                .ok_or_else(|| l.error(c, "empty, a value is required"))
        };
        let text = |c: &str| Some(l.text(c).to_string()).filter(|s| !s.is_empty());
        Ok(TraceRow {
            key: CaseKey::read(l)?,
            status: l.req("status")?,
            source: l.req("source")?,
            calls: l.req("calls")?,
            kernels: count("kernels")?,
            memcpys: count("memcpys")?,
            memsets: count("memsets")?,
            syncs: count("syncs")?,
            d2h_copies: count("d2h_copies")?,
            runtime_calls: count("runtime_calls")?,
            device_ns: l.positive("device_ns", true)?,
            dominant_kernel: text("dominant_kernel"),
            fallback: text("fallback"),
            note: text("note"),
        })
    }
}

impl KernelRow {
    const TAIL: [&'static str; 8] = [
        "kind",
        "name",
        "per_call",
        "ns_per_call",
        "launcher",
        "stream",
        "parent_op",
        "source",
    ];

    /// `kernels.csv` columns in file order: the case key, then the activity.
    pub fn columns() -> Vec<&'static str> {
        let mut c = CaseKey::COLUMNS.to_vec();
        c.extend(Self::TAIL);
        c
    }

    pub(crate) fn record(&self) -> Vec<String> {
        let mut r = self.key.fields();
        r.extend([
            self.kind.to_string(),
            self.name.clone(),
            self.per_call.to_string(),
            opt(&self.ns_per_call),
            opt(&self.launcher),
            opt(&self.stream),
            opt(&self.parent_op),
            self.source.to_string(),
        ]);
        r
    }

    pub(crate) fn read(l: &Line<'_>) -> Result<Self, RunError> {
        let text = |c: &str| Some(l.text(c).to_string()).filter(|s| !s.is_empty());
        Ok(KernelRow {
            key: CaseKey::read(l)?,
            kind: l.req("kind")?,
            name: text("name").ok_or_else(|| l.error("name", "empty, a value is required"))?,
            per_call: l
                .positive("per_call", true)?
                .ok_or_else(|| l.error("per_call", "empty, a value is required"))?,
            ns_per_call: l.positive("ns_per_call", true)?,
            launcher: text("launcher"),
            stream: l.opt("stream")?,
            parent_op: text("parent_op"),
            source: l.req("source")?,
        })
    }
}
