//! The driver: for each group of cases (a bench binary on each side) it walks the cases
//! in rounds. In each round every undecided case is visited once by a fresh pair of
//! worker processes (one per side, started for the round): both sides prepare the case
//! afresh, warm up, and take turns sample by sample (A B, B A, …) for
//! [`Settings::pairs`] pairs in the first two rounds, then for the pairs the spreads of
//! those rounds make best for its kind of case ([`Outcome::pairs`]). A round's estimate of
//! a case is the median of its pairs' log ratios (each sample after one untimed call,
//! so that it starts warm though the other side's ran just before); its rounds differ by
//! what a process and an allocation share among their samples, which pairing cannot
//! cancel, and the verdict reads that spread
//! ([`stats::paired::Rounds`]). After rounds 2, 4, 8 and 16 ([`stats::paired::Looks`]) the
//! decided cases drop out; the others go on while the budget lasts, the device-timed ones
//! alone once a full round no longer fits ([`Outcome::device_only_rounds`]).

use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rundir::{CaseKey, Status};
use stats::paired::{Looks, PairedCase};

use crate::plan::{Kinds, Visit, planned_pairs, round_cost};
use crate::protocol::{CaseName, PROTOCOL, Prepared, Reply, Request, Sampled};
use crate::visit::{Duo, visit};
use crate::worker::{Worker, WorkerError};

/// Makes a fresh worker of one side of a group.
pub type Factory<'a> = Box<dyn FnMut() -> Result<Box<dyn Worker>, WorkerError> + 'a>;

/// One group of cases: the same bench binary on both sides.
pub struct Group<'a> {
    pub name: String,
    pub base: Factory<'a>,
    pub cand: Factory<'a>,
}

impl std::fmt::Debug for Group<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("name", &self.name).finish()
    }
}

/// What the driver is told: every knob is an `opbench ab` option.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// A case is `same` when its interval lies inside ± this (a fraction).
    pub tolerance: f64,
    /// The same for a family and the global verdicts.
    pub family_tolerance: f64,
    /// The time one sample aims at.
    pub sample: Duration,
    /// Warm-up per side per visit.
    pub warmup: Duration,
    /// The whole comparison's time: rounds go on while the next one fits.
    pub budget: Budget,
    /// Rounds: judged after `first`, then twice as many, up to `max`.
    pub looks: Looks,
    /// Pairs a case takes in each of the first two rounds.
    pub pairs: usize,
    /// The most pairs a visit takes after them ([`Outcome::pairs`] for its kind of case, as
    /// those rounds' spreads make best).
    pub max_pairs: usize,
    pub seed: u64,
    /// A regular expression on the case keys.
    pub filter: Option<String>,
    /// The CPUs both sides' workers run on (`OPBENCH_CPUS`), for the summary; `None`:
    /// where the OS put them.
    pub cpus: Option<String>,
    /// The one CPU a GPU case's samples run their thread on, both sides
    /// (`OPBENCH_TIMING_CPU`; `None`: not set).
    pub timing_cpu: Option<String>,
    /// Where a device-timed case's tensors sit for each pair.
    pub placement: Placement,
}

/// Where a device-timed case's tensors sit in the device's memory. A worker process's
/// small cases all sit where its first allocations did, and on the H200 a process's small
/// device cases moved together by up to ±5% from one round to the next while its pairs
/// agreed within 0.1% (docs/method.md, "Placement"). Whether their placement is what moves
/// them has not been measured on a GPU yet, so `Once` is the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Made once a visit, as the worker's allocator puts it.
    Once,
    /// Made again before each pair on both sides, each side in its own placement
    /// ([`crate::protocol::Request::Prepare`]'s `place`): the pairs average it.
    EachPair,
}

impl Placement {
    /// As `--placement` and the run's `placement` setting name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Once => "once",
            Placement::EachPair => "each-pair",
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tolerance: 0.03,
            family_tolerance: 0.015,
            sample: Duration::from_millis(10),
            warmup: Duration::from_millis(50),
            budget: Budget::Total(Duration::from_secs(600)),
            looks: Looks::default(),
            pairs: 8,
            max_pairs: 32,
            seed: 1,
            filter: None,
            cpus: None,
            timing_cpu: None,
            placement: Placement::Once,
        }
    }
}

