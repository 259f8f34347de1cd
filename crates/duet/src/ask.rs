//! How both drivers ask a worker for a case (the paired visit, [`crate::visit`], and the
//! single run, [`crate::solo`]): one request's reply or its trouble, one sample, and the
//! calls a sample holds ([`calibrate`]). The two differ in what they aim at: the paired
//! visit sizes a sample by the slower side's wall time around each request (a
//! device-timed sample's GPU time can be a fraction of its enqueue); the single run by the
//! time the worker's own clock gave its calls, within a cap of calls.

use std::time::{Duration, Instant};

use crate::protocol::{Reply, Request, Sampled};
use crate::worker::{Worker, WorkerError};

/// What went wrong with a request, and on which side (`()` where there is one worker).
pub(crate) enum Trouble<S> {
    /// The worker answered `error` or something other than was asked (the case ends
    /// `error`; the worker goes on).
    Refused(S, String),
    /// The worker died or garbled (the case ends `error`; the worker is started again).
    Lost(S, WorkerError),
}

/// A request's reply: an error reply refuses the case, a worker that died or garbled
/// loses it.
pub(crate) fn ask<S>(w: &mut dyn Worker, side: S, req: &Request) -> Result<Reply, Trouble<S>> {
    match w.call(req) {
        Ok(Reply::Error { message }) => Err(Trouble::Refused(side, message)),
        Ok(reply) => Ok(reply),
        Err(e) => Err(Trouble::Lost(side, e)),
    }
}

/// One sample of `iters` calls of case `key`; an empty one refuses the case.
pub(crate) fn sample<S: Copy>(
    w: &mut dyn Worker,
    side: S,
    key: &str,
    iters: u64,
) -> Result<Sampled, Trouble<S>> {
    let req = Request::Sample {
        key: key.into(),
        iters,
    };
    match ask(w, side, &req)? {
        Reply::Sample(s) if s.calls > 0 && s.total_ns > 0.0 => Ok(s),
        Reply::Sample(s) => Err(Trouble::Refused(side, format!("an empty sample: {s:?}"))),
        other => Err(Trouble::Refused(
            side,
            format!("answered sample with {other:?}"),
        )),
    }
}

/// What a sample aims at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Aim {
    /// A sample's time.
    pub sample: Duration,
    /// Warm-up samples at least this long (and at least two).
    pub warmup: Duration,
    /// At most this many calls a sample (1: a whole call, one warm-up sample only).
    pub cap: u64,
    /// Samples of one call first (a first call may pay setup).
    pub first_calls: usize,
}

/// The calls a sample holds: `first_calls` samples of one call, then warm-up samples
/// until `warmup` has passed (at least two, at most 50), each sized from the last one's
/// time per call (`per_call(iters)`, ns) to fill `sample`, within `cap`.
pub(crate) fn calibrate<S>(
    mut per_call: impl FnMut(u64) -> Result<f64, Trouble<S>>,
    aim: Aim,
) -> Result<u64, Trouble<S>> {
    let mut per = 0.0;
    for _ in 0..aim.first_calls.max(1) {
        per = per_call(1)?;
    }
    if aim.cap <= 1 {
        return Ok(1);
    }
    let mut iters = iters_for(per, aim.sample, 1).min(aim.cap);
    let t0 = Instant::now();
    let mut looks = 0;
    while looks < 2 || (t0.elapsed() < aim.warmup && looks < 50) {
        per = per_call(iters)?;
        iters = iters_for(per, aim.sample, iters).min(aim.cap);
        looks += 1;
    }
    Ok(iters)
}

/// Calls per sample for a per-call time `per` (ns) to fill `aim`; `fallback` where `per`
/// says nothing.
pub(crate) fn iters_for(per: f64, aim: Duration, fallback: u64) -> u64 {
    if per.is_nan() || per <= 0.0 {
        return fallback;
    }
    ((aim.as_nanos() as f64 / per).ceil() as u64).clamp(1, 10_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_fills_its_aim() {
        let aim = Duration::from_millis(10);
        assert_eq!(iters_for(2_000.0, aim, 7), 5_000);
        assert_eq!(iters_for(0.0, aim, 7), 7);
        assert_eq!(iters_for(1e9, aim, 7), 1);
        assert_eq!(iters_for(f64::NAN, aim, 7), 7);
    }

    #[test]
    fn calibration_warms_up_twice_at_least_within_its_cap() {
        let aim = |cap, first_calls| Aim {
            sample: Duration::from_millis(10),
            warmup: Duration::ZERO,
            cap,
            first_calls,
        };
        // a call of 2 µs: 5,000 a sample, or the cap; the calls each sample was asked for
        let run = |cap, first_calls| {
            let mut asked = Vec::new();
            let got = calibrate(
                |iters: u64| -> Result<f64, Trouble<()>> {
                    asked.push(iters);
                    Ok(2_000.0)
                },
                aim(cap, first_calls),
            );
            (got.ok(), asked)
        };
        assert_eq!(run(u64::MAX, 2), (Some(5_000), vec![1, 1, 5_000, 5_000]));
        assert_eq!(run(16, 1), (Some(16), vec![1, 16, 16]));
        // a whole call a sample: one call only
        assert_eq!(run(1, 1), (Some(1), vec![1]));
    }
}
