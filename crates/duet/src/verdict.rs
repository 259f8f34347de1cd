//! The verdicts of a finished comparison: each case's, each family's, the global ones,
//! and the exit code with its reasons.
//!
//! - A case: the mean of its rounds' median log ratios, with a Student-t interval on the
//!   between-round spread moderated by the spread its kind's cases share
//!   ([`stats::paired::Rounds`]) at the sequential design's level
//!   ([`stats::paired::Looks::level`]), judged against the tolerance; a `slower` or
//!   `faster` must also be a discovery by Benjamini–Hochberg over the cases
//!   (false-discovery rate 5%), else it is `ambiguous`.
//! - A family: the median over its cases of their estimates, an interval by bootstrap
//!   over cases, widened by the process term (what one round's processes share among
//!   their cases, measured from round to round), judged against the family
//!   tolerance.
//! - Exit 1 names every reason: a slower case, a slower family.

use std::collections::{BTreeMap, BTreeSet};

use rundir::Status;
use stats::Verdict;
use stats::paired::{Pooled, Rounds, median_se, pooled, prior, process_sd};
use stats::verdict::{Intervals, judge as rule};

use crate::state::{CaseRun, Outcome, Settings};
use crate::tolerance::Tol;

pub use crate::kind::Kind;

/// One case's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum CaseVerdict {
    /// Timed in pairs and judged.
    Judged(Verdict),
    /// The two sides ended differently before timing (`ok` → `mismatch`, …).
    StatusChanged { base: Status, cand: Status },
    /// Not timed on both: the same status on both sides, or a side's worker failed.
    NotTimed(Status),
}

impl CaseVerdict {
    pub fn word(&self) -> String {
        match self {
            CaseVerdict::Judged(j) => j.as_str().to_string(),
            CaseVerdict::StatusChanged { .. } => "status-changed".into(),
            CaseVerdict::NotTimed(s) => s.to_string(),
        }
    }
}

/// A case's line.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseLine {
    pub name: String,
    pub group: String,
    pub kind: Option<Kind>,
    /// The family it is pooled in (`linear pipelined (host-bound)`), where it was judged.
    pub family: Option<String>,
    pub verdict: CaseVerdict,
    /// cand / base: median, low, high.
    pub ratio: Option<(f64, f64, f64)>,
    pub pairs: usize,
    /// ± the interval's half-width (a fraction): what an `ambiguous` case could resolve.
    pub resolution: Option<f64>,
    /// The tolerance it was judged by, where judged.
    pub tolerance: Option<crate::tolerance::Tol>,
    /// Timed one side alone and then the other (it does not fit twice).
    pub unpaired: bool,
    pub note: String,
}

/// A family's (or a global) line.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyLine {
    pub name: String,
    pub kind: Kind,
    /// A global line (every case of its kind), not one op's in one mode.
    pub global: bool,
    pub pooled: Pooled,
    pub judgement: Verdict,
    /// The tolerance it was judged by.
    pub tolerance: crate::tolerance::Tol,
    /// The process term was measured (two or more processes a group) or not.
    pub process_measured: bool,
}

/// The whole comparison's verdicts.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdicts {
    pub cases: Vec<CaseLine>,
    /// The global lines first (host-bound, device), then each op in each mode.
    pub families: Vec<FamilyLine>,
    /// What one process of this run shared among its cases, per kind of timing.
    pub noise: rundir::noise::ProcessNoise,
    /// Why the exit code is 1; empty: 0.
    pub regressions: Vec<String>,
    /// The tolerances each kind was judged by.
    pub tolerances: crate::tolerance::Tolerances,
}

impl Verdicts {
    pub fn exit_code(&self) -> i32 {
        i32::from(!self.regressions.is_empty())
    }

