//! A family's shared shift between two runs: the geometric-mean ratio over its cases, with
//! an interval that carries what a process shares among all its cases.
//!
//! Every case of a family that ran in one process moves with that process: a GPU process's
//! stream launches cost ~0.1 µs more or less for all its kernels (docs/method.md, "The
//! process term"), a CPU process sits on a faster or slower core. Executions resampled
//! jointly see that term only where a side has several; with one execution a side they see
//! none, and an interval of zero width called one build's runs a regression. So the shift's
//! standard error is never below what the processes alone give: each unit's (one op crate
//! in one mode: one process an execution) per-process variance, pooled from its own
//! executions and a prior ([`ProcessTerm`]), over the executions each side has.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::decide::{CaseTest, exec_logs, p_value, sd, widen};
use crate::estimate::mean;

/// A family's shared shift: the geometric mean ratio over its cases.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shift {
    /// Cases in the family.
    pub cases: usize,
    /// exp(mean over cases of ln ratio).
    pub ratio: f64,
    pub se: f64,
    pub df: f64,
    pub p: f64,
}

impl Shift {
    /// As a [`CaseTest`], for its interval, mde and equivalence.
    pub fn as_test(&self) -> CaseTest {
        CaseTest {
            ratio: self.ratio,
            se: self.se,
            df: self.df,
            p: self.p,
        }
    }
}

/// What one process shares among all its cases of a unit: the standard deviation of that
/// shared factor's log, per process, and the evidence it counts as (degrees of freedom).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessTerm {
    pub sd: f64,
    pub df: f64,
}

/// One case of a family: the logs of its per-execution medians on each side, the unit
/// whose process it ran in, and that unit's prior process term.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyCase {
    pub base: Vec<f64>,
    pub cand: Vec<f64>,
    /// Cases of one unit share execution i's process; cases of two units never do.
    pub unit: u32,
    pub prior: ProcessTerm,
}

impl FamilyCase {
    /// The logs of per-execution medians of per-call times grouped by execution (empty
    /// groups dropped), of `unit` with its `prior`.
    pub fn from_groups(
        base: &[Vec<f64>],
        cand: &[Vec<f64>],
        unit: u32,
        prior: ProcessTerm,
    ) -> Option<Self> {
        let (b, c) = (exec_logs(base), exec_logs(cand));
        (!b.is_empty() && !c.is_empty()).then_some(FamilyCase {
            base: b,
            cand: c,
            unit,
            prior,
        })
    }

    /// The case's log ratio: mean log of its candidate executions less the base's (the
    /// geometric mean of execution medians, whose bootstrap is as smooth as the estimate).
    fn log_ratio(&self) -> f64 {
        mean(&self.cand) - mean(&self.base)
    }
}

/// The degrees of freedom from which a unit's own executions give its process term: two
/// executions a side, or three on one.
const OWN_DF: f64 = 2.0;

/// The df from which the measured process term stands for the family's spread, in place
/// of the bootstrap of its few executions: both sides' own spreads of at least two units
/// (three executions a side give 4 a unit).
const MEASURED_DF: f64 = 8.0;

/// The spread over executions of a unit's mean log on one side: (variance × df, df), from
/// the executions every case of the unit has.
fn own_spread(cases: &[&FamilyCase], side: fn(&FamilyCase) -> &[f64]) -> (f64, f64) {
    let n = cases.iter().map(|c| side(c).len()).min().unwrap_or(0);
    if n < 2 {
        return (0.0, 0.0);
    }
    let means: Vec<f64> = (0..n)
        .map(|e| mean(&cases.iter().map(|c| side(c)[e]).collect::<Vec<_>>()))
        .collect();
    let df = (n - 1) as f64;
    (sd(&means).powi(2) * df, df)
}

/// A family's cases by the unit whose process they ran in.
fn by_unit(cases: &[FamilyCase]) -> BTreeMap<u32, Vec<&FamilyCase>> {
    let mut units: BTreeMap<u32, Vec<&FamilyCase>> = BTreeMap::new();
    for c in cases {
        units.entry(c.unit).or_default().push(c);
    }
    units
}

/// A unit's variance and its df: its own (`own_ss` over `own` df) from [`OWN_DF`] on;
/// with less, `prior_var` worth `prior_df` pooled with what there is, as limma pools.
fn pooled(own_ss: f64, own: f64, prior_var: f64, prior_df: f64) -> (f64, f64) {
    if own >= OWN_DF {
        (own_ss / own, own)
    } else if prior_df + own > 0.0 {
        (
            (prior_df * prior_var + own_ss) / (prior_df + own),
            prior_df + own,
        )
    } else {
        (prior_var, 0.0)
    }
}

