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

/// A family's verdict: the shared shift of its cases.
#[derive(Debug, Clone)]
pub struct FamilyLine {
    pub scope: FamilyScope,
    pub shift: stats::decide::Shift,
    pub ci: (f64, f64),
    pub mde: f64,
    pub verdict: Verdict,
}

/// The families' shared shifts, with Benjamini–Hochberg over the global families and,
/// apart, over the per-op ones.
pub(super) fn families(
    lines: &[Line],
    bs: &PerCall,
    cs: &PerCall,
    raw: &BTreeSet<CaseKey>,
    drift: (Drift, Drift),
    dispatch: Option<stats::decide::CaseTest>,
    s: Settings,
) -> Vec<FamilyLine> {
    use stats::decide::FamilyCase;
    let mut groups: BTreeMap<FamilyScope, Vec<FamilyCase>> = BTreeMap::new();
    for l in lines.iter().filter(|l| l.mde.is_some()) {
        let (Some(x), Some(y)) = (bs.times.get(&l.key), cs.times.get(&l.key)) else {
            continue;
        };
        let Some(fc) = FamilyCase::from_groups(x, y) else {
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
    let mut shifts: Vec<(FamilyScope, stats::decide::Shift)> = Vec::new();
    for (scope, cases) in groups {
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
        if let Some(mut sh) = stats::decide::shared_shift(&cases, d, s.resamples) {
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
            stats::decide::Shift {
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
