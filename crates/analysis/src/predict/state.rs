//! The host's state: a run's rows at one state of the host, and rows sampled in rounds read
//! pair by pair.

use super::*;

/// Which of a host-timed case's samples price it (docs/method.md, "The host's state").
///
/// A host whose speed switches between states (the H200 VM: whole processes, sometimes
/// whole rows, at 1.5–2× the fast state's step time) makes a row's median a mix of states
/// that differs from row to row; the fast state is the host at its undisturbed speed,
/// the same state for every row and for the measured step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostState {
    /// Each row's median, as the run publishes it.
    Typical,
    /// Each host-timed row (and the measured step) at the [`FAST_QUANTILE`] of its samples
    /// pooled over the run's executions.
    Fast,
}

/// The quantile of a case's pooled samples that [`HostState::Fast`] prices it at: low
/// enough to leave out the slow state where one execution of several was fast, high
/// enough that one sample's luck does not set it.
pub const FAST_QUANTILE: f64 = 0.1;

impl HostState {
    pub const ALL: [HostState; 2] = [HostState::Typical, HostState::Fast];
    /// The state printed beside this one.
    pub fn other(self) -> Self {
        match self {
            HostState::Typical => HostState::Fast,
            HostState::Fast => HostState::Typical,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Typical => "typical",
            HostState::Fast => "fast",
        }
    }
}

impl std::str::FromStr for HostState {
    type Err = rundir::UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        rundir::UnknownValue::find(s, &Self::ALL, Self::as_str)
    }
}

/// `run` with its rows priced in host state `state`: [`HostState::Typical`] is the run as
/// loaded; [`HostState::Fast`] prices every ok row timed by the host's clock (not GPU
/// events or graph replays) at the median of its clean samples (none flagged by
/// [`rundir::Sample::flags`]: no steal, no burst of switches, the host control around it
/// within [`rundir::HOST_SLOW`]× its median, no stalled stretch of its calls, no GPU
/// throttled below its case's usual clock; in a run of several executions, over all of them,
/// less an execution the case ran slow through: [`rundir::SampleFlag::HostLevel`]), where
/// its samples record their state and at least
/// three are clean; else at the [`FAST_QUANTILE`] of its samples pooled over executions.
/// The row's interval is dropped (it was the median's) and its note says which and how
/// many samples priced it. Rows without samples keep their median. In either state, a row
/// sampled in rounds with a base row ([`StepProfile::paired_sites`]) is then read against
/// it pair by pair ([`read_in_pairs`]). Errors: samples.csv unreadable in the fast state
/// (in the typical state such a run is returned as loaded).
pub fn at_host_state(run: &Run, state: HostState) -> Result<Run, AnalysisError> {
    let mut out = run.clone();
    let samples = match (state, run.samples()) {
        (_, Ok(s)) => s,
        // a run without readable samples has no pairs to read: as loaded
        (HostState::Typical, Err(_)) => return Ok(out),
        (HostState::Fast, Err(e)) => return Err(e.into()),
    };
    if state == HostState::Fast {
        for r in out
            .results
            .iter_mut()
            .filter(|r| r.is_ok() && !r.key.mode.is_device())
        {
            let of: &[rundir::Sample] = samples.get(&r.key).map_or(&[], Vec::as_slice);
            at_fast_state(r, of);
        }
    }
    read_in_pairs(&mut out, &samples, state);
    Ok(out)
}

/// `r` at the median of its clean samples `of`, else at their [`FAST_QUANTILE`].
fn at_fast_state(r: &mut ResultRow, of: &[rundir::Sample]) {
    let mut v: Vec<f64> = of.iter().map(|s| s.per_call_ns()).collect();
    if v.is_empty() {
        return;
    }
    let clean = clean_samples(of);
    let how = if clean.len() >= 3 {
        let clean: Vec<f64> = clean.iter().map(|s| s.per_call_ns()).collect();
        r.median_ns = Some(stats::median(&clean));
        format!(
            "fast state: the median of its {} clean samples of {}",
            clean.len(),
            v.len()
        )
    } else {
        v.sort_by(f64::total_cmp);
        r.median_ns = Some(stats::quantile_sorted(&v, FAST_QUANTILE));
        format!(
            "fast state: the {:.0}th percentile of its {} samples",
            100.0 * FAST_QUANTILE,
            v.len()
        )
    };
    append_note(r, &how);
    r.ci_low_ns = None;
    r.ci_high_ns = None;
}

/// The samples of `of` that carry no state flag (none where they record no state).
fn clean_samples(of: &[rundir::Sample]) -> Vec<&rundir::Sample> {
    rundir::flag_each(of)
        .map(|flags| {
            of.iter()
                .zip(flags)
                .filter(|(_, f)| !f)
                .map(|(s, _)| s)
                .collect()
        })
        .unwrap_or_default()
}

