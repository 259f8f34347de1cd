//! What a run's trace pass says about a decode step: the traced step beside what predict's
//! plan expects from the traced op cases.
//!
//! The plan's kernels are Σ calls per step × kernels per call of each planned op case (from
//! its own trace), plus one per unmeasured call that launches a kernel. The plan's ATen ops
//! are Σ calls × each case's top-level ops; an op the traced step dispatches more often than
//! the plan accounts for is listed by name: a call the plan does not have.

use std::collections::BTreeMap;

use rundir::{Activity, CaseKey, KernelRow, Mode, OpKind, Run, SeriesKey, TraceRow};
use shapes::{CallKind, StepPlan};

use crate::AnalysisError;
use crate::predict::Query;

/// A traced decode step against its plan.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCheck {
    /// From the step's own trace (per step).
    pub traced_kernels: f64,
    pub traced_device_ns: Option<f64>,
    /// From the plan and the op cases' traces; `None` when a planned case has no trace.
    pub planned_kernels: Option<f64>,
    /// Planned cases without a trace (named).
    pub untraced: Vec<String>,
    /// Kernels per step by the ATen op that launched them, from the step's trace.
    pub kernels_by_op: Vec<(String, f64)>,
    /// ATen ops the step dispatches more often than the plan accounts for: (op, per step
    /// in the trace, per step in the plan).
    pub unplanned: Vec<(String, f64, f64)>,
}

/// The trace pass's rows of a run, by case (their key's mode is `pipelined`).
#[derive(Debug, Default)]
pub struct Traces {
    pub rows: BTreeMap<CaseKey, TraceRow>,
    pub kernels: BTreeMap<CaseKey, Vec<KernelRow>>,
}

