//! Families: the shared shift of a kind of case, judged as one.

use super::*;

/// What a family of cases shares.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum FamilyScope {
    /// Every host-timed case divided by the host control: the host's dispatch of all ops.
    AllHostBound,
    /// Every GPU-event case: the device's kernels.
    AllDevice,
    /// The dispatch floor's `add` at equal host speed (torch control / host control, over
    /// every sample): the build's own per-call cost, whatever the host did.
    Dispatch,
    /// One op (crate) in one timing mode; `host_bound` tells the divided host-timed cases
    /// from those compared raw.
    Op {
        op: String,
        mode: rundir::Mode,
        host_bound: bool,
    },
}

impl FamilyScope {
    /// A global family (over every op), not one op's.
    pub fn is_global(&self) -> bool {
        !matches!(self, FamilyScope::Op { .. })
    }
}

impl std::fmt::Display for FamilyScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FamilyScope::AllHostBound => {
                f.write_str("all host-bound cases (host-timed, at equal host speed)")
            }
            FamilyScope::AllDevice => f.write_str("all device cases (GPU-event time)"),
            FamilyScope::Dispatch => f.write_str("dispatch: the torch floor at equal host speed"),
            FamilyScope::Op {
                op,
                mode,
                host_bound,
            } => {
                let what = if mode.is_device() {
                    ""
                } else if *host_bound {
                    ", host-bound"
                } else {
                    ", raw (device- or compute-bound)"
                };
                write!(f, "{op} {mode}{what}")
            }
        }
    }
}

/// No speed verdicts where the comparison withholds them (one run, two kinds of machine,
/// two timing methods): every judged case and family becomes `ambiguous`, a case flagged
/// `withheld`, none fails for its speed (a
/// status change or a fall-back to the math kernel still does).
pub(super) fn withhold(lines: &mut [Line], families: &mut [FamilyLine]) {
    for l in lines.iter_mut().filter(|l| l.verdict.is_some()) {
        let other = l.flags.iter().any(|f| {
            matches!(f, Flag::StatusChanged(Status::Ok, _))
                || matches!(f, Flag::KernelChanged(b, k) if k == "math" && !b.is_empty())
        });
        l.verdict = Some(Verdict::Ambiguous);
        l.fails = other;
        l.flags.push(Flag::Withheld);
    }
    for f in families.iter_mut() {
        f.verdict = Verdict::Ambiguous;
    }
}

/// Both runs' per-call times, and whether their executions are matched (the two sides of
/// one paired run, rounds as executions).
#[derive(Clone, Copy)]
pub(super) struct Sides<'a> {
    pub(super) base: &'a PerCall,
    pub(super) cand: &'a PerCall,
    pub(super) paired: bool,
}

/// The fewest cases a family has: fewer get no family verdict.
pub const MIN_FAMILY: usize = 3;

/// The evidence a prior process term counts as, in processes: a family's own executions
/// outweigh it from five a side.
pub const PROCESS_TERM_DF: f64 = 4.0;

/// Where a kind's process term came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermSource {
    /// `opbench ab` measured it from its rounds, stored in a run's env.json.
    Stored,
    /// Neither run has one: this project's measured figure ([`rundir::noise::TermKind::fallback`]).
    Fallback,
}

/// A kind of timing's process term, as the families of a comparison carry it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessTermLine {
    pub kind: rundir::noise::TermKind,
    /// sd of the log, a process.
    pub sd: f64,
    pub source: TermSource,
}

/// Each kind of timing's process term for a comparison of `base` and `cand`: the larger
/// of what the runs stored ([`rundir::noise::ProcessNoise`]), else the fallback.
pub fn process_terms(base: Option<&Env>, cand: Option<&Env>) -> Vec<ProcessTermLine> {
    let stored: Vec<rundir::noise::ProcessNoise> = [base, cand]
        .into_iter()
        .flatten()
        .filter_map(rundir::noise::ProcessNoise::of)
        .collect();
    rundir::noise::TermKind::ALL
        .into_iter()
        .map(|kind| {
            let sds: Vec<f64> = stored
                .iter()
                .filter_map(|n| n.0.get(&kind).copied())
                .collect();
            match sds.into_iter().reduce(f64::max) {
                Some(sd) => ProcessTermLine {
                    kind,
                    sd,
                    source: TermSource::Stored,
                },
                None => ProcessTermLine {
                    kind,
                    sd: kind.fallback(),
                    source: TermSource::Fallback,
                },
            }
        })
        .collect()
}

/// A family's verdict: the shared shift of its cases.
#[derive(Debug, Clone)]
pub struct FamilyLine {
    pub scope: FamilyScope,
    pub shift: stats::family::Shift,
    pub ci: (f64, f64),
    pub mde: f64,
    pub verdict: Verdict,
}