fn append_note(r: &mut ResultRow, how: &str) {
    r.note = Some(match r.note.take() {
        Some(n) => format!("{n}; {how}"),
        None => how.to_string(),
    });
}

/// The pairs of `a`'s and `b`'s samples taken in the same round: the i-th of each in an
/// execution that took as many of one as of the other (an execution that did not is left
/// out). With `clean_only`, the pairs where neither sample carries a state flag, where at
/// least three are.
fn round_pairs<'s>(
    a: &'s [rundir::Sample],
    b: &'s [rundir::Sample],
    clean_only: bool,
) -> Vec<(&'s rundir::Sample, &'s rundir::Sample)> {
    type Marked<'s> = std::collections::BTreeMap<u32, Vec<(&'s rundir::Sample, bool)>>;
    // each sample by execution, in order, with whether it is clean (none where no state)
    let marked = |of: &'s [rundir::Sample]| -> Marked<'s> {
        let flags = rundir::flag_each(of);
        let mut out = Marked::new();
        for (i, s) in of.iter().enumerate() {
            let clean = flags.as_ref().is_some_and(|f| !f[i]);
            out.entry(s.execution).or_default().push((s, clean));
        }
        out
    };
    let (ea, eb) = (marked(a), marked(b));
    let pairs: Vec<_> = ea
        .iter()
        .filter_map(|(e, xs)| Some((xs, eb.get(e)?)))
        .filter(|(xs, ys)| xs.len() == ys.len())
        .flat_map(|(xs, ys)| xs.iter().zip(ys))
        .collect();
    let clean = pairs.iter().filter(|((_, x), (_, y))| *x && *y).count();
    pairs
        .into_iter()
        .filter(|((_, x), (_, y))| !clean_only || clean < 3 || (*x && *y))
        .map(|((x, _), (y, _))| (*x, *y))
        .collect()
}

/// What [`read_in_pairs`] notes on a row it read against `base`.
fn read_against(base: &str) -> String {
    format!("read against {base}")
}

/// Whether [`read_in_pairs`] read `r` against `base` pair by pair.
pub fn was_read_against(r: &ResultRow, base: &str) -> bool {
    r.note
        .as_deref()
        .is_some_and(|n| n.contains(&format!("{} in ", read_against(base))))
}

/// Every ok row of `run` sampled in rounds with a base row ([`StepProfile::paired_sites`])
/// read against it pair by pair: its median becomes the base's (as priced in `state`) plus
/// the median of the rounds' differences, or times the median of their ratios — the two
/// rows' difference or ratio within each round, where one state held both, not between
/// two medians that may each come from a different state of the host. In the fast state
/// the pairs whose two samples are clean (all, where fewer than three are). A row whose
/// samples do not pair, or whose base runs longer than its [`shapes::PairedSite`] allows,
/// keeps its median.
pub fn read_in_pairs(
    run: &mut Run,
    samples: &std::collections::BTreeMap<CaseKey, Vec<rundir::Sample>>,
    state: HostState,
) {
    for profile in StepProfile::EVERY {
        for p in profile.paired_sites() {
            let keys: Vec<(CaseKey, CaseKey)> = run
                .ok_rows()
                .filter(|r| r.key.op == OpKind::Decode)
                .filter(|r| r.key.variant == profile.as_str() && r.key.site == p.site)
                .map(|r| {
                    let mut base = r.key.clone();
                    base.series.site = p.base.into();
                    (r.key.clone(), base)
                })
                .collect();
            for (key, base_key) in keys {
                let (Some(a), Some(b)) = (samples.get(&key), samples.get(&base_key)) else {
                    continue;
                };
                let Some(base) = run
                    .row(&base_key)
                    .filter(|r| r.is_ok())
                    .and_then(|r| r.median_ns)
                    .filter(|&t| p.base_at_most_ns.is_none_or(|most| t <= most))
                else {
                    continue;
                };
                let pairs = round_pairs(a, b, state == HostState::Fast);
                if pairs.len() < 3 {
                    continue;
                }
                let per = |(x, y): &(&rundir::Sample, &rundir::Sample)| match p.how {
                    Pairing::Difference => x.per_call_ns() - y.per_call_ns(),
                    Pairing::Ratio => x.per_call_ns() / y.per_call_ns().max(f64::MIN_POSITIVE),
                };
                let m = stats::median(&pairs.iter().map(per).collect::<Vec<_>>());
                let (median, how) = match p.how {
                    Pairing::Difference => (base + m, "plus the median of their differences"),
                    Pairing::Ratio => (base * m, "times the median of their ratios"),
                };
                if let Some(r) = run.results.iter_mut().find(|r| r.key == key) {
                    r.median_ns = Some(median);
                    r.ci_low_ns = None;
                    r.ci_high_ns = None;
                    append_note(
                        r,
                        &format!(
                            "{} in {} rounds that sampled both: its median {how}",
                            read_against(p.base),
                            pairs.len()
                        ),
                    );
                }
            }
        }
    }
}
