//! One visit of a case in a round: both sides prepare it, calibrate, warm up and take
//! the round's pairs in turns ([`visit`]); a case that does not fit twice takes each
//! side's samples alone ([`visit_unpaired`]).

use std::time::Instant;

use rundir::Status;

use crate::ask::{Aim, ask, sample};
use crate::protocol::{Prepared, Reply, Request, Sampled};
use crate::state::{CaseRun, DriverError, Group, Pair, Placement, Settings, Side, ended};
use crate::worker::{Worker, WorkerError};

/// The two live workers of a group.
pub(crate) struct Duo<'g, 'a> {
    pub(crate) group: &'g mut Group<'a>,
    pub(crate) base: Box<dyn Worker>,
    pub(crate) cand: Box<dyn Worker>,
}

impl<'g, 'a> Duo<'g, 'a> {
    /// Both sides' workers for `round`: the base's started (and answering, its device
    /// context made) before the candidate's in even rounds, after it in odd ones. On an
    /// H100 (2026-12-06) the second of two live processes read 1.0–1.1% slower in every
    /// round of graph replays (5 of 5; 0.0% when each ran alone): alternated, that is a
    /// round term that cancels in pairs of rounds, not a bias of one side
    /// (docs/method.md, "The process term").
    pub(crate) fn start(group: &'g mut Group<'a>, round: u32) -> Result<Self, WorkerError> {
        let ready = |mut w: Box<dyn Worker>| -> Result<Box<dyn Worker>, WorkerError> {
            w.call(&Request::Hello)?;
            Ok(w)
        };
        let (base, cand) = if round % 2 == 0 {
            let base = ready((group.base)()?)?;
            (base, (group.cand)()?)
        } else {
            let cand = ready((group.cand)()?)?;
            ((group.base)()?, cand)
        };
        Ok(Duo { group, base, cand })
    }

    pub(crate) fn side(&mut self, s: Side) -> &mut dyn Worker {
        match s {
            Side::Base => &mut *self.base,
            Side::Cand => &mut *self.cand,
        }
    }

    /// A fresh worker for side `s` (after a crash, or a new block).
    pub(crate) fn restart(&mut self, s: Side) -> Result<(), WorkerError> {
        match s {
            Side::Base => self.base = (self.group.base)()?,
            Side::Cand => self.cand = (self.group.cand)()?,
        }
        Ok(())
    }
}

/// What went wrong on one side in the middle of a case.
type Trouble = crate::ask::Trouble<Side>;

fn prepare(
    w: &mut dyn Worker,
    side: Side,
    key: &str,
    place: Option<u64>,
) -> Result<Prepared, Trouble> {
    let req = Request::Prepare {
        key: key.into(),
        place,
    };
    match ask(w, side, &req)? {
        Reply::Prepared(p) => Ok(p),
        other => Err(Trouble::Refused(
            side,
            format!("answered prepare with {other:?}"),
        )),
    }
}