/// Each family's cases, each in its unit (an op crate in a mode: one process an
/// execution, or a paired run's round, sharing that process's term among its cases) with
/// its kind's prior process term.
fn family_cases(
    lines: &[Line],
    (bs, cs): (&PerCall, &PerCall),
    raw: &BTreeSet<CaseKey>,
    terms: &[ProcessTermLine],
) -> BTreeMap<FamilyScope, Vec<stats::family::FamilyCase>> {
    use stats::family::{FamilyCase, ProcessTerm};
    let mut groups: BTreeMap<FamilyScope, Vec<FamilyCase>> = BTreeMap::new();
    let mut units: BTreeMap<(String, rundir::Mode), u32> = BTreeMap::new();
    for l in lines.iter().filter(|l| l.mde.is_some()) {
        let (Some(x), Some(y)) = (bs.times.get(&l.key), cs.times.get(&l.key)) else {
            continue;
        };
        let next = units.len() as u32;
        let unit = *units
            .entry((l.key.op.to_string(), l.key.mode))
            .or_insert(next);
        let kind = rundir::noise::TermKind::of(l.key.mode);
        let sd = terms
            .iter()
            .find(|t| t.kind == kind)
            .map_or(kind.fallback(), |t| t.sd);
        let prior = ProcessTerm {
            sd,
            df: PROCESS_TERM_DF,
        };
        let Some(fc) = FamilyCase::from_groups(x, y, unit, prior) else {
            continue;
        };
        let device = l.key.mode.is_device();
        let host_bound = !device && !raw.contains(&l.key);
        if device {
            groups
                .entry(FamilyScope::AllDevice)
                .or_default()
                .push(fc.clone());
        } else if host_bound {
            groups
                .entry(FamilyScope::AllHostBound)
                .or_default()
                .push(fc.clone());
        }
        let op = FamilyScope::Op {
            op: l.key.op.to_string(),
            mode: l.key.mode,
            host_bound,
        };
        groups.entry(op).or_default().push(fc);
    }
    groups
}

/// The families' shared shifts, with Benjamini–Hochberg over the global families and,
/// apart, over the per-op ones.
pub(super) fn families(
    lines: &[Line],
    sides: Sides<'_>,
    raw: &BTreeSet<CaseKey>,
    drift: (Drift, Drift),
    dispatch: Option<stats::decide::CaseTest>,
    terms: &[ProcessTermLine],
    s: Settings,
) -> Vec<FamilyLine> {
    let groups = family_cases(lines, (sides.base, sides.cand), raw, terms);
    let mut shifts: Vec<(FamilyScope, stats::family::Shift)> = Vec::new();
    for (scope, cases) in groups {
        if cases.len() < MIN_FAMILY {
            // two cases are two cases, not a family: they are judged alone
            continue;
        }
        let d = match &scope {
            FamilyScope::AllDevice => drift.0.shared,
            FamilyScope::Op { mode, .. } if mode.is_device() => drift.0.shared,
            _ => drift.1.shared,
        };
        let host_bound = matches!(
            scope,
            FamilyScope::AllHostBound
                | FamilyScope::Op {
                    host_bound: true,
                    ..
                }
        );
        // the host's shared drift between boots enters a host-bound family once: through
        // the dispatch's test it is composed with, where there is one
        let d = if host_bound && dispatch.is_some() {
            0.0
        } else {
            d
        };
        let shift = if sides.paired {
            stats::family::paired_shift(&cases, d)
        } else {
            stats::family::shared_shift(&cases, d, s.resamples)
        };
        if let Some(mut sh) = shift {
            if let Some(disp) = dispatch.filter(|_| host_bound) {
                let t = sh.as_test().plus(&disp);
                (sh.ratio, sh.se, sh.df, sh.p) = (t.ratio, t.se, t.df, t.p);
            }
            shifts.push((scope, sh));
        }
    }
    if let Some(t) = dispatch {
        shifts.push((
            FamilyScope::Dispatch,
            stats::family::Shift {
                cases: 1,
                ratio: t.ratio,
                se: t.se,
                df: t.df,
                p: t.p,
            },
        ));
    }
    shifts.sort_by(|a, b| a.0.cmp(&b.0));
    // two tiers, each with its own false-discovery rate: the few global families are the
    // question a build comparison asks; the per-op families say where
    let mut found = vec![false; shifts.len()];
    for global in [true, false] {
        let idx: Vec<usize> = (0..shifts.len())
            .filter(|&i| shifts[i].0.is_global() == global)
            .collect();
        let ps: Vec<f64> = idx.iter().map(|&i| shifts[i].1.p).collect();
        for (&i, d) in idx
            .iter()
            .zip(stats::decide::benjamini_hochberg(&ps, s.alpha))
        {
            found[i] = d;
        }
    }
    shifts
        .into_iter()
        .zip(found)
        .map(|((scope, shift), discovery)| {
            let t = shift.as_test();
            FamilyLine {
                scope,
                shift,
                ci: t.interval(1.0 - s.alpha),
                mde: t.mde(s.alpha),
                verdict: family_verdict(&t, discovery, s),
            }
        })
        .collect()
}

/// The verdict of a family's shift: `discovery` from Benjamini–Hochberg over the families,
/// and its interval wholly beyond the family threshold (what the reasons line says, and
/// the rule `opbench ab` judges a family by).
fn family_verdict(t: &stats::decide::CaseTest, discovery: bool, s: Settings) -> Verdict {
    stats::verdict::judge(t.intervals(s.alpha), s.family_threshold, discovery)
}