    /// The verdict line's words, from the verdicts reached: a regression; else `same` or
    /// `faster` where every global line says so (with no global line, a kind having fewer
    /// than 3 cases: every case); else ambiguous, not a pass (exit 0: nothing was found
    /// slower, and nothing was shown to be the same either).
    pub fn headline(&self) -> String {
        if !self.regressions.is_empty() {
            return "**Verdict: REGRESSION (exit 1)**, because:".into();
        }
        let global: Vec<&FamilyLine> = self.families.iter().filter(|f| f.global).collect();
        let (judged, open): (Vec<Verdict>, Vec<String>) = if global.is_empty() {
            let v: Vec<Verdict> = self
                .cases
                .iter()
                .map(|c| match c.verdict {
                    CaseVerdict::Judged(j) => j,
                    _ => Verdict::Ambiguous,
                })
                .collect();
            let n = v.iter().filter(|j| **j == Verdict::Ambiguous).count();
            let open = (n > 0 || v.is_empty()).then(|| {
                format!(
                    "{n} of {} cases undecided (no kind had 3 for a family)",
                    v.len()
                )
            });
            (v, open.into_iter().collect())
        } else {
            let open = global
                .iter()
                .filter(|f| f.judgement == Verdict::Ambiguous)
                .map(|f| format!("{} ±{:.1}%", f.name, f.tolerance.frac * 100.0))
                .collect();
            (global.iter().map(|f| f.judgement).collect(), open)
        };
        if !open.is_empty() || judged.is_empty() {
            return format!(
                "**Verdict: ambiguous, not a pass (exit 0: nothing found slower)**: \
                 undecided against its tolerance: {}.",
                open.join(", ")
            );
        }
        if judged.contains(&Verdict::Faster) {
            "**Verdict: faster, no regression found (exit 0).**".into()
        } else {
            "**Verdict: same, no regression found (exit 0).**".into()
        }
    }

    /// How many cases ended with each verdict word.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for c in &self.cases {
            *out.entry(c.verdict.word()).or_default() += 1;
        }
        out
    }
}

/// The kind of each judged case: device cases by their mode; a host-timed case is
/// host-bound unless its base's time is bound by the device or by compute.
fn kinds(cases: &[&CaseRun]) -> BTreeMap<String, Kind> {
    let median = |c: &CaseRun| {
        let xs: Vec<f64> = c.pairs.iter().map(|p| p.per_call().0).collect();
        (!xs.is_empty()).then(|| stats::median(&xs))
    };
    let control = |c: &CaseRun| {
        let xs: Vec<f64> = c.pairs.iter().filter_map(|p| p.base.control_ns).collect();
        (!xs.is_empty()).then(|| stats::median(&xs))
    };
    // a case's device time: its `device` row's, else its `graph` row's (replays carry no
    // launch gaps, so they read lower: a case is then called host-bound a little sooner)
    let device: BTreeMap<rundir::CaseKey, f64> = cases
        .iter()
        .filter(|c| matches!(c.key.mode, rundir::Mode::Device | rundir::Mode::Graph))
        .filter_map(|c| median(c).map(|m| (c.key.clone(), m)))
        .collect();
    let device_of = |k: &rundir::CaseKey| {
        (device.get(&k.in_mode(rundir::Mode::Device)))
            .or_else(|| device.get(&k.in_mode(rundir::Mode::Graph)))
            .copied()
    };
    let mut out = BTreeMap::new();
    for c in cases {
        let kind = if c.key.mode == rundir::Mode::Device {
            Kind::Launch
        } else if c.key.mode.is_device() {
            Kind::Device
        } else {
            let Some(host) = median(c) else { continue };
            let dev = device_of(&c.key);
            if rundir::bound_by_host(host, dev, control(c)) {
                Kind::HostBound
            } else {
                Kind::HostTimedBound
            }
        };
        out.insert(c.name.clone(), kind);
    }
    out
}

/// Each timed case's estimate from its rounds, its between-round spread moderated by the
/// prior of its kind's cases.
fn estimates(cases: &[&CaseRun]) -> BTreeMap<String, (Kind, Rounds)> {
    let kinds = kinds(cases);
    let rounds: BTreeMap<&str, Vec<f64>> = cases
        .iter()
        .filter(|c| c.ended.is_none())
        .map(|c| (c.name.as_str(), c.round_estimates()))
        .collect();
    let mut out = BTreeMap::new();
    for kind in KINDS {
        let of_kind: Vec<(&str, &Vec<f64>)> = rounds
            .iter()
            .filter(|(n, _)| kinds.get(**n) == Some(&kind))
            .map(|(n, r)| (*n, r))
            .collect();
        let all: Vec<&[f64]> = of_kind.iter().map(|(_, r)| r.as_slice()).collect();
        let p = prior(&all);
        for (name, r) in of_kind {
            if let Some(est) = Rounds::of(r, p) {
                out.insert(name.to_string(), (kind, est));
            }
        }
    }
    out
}

