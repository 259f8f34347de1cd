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
use rundir::Status;

use crate::budget::VisitPrior;
use crate::plan::{Kinds, Visit, planned_pairs, round_cost};
use crate::protocol::{CaseName, PROTOCOL, Reply, Request};
use crate::state::ended;
pub use crate::state::{
    Budget, CaseRun, DriverError, Ended, Factory, Group, Outcome, Pair, Placement, Progress,
    Settings, Side,
};
use crate::visit::{Duo, visit};
use crate::worker::Worker;

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
    starts: &mut Duration,
) -> Result<Vec<CaseRun>, DriverError> {
    let s0 = Instant::now();
    let mut duo = Duo::start(group, 0)?;
    let be = hello(&mut *duo.base)?;
    let ce = hello(&mut *duo.cand)?;
    *starts += s0.elapsed();
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
    check_filter(settings)?;
    let t0 = Instant::now();
    let (mut lists, envs, starts) = list_cases(groups, settings)?;
    let listed: usize = lists.iter().flatten().filter(|c| c.ended.is_none()).count();
    let budget = settings.budget.for_cases(listed);
    let looks = settings.looks;
    let plan_of = crate::budget::plan(
        listed,
        looks.first.min(looks.max),
        settings.pairs.max(1),
        visit_prior(settings),
        (starts, t0.elapsed()),
        budget,
    )?;
    not_run(&mut lists, plan_of.cases, budget);
    let cases = lists.iter().flatten().filter(|c| c.ended.is_none()).count();
    let (visited, decided, elapsed, plan) = (0, 0, t0.elapsed(), Some(plan_of));
    let mut tally = Progress {
        visited,
        cases,
        decided,
        elapsed,
        budget,
        plan,
    };
    progress(&tally);
    tally.plan = None;
    // (host-timed, device-timed) pairs a visit: the budget's plan until two rounds show better
    let mut pairs = (plan_of.pairs, plan_of.pairs);
    let mut plan: Option<(Visit, Visit)> = None;
    let mut last_round: Option<LastRound> = None;
    let mut device_only_rounds = 0;
    for round in 0..looks.max as u32 {
        let active = |c: &CaseRun| c.ended.is_none() && !c.decided;
        let visiting = kinds(lists.iter().flatten().filter(|c| active(c)));
        if visiting.0 + visiting.1 == 0 {
            break;
        }
        let left = budget.saturating_sub(t0.elapsed());
        let visits = if (round as usize) < looks.first {
            if round > 0 {
                let k = refit_pairs(&lists, last_round, left, plan_of.pairs);
                pairs = (k, k);
            }
            visiting
        } else {
            let Some(v) = next_visits(visiting, plan, pairs, last_round, left) else {
                break;
            };
            v
        };
        let device_only = visits.0 == 0 && visiting.0 > 0;
        device_only_rounds += u32::from(device_only);
        let r0 = Instant::now();
        tally.visited = 0;
        tally.cases = visits.0 + visits.1;
        let starts = visit_round(
            (groups, &mut lists),
            round,
            settings,
            (pairs, device_only),
            (&mut tally, t0, budget),
            progress,
        )?;
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
            (pairs, plan) = ((h.pairs, d.pairs), Some((h, d)));
        }
        if looks.is_look(round as usize + 1) {
            tally.decided = look(&mut lists, settings);
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
        budget_plan: Some(plan_of),
    })
}

