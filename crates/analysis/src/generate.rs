//! generate() per new token — the user's number — priced from a predicted step (issue 31).
//!
//! transformers' `generate()` runs, for every new token, the model's step and then its own
//! loop: the logits to float32, the logits processors, argmax, the eos masking, appending
//! the token, the stopping criteria — and a synchronization: its `StopCheck` reads
//! `unfinished.max() == 0` on the host every token (transformers 5.17 defers that read only
//! on Apple's MPS), so the host cannot queue the next token's step while the device
//! finishes this one. A token therefore costs
//!
//! - on a GPU: max(step host + tail, step device) + loop, where the step is the predicted
//!   step less its own argmax (the loop makes the token's), `tail` the device time of the
//!   step's last call (lm_head), which the host waits out at the sync when it set the
//!   pace, and `loop` scripts/peer.py's `generate_loop` row (generate() with the forward
//!   replaced by a stand-in: its host work and the sync against an idle device);
//! - on the CPU: the step's serial time less its argmax, plus the loop.
//!
//! The tail is a bound: the loop's calls before its sync overlap part of it. The measured
//! generate() it is checked against is the peer's `generate_from_l` row (generate() from
//! the step's cache of L, sampled in rounds interleaved with the step and the loop).

use rundir::{Mode, ResultRow, Run};

use crate::predict::{Prediction, Query, Split};

/// generate() per new token, priced.
#[derive(Debug, Clone)]
pub struct Generate {
    pub batch: usize,
    /// The predicted step as generate() runs it: its host and device time less the
    /// step's own argmax.
    pub step_host_ns: f64,
    pub step_device_ns: f64,
    /// GPU: the device time of the step's last call, waited out at the per-token sync
    /// when the host set the pace; 0 on the CPU and when the device did.
    pub tail_ns: f64,
    /// generate()'s own work per token (the peer's `generate_loop` row).
    pub loop_ns: f64,
    /// One new token.
    pub token_ns: f64,
    /// The peer's generate() from the step's cache of L, where the run has it.
    pub measured: Option<ResultRow>,
}

impl Generate {
    pub fn tokens_per_s(&self) -> f64 {
        self.batch as f64 / (self.token_ns * 1e-9)
    }

    /// The token in four parts, ms-ready ns: kernels beyond the host's time, libtorch's
    /// dispatch, Python + transformers' step, generate()'s loop — from the step's split
    /// (whose dispatch and Python shares of the host's time are kept, less the argmax).
    pub fn parts(&self, step: &Prediction, split: &Split) -> [f64; 4] {
        let host = self.step_host_ns.max(0.0);
        let full = step.host_time_ns().max(f64::MIN_POSITIVE);
        let dispatch = split.dispatch_ns * host / full;
        let python = split.python_ns * host / full;
        let kernels = (self.token_ns - self.loop_ns - dispatch - python).max(0.0);
        [kernels, dispatch, python, self.loop_ns]
    }

    /// predicted / measured, where measured.
    pub fn ratio(&self) -> Option<f64> {
        let m = self.measured.as_ref()?.median_ns?;
        (m > 0.0).then(|| self.token_ns / m)
    }
}

/// generate() per token for the step `step` predicted for `q`: `None` where the profile has
/// no generate loop (the tch profiles), the mode is not the eager loop's (`pipelined`), or
/// the run lacks the peer's `generate_loop` row at this batch.
pub fn price(run: &Run, q: &Query, step: &Prediction) -> Option<Generate> {
    let g = step.plan.generate_loop()?;
    if q.mode != Mode::Pipelined {
        return None;
    }
    let row = |site: &str| {
        run.row(&q.decode_key(q.profile.as_str(), site, Mode::Pipelined))
            .filter(|r| r.is_ok())
    };
    let loop_ns = row(g.site)?.median_ns?;
    let (op, site) = g.replaces;
    let (argmax_host, argmax_device) = step
        .components
        .iter()
        .filter(|c| c.op == Some(op) && c.site == site)
        .fold((0.0, 0.0), |(h, d), c| {
            let host = if step.gpu { c.host_ns } else { c.per_call_ns };
            (h + c.calls as f64 * host, d + c.calls as f64 * c.device_ns)
        });
    let (step_host, step_device) = (
        step.host_time_ns() - argmax_host,
        step.device_ns - argmax_device,
    );
    let (tail, token) = if step.gpu {
        let (last_op, last_site) = g.last;
        let tail = step
            .components
            .iter()
            .find(|c| c.op == Some(last_op) && c.site == last_site)
            .map_or(0.0, |c| c.device_ns);
        let tail = if step_host + tail >= step_device {
            tail
        } else {
            0.0
        };
        (tail, (step_host + tail).max(step_device) + loop_ns)
    } else {
        (0.0, step_host + loop_ns)
    };
    Some(Generate {
        batch: q.batch,
        step_host_ns: step_host,
        step_device_ns: step_device,
        tail_ns: tail,
        loop_ns,
        token_ns: token,
        measured: row(g.measured_site).cloned(),
    })
}