/// Every kind, in the order the global lines print.
const KINDS: [Kind; 4] = [
    Kind::HostBound,
    Kind::Launch,
    Kind::Device,
    Kind::HostTimedBound,
];

/// The tolerances from the settings' and from the terms these cases measured: per kind,
/// a case's between-round sd (the moderation prior's) and a round's process term.
fn tolerances(
    est: &BTreeMap<String, (Kind, Rounds)>,
    cases: &[&CaseRun],
    s: &Settings,
) -> crate::tolerance::Tolerances {
    let mut case_terms = BTreeMap::new();
    for kind in KINDS {
        let rounds: Vec<Vec<f64>> = cases
            .iter()
            .filter(|c| est.get(&c.name).is_some_and(|e| e.0 == kind))
            .map(|c| c.round_estimates())
            .collect();
        let all: Vec<&[f64]> = rounds.iter().map(Vec::as_slice).collect();
        if let Some(p) = prior(&all) {
            case_terms.insert(kind, p.var.sqrt().exp_m1());
        }
    }
    let members = members_of(cases, est);
    let family_terms: BTreeMap<Kind, f64> = process_terms(&members, |m| m.0)
        .into_iter()
        .map(|(k, sd)| (k, sd.exp_m1()))
        .collect();
    crate::tolerance::Tolerances::of(
        (s.tolerance, s.family_tolerance),
        &case_terms,
        &family_terms,
    )
}

/// The cases decided now (before the false-discovery step): the sequential stop.
pub fn decided(cases: &[&CaseRun], s: &Settings) -> BTreeSet<String> {
    let level = s.looks.level();
    let est = estimates(cases);
    let tol = tolerances(&est, cases, s);
    est.into_iter()
        .filter(|(_, (k, e))| {
            rule(
                Intervals::of_log(e.interval(level)),
                tol.case(*k).frac,
                true,
            )
            .is_decided()
        })
        .map(|(n, _)| n)
        .collect()
}

/// Judge a finished comparison.
pub fn judge(outcome: &Outcome) -> Verdicts {
    let s = &outcome.settings;
    let level = s.looks.level();
    let looks = s.looks.schedule().len() as f64;
    let all: Vec<&CaseRun> = outcome.cases.iter().collect();
    let est = estimates(&all);
    let tol = tolerances(&est, &all, s);
    let case_tol = |name: &str| {
        est.get(name)
            .map_or(tol.case(Kind::Device), |e| tol.case(e.0))
    };
    let mut cases: Vec<CaseLine> = outcome
        .cases
        .iter()
        .map(|c| case_line(c, est.get(&c.name).copied(), level, case_tol(&c.name)))
        .collect();
    // a discovery: Benjamini–Hochberg over the judged cases' directional p-values, each
    // multiplied by the looks (Bonferroni over the sequential design)
    let judged: Vec<usize> = (0..cases.len())
        .filter(|&i| est.contains_key(&cases[i].name))
        .collect();
    let ps: Vec<f64> = judged
        .iter()
        .map(|&i| {
            let (up, down) = est[&cases[i].name]
                .1
                .p_beyond(case_tol(&cases[i].name).frac);
            (up.min(down) * looks).min(1.0)
        })
        .collect();
    let found = stats::decide::benjamini_hochberg(&ps, 0.05);
    for (&i, &f) in judged.iter().zip(&found) {
        let (_, e) = est[&cases[i].name];
        let t = case_tol(&cases[i].name).frac;
        let j = rule(Intervals::of_log(e.interval(level)), t, f);
        if let CaseVerdict::Judged(was @ (Verdict::Slower | Verdict::Faster)) = cases[i].verdict
            && j != was
        {
            cases[i].verdict = CaseVerdict::Judged(j);
            cases[i].note = format!(
                "{} beyond ±{:.1}% at its look, not a discovery at a 5% false-discovery rate",
                was.as_str(),
                t * 100.0
            );
        }
    }
    let members = members_of(&all, &est);
    let families = families(&members, &tol);
    let mut regressions = Vec::new();
    let slower: Vec<&CaseLine> = cases
        .iter()
        .filter(|c| c.verdict == CaseVerdict::Judged(Verdict::Slower))
        .collect();
    if !slower.is_empty() {
        regressions.push(format!(
            "{} case{} slower beyond {} (first: {})",
            slower.len(),
            if slower.len() == 1 { "" } else { "s" },
            slower[0]
                .tolerance
                .map_or(String::new(), |t| format!("±{:.1}%", t.frac * 100.0))
                .trim_start_matches('±'),
            slower[0].name
        ));
    }
    for f in families.iter().filter(|f| f.judgement == Verdict::Slower) {
        let (r, lo, hi) = f.pooled.ratio();
        regressions.push(format!(
            "{}: {} [{}, {}] lies wholly above +{:.1}%",
            f.name,
            pct(r),
            pct(lo),
            pct(hi),
            f.tolerance.frac * 100.0
        ));
    }
    Verdicts {
        cases,
        families,
        regressions,
        noise: noise(&members),
        tolerances: tol,
    }
}

