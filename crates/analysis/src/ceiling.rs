//! The bandwidth bound, for what would help: the step's bytes at the device's measured
//! copy rate ([`bandwidth_bound`], the physical limit), and every linear projection at that
//! rate with the step's other calls as they are ([`linear_at_bound`]): what a GEMM library
//! or kernel that streams its weights at the copy rate would give, with what could get
//! there on this stack and how far each measured linear is from it.
//!
//! The copy rate is [`crate::predict::copy_gbps`], the one the ceiling rows measure.

use rundir::OpKind;

use crate::help::{Here, Lever};
use crate::predict::{Prediction, Query, copy_gbps};
use crate::stack::{Check, Stack};

/// The row's name.
pub const LINEAR_AT_BOUND: &str = "every linear at the copy rate";

/// The physical limit: the bytes the step's calls move (weights and the KV cache above
/// all) over the device's measured copy bandwidth.
pub fn bandwidth_bound(run: &rundir::Run, q: &Query, pred: &Prediction) -> Lever {
    let name = "the bandwidth bound".to_string();
    let action =
        "none: every weight and the KV cache read once a step at the copy ceiling".to_string();
    let bytes: f64 = pred
        .plan
        .measured
        .iter()
        .map(|c| c.problem.bytes(q.dtype.size()) as f64 * c.problem.calls_per_step as f64)
        .sum();
    let gbps = copy_gbps(run, q.device, q.dtype, None);
    match gbps.filter(|g| *g > 0.0) {
        Some(g) => Lever::priced(
            format!("{name} ({:.0} MB at {g:.0} GB/s)", bytes / 1e6),
            action,
            q.batch,
            bytes / g,
            None,
        ),
        None => Lever::unpriced(
            name,
            action,
            q.batch,
            None,
            "time the copy ceiling: cargo bench -p harness",
        ),
    }
}

/// The step with every linear call at its bytes over the measured copy rate, where that is
/// faster than it was priced (a call already at or past the rate keeps its price): on a
/// GPU each call's device time, the step max(host, device) again — a host-bound step
/// gains nothing from faster kernels, and the row says so by its price; on the CPU each
/// call's time in the serial sum. Its action names what could get there on this stack:
/// TunableOp (`PYTORCH_TUNABLEOP_ENABLED`), the other BLAS library (cuBLASLt, or hipBLASLt
/// where doctor found its knob acts on the arch), a skinny-GEMM kernel (an inference
/// engine's, for M = batch rows), and each linear site's priced time over its bound.
pub fn linear_at_bound(run: &rundir::Run, q: &Query, pred: &Prediction, stack: &Stack) -> Lever {
    let name = LINEAR_AT_BOUND;
    let gbps = copy_gbps(run, q.device, q.dtype, None).filter(|g| *g > 0.0);
    let Some(g) = gbps else {
        return Lever::unpriced(
            name,
            "time the copy ceiling: cargo bench -p harness",
            q.batch,
            None,
            "the run has no copy ceiling (`ceiling/copy`)",
        )
        .at(Here::Unchecked("no copy rate measured".into()));
    };
    let mut saved = 0.0;
    let mut far = Vec::new();
    for c in pred
        .components
        .iter()
        .filter(|c| c.op == Some(OpKind::Linear))
    {
        let Some(call) = pred
            .plan
            .measured
            .iter()
            .find(|p| p.problem.op == OpKind::Linear && p.problem.site == c.site)
        else {
            continue;
        };
        let bound = call.problem.bytes(q.dtype.size()) as f64 / g;
        let now = if pred.gpu { c.device_ns } else { c.per_call_ns };
        saved += c.calls as f64 * (now - bound).max(0.0);
        if bound > 0.0 {
            far.push(format!("{} {:.1}×", c.site, now / bound));
        }
    }
    let step = if pred.gpu {
        pred.host_ns.max(pred.device_ns - saved)
    } else {
        pred.serial_ns - saved
    };
    let lib = match stack.backend.as_str() {
        "rocm" => match &stack.hipblaslt {
            Check::No(w) => format!("hipBLASLt is not for this arch ({w})"),
            _ => "TORCH_BLAS_PREFER_HIPBLASLT=1".to_string(),
        },
        _ => "TORCH_BLAS_PREFER_CUBLASLT=1".to_string(),
    };
    let (action, here) = if pred.gpu {
        (
            format!(
                "what could get there: PYTORCH_TUNABLEOP_ENABLED=1, the other BLAS library \
                 ({lib}) — both priced by scripts/bench --knobs — or a skinny-GEMM kernel \
                 (an inference engine's); each linear's kernel over its bound: {}",
                far.join(", ")
            ),
            Here::Runs("TunableOp and the BLAS choice are knobs of this build".into()),
        )
    } else {
        (
            format!(
                "each linear's time over its bound: {}; no knob of this stack picks the CPU's \
                 GEMM library",
                far.join(", ")
            ),
            Here::Not(
                "TunableOp and the BLAS library choice are GPU settings; the CPU's GEMM is \
                 oneDNN/MKL's"
                    .into(),
            ),
        )
    };
    Lever::priced(format!("{name} ({g:.0} GB/s)"), action, q.batch, step, None).at(here)
}
