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
//! ([`stats::paired::Rounds`]). After rounds 2, 4 and 8 ([`stats::paired::Looks`]) the
//! decided cases drop out; the others go on while the budget lasts.

use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rundir::{CaseKey, Status};
use stats::paired::{Looks, PairedCase};

use crate::plan::{Kinds, Visit, planned_pairs, round_cost};
use crate::protocol::{CaseName, PROTOCOL, Prepared, Reply, Request, Sampled};
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
    /// Pairs a case takes in each of the first two rounds, and at most after them (then
    /// [`Outcome::pairs`] for its kind of case).
    pub pairs: usize,
    pub seed: u64,
    /// A regular expression on the case keys.
    pub filter: Option<String>,
    /// The CPUs both sides' workers run on (`OPBENCH_CPUS`), for the summary; `None`:
    /// where the OS put them.
    pub cpus: Option<String>,
    /// Where a device-timed case's tensors sit for each pair.
    pub placement: Placement,
}

/// Where a device-timed case's tensors sit in the device's memory. A worker process's
/// small cases otherwise all sit where its first allocations did, and on the H200 a
/// process's small device cases moved together by up to ±5% from one round to the next
/// while its pairs agreed within 0.1% (docs/method.md, "placement").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Made once a visit, as the worker's allocator puts it.
    Once,
    /// Made again before each pair on both sides, each side in its own placement
    /// ([`crate::protocol::Request::Prepare`]'s `place`): the pairs average it.
    EachPair,
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
            seed: 1,
            filter: None,
            cpus: None,
            placement: Placement::EachPair,
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
}