/// `+3.1%` for a ratio of 1.031.
pub fn pct(ratio: f64) -> String {
    format!("{:+.1}%", (ratio - 1.0) * 100.0)
}

fn case_line(c: &CaseRun, est: Option<(Kind, Rounds)>, level: f64, tol: Tol) -> CaseLine {
    let mut line = case_line_inner(c, est, level, tol);
    let (b, k) = c.uncovered().unwrap_or((0, 0));
    let bound = (b + k > 0).then(|| {
        format!(
            "upper bound: in {b} base and {k} candidate chunks the host's enqueue outlasted \
             the lead, so the GPU's wait for the host is in their time"
        )
    });
    for why in [c.unpaired.clone(), bound].into_iter().flatten() {
        line.note = if line.note.is_empty() {
            why
        } else {
            format!("{why}; {}", line.note)
        };
    }
    line
}

fn case_line_inner(c: &CaseRun, est: Option<(Kind, Rounds)>, level: f64, tol: Tol) -> CaseLine {
    let mut line = CaseLine {
        name: c.name.clone(),
        group: c.group.clone(),
        kind: est.map(|e| e.0),
        family: est.map(|e| format!("{} ({})", family_of(&c.key), e.0.as_str())),
        verdict: CaseVerdict::NotTimed(Status::Error),
        ratio: None,
        pairs: c.pairs.len(),
        resolution: None,
        tolerance: None,
        unpaired: c.unpaired.is_some(),
        note: String::new(),
    };
    if let Some(e) = &c.ended {
        let status = |p: &Option<crate::protocol::Prepared>| p.as_ref().map(|p| p.status);
        line.verdict = match (status(&c.base), status(&c.cand)) {
            (Some(b), Some(k)) if b != k => CaseVerdict::StatusChanged { base: b, cand: k },
            _ => CaseVerdict::NotTimed(e.status),
        };
        let side = e
            .side
            .map_or(String::new(), |s| format!("{}: ", s.as_str()));
        line.note = format!("{side}{}", e.reason);
        return line;
    }
    let Some((_, e)) = est else {
        line.note = "no spread to judge by: one round and no other case".into();
        return line;
    };
    let (lo, hi) = e.interval(level);
    line.ratio = Some((e.mean.exp(), lo.exp(), hi.exp()));
    // the look's verdict: a discovery is judged over all cases once the comparison ends
    let j = rule(Intervals::of_log((lo, hi)), tol.frac, true);
    line.verdict = CaseVerdict::Judged(j);
    line.tolerance = Some(tol);
    if j == Verdict::Ambiguous {
        line.resolution = Some(((hi - lo) / 2.0).exp_m1());
        line.note = format!(
            "undecided after {} round{} ({} pairs, {:.1} s)",
            e.rounds,
            if e.rounds == 1 { "" } else { "s" },
            c.pairs.len(),
            c.spent.as_secs_f64()
        );
    }
    line
}

/// A judged case in its family: (kind, family name, its estimate, its round estimates, its
/// kind of timing).
type Member = (Kind, String, f64, Vec<f64>, rundir::noise::TermKind);

/// Every judged case in its family.
fn members_of(cases: &[&CaseRun], est: &BTreeMap<String, (Kind, Rounds)>) -> Vec<Member> {
    let mut members: Vec<Member> = Vec::new();
    for c in cases {
        let Some((kind, e)) = est.get(&c.name) else {
            continue;
        };
        members.push((
            *kind,
            family_of(&c.key),
            e.mean,
            c.round_estimates(),
            rundir::noise::TermKind::of(c.key.mode),
        ));
    }
    members
}

