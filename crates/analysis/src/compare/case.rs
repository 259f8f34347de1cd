//! Each case's test and verdict: from its executions (moderated towards its kind's
//! variance) or, with one execution a side, from its samples, and the decision over the
//! comparison's cases (Benjamini–Hochberg per timing mode, the threshold, equivalence).

use super::*;

/// One case's data for the decision: its test, or why it has none.
enum Tested {
    /// A device-timed case's test from one execution's samples.
    Device(stats::decide::CaseTest),
    /// A host-timed case with one execution a side: ratio and interval for information.
    SingleHost(f64, (f64, f64)),
    NoSamples,
}

/// The test of one case both runs have ok with a single execution on a side (cases with two
/// or more a side take [`stats::decide::moderated_test`]): the samples' bootstrap.
fn test_single(x: &[Vec<f64>], y: &[Vec<f64>], device: bool, drift: f64, s: Settings) -> Tested {
    let total = |g: &[Vec<f64>]| g.iter().map(Vec::len).sum::<usize>();
    if total(x) < 2 || total(y) < 2 {
        return Tested::NoSamples;
    }
    let t = stats::decide::case_test(x, y, drift, s.resamples);
    if device {
        Tested::Device(t)
    } else {
        Tested::SingleHost(t.ratio, t.interval(1.0 - s.alpha))
    }
}

/// The verdict of a tested case by the one rule ([`stats::verdict`]), from this tool's
/// inputs: `discovery` is Benjamini–Hochberg over the comparison's tests against no
/// change, so the change it must carry beyond the threshold is its estimate (the
/// comparison's uncertainty is in the discovery; an interval wholly beyond ±3% on top
/// found 58 of 128 host-bound cases of a planted +10% in the calibration runs, against 80%
/// and more); `same` is equivalence by two one-sided tests. With one process a side
/// (device time) a change must also clear `floor`, what two processes' terms make
/// ([`single_process_floor`]).
fn case_verdict(t: &stats::decide::CaseTest, floor: f64, discovery: bool, s: Settings) -> Verdict {
    let intervals = stats::verdict::Intervals {
        change: (t.ratio, t.ratio),
        ..t.intervals(s.alpha)
    };
    stats::verdict::judge_beyond(intervals, s.threshold, floor, discovery)
}

/// Each tested case's verdict. A host-bound case's change at equal host speed is its change
/// against the torch control times the dispatch's own change ([`dispatch_test`]): that
/// composed test gives the ratio, interval and mde. Its discovery may come from either test
/// — the composed one (a build that made every call dearer), or the one against the
/// torch control alone (a change of this op, measured without the dispatch's process-to-
/// process noise) — with Benjamini–Hochberg over all of a timing mode's tests; `slower`
/// still needs the composed ratio beyond the threshold.
/// What the cases' decision reads besides their tests.
#[derive(Clone, Copy)]
pub(super) struct Judged<'a> {
    /// The dispatch's own change ([`dispatch_test`]), composed with host-bound cases.
    pub(super) dispatch: Option<&'a stats::decide::CaseTest>,
    pub(super) raw: &'a BTreeSet<CaseKey>,
    /// What the host-bound cases were divided by.
    pub(super) used: Control,
    /// Each kind's process term: a one-execution case's floor.
    pub(super) terms: &'a [ProcessTermLine],
}

pub(super) fn decide_cases(
    lines: &mut [Line],
    tests: &[(usize, stats::decide::CaseTest, bool)],
    j: Judged<'_>,
    s: Settings,
) {
    let Judged {
        dispatch,
        raw,
        used,
        terms,
    } = j;
    // one process a side: nothing under what two processes' terms make can be called
    let floor = |k: &CaseKey| {
        let kind = rundir::noise::TermKind::of(k.mode);
        let sd = terms
            .iter()
            .find(|t| t.kind == kind)
            .map_or(kind.fallback(), |t| t.sd);
        single_process_floor(sd, s.alpha)
    };
    let host_bound = |k: &CaseKey| !k.mode.is_device() && !raw.contains(k);
    let composed: Vec<Option<stats::decide::CaseTest>> = tests
        .iter()
        .map(|(i, t, _)| {
            dispatch
                .filter(|_| host_bound(&lines[*i].key))
                .map(|d| t.plus(d))
        })
        .collect();
    // Benjamini–Hochberg per timing mode: each mode asks its own question (the kernels,
    // the host's dispatch), and many discoveries in one must not loosen the other
    let mut discovery = vec![false; tests.len()];
    let modes: BTreeSet<rundir::Mode> = tests.iter().map(|(i, ..)| lines[*i].key.mode).collect();
    for mode in modes {
        // (test index, p) of the mode's own and composed tests
        let mut ps: Vec<(usize, f64)> = Vec::new();
        for (j, (i, own, _)) in tests.iter().enumerate() {
            if lines[*i].key.mode == mode {
                ps.push((j, own.p));
                ps.extend(composed[j].map(|c| (j, c.p)));
            }
        }
        let p: Vec<f64> = ps.iter().map(|x| x.1).collect();
        for ((j, _), d) in ps
            .iter()
            .zip(stats::decide::benjamini_hochberg(&p, s.alpha))
        {
            discovery[*j] |= d;
        }
    }
    for (j, (i, own, single)) in tests.iter().enumerate() {
        let discovery = discovery[j];
        let t = composed[j].unwrap_or(*own);
        let line = &mut lines[*i];
        line.divided_by = Some(if host_bound(&line.key) {
            used
        } else {
            Control::Raw
        });
        let floor = if *single { floor(&line.key) } else { 0.0 };
        line.verdict = Some(case_verdict(&t, floor, discovery, s));
        line.ratio = Some(t.ratio);
        line.ratio_ci = Some(t.interval(1.0 - s.alpha));
        line.p = Some(t.p.min(own.p));
        line.mde = Some(t.mde(s.alpha).max(floor));
        line.fails |= line.verdict == Some(Verdict::Slower);
        if *single && line.verdict == Some(Verdict::Ambiguous) && discovery {
            line.flags.push(Flag::SingleExecution);
        }
    }
}

