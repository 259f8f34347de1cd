//! `graph` mode: a case captured into a CUDA graph (hipGraph on ROCm) and replayed, which is
//! what CUDA-graph decoding (vLLM, `torch.compile(mode="reduce-overhead")`, transformers'
//! static cache with graphs) does to take the host out of the step.
//!
//! A case is captured twice through libtorch's own `at::cuda::CUDAGraph` ([`atenx::Graph`]):
//! - once for the check: one call of [`Prepared::output`]; the captured output is filled
//!   with NaN (where the call allocates it), the graph replayed, and what the replay wrote is
//!   compared with the float64 reference, so a replay that computes nothing or the wrong
//!   thing is a `mismatch` row;
//! - once for timing: [`Prepared::graph_calls`] calls back to back (16 for an op, 1 for a
//!   whole decode step). The timed unit is one replay; its device time (GPU events behind a
//!   lead, as `device` mode) over the calls it holds is the row's time per call: kernel time
//!   plus the graph's own gap between kernels, with no host dispatch.
//!
//! `graph_cold` mode captures the timing graph after [`Prepared::spread_state`]: each call
//! of the graph reads its own copy of the case's model state (weights, KV cache), with
//! enough copies to pass twice the last-level cache ([`crate::cold`]), so the state comes
//! from memory as it does in a step that streams every layer's weights. The case keeps its
//! copies alive as long as the graph that reads them.
//!
//! A case that cannot be captured (a call that synchronizes the host, a backend that does not
//! allow capture) is an `unsupported` row with libtorch's reason; on the CPU and on a build
//! whose `CUDAGraph` layout was not checked, too.

use std::sync::OnceLock;

use tch::{TchError, Tensor};

use crate::op::{Failure, Prepared, Status, first_line, rel_err};
use crate::{Check, DType, Device, dtype};

/// libtorch's graph class on `device`, resolved once per process, or why graph mode cannot
/// run there.
pub fn available(device: Device) -> Result<&'static atenx::GraphApi, String> {
    if !device.is_gpu() {
        return Err("graph replay needs a GPU (CUDA graphs / hipGraph)".into());
    }
    static API: OnceLock<Result<atenx::GraphApi, String>> = OnceLock::new();
    API.get_or_init(|| {
        let lib = crate::load_gpu_library().ok_or_else(|| {
            "graph replay needs libtorch's GPU library (libtorch_cuda / libtorch_hip), which is not loaded"
                .to_string()
        })?;
        atenx::GraphApi::load(&lib)
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// A captured case: each [`Prepared::run`] is one replay of `calls` calls.
pub struct GraphCase {
    graph: atenx::Graph,
    calls: u64,
    kernel: Option<String>,
    note: Option<String>,
    bytes: Option<u64>,
    /// `graph_cold`: the case whose copies of its state the graph reads (dropped after it).
    owner: Option<Box<dyn Prepared>>,
}

impl std::fmt::Debug for GraphCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphCase")
            .field("graph", &self.graph)
            .field("calls", &self.calls)
            .field("note", &self.note)
            .field("owns_state", &self.owner.is_some())
            .finish()
    }
}

impl Prepared for GraphCase {
    fn run(&mut self) -> Result<(), TchError> {
        self.graph.replay()
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        Err(TchError::Kind(
            "a graph case is checked when it is captured".into(),
        ))
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        self.output()
    }
    fn kernel(&self) -> Option<String> {
        self.kernel.clone()
    }
    fn note(&self) -> Option<String> {
        self.note.clone()
    }
    fn bytes(&self) -> Option<u64> {
        self.bytes
    }
    fn calls_per_run(&self) -> u64 {
        self.calls
    }
}

/// A capture failure as a row: out of memory stays `oom`, anything else is a case the
/// graph path does not provide.
fn capture_failure(e: &TchError) -> Failure {
    let f = crate::classify(e);
    if f.status == Status::Oom {
        f
    } else {
        Failure::unsupported(format!(
            "graph capture failed: {}",
            first_line(&e.to_string())
        ))
    }
}

/// Capture `p` on `device`, check a replay's output against the float64 reference, and
/// return the timing graph with the replay's relative error.
pub fn capture(
    p: &mut dyn Prepared,
    device: Device,
    dt: DType,
) -> Result<(GraphCase, f64), (Failure, Option<f64>)> {
    capture_with(p, device, dt, None)
}

/// `graph_cold`: [`capture`] of a case of its own (`p`, prepared for this capture only),
/// whose timing graph reads copies of its state spread past twice `l2_bytes`. The returned
/// case owns `p`, so the copies live as long as the graph.
pub fn capture_cold(
    mut p: Box<dyn Prepared>,
    device: Device,
    dt: DType,
    l2_bytes: u64,
) -> Result<(GraphCase, f64), (Failure, Option<f64>)> {
    let (mut case, err) = capture_with(p.as_mut(), device, dt, Some(l2_bytes))?;
    case.owner = Some(p);
    Ok((case, err))
}

