//! A single run's driver: one worker's cases, each prepared, judged, warmed up and timed,
//! alone or in interleaved rounds with its group ([`crate::protocol::Sampling`]). `opbench peer` drives
//! scripts/peer.py with it: Python builds the model's sites and times a sample when asked;
//! this decides which cases, the warm-up, the calls a sample holds, the rounds and their
//! order, and judges each case's error by the one tolerance table before timing it.
//!
//! A worker that answers `error` ends that case `error` with its reason; one that dies ends
//! the cases it held `error`, is started again, and the run goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::seq::SliceRandom;

use rundir::Status;

use crate::ask::{Aim, sample};
use crate::protocol::{CaseName, GroupKind, PROTOCOL, Prepared, Reply, Request, Sampled};
use crate::state::Factory;
use crate::worker::{Worker, WorkerError};

/// What the driver is told (a run's budget, from its env.json).
#[derive(Debug, Clone, PartialEq)]
pub struct SoloSettings {
    /// Samples a case alone takes; a group's rounds follow [`group_rounds`].
    pub samples: usize,
    /// Warm-up per case.
    pub warmup: Duration,
    /// Measurement per case: a sample aims at `measure / samples` of wall-clock time.
    pub measure: Duration,
    pub seed: u64,
    /// No unit starts after this (a run under a hard limit keeps what it finished: the
    /// cases not started are left for a later run to resume).
    pub deadline: Option<Instant>,
}

/// Rounds a group of `kind` takes (`None`: any other group): a decoder layer five ways
/// twice the run's samples (predict reads differences of ~10% of each row); the step and
/// generate() taken apart half of them, at least 8 (each sample a whole step or call);
/// any other group the run's samples.
pub fn group_rounds(kind: Option<GroupKind>, samples: usize) -> usize {
    match kind {
        Some(GroupKind::Layers) => 2 * samples,
        Some(GroupKind::Step) => (samples / 2).max(8),
        None => samples,
    }
}

/// Samples a case alone takes: the run's, or for a case of one call a sample (a whole
/// generate() call) a third of them, at least 3.
pub fn alone_samples(samples: usize, max_iters: Option<u64>) -> usize {
    match max_iters {
        Some(1) => (samples / 3).max(3),
        _ => samples,
    }
}

/// One case as it ended: its preparation (its `status` judged by the driver: `mismatch`
/// where its error is over the tolerance, `error` where the worker failed it, with the
/// reason), the calls a sample held and its samples in the order taken.
#[derive(Debug, Clone, PartialEq)]
pub struct SoloCase {
    pub name: CaseName,
    pub prepared: Prepared,
    pub iters: u64,
    pub samples: Vec<Sampled>,
}

/// Whether a prepared case's error is within its tolerance: `Err(reason)` where it is not.
pub type Judge<'a> = &'a dyn Fn(&CaseName, &Prepared) -> Result<(), String>;

/// Why the run could not start.
#[derive(Debug, thiserror::Error)]
pub enum SoloError {
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error("{0}")]
    Protocol(String),
}

/// Lists the worker's cases (those `skip` does not pass over) and times them, unit by unit
/// (a case alone, or a whole group), handing each case to `emit` as it ends. Returns how
/// many cases were left untimed at the deadline.
pub fn run(
    factory: &mut Factory<'_>,
    filter: Option<String>,
    skip: &dyn Fn(&CaseName) -> bool,
    judge: Judge<'_>,
    settings: &SoloSettings,
    emit: &mut dyn FnMut(SoloCase),
) -> Result<usize, SoloError> {
    let mut w = start(factory)?;
    let cases = match w.call(&Request::Cases { filter })? {
        Reply::Cases { cases, .. } => cases,
        other => {
            return Err(SoloError::Protocol(format!(
                "answered cases with {other:?}"
            )));
        }
    };
    let companions: BTreeSet<String> = cases
        .iter()
        .filter_map(|c| c.sampling.before.clone())
        .collect();
    let by_key: BTreeMap<String, CaseName> =
        cases.iter().map(|c| (c.key.clone(), c.clone())).collect();
    let mut done_groups = BTreeSet::new();
    let mut left = 0;
    for case in cases.iter().filter(|c| !skip(c)) {
        if companions.contains(&case.key) {
            continue;
        }
        if settings.deadline.is_some_and(|d| Instant::now() >= d) {
            left += 1;
            continue;
        }
        let unit: Vec<CaseName> = match &case.sampling.group {
            None => vec![case.clone()],
            Some(g) if done_groups.insert(g.clone()) => cases
                .iter()
                .filter(|c| c.sampling.group.as_ref() == Some(g) && !skip(c))
                .cloned()
                .collect(),
            Some(_) => continue,
        };
        let unit = Unit::new(unit, &by_key);
        let mut out = Vec::new();
        if let Err(e) = unit.time(w.as_mut(), judge, settings, &mut out) {
            // the worker died: what it held ends `error`, and a fresh one goes on
            let reason = format!("the worker died: {e}");
            for c in unit.all() {
                if !out.iter().any(|o: &SoloCase| o.name.key == c.key) {
                    out.push(ended(c, Status::Error, &reason));
                }
            }
            w = start(factory)?;
        }
        out.into_iter().for_each(&mut *emit);
    }
    Ok(left)
}