/// The standard error the processes alone give the family's shift, and its df: per unit,
/// its per-process variance over the processes each side has, weighted by the unit's share
/// of the cases. The per-process variance is measured in the runs: the spread of each
/// unit's executions about its side's mean, pooled over the family's units of one kind of
/// timing (those of one prior), as `opbench ab` pools its rounds' spread into its process
/// term; its df is the sum of theirs. With fewer than 2 (one execution a side, or one and
/// two) it is the prior pooled with what there is, as limma pools. The df is the smallest
/// kind's.
fn process_se(cases: &[FamilyCase]) -> (f64, f64) {
    let n = cases.len() as f64;
    let units = by_unit(cases);
    // per kind (its prior's bits): the units' summed squares and df
    let mut kinds: BTreeMap<(u64, u64), (f64, f64)> = BTreeMap::new();
    for members in units.values() {
        let prior = members[0].prior;
        let (sb, db) = own_spread(members, |c| &c.base);
        let (sc, dc) = own_spread(members, |c| &c.cand);
        let k = kinds
            .entry((prior.sd.to_bits(), prior.df.to_bits()))
            .or_default();
        k.0 += sb + sc;
        k.1 += db + dc;
    }
    let (mut var, mut df) = (0.0, f64::INFINITY);
    for members in units.values() {
        let prior = members[0].prior;
        let (ss, own) = kinds[&(prior.sd.to_bits(), prior.df.to_bits())];
        let (s2, d) = pooled(ss, own, prior.sd.powi(2), prior.df);
        let procs = |side: fn(&FamilyCase) -> usize| {
            members.iter().map(|c| side(c)).min().unwrap_or(1).max(1) as f64
        };
        let (nb, nc) = (procs(|c| c.base.len()), procs(|c| c.cand.len()));
        let w = members.len() as f64 / n;
        var += w * w * s2 * (1.0 / nb + 1.0 / nc);
        df = df.min(d);
    }
    (var.sqrt(), if df.is_finite() { df } else { 0.0 })
}

/// The shared shift of a family of cases: exp of the mean over cases of each case's log
/// ratio of geometric-mean execution medians. Each bootstrap replicate draws the executions
/// of each side once for all cases (execution i of every case is the same process); the
/// cases are the family's own, not a sample of others, so they are not resampled (their
/// spread is the family's make-up, not noise). The standard error is the larger of the
/// replicates' spread (widened for few executions; df = executions − 2, at least 2) and
/// what the processes alone give ([`ProcessTerm`], never zero where the prior is not); a
/// shared drift between boots (`drift`, the sd of a whole boot's shift) is added in
/// quadrature.
pub fn shared_shift(cases: &[FamilyCase], drift: f64, resamples: usize) -> Option<Shift> {
    if cases.is_empty() {
        return None;
    }
    let n = cases.len();
    let point = cases.iter().map(FamilyCase::log_ratio).sum::<f64>() / n as f64;
    let nb = cases.iter().map(|c| c.base.len()).max().unwrap_or(1);
    let nc = cases.iter().map(|c| c.cand.len()).max().unwrap_or(1);
    let mut rng = StdRng::seed_from_u64(23);
    let (mut ib, mut ic) = (vec![0usize; nb], vec![0usize; nc]);
    let (mut xb, mut xc) = (Vec::new(), Vec::new());
    let mut reps = Vec::with_capacity(resamples);
    for _ in 0..resamples.max(50) {
        ib.iter_mut().for_each(|i| *i = rng.random_range(0..nb));
        ic.iter_mut().for_each(|i| *i = rng.random_range(0..nc));
        let mut sum = 0.0;
        for c in cases {
            xb.clear();
            xb.extend(ib.iter().map(|&i| c.base[i % c.base.len()]));
            xc.clear();
            xc.extend(ic.iter().map(|&i| c.cand[i % c.cand.len()]));
            sum += mean(&xc) - mean(&xb);
        }
        reps.push(sum / n as f64);
    }
    let boot = sd(&reps) * widen(nb.min(nc));
    let (procs, procs_df) = process_se(cases);
    // a term measured from 2 df or more (pooled over the family's units) is the spread
    // the bootstrap of so few executions estimates, with more df; without, the larger
    let (se, df) = if procs_df >= MEASURED_DF || procs > boot {
        (procs, procs_df.max(2.0))
    } else {
        (boot, ((nb + nc) as f64 - 2.0).max(2.0))
    };
    let se = (se.powi(2) + drift.powi(2)).sqrt();
    Some(Shift {
        cases: n,
        ratio: point.exp(),
        se,
        df,
        p: p_value(point, se, df),
    })
}