fn capture_with(
    p: &mut dyn Prepared,
    device: Device,
    dt: DType,
    cold: Option<u64>,
) -> Result<(GraphCase, f64), (Failure, Option<f64>)> {
    let api = available(device).map_err(|why| (Failure::unsupported(why), None))?;
    let fail = |e: TchError| (capture_failure(&e), None);
    // the eager output's storage: a captured output elsewhere was allocated by the graph
    // and can be poisoned; one at the same place is written in place (a cache)
    let eager_ptr = p.output().map_err(fail)?.data_ptr();
    device.sync();
    let (mut check_graph, mut out) =
        atenx::Graph::capture(api, device.index, 1, || p.output()).map_err(fail)?;
    let in_place = out.data_ptr() == eager_ptr;
    if !in_place {
        // NaN where the output can hold it; an index output (argmax) gets -1, which no
        // index is (filling an integer tensor with NaN is an error that tch then panics on)
        let floating = matches!(
            out.kind(),
            tch::Kind::Half | tch::Kind::BFloat16 | tch::Kind::Float | tch::Kind::Double
        );
        let poison = if floating { f64::NAN } else { -1.0 };
        drop(out.f_fill_(poison).map_err(fail)?);
    }
    check_graph.replay().map_err(fail)?;
    device.sync();
    let reference = p.reference().map_err(fail)?;
    let err = rel_err(&Check {
        output: out,
        reference,
    })
    .map_err(fail)?;
    drop(check_graph);
    let tol = p.tolerance().unwrap_or_else(|| dtype::tolerance(dt));
    if err.is_nan() || err > tol {
        return Err((
            Failure {
                status: Status::Mismatch,
                reason: format!(
                    "graph replay: relative error {err:.3e} against the float64 reference exceeds {tol:e}"
                ),
            },
            Some(err),
        ));
    }
    let mut calls = p.graph_calls().max(1);
    let mut spread = None;
    if let Some(llc) = cold {
        let s = crate::cold::spread(p, llc, calls).map_err(fail)?;
        calls = s.calls;
        spread = Some(s.note);
    }
    let (graph, ()) = atenx::Graph::capture(api, device.index, 1, || {
        for _ in 0..calls {
            p.run()?;
        }
        Ok(())
    })
    .map_err(fail)?;
    device.sync();
    // a run of the case may itself make several calls (the floor's mixed / blocked)
    let calls = calls * p.calls_per_run().max(1);
    let mut note = format!("{calls} calls per graph");
    if let Some(s) = spread {
        note = format!("{note}, {s}");
    }
    if in_place {
        note.push_str("; output written in place, so the check could not poison it");
    }
    if let Some(n) = p.note() {
        note = format!("{n}; {note}");
    }
    Ok((
        GraphCase {
            graph,
            calls,
            kernel: p.kernel(),
            note: Some(note),
            bytes: p.bytes(),
            owner: None,
        },
        err,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Floor, Op};
    use shapes::Problem;

    /// On the CPU graph mode is an unsupported answer; on a GPU a captured add replays to
    /// the right answer and its replays run.
    #[test]
    fn graph_mode_exactly_when_a_gpu_is_visible() {
        let cpu = Device::CPU;
        let mut p = Floor
            .prepare("add", &Problem::floor(), DType::F32, cpu)
            .unwrap();
        let (f, _) = capture(p.as_mut(), cpu, DType::F32).unwrap_err();
        assert_eq!(f.status, Status::Unsupported);
        assert!(f.reason.contains("needs a GPU"), "{}", f.reason);
        if crate::gpu_count() == 0 {
            return;
        }
        let gpu = crate::select_devices(crate::DeviceChoice::Gpu, 0).unwrap()[0];
        let mut p = Floor
            .prepare("add", &Problem::floor(), DType::F16, gpu)
            .unwrap();
        let (mut g, err) = capture(p.as_mut(), gpu, DType::F16).expect("an add captures");
        assert!(err < 1e-3, "{err}");
        assert_eq!(g.calls_per_run(), 16);
        for _ in 0..3 {
            g.run().unwrap();
        }
        gpu.sync();
        // an integer output (argmax) is poisoned with -1, not NaN (which tch panics on)
        let x = crate::tensors::randn(&[4, 1000], DType::F16, gpu, 5).unwrap();
        let mut argmax = Argmax(x);
        let (_, err) = capture(&mut argmax, gpu, DType::F16).expect("an argmax captures");
        assert_eq!(err, 0.0);
        // a case that runs several calls per run: the graph holds runs × calls
        let mut mixed = Floor
            .prepare("mixed", &Problem::floor(), DType::F16, gpu)
            .unwrap();
        let (g, _) = capture(mixed.as_mut(), gpu, DType::F16).expect("the mix captures");
        assert_eq!(g.calls_per_run(), 16 * mixed.calls_per_run());
    }

    struct Argmax(Tensor);

    impl Prepared for Argmax {
        fn run(&mut self) -> Result<(), TchError> {
            self.0.f_argmax(-1, false).map(drop)
        }
        fn output(&mut self) -> Result<Tensor, TchError> {
            self.0.f_argmax(-1, false)
        }
        fn reference(&mut self) -> Result<Tensor, TchError> {
            crate::tensors::f64_cpu(&self.0)?.f_argmax(-1, false)
        }
    }
}