fn start(factory: &mut Factory<'_>) -> Result<Box<dyn Worker>, SoloError> {
    let mut w = factory()?;
    match w.call(&Request::Hello)? {
        Reply::Hello { protocol, .. } if protocol == PROTOCOL => Ok(w),
        Reply::Hello { protocol, .. } => Err(SoloError::Protocol(format!(
            "{} speaks protocol {protocol}, this driver {PROTOCOL}",
            w.label()
        ))),
        other => Err(SoloError::Protocol(format!(
            "answered hello with {other:?}"
        ))),
    }
}

/// A case that ended without samples.
fn ended(name: &CaseName, status: Status, reason: &str) -> SoloCase {
    SoloCase {
        name: name.clone(),
        prepared: Prepared {
            key: name.key.clone(),
            status,
            reason: Some(reason.into()),
            ..Prepared::default()
        },
        iters: 0,
        samples: Vec::new(),
    }
}

/// A case alone or a group, with the companions its cases name.
struct Unit {
    members: Vec<CaseName>,
    companions: BTreeMap<String, CaseName>,
}

/// A case being timed in its unit.
struct Live {
    case: SoloCase,
    /// Its companion's key, where the companion is live too.
    before: Option<String>,
}

/// What a worker did to a request: answered `error` (the case ends `error`), or died.
type Trouble = crate::ask::Trouble<()>;

impl Unit {
    fn new(members: Vec<CaseName>, by_key: &BTreeMap<String, CaseName>) -> Self {
        let companions = members
            .iter()
            .filter_map(|c| c.sampling.before.as_ref())
            .filter_map(|k| Some((k.clone(), by_key.get(k)?.clone())))
            .collect();
        Unit {
            members,
            companions,
        }
    }

    fn all(&self) -> impl Iterator<Item = &CaseName> {
        self.members.iter().chain(self.companions.values())
    }