/// The shared shift of a family whose two sides were measured in matched processes: the
/// two sides of one paired run (`opbench ab`), where round r of the base and of the
/// candidate took turns in the same window, so what that window's host did is in both.
/// Per unit, each round's difference of the sides' mean logs; the shift is their mean,
/// weighted by the unit's share of the cases, and its variance the rounds' spread over
/// their number. A unit of fewer than 3 rounds pools its spread with the prior (a
/// difference of two processes: twice its variance), as [`shared_shift`] does.
pub fn paired_shift(cases: &[FamilyCase], drift: f64) -> Option<Shift> {
    if cases.is_empty() {
        return None;
    }
    let n = cases.len() as f64;
    let (mut point, mut var, mut df) = (0.0, 0.0, f64::INFINITY);
    for members in by_unit(cases).values() {
        let rounds = members
            .iter()
            .map(|c| c.base.len().min(c.cand.len()))
            .min()
            .unwrap_or(0);
        if rounds == 0 {
            return None;
        }
        let d: Vec<f64> = (0..rounds)
            .map(|r| {
                mean(
                    &members
                        .iter()
                        .map(|c| c.cand[r] - c.base[r])
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let own = (rounds - 1) as f64;
        let prior = members[0].prior;
        let own_ss = if rounds >= 2 {
            sd(&d).powi(2) * own
        } else {
            0.0
        };
        // the prior of a difference of two processes: twice a process's variance
        let (s2, dfu) = pooled(own_ss, own, 2.0 * prior.sd.powi(2), prior.df);
        let w = members.len() as f64 / n;
        point += w * mean(&d);
        var += w * w * s2 / rounds as f64;
        df = df.min(dfu);
    }
    let se = (var + drift.powi(2)).sqrt();
    let df = if df.is_finite() { df.max(1.0) } else { 1.0 };
    Some(Shift {
        cases: cases.len(),
        ratio: point.exp(),
        se,
        df,
        p: p_value(point, se, df),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::case_test;
    use crate::decide::tests::execs;
    use rand_distr::{Distribution, Normal as N};

    const NONE: ProcessTerm = ProcessTerm { sd: 0.0, df: 0.0 };

    #[test]
    fn a_family_shift_is_found_where_its_cases_are_each_unclear() {
        // 60 cases, each 15% noisy between processes, all +6%: few cases alone are clear,
        // the family is
        let mut rng = StdRng::seed_from_u64(3);
        let mut cases = Vec::new();
        let mut clear = 0;
        for _ in 0..60 {
            let m = rng.random_range(1e3..1e5);
            let b = execs(&mut rng, m, 0.15, 0.02, 5);
            let c = execs(&mut rng, m * 1.06, 0.15, 0.02, 5);
            clear += usize::from(case_test(&b, &c, 0.0, 500).p < 0.01);
            cases.push(FamilyCase::from_groups(&b, &c, 0, NONE).unwrap());
        }
        assert!(clear <= 6, "{clear} cases clear alone");
        let s = shared_shift(&cases, 0.0, 1000).unwrap();
        let (lo, hi) = s.as_test().interval(0.95);
        assert!(
            s.p < 0.05 && lo > 1.0 && hi > 1.06 && lo < 1.06,
            "{s:?} [{lo}, {hi}]"
        );
        // a drift as large as the shift makes it unclear again
        let d = shared_shift(&cases, 0.06, 1000).unwrap();
        assert!(d.p > 0.05, "{d:?}");
        assert!(shared_shift(&[], 0.0, 10).is_none());
    }

    /// Runs of one unit whose every process shares a factor of sd `term`: `execs`
    /// executions a side, `cases` cases, the candidate `shift` slower.
    fn shared(rng: &mut StdRng, term: f64, execs: usize, shift: f64) -> Vec<FamilyCase> {
        let side = |rng: &mut StdRng, s: f64| -> Vec<f64> {
            (0..execs)
                .map(|_| s * (1.0 + N::new(0.0, term).unwrap().sample(rng)))
                .collect()
        };
        let (b, c) = (side(rng, 1.0), side(rng, 1.0 + shift));
        let prior = ProcessTerm { sd: term, df: 4.0 };
        (0..40)
            .map(|i| {
                let m = 1e3 * (1.0 + i as f64);
                let g = |f: &[f64], rng: &mut StdRng| -> Vec<Vec<f64>> {
                    f.iter()
                        .map(|x| {
                            (0..10)
                                .map(|_| m * x * (1.0 + N::new(0.0, 0.001).unwrap().sample(rng)))
                                .collect()
                        })
                        .collect()
                };
                let (gb, gc) = (g(&b, rng), g(&c, rng));
                FamilyCase::from_groups(&gb, &gc, 0, prior).unwrap()
            })
            .collect()
    }

    #[test]
    fn a_shared_process_term_widens_one_execution_a_side_and_is_never_zero_width() {
        // one process a side, a term of 3%: the 40 cases agree to 0.1%, yet the family's
        // interval carries the term, and an A/A is never called changed
        let mut rng = StdRng::seed_from_u64(11);
        let mut false_alarms = 0;
        for _ in 0..200 {
            let s = shared_shift(&shared(&mut rng, 0.03, 1, 0.0), 0.0, 200).unwrap();
            let (lo, hi) = s.as_test().interval(0.95);
            assert!(hi - lo > 0.1, "{s:?}: [{lo}, {hi}]");
            false_alarms += usize::from(lo > 1.015 || hi < 0.985);
        }
        assert!(false_alarms <= 10, "{false_alarms} of 200 A/A beyond ±1.5%");
        // the bootstrap alone gave these a zero-width interval
        let none: Vec<FamilyCase> = shared(&mut rng, 0.03, 1, 0.0)
            .into_iter()
            .map(|c| FamilyCase { prior: NONE, ..c })
            .collect();
        assert!(shared_shift(&none, 0.0, 200).unwrap().se < 1e-3);
    }

    #[test]
    fn matched_rounds_cancel_what_both_sides_of_a_round_share() {
        // six rounds, each round's window moving both sides alike by ±10%; +5% planted
        let mut rng = StdRng::seed_from_u64(13);
        let window = N::new(0.0, 0.10).unwrap();
        let prior = ProcessTerm { sd: 0.01, df: 4.0 };
        let mut found = 0;
        for _ in 0..20 {
            let w: Vec<f64> = (0..6).map(|_| window.sample(&mut rng)).collect();
            let cases: Vec<FamilyCase> = (0..30)
                .map(|i| {
                    let m = (1e3 * (1.0 + i as f64)).ln();
                    let side = |f: f64, rng: &mut StdRng| -> Vec<f64> {
                        w.iter()
                            .map(|x| m + x + f + N::new(0.0, 0.005).unwrap().sample(rng))
                            .collect()
                    };
                    let (base, cand) = (side(0.0, &mut rng), side(0.05, &mut rng));
                    FamilyCase {
                        base,
                        cand,
                        unit: 0,
                        prior,
                    }
                })
                .collect();
            let paired = paired_shift(&cases, 0.0).unwrap();
            let (lo, hi) = paired.as_test().interval(0.95);
            found += usize::from(lo > 1.015 && hi > 1.05);
            // read as independent sides, the windows swamp it
            let apart = shared_shift(&cases, 0.0, 200).unwrap();
            assert!(apart.se > 5.0 * paired.se, "{apart:?} {paired:?}");
        }
        assert!(found >= 18, "{found} of 20");
    }

    #[test]
    fn a_planted_shift_is_found_across_three_executions_of_several_units() {
        // five units (op crates), three executions a side, a term of 3% a process, +10%
        let mut rng = StdRng::seed_from_u64(12);
        let (mut found, mut missed) = (0, 0);
        for _ in 0..50 {
            let cases: Vec<FamilyCase> = (0..5)
                .flat_map(|u| {
                    shared(&mut rng, 0.03, 3, 0.10)
                        .into_iter()
                        .map(move |c| FamilyCase { unit: u, ..c })
                })
                .collect();
            let s = shared_shift(&cases, 0.0, 200).unwrap();
            let (lo, hi) = s.as_test().interval(0.95);
            missed += usize::from(lo > 1.10 || hi < 1.10);
            found += usize::from(lo > 1.015);
        }
        assert!(found >= 45, "{found} of 50");
        assert!(missed <= 5, "{missed} of 50 intervals miss +10%");
    }
}