/// The comparison's time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// This long in all.
    Total(Duration),
    /// `each` a case (counted once both sides have listed theirs), at most `cap`.
    PerCase { each: Duration, cap: Duration },
}

impl Budget {
    /// The time for `cases` timed cases.
    pub fn for_cases(self, cases: usize) -> Duration {
        match self {
            Budget::Total(t) => t,
            Budget::PerCase { each, cap } => (each * cases.max(1) as u32).min(cap),
        }
    }
}

/// Which side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Base,
    Cand,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Base => "base",
            Side::Cand => "cand",
        }
    }
}

/// One pair: the two sides' samples of a case, taken back to back.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    /// The round that took it (from 0).
    pub round: u32,
    pub index: u32,
    pub base: Sampled,
    pub cand: Sampled,
    /// The base's sample came first (pairs alternate).
    pub base_first: bool,
    /// The driver's clock around the pair (warm-up calls and a fresh placement included):
    /// what the plan prices a pair by, as a device-timed sample reports only its GPU time.
    /// `None` where not known (a replayed run).
    pub wall_ns: Option<f64>,
}

impl Pair {
    /// (base, cand) time per call.
    pub fn per_call(&self) -> (f64, f64) {
        let per = |s: &Sampled| s.total_ns / s.calls.max(1) as f64;
        (per(&self.base), per(&self.cand))
    }

    /// What the pair took: the driver's clock where known, else the samples' own times.
    pub fn cost_ns(&self) -> f64 {
        self.wall_ns
            .unwrap_or(self.base.total_ns + self.cand.total_ns)
    }
}

/// A case that did not end as pairs: which side, what status, why.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub side: Option<Side>,
    pub status: Status,
    pub reason: String,
}

/// One case of the comparison and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseRun {
    pub key: CaseKey,
    pub name: String,
    pub group: String,
    pub base: Option<Prepared>,
    pub cand: Option<Prepared>,
    pub pairs: Vec<Pair>,
    /// Why it has no verdict of its times (a side refused it, a worker died).
    pub ended: Option<Ended>,
    /// Decided at its last look (the sequential stop).
    pub decided: bool,
    /// Rounds that visited it.
    pub visits: u32,
    pub spent: Duration,
    /// Why it runs unpaired: it does not fit in the device's memory twice, so each round
    /// times one side alone and then the other, each in a process of its own.
    pub unpaired: Option<String>,
}

impl CaseRun {
    /// The uncovered device chunks of its samples, (base, candidate), or `None` where no
    /// sample of either side said; see
    /// [`Sampled::uncovered`](crate::protocol::Sampled::uncovered).
    pub fn uncovered(&self) -> Option<(u64, u64)> {
        let told = |s: &crate::protocol::Sampled| s.uncovered;
        self.pairs
            .iter()
            .any(|p| told(&p.base).or(told(&p.cand)).is_some())
            .then(|| {
                let count = |s| told(s).unwrap_or(0);
                self.pairs
                    .iter()
                    .fold((0, 0), |(b, c), p| (b + count(&p.base), c + count(&p.cand)))
            })
    }

    /// The planted device spin each side's samples held, as a fraction of the rest of their
    /// time (base, candidate), or `None` where no sample said
    /// ([`Sampled::planted_ns`](crate::protocol::Sampled::planted_ns)).
    pub fn planted(&self) -> Option<(f64, f64)> {
        let told = |s: &crate::protocol::Sampled| s.planted_ns;
        if !self
            .pairs
            .iter()
            .any(|p| told(&p.base).or(told(&p.cand)).is_some())
        {
            return None;
        }
        let share = |side: fn(&Pair) -> &crate::protocol::Sampled| {
            let (spin, all) = self.pairs.iter().map(side).fold((0.0, 0.0), |(sp, al), s| {
                (sp + told(s).unwrap_or(0.0), al + s.total_ns)
            });
            if all > spin { spin / (all - spin) } else { 0.0 }
        };
        Some((share(|p| &p.base), share(|p| &p.cand)))
    }

