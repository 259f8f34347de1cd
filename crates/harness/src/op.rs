//! The [`Op`] trait every op crate implements, and what a case can end as.

use shapes::{OpKind, Problem};
use tch::{TchError, Tensor};

use crate::{Config, DType, Device};

pub use rundir::Status;

/// A case that cannot be timed, and why. Becomes a row with an empty timing.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub status: Status,
    pub reason: String,
}

impl Failure {
    pub fn unsupported(reason: impl Into<String>) -> Self {
        Failure {
            status: Status::Unsupported,
            reason: reason.into(),
        }
    }
    pub fn error(reason: impl Into<String>) -> Self {
        Failure {
            status: Status::Error,
            reason: reason.into(),
        }
    }
}

/// Classify a libtorch error by its message: out of memory, not provided, or other.
pub fn classify(err: &TchError) -> Failure {
    let reason = first_line(&err.to_string());
    let lower = reason.to_lowercase();
    let status = if lower.contains("out of memory") || lower.contains("outofmemory") {
        Status::Oom
    } else if [
        "not implemented",
        "notimplemented",
        "not supported",
        "unsupported",
        "no available kernel",
        "could not run",
        "is not compiled",
        "not compiled with",
        "only supports",
        "not available",
        "torch not compiled",
        // a build without a fused SDPA kernel: "USE_MEM_EFF_ATTENTION was not enabled for
        // build." (the motivating user's Windows ROCm build), "USE_FLASH_ATTENTION ..."
        "was not enabled for build",
        // ROCm: AOTriton / CK without kernels for this GPU, "... was not compiled for
        // current AMD GPU architecture"
        "was not compiled for",
        "not built with",
    ]
    .iter()
    .any(|m| lower.contains(m))
    {
        Status::Unsupported
    } else {
        Status::Error
    };
    Failure { status, reason }
}

/// The first meaningful line of a libtorch message (they carry C++ backtraces), trimmed to
/// something that fits a CSV cell.
pub fn first_line(msg: &str) -> String {
    let line = msg
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("Exception raised from"))
        .unwrap_or("")
        .to_string();
    let line = line.strip_prefix("Torch(\"").unwrap_or(&line).to_string();
    let line = without_boilerplate(&line);
    if line.chars().count() > 300 {
        let cut: String = line.chars().take(300).collect();
        format!("{cut}…")
    } else {
        line
    }
}

/// Sentences libtorch appends to every dispatcher error, which say nothing of this case:
/// cut from the first of them on ("Could not run 'aten::…' with arguments from the 'CPU'
/// backend" is the fact; "This could be because … If you are a Facebook employee …" is not).
const BOILERPLATE: [&str; 4] = [
    ". This could be because the operator doesn't exist",
    ". If you are a Facebook employee",
    ". Please report a bug to PyTorch",
    ". See https://",
];

fn without_boilerplate(line: &str) -> String {
    let cut = BOILERPLATE
        .iter()
        .filter_map(|b| line.find(b))
        .min()
        .unwrap_or(line.len());
    let kept = &line[..cut];
    if cut < line.len() {
        format!("{kept}.")
    } else {
        kept.to_string()
    }
}

/// A model the problem names that cannot be loaded: an `error` row with the reason.
impl From<shapes::ShapesError> for Failure {
    fn from(e: shapes::ShapesError) -> Self {
        Failure::error(e.to_string())
    }
}

impl From<TchError> for Failure {
    fn from(e: TchError) -> Self {
        classify(&e)
    }
}

/// One output of a case beside its float64 CPU reference (same shape, both float64 on CPU).
/// An op may check a documented slice of its output (e.g. the first batch element) to keep
/// the reference affordable at large shapes.
#[derive(Debug)]
pub struct Check {
    pub output: Tensor,
    pub reference: Tensor,
}

