//! A transformers step split into kernels, libtorch's dispatch, and Python with the
//! framework.

use super::*;

/// A step split three ways, from the transformers prediction and the same step's
/// libtorch-only (hf-eager) prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    /// Σ kernel time on a GPU (it overlaps the host's work); `None` on the CPU, where a
    /// call's work and dispatch are one pipelined time.
    pub kernels_ns: Option<f64>,
    /// The host time the same calls cost when made from tch: ATen's dispatch and launch (on
    /// the CPU, dispatch and work together).
    pub dispatch_ns: f64,
    /// The rest of the host's time: Python, nn.Module calls, transformers' own work.
    pub python_ns: f64,
}

impl Split {
    /// The transformers step `transformers` (predicted for `q`) split three ways. The
    /// libtorch share is the same calls as tch makes them (the hf-eager profile's rows) at
    /// the host speed and context of the transformers step's own process: where its host
    /// costs were scaled to its own layer, the hf-eager rows as measured alone times that
    /// scale (and, for [`HostSpeed::Layer`], the context factor; [`HostSpeed::Beside`]'s
    /// layer ran in sequence, its context in the scale) — not hf-eager's own `controlled`
    /// price, which follows the tch step's process (its own layer beside its step: at
    /// whatever state that process was in); else the hf-eager step under `q`'s host model.
    pub fn priced(
        run: &Run,
        fits: &Fits,
        q: &Query,
        transformers: &Prediction,
    ) -> Result<Split, AnalysisError> {
        let tch = Query {
            profile: StepProfile::HfEager,
            ..q.clone()
        };
        let alone = Query {
            host: HostModel::AsMeasured,
            ..tch.clone()
        };
        let libtorch = match transformers.host_speed {
            Some(HostSpeed::Layer { scale, .. }) => {
                let factor = transformers.context.map_or(1.0, |c| c.factor);
                predict_with(run, fits, &alone)?.host_time_ns() * scale * factor
            }
            // the layer beside the step ran its calls in sequence: the context is in `scale`
            Some(HostSpeed::Beside { scale, .. }) => {
                predict_with(run, fits, &alone)?.host_time_ns() * scale
            }
            _ => predict_with(run, fits, &tch)?.host_time_ns(),
        };
        Ok(Split::of(transformers, libtorch))
    }

    /// The split where the same calls cost libtorch `libtorch_ns` of host time.
    fn of(transformers: &Prediction, libtorch_ns: f64) -> Split {
        let host = transformers.host_time_ns();
        // the framework's own work is Python's whatever the calls cost; where the calls
        // from Python priced below tch's (noise: on the CPU a call's work dwarfs its
        // dispatch), Python added nothing to them and dispatch is all their time
        let calls = host - transformers.framework_ns();
        let dispatch = libtorch_ns.min(calls);
        Split {
            kernels_ns: transformers.gpu.then_some(transformers.device_ns),
            dispatch_ns: dispatch,
            python_ns: host - dispatch,
        }
    }
}