    pub(crate) fn new(name: &CaseName, group: &str) -> Result<Self, String> {
        Ok(CaseRun {
            key: CaseKey::from_fields(&name.fields).map_err(|e| format!("{}: {e}", name.key))?,
            name: name.key.clone(),
            group: group.to_string(),
            base: None,
            cand: None,
            pairs: Vec::new(),
            ended: None,
            decided: false,
            visits: 0,
            spent: Duration::ZERO,
            unpaired: None,
        })
    }

    /// Each round's estimate: the median log ratio of its pairs, in round order.
    pub fn round_estimates(&self) -> Vec<f64> {
        let mut by: std::collections::BTreeMap<u32, Vec<(f64, f64)>> = Default::default();
        for p in &self.pairs {
            by.entry(p.round).or_default().push(p.per_call());
        }
        by.values()
            .map(|v| PairedCase::from_pairs(v))
            .filter(|c| c.n() > 0)
            .map(|c| c.median())
            .collect()
    }
}

/// A finished comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub cases: Vec<CaseRun>,
    /// Each side's env.json, from its first worker's hello.
    pub base_env: Option<serde_json::Value>,
    pub cand_env: Option<serde_json::Value>,
    pub took: Duration,
    /// The budget the cases were given.
    pub budget: Duration,
    pub settings: Settings,
    /// Pairs a visit took after the first two rounds, for host-timed and device-timed
    /// cases ([`stats::paired::pairs_per_visit`] from what those rounds showed).
    pub pairs: (usize, usize),
    /// Rounds that visited the device-timed cases alone, a full round no longer fitting
    /// the budget.
    pub device_only_rounds: u32,
}

/// Progress, after each case visit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub visited: usize,
    pub cases: usize,
    pub decided: usize,
    pub elapsed: Duration,
    pub budget: Duration,
}

/// Why a comparison could not run at all (a case that fails is a row, never this).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error("{0}")]
    Protocol(String),
    #[error("--filter: {0}")]
    Filter(String),
}

/// Hello: the worker's env.json, after checking its protocol.
fn hello(w: &mut dyn Worker) -> Result<serde_json::Value, DriverError> {
    match w.call(&Request::Hello)? {
        Reply::Hello { protocol, env, .. } if protocol == PROTOCOL => Ok(env),
        Reply::Hello { protocol, .. } => Err(DriverError::Protocol(format!(
            "{} speaks protocol {protocol}, this opbench {PROTOCOL}",
            w.label()
        ))),
        other => Err(DriverError::Protocol(format!(
            "{} answered hello with {other:?}",
            w.label()
        ))),
    }
}

fn list(w: &mut dyn Worker, filter: &Option<String>) -> Result<ListReply, DriverError> {
    match w.call(&Request::Cases {
        filter: filter.clone(),
    })? {
        Reply::Cases { cases, unsupported } => Ok((cases, unsupported)),
        Reply::Error { message } => Err(DriverError::Filter(message)),
        other => Err(DriverError::Protocol(format!(
            "{} answered cases with {other:?}",
            w.label()
        ))),
    }
}

type ListReply = (Vec<CaseName>, Vec<crate::protocol::NotServed>);