/// What `prepare` returns: inputs and buffers built, ready to be called many times.
pub trait Prepared {
    /// One call of the op: exactly what is timed. Inputs are prepared already; the output is
    /// allocated as eager PyTorch allocates it (through the caching allocator on GPUs).
    fn run(&mut self) -> Result<(), TchError>;

    /// Run once and return what the check compares: the output, or a documented slice of
    /// it, still on the device. Graph mode captures this call and checks what a replay
    /// wrote into the captured tensor.
    fn output(&mut self) -> Result<Tensor, TchError>;

    /// The float64 CPU reference for [`Prepared::output`], from the same inputs.
    fn reference(&mut self) -> Result<Tensor, TchError>;

    /// Run once and return the output beside the float64 CPU reference on the same inputs.
    fn check(&mut self) -> Result<Check, TchError> {
        let output = self.output()?;
        let reference = self.reference()?;
        Ok(Check { output, reference })
    }

    /// How many calls of the case one [`Prepared::run`] makes (a graph replay runs many).
    fn calls_per_run(&self) -> u64 {
        1
    }

    /// Calls captured into one graph in `graph` mode: enough that the replay's own launch
    /// is a small part of the graph. A whole decode step takes one.
    fn graph_calls(&self) -> u64 {
        16
    }

    /// Bytes of model state one call reads: weights, a KV cache — what a real step streams
    /// from memory because every other layer's state passed through the cache in between.
    /// 0 (the default): none worth making cold.
    fn state_bytes(&self) -> u64 {
        0
    }

    /// Hold `copies` copies of the model state; from now on each [`Prepared::run`] uses the
    /// next copy in turn (the cold modes, [`crate::cold`]). Only called when
    /// [`Prepared::state_bytes`] is not 0.
    fn spread_state(&mut self, _copies: usize) -> Result<(), TchError> {
        Err(TchError::Kind(
            "this case has no model state to copy".into(),
        ))
    }

    /// Why the call cannot be timed on the device's clock or captured in a graph, where it
    /// waits for the device itself (a `nonzero`, an `.item()`): a lead kernel would stall
    /// its every wait, and a graph cannot hold one. Its pipelined time holds its kernels.
    /// `None` (the default): it only queues work.
    fn waits_for_device(&self) -> Option<String> {
        None
    }

    /// What actually ran, where it can be known (SDPA: the backend chosen).
    fn kernel(&self) -> Option<String> {
        None
    }

    /// Something the reader of the row must know (e.g. K/V expanded to H heads).
    fn note(&self) -> Option<String> {
        None
    }

    /// The relative error this case may show, where it is not the dtype's single-op
    /// tolerance ([`crate::dtype::tolerance`]): a whole forward accumulates more.
    fn tolerance(&self) -> Option<f64> {
        None
    }

    /// Bytes one call moves, where the variant moves more than the problem's minimum
    /// (DynamicCache's `cat` copies the whole cache).
    fn bytes(&self) -> Option<u64> {
        None
    }
}

/// One op: its variants and how to prepare a case.
pub trait Op {
    fn kind(&self) -> OpKind;

    /// Variant names, in the order they run.
    fn variants(&self) -> Vec<&'static str>;

    /// The problems to measure: by default every problem of this op over the configured
    /// models and grid profile.
    fn problems(&self, config: &Config) -> Vec<Problem> {
        config
            .models
            .iter()
            .flat_map(|m| config.profile.problems(m, self.kind()))
            .collect()
    }

    /// Whether `variant` is a case at this problem's site (e.g. `fused_qkv` only at
    /// `qkv_proj`). Combinations that do not apply get no row at all.
    fn applies(&self, _variant: &str, _problem: &Problem) -> bool {
        true
    }

    /// A case of this op timed once before every sample of `problem`'s `pipelined` case,
    /// written as a row of its own (the site the returned problem names): a control
    /// interleaved with the case at the scale of one sample, so that it sees the host in
    /// the state the case's samples saw (the decode crate: one decoder layer beside each
    /// step). It is checked against float64 like any case; outside the case's timed region.
    /// `None` (the default): none.
    fn beside(&self, _variant: &str, _problem: &Problem) -> Option<Problem> {
        None
    }