/// The kind of case whose executions vary alike: mode, whether divided by the host
/// control, and size (decades of the base median from 5 µs).
fn kind_of(line: &Line, raw: &BTreeSet<CaseKey>) -> (rundir::Mode, bool, i32) {
    let size = line
        .base
        .map_or(0, |ns| ((ns / 5_000.0).log10().floor() as i32).clamp(-1, 3));
    (line.key.mode, raw.contains(&line.key), size)
}

/// Every comparable case's test (line index, test, single execution a side): cases with two
/// or more executions a side by [`stats::decide::moderated_test`], their variance shrunk
/// towards their kind's ([`kind_of`]); cases with one by the samples' bootstrap. Host-timed
/// cases of one execution get no test, and lines without samples say so.
pub(super) fn case_tests(
    lines: &mut [Line],
    bs: &PerCall,
    cs: &PerCall,
    raw: &BTreeSet<CaseKey>,
    drift: (Drift, Drift),
    raw_drift: f64,
    s: Settings,
) -> Vec<(usize, stats::decide::CaseTest, bool)> {
    use stats::decide::{ExecLogs, Prior};
    let mut multi: Vec<(usize, ExecLogs)> = Vec::new();
    let mut tests = Vec::new();
    for (i, line) in lines.iter_mut().enumerate() {
        if !line.both_ok {
            continue;
        }
        let device = line.key.mode.is_device();
        let d = case_drift(line, raw, drift, raw_drift);
        let (Some(x), Some(y)) = (bs.times.get(&line.key), cs.times.get(&line.key)) else {
            line.no_samples();
            continue;
        };
        if let Some(logs) = ExecLogs::from_groups(x, y) {
            multi.push((i, logs));
            continue;
        }
        match test_single(x, y, device, d, s) {
            Tested::Device(t) => tests.push((i, t, true)),
            Tested::SingleHost(r, ci) => {
                line.divided_by = Some(if raw.contains(&line.key) {
                    Control::Raw
                } else {
                    bs.used
                });
                line.verdict = Some(Verdict::Ambiguous);
                line.ratio = Some(r);
                line.ratio_ci = Some(ci);
                line.flags.push(Flag::SingleExecution);
            }
            Tested::NoSamples => line.no_samples(),
        }
    }
    let mut vars: BTreeMap<(rundir::Mode, bool, i32), Vec<(f64, f64)>> = BTreeMap::new();
    let mut ops: BTreeMap<(rundir::Mode, bool, i32), BTreeSet<String>> = BTreeMap::new();
    for (i, logs) in &multi {
        let kind = kind_of(&lines[*i], raw);
        vars.entry(kind).or_default().push(logs.variance());
        ops.entry(kind)
            .or_default()
            .insert(lines[*i].key.op.to_string());
    }
    // the cases of one op crate ran in the same processes, so their variances are one
    // piece of evidence, not one a case: a kind's prior counts at most its crates' df
    let priors: BTreeMap<_, Option<Prior>> = vars
        .into_iter()
        .map(|(k, v)| {
            let dfs: Vec<f64> = v.iter().map(|x| x.1).collect();
            let cap = ops[&k].len() as f64 * stats::median(&dfs);
            let prior = Prior::pooled(&v).map(|p| Prior {
                df: p.df.min(cap),
                ..p
            });
            (k, prior)
        })
        .collect();
    for (i, logs) in multi {
        let line = &lines[i];
        let d = case_drift(line, raw, drift, raw_drift);
        let prior = priors.get(&kind_of(line, raw)).copied().flatten();
        tests.push((i, stats::decide::moderated_test(&logs, prior, d), false));
    }
    tests
}

/// A case's drift between boots: the device's, the host's, or for a host-timed case
/// compared raw, the host's with the host's change of speed between the runs.
fn case_drift(line: &Line, raw: &BTreeSet<CaseKey>, drift: (Drift, Drift), raw_drift: f64) -> f64 {
    if line.key.mode.is_device() {
        drift.0.case
    } else if raw.contains(&line.key) {
        raw_drift
    } else {
        drift.1.case
    }
}