impl Pair {
    /// (base, cand) time per call.
    pub fn per_call(&self) -> (f64, f64) {
        let per = |s: &Sampled| s.total_ns / s.calls.max(1) as f64;
        (per(&self.base), per(&self.cand))
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
    fn new(name: &CaseName, group: &str) -> Result<Self, String> {
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

/// The two live workers of a group.
struct Duo<'g, 'a> {
    group: &'g mut Group<'a>,
    base: Box<dyn Worker>,
    cand: Box<dyn Worker>,
}

impl<'g, 'a> Duo<'g, 'a> {
    fn start(group: &'g mut Group<'a>) -> Result<Self, WorkerError> {
        let base = (group.base)()?;
        let cand = (group.cand)()?;
        Ok(Duo { group, base, cand })
    }

    fn side(&mut self, s: Side) -> &mut dyn Worker {
        match s {
            Side::Base => &mut *self.base,
            Side::Cand => &mut *self.cand,
        }
    }

    /// A fresh worker for side `s` (after a crash, or a new block).
    fn restart(&mut self, s: Side) -> Result<(), WorkerError> {
        match s {
            Side::Base => self.base = (self.group.base)()?,
            Side::Cand => self.cand = (self.group.cand)()?,
        }
        Ok(())
    }
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
    let mut duo = Duo::start(group)?;
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

fn ended(side: Option<Side>, status: Status, reason: &str) -> Ended {
    Ended {
        side,
        status,
        reason: reason.to_string(),
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
    // the last round's time, the (host-timed, device-timed) cases it visited and the pairs
    // a visit of each took
    let mut last_round: Option<(Duration, Kinds, Kinds)> = None;
    for round in 0..looks.max as u32 {
        let active = |c: &CaseRun| c.ended.is_none() && !c.decided;
        let visiting = lists
            .iter()
            .flatten()
            .filter(|c| active(c))
            .fold((0, 0), |(h, d), c| {
                if c.key.mode.is_device() {
                    (h, d + 1)
                } else {
                    (h + 1, d)
                }
            });
        let n = visiting.0 + visiting.1;
        if n == 0 {
            break;
        }
        if round as usize >= looks.first {
            // the next round fits the budget, by the last round's time scaled to this
            // one's visits (a visit of fewer pairs is shorter)
            let next = last_round.map_or(Duration::ZERO, |(t, was, took)| {
                t.mul_f64(round_cost(plan, visiting, pairs) / round_cost(plan, was, took).max(1e-9))
            });
            if t0.elapsed() + next > budget {
                break;
            }
        }
        let r0 = Instant::now();
        tally.visited = 0;
        tally.cases = n;
        for (g, list) in groups.iter_mut().zip(lists.iter_mut()) {
            let mut order: Vec<usize> = (0..list.len()).filter(|&i| active(&list[i])).collect();
            if order.is_empty() {
                continue;
            }
            order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(
                settings.seed + u64::from(round),
            ));
            let mut duo = Duo::start(g)?;
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
        last_round = Some((r0.elapsed(), visiting, pairs));
        if round == 1 {
            let all: Vec<&CaseRun> = lists.iter().flatten().collect();
            let (h, d) = (
                planned_pairs(&all, false, settings.pairs),
                planned_pairs(&all, true, settings.pairs),
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
    })
}

/// What went wrong on one side in the middle of a case.
enum Trouble {
    /// The worker answered `error` (the case ends `error`; the worker goes on).
    Refused(Side, String),
    /// The worker died or garbled (the case ends `error`; the side is restarted).
    Lost(Side, WorkerError),
}

fn prepare(
    w: &mut dyn Worker,
    side: Side,
    key: &str,
    place: Option<u64>,
) -> Result<Prepared, Trouble> {
    match w.call(&Request::Prepare {
        key: key.into(),
        place,
    }) {
        Ok(Reply::Prepared(p)) => Ok(p),
        Ok(Reply::Error { message }) => Err(Trouble::Refused(side, message)),
        Ok(other) => Err(Trouble::Refused(
            side,
            format!("answered prepare with {other:?}"),
        )),
        Err(e) => Err(Trouble::Lost(side, e)),
    }
}

fn sample(w: &mut dyn Worker, side: Side, key: &str, iters: u64) -> Result<Sampled, Trouble> {
    match w.call(&Request::Sample {
        key: key.into(),
        iters,
    }) {
        Ok(Reply::Sample(s)) if s.calls > 0 && s.total_ns > 0.0 => Ok(s),
        Ok(Reply::Sample(s)) => Err(Trouble::Refused(side, format!("an empty sample: {s:?}"))),
        Ok(Reply::Error { message }) => Err(Trouble::Refused(side, message)),
        Ok(other) => Err(Trouble::Refused(
            side,
            format!("answered sample with {other:?}"),
        )),
        Err(e) => Err(Trouble::Lost(side, e)),
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
fn visit(
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
    if b.status == "ok" && c.status == "oom" {
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
    let iters = calibrate(duo, &key, settings, &[second, first])?;
    for _ in 0..pairs.max(1) {
        let index = case.pairs.len() as u32;
        let order = pair_order(index);
        if placed && index != opening {
            for s in order {
                let p = prepare(duo.side(s), s, &key, place(index, s))?;
                if p.status != "ok" {
                    let why = p.reason.unwrap_or(p.status);
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
        });
    }
    Ok(())
}

/// A status other than `ok` on either side ends the case (the verdict compares the
/// statuses): whether it ended.
fn end_on_status(case: &mut CaseRun) -> bool {
    let ok = |p: &Option<Prepared>| p.as_ref().is_some_and(|p| p.status == "ok");
    if ok(&case.base) && ok(&case.cand) {
        return false;
    }
    let (side, p) = if !ok(&case.base) {
        (Side::Base, case.base.as_ref())
    } else {
        (Side::Cand, case.cand.as_ref())
    };
    let p = p.cloned().unwrap_or_default();
    let status: Status = p.status.parse().unwrap_or(Status::Error);
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
    let order = if round % 2 == 0 {
        [Side::Base, Side::Cand]
    } else {
        [Side::Cand, Side::Base]
    };
    let mut taken: (Vec<Sampled>, Vec<Sampled>) = (Vec::new(), Vec::new());
    let mut iters = None;
    for side in order {
        let other = other(side);
        duo.restart(other).map_err(|e| Trouble::Lost(other, e))?;
        let p = prepare(duo.side(side), side, &key, None)?;
        match side {
            Side::Base => case.base = Some(p.clone()),
            Side::Cand => case.cand = Some(p.clone()),
        }
        if p.status != "ok" {
            let status: Status = p.status.parse().unwrap_or(Status::Error);
            let why = format!("alone: {}", p.reason.as_deref().unwrap_or("-"));
            case.ended = Some(ended(Some(side), status, &why));
            return Ok(());
        }
        let own = calibrate(duo, &key, settings, &[side])?;
        let n = *iters.get_or_insert(own);
        let into = match side {
            Side::Base => &mut taken.0,
            Side::Cand => &mut taken.1,
        };
        for _ in 0..settings.pairs.max(1) {
            into.push(sample(duo.side(side), side, &key, n)?);
        }
        let _ = duo.side(side).call(&Request::Release { key: key.clone() });
    }
    // neither process holds the case for the next one
    duo.restart(order[1])
        .map_err(|e| Trouble::Lost(order[1], e))?;
    for (base, cand) in taken.0.into_iter().zip(taken.1) {
        let index = case.pairs.len() as u32;
        case.pairs.push(Pair {
            round,
            index,
            base,
            cand,
            base_first: order[0] == Side::Base,
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

/// The calls a sample holds: one call on each side (twice: a first call may pay setup),
/// then warm-up samples in turns. The slower side's wall-clock time per call, as the driver
/// sees it around each request, sets the count, so that a sample's wall time (not only the
/// time it reports: a device-timed sample's GPU time can be a fraction of its enqueue)
/// stays near its aim.
fn calibrate(
    duo: &mut Duo<'_, '_>,
    key: &str,
    settings: &Settings,
    sides: &[Side],
) -> Result<u64, Trouble> {
    let timed = |side: Side, duo: &mut Duo<'_, '_>, iters: u64| -> Result<f64, Trouble> {
        let t0 = Instant::now();
        let s = sample(duo.side(side), side, key, iters)?;
        let wall = t0.elapsed().as_nanos() as f64;
        Ok(wall.max(s.total_ns) / iters as f64)
    };
    let slowest = |duo: &mut Duo<'_, '_>, iters: u64| -> Result<f64, Trouble> {
        let mut slow = 0.0f64;
        for &side in sides {
            slow = slow.max(timed(side, duo, iters)?);
        }
        Ok(slow)
    };
    let mut per = 0.0;
    for _ in 0..2 {
        per = slowest(duo, 1)?;
    }
    let mut iters = iters_for(per, settings.sample, 1);
    let t0 = Instant::now();
    let mut rounds = 0;
    while rounds < 2 || t0.elapsed() < settings.warmup {
        per = slowest(duo, iters)?;
        iters = iters_for(per, settings.sample, iters);
        rounds += 1;
        if rounds >= 50 {
            break;
        }
    }
    Ok(iters)
}

/// Calls per sample for the slowest side's per-call time `slow` to fill `aim`.
pub(crate) fn iters_for(slow: f64, aim: Duration, fallback: u64) -> u64 {
    if slow.is_nan() || slow <= 0.0 {
        return fallback;
    }
    ((aim.as_nanos() as f64 / slow).ceil() as u64).clamp(1, 10_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_aims_at_its_time_from_the_slower_side() {
        let aim = Duration::from_millis(10);
        assert_eq!(iters_for(2_000.0, aim, 7), 5_000);
        assert_eq!(iters_for(0.0, aim, 7), 7);
        assert_eq!(iters_for(1e9, aim, 7), 1);
        assert_eq!(iters_for(f64::NAN, aim, 7), 7);
    }
}