    /// Whether a prepared case of `variant` at `problem` holds model state — weights, a KV
    /// cache — that the cold modes copy ([`Prepared::state_bytes`] is its size). A case without gets
    /// no `pipelined_cold` or (on a GPU) `graph_cold` case: its warm row holds, nothing is
    /// prepared for it, and the plan does not count it. `false` (the default): none.
    fn holds_state(&self, _variant: &str, _problem: &Problem) -> bool {
        false
    }

    /// Build inputs and buffers on `device`. A variant the build or device does not provide
    /// is a [`Failure`] with status `unsupported` and the reason, never a panic.
    fn prepare(
        &self,
        variant: &str,
        problem: &Problem,
        dtype: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure>;
}

/// ‖out − ref‖ / ‖ref‖ in float64 (‖·‖ the Frobenius norm). A zero reference compares the
/// absolute norm instead; a NaN anywhere gives NaN.
pub fn rel_err(check: &Check) -> Result<f64, TchError> {
    let out = check
        .output
        .f_to_kind(tch::Kind::Double)?
        .f_to_device(tch::Device::Cpu)?;
    let reference = check
        .reference
        .f_to_kind(tch::Kind::Double)?
        .f_to_device(tch::Device::Cpu)?;
    if out.size() != reference.size() {
        return Err(TchError::Shape(format!(
            "output shape {:?} != reference shape {:?}",
            out.size(),
            reference.size()
        )));
    }
    let diff = out.f_sub(&reference)?.f_norm()?.f_double_value(&[])?;
    let norm = reference.f_norm()?.f_double_value(&[])?;
    Ok(if norm > 0.0 { diff / norm } else { diff })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_dispatcher_error_keeps_its_fact_and_drops_torchs_boilerplate() {
        let msg = "Internal torch error: Could not run 'aten::_scaled_dot_product_efficient_attention' \
                   with arguments from the 'CPU' backend. This could be because the operator doesn't \
                   exist for this backend, or was omitted during the selective/custom build process (if \
                   using custom build). If you are a Facebook employee using PyTorch on mobile, please \
                   visit https://fburl.com/ptmfixes for possible resolutions.";
        let line = super::first_line(msg);
        assert_eq!(
            line,
            "Internal torch error: Could not run 'aten::_scaled_dot_product_efficient_attention' \
             with arguments from the 'CPU' backend."
        );
        // a message without boilerplate is kept whole
        assert_eq!(
            super::first_line("No available kernel. Aborting execution."),
            "No available kernel. Aborting execution."
        );
    }

    use super::*;

    /// Messages PyTorch gives, recorded from its sources and users' reports.
    #[test]
    fn a_missing_kernel_is_unsupported_not_an_error() {
        let torch = |m: &str| classify(&TchError::Torch(m.to_string()));
        for m in [
            "USE_MEM_EFF_ATTENTION was not enabled for build.\nException raised from _efficient_attention_forward at aten/src/ATen/native/transformers/cuda/attention.cu:1412",
            "USE_FLASH_ATTENTION was not enabled for build.",
            "Flash attention was not compiled for current AMD GPU architecture",
            "No available kernel. Aborting execution.",
            "Could not run 'aten::_flash_attention_forward' with arguments from the 'CPU' backend.",
        ] {
            let f = torch(m);
            assert_eq!(f.status, Status::Unsupported, "{m}");
            assert!(!f.reason.contains("Exception raised from"), "{}", f.reason);
        }
        assert_eq!(
            torch("CUDA out of memory. Tried to allocate 2.00 GiB").status,
            Status::Oom
        );
        assert_eq!(
            torch("HIP out of memory. Tried to allocate 20.00 MiB").status,
            Status::Oom
        );
        assert_eq!(
            torch("shape '[1, 16]' is invalid for input of size 8").status,
            Status::Error
        );
    }
}