impl Traces {
    pub fn load(run: &Run) -> Result<Traces, AnalysisError> {
        let rows = run
            .traces()?
            .into_iter()
            .map(|t| (t.key.clone(), t))
            .collect();
        let mut kernels: BTreeMap<CaseKey, Vec<KernelRow>> = BTreeMap::new();
        for k in run.kernels()? {
            kernels.entry(k.key.clone()).or_default().push(k);
        }
        Ok(Traces { rows, kernels })
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The trace of the case `key` (in any mode).
    pub fn of(&self, key: &CaseKey) -> Option<&TraceRow> {
        self.rows.get(&key.in_mode(Mode::Pipelined))
    }

    fn activities(&self, key: &CaseKey) -> &[KernelRow] {
        self.kernels
            .get(&key.in_mode(Mode::Pipelined))
            .map_or(&[], Vec::as_slice)
    }
}

/// Check the traced step of `q` against its plan; `None` when the step was not traced.
pub fn step_check(traces: &Traces, q: &Query) -> Option<StepCheck> {
    let step_key = q.step_key(Mode::Pipelined);
    let step = traces.of(&step_key).filter(|t| t.calls > 0)?;
    let plan = StepPlan::new(q.model, q.profile, q.step());
    let mut planned_kernels = 0.0;
    let mut untraced = Vec::new();
    let mut planned_ops: BTreeMap<String, f64> = BTreeMap::new();
    for call in &plan.measured {
        let p = &call.problem;
        let key = SeriesKey {
            op: p.op,
            variant: call.variant.into(),
            site: p.site.into(),
            model: p.model.clone(),
            phase: rundir::Phase::Decode,
            q_len: 1,
            kv_len: p.kv_len,
            dtype: q.dtype,
            device: q.device,
            mode: Mode::Pipelined,
        }
        .at(p.batch);
        match traces.of(&key).filter(|t| t.calls > 0) {
            Some(t) => {
                planned_kernels += t.kernels * p.calls_per_step as f64;
                for a in traces.activities(&key) {
                    if a.kind == Activity::CpuOp {
                        *planned_ops.entry(a.name.clone()).or_default() +=
                            a.per_call * p.calls_per_step as f64;
                    }
                }
            }
            None => untraced.push(format!("{}/{}/{}", p.op, call.variant, p.site)),
        }
    }
    planned_kernels += plan
        .other
        .iter()
        .filter(|o| o.kind == CallKind::Kernel)
        .map(|o| o.calls as f64)
        .sum::<f64>();
    let acts = traces.activities(&step_key);
    let mut by_op: BTreeMap<String, f64> = BTreeMap::new();
    for a in acts.iter().filter(|a| a.kind == Activity::Kernel) {
        *by_op
            .entry(a.parent_op.clone().unwrap_or_else(|| "(no ATen op)".into()))
            .or_default() += a.per_call;
    }
    let mut kernels_by_op: Vec<(String, f64)> = by_op.into_iter().collect();
    kernels_by_op.sort_by(|a, b| b.1.total_cmp(&a.1));
    let unplanned = acts
        .iter()
        .filter(|a| a.kind == Activity::CpuOp)
        .filter_map(|a| {
            let planned = planned_ops.get(&a.name).copied().unwrap_or(0.0);
            (a.per_call > planned + 0.5).then(|| (a.name.clone(), a.per_call, planned))
        })
        .collect();
    Some(StepCheck {
        traced_kernels: step.kernels,
        traced_device_ns: step.device_ns,
        planned_kernels: untraced.is_empty().then_some(planned_kernels),
        untraced,
        kernels_by_op,
        unplanned,
    })
}

/// The op cases of a run's trace pass at batch `b` on a device, in key order (decode steps
/// excluded: they have their own table).
pub fn op_rows(traces: &Traces, device: rundir::DeviceId, b: usize) -> Vec<&TraceRow> {
    traces
        .rows
        .values()
        .filter(|t| {
            t.key.series.device == device
                && t.key.batch == b
                && t.key.series.op != OpKind::Decode
                && t.key.series.phase == rundir::Phase::Decode
        })
        .collect()
}

/// A case's top-level ATen ops, `name ×n` joined, for tables.
pub fn top_ops(traces: &Traces, key: &CaseKey) -> String {
    traces
        .activities(key)
        .iter()
        .filter(|a| a.kind == Activity::CpuOp)
        .map(|a| {
            if (a.per_call - 1.0).abs() < 1e-9 {
                a.name.clone()
            } else {
                format!("{} ×{}", a.name, a.per_call)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether what cuBLASLt's log said it chose (`... tile 8x64 ... cluster 2x1x1`) is the
/// kernel the trace saw: NVIDIA's `nvjet` kernel names carry the same tile (`_8x64_`) and
/// cluster shape (`_2x1_`). `None` when either side does not say.
pub fn log_names_kernel(log: &str, kernel: &str) -> Option<bool> {
    let word = |key: &str| {
        let mut it = log.split_whitespace();
        it.find(|w| *w == key).and(it.next())
    };
    let tile = word("tile")?;
    let cluster = word("cluster")?;
    // the kernel names the cluster's first two dimensions
    let cluster2: String = cluster.split('x').take(2).collect::<Vec<_>>().join("x");
    if !kernel.starts_with("nvjet") {
        return None;
    }
    Some(kernel.contains(&format!("_{tile}_")) && kernel.contains(&format!("_{cluster2}_")))
}

#[cfg(test)]
mod tests {
    use super::log_names_kernel;

    #[test]
    fn a_cublaslt_log_line_names_the_traced_nvjet_kernel() {
        let log = "cublasLtHSHMatmul algo 66 tile 8x64 stages 64xAUTO cluster 2x1x1";
        assert_eq!(
            log_names_kernel(log, "nvjet_sm90_hsh_8x64_64x16_2x1_v_bz_TNN"),
            Some(true)
        );
        assert_eq!(
            log_names_kernel(log, "nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_TNT"),
            Some(false)
        );
        assert_eq!(log_names_kernel(log, "ampere_h16816gemm"), None);
        assert_eq!(log_names_kernel("rocblas-bench m=1", "nvjet_x"), None);
    }
}