/// A case's family, less its kind: its op in its mode; scripts/peer.py's rows (the same op
/// from Python) are a family of their own.
fn family_of(key: &rundir::CaseKey) -> String {
    let python = rundir::Timer::of(&key.variant) != rundir::Timer::Rust;
    format!(
        "{} {}{}",
        key.op,
        key.mode,
        if python { " from Python" } else { "" }
    )
}

/// What one process of this run shared among its cases, per kind of timing: each kind's
/// round term (a ratio of two processes) over √2. This machine's noise figure, which
/// `opbench compare` reads back from the sides' env.json.
fn noise(members: &[Member]) -> rundir::noise::ProcessNoise {
    rundir::noise::ProcessNoise(
        process_terms(members, |m| m.4)
            .into_iter()
            // a term the rounds could not tell from their sampling is not a measurement
            // of none: it is left out, and compare falls back to the kind's figure
            .filter(|&(_, sd)| sd > 0.0)
            .map(|(k, sd)| (k, sd / std::f64::consts::SQRT_2))
            .collect(),
    )
}

/// The families: the global ones by kind, then each op in each mode.
fn families(members: &[Member], tol: &crate::tolerance::Tolerances) -> Vec<FamilyLine> {
    let level = 0.95;
    let fams: BTreeSet<(Kind, String)> = members.iter().map(|m| (m.0, m.1.clone())).collect();
    let sd = process_terms(members, |m| m.0);
    let mut out = Vec::new();
    let mut add = |name: String, kind: Kind, global: bool, pick: &dyn Fn(&Member) -> bool| {
        let chosen: Vec<&Member> = members.iter().filter(|m| pick(m)).collect();
        if chosen.len() < 3 {
            // a bootstrap over one or two cases has no width to judge by
            return;
        }
        let xs: Vec<f64> = chosen.iter().map(|m| m.2).collect();
        let term = sd.get(&kind).copied();
        // the shared term of a round, over the rounds every case of the family has
        let rounds = chosen.iter().map(|m| m.3.len()).min().unwrap_or(1).max(1);
        let per = term.unwrap_or(0.0) / (rounds as f64).sqrt();
        if let Some(p) = pooled(&xs, level, per, 2000) {
            let t = tol.family(kind);
            out.push(FamilyLine {
                name,
                kind,
                global,
                tolerance: t,
                judgement: rule(Intervals::of_log((p.low, p.high)), t.frac, true),
                pooled: p,
                process_measured: term.is_some(),
            });
        }
    };
    for kind in KINDS {
        add(format!("all {} cases", kind.as_str()), kind, true, &|m| {
            m.0 == kind
        });
    }
    for (kind, fam) in fams {
        let name = format!("{fam} ({})", kind.as_str());
        add(name, kind, false, &|m| m.0 == kind && m.1 == fam);
    }
    out
}

/// The spread of what one round's processes share among a family's cases, per `kind_of` a
/// member: each op-and-mode family's median over its cases, round by round (over the rounds
/// all its cases have), pooled over the kind's families (no entry for a kind with no family
/// of 3 or more cases). It is the term of a round's two processes, a ratio.
fn process_terms<K: Ord + Copy>(
    members: &[Member],
    kind_of: impl Fn(&Member) -> K,
) -> BTreeMap<K, f64> {
    let fams: BTreeSet<(K, &str)> = members.iter().map(|m| (kind_of(m), m.1.as_str())).collect();
    // per kind, each family's (round estimates, their squared standard errors)
    type Rounds2 = (Vec<f64>, Vec<f64>);
    let mut groups: BTreeMap<K, Vec<Rounds2>> = BTreeMap::new();
    for (kind, fam) in fams {
        let rounds: Vec<&Vec<f64>> = members
            .iter()
            .filter(|m| kind_of(m) == kind && m.1 == fam)
            .map(|m| &m.3)
            .collect();
        let r = rounds.iter().map(|x| x.len()).min().unwrap_or(0);
        if rounds.len() < 3 || r < 2 {
            continue;
        }
        let (mut est, mut se2) = (Vec::new(), Vec::new());
        for i in 0..r {
            let xs: Vec<f64> = rounds.iter().map(|x| x[i]).collect();
            est.push(stats::median(&xs));
            se2.push(median_se(&xs, 500).powi(2));
        }
        groups.entry(kind).or_default().push((est, se2));
    }
    groups
        .into_iter()
        .filter_map(|(k, g)| process_sd(&g).map(|sd| (k, sd)))
        .collect()
}