    /// Prepare, judge, calibrate and sample the unit's cases; those that end early go to
    /// `out` at once, the rest when the unit is done. Err: the worker died.
    fn time(
        &self,
        w: &mut dyn Worker,
        judge: Judge<'_>,
        settings: &SoloSettings,
        out: &mut Vec<SoloCase>,
    ) -> Result<(), WorkerError> {
        let mut live: BTreeMap<String, Live> = BTreeMap::new();
        for c in self.all() {
            if let Some(case) = ready(w, c, judge, settings, out)? {
                live.insert(c.key.clone(), Live { case, before: None });
            }
        }
        for c in &self.members {
            let before = c.sampling.before.clone().filter(|k| live.contains_key(k));
            if let Some(l) = live.get_mut(&c.key) {
                l.before = before;
            }
        }
        let mut order: Vec<Vec<String>> = self.blocks(&live);
        let first = &self.members[0].sampling;
        let rounds = match first.group {
            Some(_) => group_rounds(first.kind, settings.samples),
            None => alone_samples(settings.samples, first.max_iters),
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(settings.seed);
        for _ in 0..rounds {
            // a unit of one case shuffles to itself
            order.iter_mut().for_each(|b| b.shuffle(&mut rng));
            order.shuffle(&mut rng);
            for key in order.iter().flatten() {
                let Some(l) = live.get(key) else { continue };
                let mut keys = l.before.clone().into_iter().collect::<Vec<_>>();
                keys.push(key.clone());
                for k in keys {
                    let Some(l) = live.get_mut(&k) else { continue };
                    match sample(w, (), &k, l.case.iters) {
                        Ok(s) => l.case.samples.push(s),
                        Err(Trouble::Refused((), why)) => {
                            let l = live.remove(&k).map(|l| l.case);
                            out.extend(l.map(|c| ended(&c.name, Status::Error, &why)));
                        }
                        Err(Trouble::Lost((), e)) => {
                            let why = format!("the worker died: {e}");
                            out.extend(
                                live.values()
                                    .map(|l| ended(&l.case.name, Status::Error, &why)),
                            );
                            return Err(e);
                        }
                    }
                }
            }
        }
        for (k, l) in live {
            let _ = w.call(&Request::Release { key: k });
            out.push(l.case);
        }
        Ok(())
    }

    /// The members' blocks in listing order: a block's cases together, a case without a
    /// block alone.
    fn blocks(&self, live: &BTreeMap<String, Live>) -> Vec<Vec<String>> {
        let mut out: Vec<(Option<String>, Vec<String>)> = Vec::new();
        for c in self.members.iter().filter(|c| live.contains_key(&c.key)) {
            let block = c.sampling.block.clone();
            match out.iter_mut().find(|(b, _)| block.is_some() && *b == block) {
                Some((_, keys)) => keys.push(c.key.clone()),
                None => out.push((block, vec![c.key.clone()])),
            }
        }
        out.into_iter().map(|(_, keys)| keys).collect()
    }
}

/// A case prepared, judged and calibrated (`Some`, ready to sample), or ended into `out`.
fn ready(
    w: &mut dyn Worker,
    c: &CaseName,
    judge: Judge<'_>,
    settings: &SoloSettings,
    out: &mut Vec<SoloCase>,
) -> Result<Option<SoloCase>, WorkerError> {
    let prepared = match w.call(&Request::Prepare {
        key: c.key.clone(),
        place: None,
    })? {
        Reply::Prepared(p) => p,
        Reply::Error { message } => {
            out.push(ended(c, Status::Error, &message));
            return Ok(None);
        }
        other => {
            out.push(ended(
                c,
                Status::Error,
                &format!("answered prepare with {other:?}"),
            ));
            return Ok(None);
        }
    };
    let mut case = SoloCase {
        name: c.clone(),
        prepared,
        iters: 0,
        samples: Vec::new(),
    };
    if case.prepared.status != Status::Ok {
        out.push(case);
        return Ok(None);
    }
    if let Err(why) = judge(c, &case.prepared) {
        case.prepared.status = Status::Mismatch;
        case.prepared.reason = Some(why);
        out.push(case);
        return Ok(None);
    }
    let aim = settings.measure / settings.samples.max(1) as u32;
    match calls_per_sample(w, &c.key, aim, settings.warmup, c.sampling.max_iters) {
        Ok(iters) => case.iters = iters.max(c.sampling.min_iters.unwrap_or(1)),
        Err(Trouble::Refused((), why)) => {
            out.push(ended(c, Status::Error, &why));
            return Ok(None);
        }
        Err(Trouble::Lost((), e)) => return Err(e),
    }
    Ok(Some(case))
}

/// The calls a sample holds ([`crate::ask::calibrate`]): a first sample of one call (it
/// may pay setup), then warm-up samples until `warmup` has passed (at least two), each
/// sized from the last one's time per call (as the worker timed its calls: the controls
/// and counters around a sample are not the sample's) to fill `aim`, at most `max_iters`.
/// A case of one call a sample takes that one call only (a whole generate() call).
fn calls_per_sample(
    w: &mut dyn Worker,
    key: &str,
    aim: Duration,
    warmup: Duration,
    max_iters: Option<u64>,
) -> Result<u64, Trouble> {
    let timed = |iters: u64| -> Result<f64, Trouble> {
        let s = sample(w, (), key, iters)?;
        Ok(s.spent_ns.unwrap_or(s.total_ns) / iters as f64)
    };
    let aim = Aim {
        sample: aim,
        warmup,
        cap: max_iters.unwrap_or(10_000_000).max(1),
        first_calls: 1,
    };
    crate::ask::calibrate(timed, aim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_rounds_follow_its_kind() {
        assert_eq!(group_rounds(Some(GroupKind::Layers), 20), 40);
        assert_eq!(group_rounds(Some(GroupKind::Step), 20), 10);
        assert_eq!(group_rounds(Some(GroupKind::Step), 4), 8);
        assert_eq!(group_rounds(None, 20), 20);
        // the kind travels typed, whatever the group is called
        let s: crate::protocol::Sampling =
            serde_json::from_str(r#"{"group": "anything", "kind": "layers"}"#).expect("a sampling");
        assert_eq!(s.kind, Some(GroupKind::Layers));
        assert_eq!(alone_samples(20, Some(1)), 6);
        assert_eq!(alone_samples(4, Some(1)), 3);
        assert_eq!(alone_samples(20, Some(16)), 20);
    }
}