/// Every case of a group, in shuffled order: those both sides serve, and those that end
/// before any timing (one side lacks it, a side cannot serve it).
fn group_cases(
    group: &mut Group<'_>,
    settings: &Settings,
    envs: &mut (Option<serde_json::Value>, Option<serde_json::Value>),
) -> Result<Vec<CaseRun>, DriverError> {
    let mut duo = Duo::start(group, 0)?;
    let be = hello(&mut *duo.base)?;
    let ce = hello(&mut *duo.cand)?;
    envs.0.get_or_insert(be);
    envs.1.get_or_insert(ce);
    let (bc, bu) = list(&mut *duo.base, &settings.filter)?;
    let (cc, cu) = list(&mut *duo.cand, &settings.filter)?;
    let name = duo.group.name.clone();
    let mut out = Vec::new();
    let cand_has: std::collections::BTreeSet<&str> = cc.iter().map(|c| c.key.as_str()).collect();
    let base_has: std::collections::BTreeSet<&str> = bc.iter().map(|c| c.key.as_str()).collect();
    let new_run = |c: &CaseName| CaseRun::new(c, &name).map_err(DriverError::Protocol);
    for c in &bc {
        let mut run = new_run(c)?;
        if !cand_has.contains(c.key.as_str()) {
            run.ended = Some(ended(
                Some(Side::Cand),
                Status::Unsupported,
                "the candidate does not list this case",
            ));
        }
        out.push(run);
    }
    for c in cc.iter().filter(|c| !base_has.contains(c.key.as_str())) {
        let mut run = new_run(c)?;
        run.ended = Some(ended(
            Some(Side::Base),
            Status::Unsupported,
            "the base does not list this case",
        ));
        out.push(run);
    }
    for (side, list) in [(Side::Base, bu), (Side::Cand, cu)] {
        for ns in list {
            if out.iter().any(|r| r.name == ns.case.key) {
                continue;
            }
            let mut run = new_run(&ns.case)?;
            run.ended = Some(ended(Some(side), Status::Unsupported, &ns.reason));
            out.push(run);
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rng = rand::rngs::StdRng::seed_from_u64(settings.seed);
    out.shuffle(&mut rng);
    Ok(out)
}

pub(crate) fn ended(side: Option<Side>, status: Status, reason: &str) -> Ended {
    Ended {
        side,
        status,
        reason: reason.to_string(),
    }
}

/// How many of `cases` are (host-timed, device-timed).
fn kinds<'a>(cases: impl Iterator<Item = &'a CaseRun>) -> Kinds {
    cases.fold((0, 0), |(h, d), c| {
        if c.key.mode.is_device() {
            (h, d + 1)
        } else {
            (h + 1, d)
        }
    })
}

/// What the last round took: in all, in starting its workers, and the (host-timed,
/// device-timed) cases it visited and the pairs a visit of each took.
#[derive(Debug, Clone, Copy)]
struct LastRound {
    took: Duration,
    starts: Duration,
    visits: Kinds,
    pairs: Kinds,
}

/// The (host-timed, device-timed) cases the next round visits, with `left` of the budget:
/// every active one (`visiting`) where that round fits, by the last round's time (its
/// workers' starts, then its visits scaled to the next one's: a visit of fewer pairs is
/// shorter). Else, once the first rounds made a plan, the device-timed ones alone where
/// that fits: their visits cost a fraction of the host-timed ones', and what they resolve
/// is bound by their rounds (the processes' shared device term), not their pairs.
/// `None`: no round fits.
fn next_visits(
    visiting: Kinds,
    plan: Option<(Visit, Visit)>,
    pairs: Kinds,
    last_round: Option<LastRound>,
    left: Duration,
) -> Option<Kinds> {
    let fits = |v: Kinds| {
        let next = last_round.map_or(Duration::ZERO, |r| {
            let scale = round_cost(plan, v, pairs) / round_cost(plan, r.visits, r.pairs).max(1e-9);
            r.starts + r.took.saturating_sub(r.starts).mul_f64(scale)
        });
        next <= left
    };
    if fits(visiting) {
        Some(visiting)
    } else if plan.is_some() && visiting.1 > 0 && fits((0, visiting.1)) {
        Some((0, visiting.1))
    } else {
        None
    }
}

/// Run the comparison over `groups`; `progress` is told after every case visit.
pub fn run(
    groups: &mut [Group<'_>],
    settings: &Settings,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Outcome, DriverError> {
    if let Some(f) = &settings.filter {
        regex::Regex::new(f).map_err(|e| DriverError::Filter(e.to_string()))?;
    }
    let t0 = Instant::now();
    let mut envs = (None, None);
    let mut lists = Vec::new();
    for g in groups.iter_mut() {
        lists.push(group_cases(g, settings, &mut envs)?);
    }
    let timed: usize = lists.iter().flatten().filter(|c| c.ended.is_none()).count();
    let budget = settings.budget.for_cases(timed);
    let mut tally = Progress {
        visited: 0,
        cases: timed,
        decided: 0,
        elapsed: Duration::ZERO,
        budget,
    };
    let looks = settings.looks;
    // (host-timed, device-timed) pairs a visit: the settings' until two rounds show better
    let mut pairs = (settings.pairs.max(1), settings.pairs.max(1));
    let mut plan: Option<(Visit, Visit)> = None;
    let mut last_round: Option<LastRound> = None;
    let mut device_only_rounds = 0;
    for round in 0..looks.max as u32 {
        let active = |c: &CaseRun| c.ended.is_none() && !c.decided;
        let visiting = kinds(lists.iter().flatten().filter(|c| active(c)));
        if visiting.0 + visiting.1 == 0 {
            break;
        }
        let visits = if (round as usize) < looks.first {
            visiting
        } else {
            let left = budget.saturating_sub(t0.elapsed());
            match next_visits(visiting, plan, pairs, last_round, left) {
                Some(v) => v,
                None => break,
            }
        };
        let device_only = visits.0 == 0 && visiting.0 > 0;
        device_only_rounds += u32::from(device_only);
        let r0 = Instant::now();
        let mut starts = Duration::ZERO;
        tally.visited = 0;
        tally.cases = visits.0 + visits.1;
        for (g, list) in groups.iter_mut().zip(lists.iter_mut()) {
            let mut order: Vec<usize> = (0..list.len())
                .filter(|&i| active(&list[i]) && (!device_only || list[i].key.mode.is_device()))
                .collect();
            if order.is_empty() {
                continue;
            }
            order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(
                settings.seed + u64::from(round),
            ));
            let s0 = Instant::now();
            let mut duo = Duo::start(g, round)?;
            starts += s0.elapsed();
            for i in order {
                let k = if list[i].key.mode.is_device() {
                    pairs.1
                } else {
                    pairs.0
                };
                visit(&mut duo, &mut list[i], round, settings, k)?;
                tally.visited += 1;
                tally.elapsed = t0.elapsed();
                progress(&tally);
            }
        }
        last_round = Some(LastRound {
            took: r0.elapsed(),
            starts,
            visits,
            pairs,
        });
        if round == 1 {
            let all: Vec<&CaseRun> = lists.iter().flatten().collect();
            let (h, d) = (
                planned_pairs(&all, false, settings.max_pairs),
                planned_pairs(&all, true, settings.max_pairs),
            );
            pairs = (h.pairs, d.pairs);
            plan = Some((h, d));
        }
        if looks.is_look(round as usize + 1) {
            let all: Vec<&CaseRun> = lists.iter().flatten().collect();
            let decided = crate::verdict::decided(&all, settings);
            for c in lists.iter_mut().flatten() {
                c.decided = decided.contains(&c.name);
            }
            tally.decided = decided.len();
            progress(&tally);
        }
    }
    Ok(Outcome {
        cases: lists.into_iter().flatten().collect(),
        base_env: envs.0,
        cand_env: envs.1,
        took: t0.elapsed(),
        budget,
        settings: settings.clone(),
        pairs,
        device_only_rounds,
    })
}

#[cfg(test)]
mod tests {
    use super::{LastRound, Visit, next_visits};
    use std::time::Duration;

    #[test]
    fn a_round_is_priced_by_its_starts_and_its_visits_and_the_device_cases_go_on_alone() {
        // the last round: 100 s, 10 of them starting workers; 100 host-timed visits of
        // 0.8 s and 50 device-timed ones of 0.2 s (80 and 10 cost units of the 90 s)
        let plan = Some((
            Visit {
                pairs: 16,
                visit_ns: 0.8e9,
                pair_ns: 0.0,
            },
            Visit {
                pairs: 2,
                visit_ns: 0.2e9,
                pair_ns: 0.0,
            },
        ));
        let last = Some(LastRound {
            took: Duration::from_secs(100),
            starts: Duration::from_secs(10),
            visits: (100, 50),
            pairs: (16, 2),
        });
        let next =
            |left: u64| next_visits((100, 50), plan, (16, 2), last, Duration::from_secs(left));
        assert_eq!(next(100), Some((100, 50)));
        // the device cases alone: 10 s of starts and 10 of visits
        assert_eq!(next(99), Some((0, 50)));
        assert_eq!(next(20), Some((0, 50)));
        assert_eq!(next(19), None);
        // before a plan there is no round of one kind
        assert_eq!(
            next_visits((100, 50), None, (8, 8), last, Duration::from_secs(50)),
            None
        );
    }
}