/// Every group's cases, listed by starting its workers: the lists, the two sides'
/// environments and what the workers' starts took.
#[allow(clippy::type_complexity)]
fn list_cases(
    groups: &mut [Group<'_>],
    settings: &Settings,
) -> Result<
    (
        Vec<Vec<CaseRun>>,
        (Option<serde_json::Value>, Option<serde_json::Value>),
        Duration,
    ),
    DriverError,
> {
    let mut envs = (None, None);
    let mut lists = Vec::new();
    let mut starts = Duration::ZERO;
    for g in groups.iter_mut() {
        lists.push(group_cases(g, settings, &mut envs, &mut starts)?);
    }
    Ok((lists, envs, starts))
}

/// The settings' filter compiles as a regular expression.
fn check_filter(settings: &Settings) -> Result<(), DriverError> {
    if let Some(f) = &settings.filter {
        regex::Regex::new(f).map_err(|e| DriverError::Filter(e.to_string()))?;
    }
    Ok(())
}

/// A look at every case so far: those decided stop being visited; how many are.
fn look(lists: &mut [Vec<CaseRun>], settings: &Settings) -> usize {
    let all: Vec<&CaseRun> = lists.iter().flatten().collect();
    let decided = crate::verdict::decided(&all, settings);
    for c in lists.iter_mut().flatten() {
        c.decided = decided.contains(&c.name);
    }
    decided.len()
}

/// A visit's cost before any is timed: the settings' sample and warm-up, and a prepare of
/// 50 ms a side (making the case and checking it against float64; a guess, which the
/// first round's visits replace: [`refit_pairs`], and the stop before each visit).
fn visit_prior(s: &Settings) -> VisitPrior {
    VisitPrior {
        sample: s.sample,
        warmup: s.warmup,
        prepare: Duration::from_millis(100),
    }
}

/// The cases past the first `keep` (the lists are shuffled) end `skipped`, not run: the
/// budget's plan fits only `keep` of them.
fn not_run(lists: &mut [Vec<CaseRun>], keep: usize, budget: Duration) {
    let mut kept = 0;
    let all: usize = lists.iter().flatten().filter(|c| c.ended.is_none()).count();
    // across the groups in turn, so that each keeps its share
    let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..longest {
        for list in lists.iter_mut() {
            let Some(c) = list.get_mut(i).filter(|c| c.ended.is_none()) else {
                continue;
            };
            if kept < keep {
                kept += 1;
            } else {
                c.ended = Some(ended(
                    None,
                    Status::Skipped,
                    &format!(
                        "not run: the {:.0} s budget fits {keep} of these {all} cases",
                        budget.as_secs_f64()
                    ),
                ));
            }
        }
    }
}

/// The pairs the second obligatory round takes: those that fit what is `left`, by what the
/// first round's visits cost beyond their pairs and a pair (medians over its cases), at
/// most `max`; 2 where not even those fit (the stop before each visit then ends the round).
fn refit_pairs(
    lists: &[Vec<CaseRun>],
    last: Option<LastRound>,
    left: Duration,
    max: usize,
) -> usize {
    let (mut fixed, mut pair) = (Vec::new(), Vec::new());
    for c in lists
        .iter()
        .flatten()
        .filter(|c| c.visits > 0 && !c.pairs.is_empty())
    {
        let pairs_ns: f64 = c.pairs.iter().map(Pair::cost_ns).sum();
        fixed.push((c.spent.as_nanos() as f64 - pairs_ns).max(0.0));
        pair.push(pairs_ns / c.pairs.len() as f64);
    }
    let (Some(last), false) = (last, fixed.is_empty()) else {
        return max;
    };
    let ns = |x: f64| Duration::from_nanos(x as u64);
    let visits = lists
        .iter()
        .flatten()
        .filter(|c| c.ended.is_none() && !c.decided)
        .count();
    crate::budget::pairs_that_fit(
        visits,
        (ns(stats::median(&fixed)), ns(stats::median(&pair))),
        last.starts,
        left,
        max,
    )
    .unwrap_or(2)
}

/// One round's visits: in each group, a fresh pair of workers visits each active case
/// (only the device-timed ones where `device_only`) once, in an order shuffled by the
/// round, for the pairs of its kind. Returns the time the workers took to start.
fn visit_round(
    (groups, lists): (&mut [Group<'_>], &mut [Vec<CaseRun>]),
    round: u32,
    settings: &Settings,
    (pairs, device_only): ((usize, usize), bool),
    (tally, t0, budget): (&mut Progress, Instant, Duration),
    progress: &mut dyn FnMut(&Progress),
) -> Result<Duration, DriverError> {
    let mut starts = Duration::ZERO;
    let mut cost = VisitCost::default();
    // the first round: its visits stop once the rest of it and the second round no longer
    // fit (the rest of its cases are then listed as not run)
    let mut full = false;
    for (g, list) in groups.iter_mut().zip(lists.iter_mut()) {
        let mut order: Vec<usize> = (0..list.len())
            .filter(|&i| {
                (list[i].ended.is_none() && !list[i].decided)
                    && (!device_only || list[i].key.mode.is_device())
            })
            .collect();
        if order.is_empty() {
            continue;
        }
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(
            settings.seed + u64::from(round),
        ));
        if full || t0.elapsed() + cost.start + cost.visit(settings, pairs.0.max(pairs.1)) > budget {
            stop_round(list, &order, round, budget);
            continue;
        }
        let s0 = Instant::now();
        let mut duo = Duo::start(g, round)?;
        starts += s0.elapsed();
        cost.start = s0.elapsed();
        for (n, &i) in order.iter().enumerate() {
            let k = if list[i].key.mode.is_device() {
                pairs.1
            } else {
                pairs.0
            };
            if t0.elapsed() + cost.visit(settings, k) > budget {
                stop_round(list, &order[n..], round, budget);
                break;
            }
            if round == 0 && cost.visits >= 2 {
                // what the first visits cost says whether this case and its second visit
                // still fit, beside the second visits of those before it and the second
                // round's starts (as long as this one's so far)
                let v = cost.visit(settings, k);
                let v1 = cost.visit(settings, crate::budget::MIN_PAIRS);
                let need = t0.elapsed() + starts + v + v1 * (tally.visited + 1) as u32;
                if need > budget.mul_f64(0.95) {
                    full = true;
                    stop_round(list, &order[n..], round, budget);
                    break;
                }
            }
            let v0 = Instant::now();
            visit(&mut duo, &mut list[i], round, settings, k)?;
            cost.took(v0.elapsed(), k);
            tally.visited += 1;
            tally.elapsed = t0.elapsed();
            progress(tally);
        }
    }
    Ok(starts)
}

/// What this round's visits cost so far: the stop before each visit prices the next by it.
#[derive(Debug, Default)]
struct VisitCost {
    /// The last group's workers' start.
    start: Duration,
    /// The visits timed so far: their seconds and pairs, summed, and their count.
    secs: f64,
    pairs: f64,
    visits: usize,
}

impl VisitCost {
    /// A visit of `pairs` pairs took `took`.
    fn took(&mut self, took: Duration, pairs: usize) {
        self.secs += took.as_secs_f64();
        self.pairs += pairs as f64;
        self.visits += 1;
    }

    /// What the next visit of `pairs` should cost: the mean of this round's visits scaled
    /// to its pairs (by the settings' prior of a visit), or the prior before one is timed.
    fn visit(&self, s: &Settings, pairs: usize) -> Duration {
        let prior = visit_prior(s);
        let n = self.visits;
        if n == 0 {
            return prior.visit(pairs);
        }
        let mean = self.secs / n as f64;
        let mean_pairs = (self.pairs / n as f64).round().max(1.0) as usize;
        let scale = prior.visit(pairs).as_secs_f64() / prior.visit(mean_pairs).as_secs_f64();
        Duration::from_secs_f64(mean * scale)
    }
}

/// The visits of `rest` left out of round `round`, the budget ending before they would:
/// a case not visited in the first round ends `skipped`.
fn stop_round(list: &mut [CaseRun], rest: &[usize], round: u32, budget: Duration) {
    if round > 0 {
        return;
    }
    for &i in rest {
        list[i].ended = Some(ended(
            None,
            Status::Skipped,
            &format!(
                "not run: its first visit and a second no longer fitted the {:.0} s budget",
                budget.as_secs_f64()
            ),
        ));
    }
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