/// The placement of a side's case for pair `index` ([`Placement::EachPair`]): a seed from
/// the comparison's, the case and the pair, different for the two sides.
fn place_seed(seed: u64, key: &str, index: u32, side: Side) -> u64 {
    // FNV-1a over the key, then the pair and the side
    let mut h = 0xcbf2_9ce4_8422_2325_u64 ^ seed;
    let bytes = key.bytes().chain(index.to_le_bytes()).chain([side as u8]);
    for b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Which side goes first in pair `index` of a case: the base in the even ones (A B, B A, …).
fn pair_order(index: u32) -> [Side; 2] {
    if index % 2 == 0 {
        [Side::Base, Side::Cand]
    } else {
        [Side::Cand, Side::Base]
    }
}

/// A sample of a pair: one call untimed first where the sample holds more than one, so
/// that it starts as warm as a sample taken back to back with its own side's does. Both
/// sides on the same CPUs share its caches: right after the other side's sample, a CPU's
/// linear call read 8% slower, the first of a pair 8% faster than the second, and the
/// median of the pairs, split into two clusters, read A/A comparisons 2–4% `faster`
/// (2-core VM, 2026-12-04).
fn warm_sample(w: &mut dyn Worker, side: Side, key: &str, iters: u64) -> Result<Sampled, Trouble> {
    if iters > 1 {
        sample(w, side, key, 1)?;
    }
    sample(w, side, key, iters)
}

/// One visit of a case in a round: prepare both sides, calibrate, warm up, take the
/// round's pairs, then release both. What goes wrong on a side ends the case `error` with
/// the reason; a side whose worker died is restarted.
pub(crate) fn visit(
    duo: &mut Duo<'_, '_>,
    case: &mut CaseRun,
    round: u32,
    settings: &Settings,
    pairs: usize,
) -> Result<(), DriverError> {
    let t0 = Instant::now();
    case.visits += 1;
    let outcome = visit_inner(duo, case, round, settings, pairs);
    for s in [Side::Base, Side::Cand] {
        // best effort: a dead worker is restarted below
        let _ = duo.side(s).call(&Request::Release {
            key: case.name.clone(),
        });
    }
    case.spent += t0.elapsed();
    match outcome {
        Ok(()) => Ok(()),
        Err(Trouble::Refused(side, why)) => {
            case.ended = Some(ended(
                Some(side),
                Status::Error,
                &format!("{} worker: {why}", side.as_str()),
            ));
            Ok(())
        }
        Err(Trouble::Lost(side, e)) => {
            case.ended = Some(ended(Some(side), Status::Error, &e.to_string()));
            duo.restart(side)?;
            Ok(())
        }
    }
}

fn visit_inner(
    duo: &mut Duo<'_, '_>,
    case: &mut CaseRun,
    round: u32,
    settings: &Settings,
    pairs: usize,
) -> Result<(), Trouble> {
    if case.unpaired.is_some() {
        return visit_unpaired(duo, case, round, settings);
    }
    let key = case.name.clone();
    let placed = settings.placement == Placement::EachPair && case.key.mode.is_device();
    let place =
        |index: u32, side: Side| placed.then(|| place_seed(settings.seed, &key, index, side));
    let opening = case.pairs.len() as u32;
    let mut b = prepare(&mut *duo.base, Side::Base, &key, place(opening, Side::Base))?;
    let mut c = prepare(&mut *duo.cand, Side::Cand, &key, place(opening, Side::Cand))?;
    b.judge(case.key.dtype);
    c.judge(case.key.dtype);
    if b.status == Status::Ok && c.status == Status::Oom {
        // it fits once, not twice: each side alone from now on
        case.unpaired = Some(format!(
            "unpaired: does not fit in device memory twice (the candidate, with the base \
             holding the case: {})",
            c.reason.as_deref().unwrap_or("out of memory")
        ));
        let _ = duo.base.call(&Request::Release { key: key.clone() });
        return visit_unpaired(duo, case, round, settings);
    }
    case.base = Some(b);
    case.cand = Some(c);
    if end_on_status(case) {
        return Ok(());
    }
    // the side that opens the first pair warms up last, so that the first pair is as every
    // other: its first sample follows its own side's, its second the other's
    let [first, second] = pair_order(case.pairs.len() as u32);
    let iters = calls_per_sample(duo, &key, settings, &[second, first])?;
    for _ in 0..pairs.max(1) {
        let index = case.pairs.len() as u32;
        let order = pair_order(index);
        let t_pair = Instant::now();
        if placed && index != opening {
            for s in order {
                let p = prepare(duo.side(s), s, &key, place(index, s))?;
                if p.status != Status::Ok {
                    let why = p.reason.unwrap_or_else(|| p.status.to_string());
                    return Err(Trouble::Refused(s, format!("made again elsewhere: {why}")));
                }
            }
        }
        let base_first = order[0] == Side::Base;
        let first = warm_sample(duo.side(order[0]), order[0], &key, iters)?;
        let second = warm_sample(duo.side(order[1]), order[1], &key, iters)?;
        let (base, cand) = if base_first {
            (first, second)
        } else {
            (second, first)
        };
        case.pairs.push(Pair {
            round,
            index,
            base,
            cand,
            base_first,
            wall_ns: Some(t_pair.elapsed().as_nanos() as f64),
        });
    }
    Ok(())
}

/// A status other than `ok` on either side ends the case (the verdict compares the
/// statuses): whether it ended.
fn end_on_status(case: &mut CaseRun) -> bool {
    let ok = |p: &Option<Prepared>| p.as_ref().is_some_and(|p| p.status == Status::Ok);
    if ok(&case.base) && ok(&case.cand) {
        return false;
    }
    let (side, p) = if !ok(&case.base) {
        (Side::Base, case.base.as_ref())
    } else {
        (Side::Cand, case.cand.as_ref())
    };
    let p = p.cloned().unwrap_or_default();
    let status = p.status;
    case.ended = Some(ended(
        Some(side),
        status,
        p.reason.as_deref().unwrap_or("-"),
    ));
    true
}

/// A round of a case that does not fit twice: the other side's process is replaced (what
/// it held on the device goes with it), then one side prepares, warms up and takes the
/// round's samples alone; then the other. Sample i of each side makes pair i. The sides
/// take turns going first from round to round.
fn visit_unpaired(
    duo: &mut Duo<'_, '_>,
    case: &mut CaseRun,
    round: u32,
    settings: &Settings,
) -> Result<(), Trouble> {
    let key = case.name.clone();
    let order = pair_order(round);
    // each sample with the driver's clock around it (ns)
    type Timed = Vec<(Sampled, f64)>;
    let mut taken: (Timed, Timed) = (Vec::new(), Vec::new());
    let mut iters = None;
    for side in order {
        let other = other(side);
        duo.restart(other).map_err(|e| Trouble::Lost(other, e))?;
        let p = prepare(duo.side(side), side, &key, None)?;
        match side {
            Side::Base => case.base = Some(p.clone()),
            Side::Cand => case.cand = Some(p.clone()),
        }
        if p.status != Status::Ok {
            let status = p.status;
            let why = format!("alone: {}", p.reason.as_deref().unwrap_or("-"));
            case.ended = Some(ended(Some(side), status, &why));
            return Ok(());
        }
        let own = calls_per_sample(duo, &key, settings, &[side])?;
        let n = *iters.get_or_insert(own);
        let into = match side {
            Side::Base => &mut taken.0,
            Side::Cand => &mut taken.1,
        };
        for _ in 0..settings.pairs.max(1) {
            let t0 = Instant::now();
            let s = sample(duo.side(side), side, &key, n)?;
            into.push((s, t0.elapsed().as_nanos() as f64));
        }
        let _ = duo.side(side).call(&Request::Release { key: key.clone() });
    }
    // neither process holds the case for the next one
    duo.restart(order[1])
        .map_err(|e| Trouble::Lost(order[1], e))?;
    for ((base, b_ns), (cand, c_ns)) in taken.0.into_iter().zip(taken.1) {
        let index = case.pairs.len() as u32;
        case.pairs.push(Pair {
            round,
            index,
            base,
            cand,
            base_first: order[0] == Side::Base,
            wall_ns: Some(b_ns + c_ns),
        });
    }
    Ok(())
}

fn other(side: Side) -> Side {
    match side {
        Side::Base => Side::Cand,
        Side::Cand => Side::Base,
    }
}

/// The calls a sample holds ([`crate::ask::calibrate`]): one call on each side, twice (a
/// first call may pay setup), then warm-up samples in turns. The slower side's wall-clock
/// time per call, as the driver sees it around each request, sets the count, so that a
/// sample's wall time (not only the time it reports: a device-timed sample's GPU time can
/// be a fraction of its enqueue) stays near its aim.
fn calls_per_sample(
    duo: &mut Duo<'_, '_>,
    key: &str,
    settings: &Settings,
    sides: &[Side],
) -> Result<u64, Trouble> {
    let slowest = |iters: u64| -> Result<f64, Trouble> {
        let mut slow = 0.0f64;
        for &side in sides {
            let t0 = Instant::now();
            let s = sample(duo.side(side), side, key, iters)?;
            let wall = t0.elapsed().as_nanos() as f64;
            slow = slow.max(wall.max(s.total_ns) / iters as f64);
        }
        Ok(slow)
    };
    let aim = Aim {
        sample: settings.sample,
        warmup: settings.warmup,
        cap: u64::MAX,
        first_calls: 2,
    };
    crate::ask::calibrate(slowest, aim)
}
