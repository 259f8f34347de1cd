//! generate() per new token — the user's number — priced from a predicted step (issue 31).
//!
//! transformers' `generate()` runs, for every new token, the model's step and then its own
//! loop: the logits to float32, the logits processors, argmax, the eos masking, appending
//! the token, the stopping criteria — and a synchronization: its `StopCheck` reads
//! `unfinished.max() == 0` on the host every token (transformers 5.17 defers that read only
//! on Apple's MPS), so the host cannot queue the next token's step while the device
//! finishes this one. A token therefore costs
//!
//! the predicted step, less its own argmax (the loop makes the token's)
//! + what the step costs more inside generate(): scripts/peer.py's `step_synced` − `step`
//!   (the per-token sync: the device's tail the host waits out, and the host no longer
//!   running ahead) and `step_as_generate` − `step_synced` (the forward called with
//!   generate()'s inputs: the 2-D attention mask, position ids, `logits_to_keep`), all
//!   three sampled in interleaved rounds; where a run lacks those rows, on a GPU the
//!   device time of the step's last kernel (lm_head), which the sync waits out
//! + generate()'s own loop: the peer's `generate_loop` (generate() with the forward
//!   replaced by a stand-in returning fixed logits).
//!
//! On a GPU the step is max(host, device) as predicted; on the CPU its serial time. The
//! measured generate() it is checked against is the peer's `generate_from_l` row
//! (generate() from the step's cache of L, sampled in the same rounds).

use rundir::{Mode, ResultRow, Run};

use crate::predict::{Prediction, Query, Split};

/// What the step costs more inside generate() than pipelined alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Extra {
    /// Measured by the peer: the per-token synchronization (`step_synced` − `step`) and
    /// generate()'s inputs to the forward (`step_as_generate` − `step_synced`), ns.
    Measured { sync_ns: f64, inputs_ns: f64 },
    /// A run without those rows, on a GPU: the device time of the step's last kernel,
    /// which the host waits out at the sync when it set the pace (0 on the CPU and where
    /// the device set it). A bound: the loop's calls before its sync overlap part of it.
    Tail { ns: f64 },
}

impl Extra {
    pub fn ns(self) -> f64 {
        match self {
            Extra::Measured { sync_ns, inputs_ns } => sync_ns + inputs_ns,
            Extra::Tail { ns } => ns,
        }
    }
}

/// generate() per new token, priced.
#[derive(Debug, Clone)]
pub struct Generate {
    pub batch: usize,
    /// The predicted step as generate() runs it: its host and device time less the
    /// step's own argmax, and the step itself (max of the two on a GPU, their serial
    /// time on the CPU).
    pub step_host_ns: f64,
    pub step_device_ns: f64,
    pub step_ns: f64,
    pub extra: Extra,
    /// generate()'s own work per token (the peer's `generate_loop` row).
    pub loop_ns: f64,
    /// One new token: step + extra + loop.
    pub token_ns: f64,
    /// The peer's generate() from the step's cache of L, where the run has it.
    pub measured: Option<ResultRow>,
}

impl Generate {
    pub fn tokens_per_s(&self) -> f64 {
        self.batch as f64 / (self.token_ns * 1e-9)
    }

    /// The token in four parts, ns: kernels beyond the host's time, libtorch's dispatch,
    /// Python + transformers' step, generate()'s own cost (its loop, its sync and its
    /// inputs) — from the step's split, whose dispatch and Python shares of the host's
    /// time are kept (less the argmax).
    pub fn parts(&self, step: &Prediction, split: &Split) -> [f64; 4] {
        let host = self.step_host_ns.max(0.0);
        let full = step.host_time_ns().max(f64::MIN_POSITIVE);
        let dispatch = split.dispatch_ns * host / full;
        let python = split.python_ns * host / full;
        let generate = self.loop_ns + self.extra.ns();
        let kernels = (self.token_ns - generate - dispatch - python).max(0.0);
        [kernels, dispatch, python, generate]
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
    let median = |site: &str| row(site).and_then(|r| r.median_ns);
    let loop_ns = median(g.site)?;
    let of = |(op, site): (rundir::OpKind, &'static str)| {
        step.components
            .iter()
            .filter(move |c| c.op == Some(op) && c.site == site)
    };
    let (argmax_host, argmax_device) = of(g.replaces).fold((0.0, 0.0), |(h, d), c| {
        let host = if step.gpu { c.host_ns } else { c.per_call_ns };
        (h + c.calls as f64 * host, d + c.calls as f64 * c.device_ns)
    });
    let host = step.host_time_ns() - argmax_host;
    let device = step.device_ns - argmax_device;
    let step_ns = if step.gpu { host.max(device) } else { host };
    let [bare, synced, as_generate] = g.step_sites.map(median);
    let extra = match (bare, synced, as_generate) {
        (Some(b), Some(s), Some(a)) => Extra::Measured {
            sync_ns: s - b,
            inputs_ns: a - s,
        },
        _ => {
            let tail = of(g.last).map(|c| c.device_ns).next().unwrap_or(0.0);
            Extra::Tail {
                ns: if step.gpu && host + tail >= device {
                    tail
                } else {
                    0.0
                },
            }
        }
    };
    Some(Generate {
        batch: q.batch,
        step_host_ns: host,
        step_device_ns: device,
        step_ns,
        extra,
        loop_ns,
        token_ns: step_ns + extra.ns() + loop_ns,
        measured: row(g.measured_site).cloned(),
    })
}
