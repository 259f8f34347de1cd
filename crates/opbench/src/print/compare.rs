//! compare's printers: the verdict and its reasons, the families, the cases, how it was
//! compared; and its CSVs.

use super::*;

/// Lines in report order: regressions first, then by verdict, flagged before unflagged.
pub(super) fn sorted(cmp: &Comparison) -> Vec<&Line> {
    // what moved first: slower, faster, ambiguous, same, then the lines without a verdict
    let rank = |v: Option<Verdict>| match v {
        Some(Verdict::Slower) => 0,
        Some(Verdict::Faster) => 1,
        Some(Verdict::Ambiguous) => 2,
        Some(Verdict::Same) => 3,
        None => 4,
    };
    let mut out: Vec<&Line> = cmp.lines.iter().collect();
    out.sort_by_key(|l| (!l.fails, rank(l.verdict), l.flags.is_empty()));
    out
}

pub(super) fn flags(l: &Line) -> String {
    l.flags
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn comparison_csv(cmp: &Comparison) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(std::io::stdout());
    let mut header: Vec<&str> = CaseKey::COLUMNS.to_vec();
    header.extend([
        "base_median_ns",
        "cand_median_ns",
        "ratio",
        "ratio_ci_low",
        "ratio_ci_high",
        "p_value",
        "verdict",
        "flags",
        "mde",
        "divided_by",
    ]);
    w.write_record(&header)?;
    for l in sorted(cmp) {
        let mut rec: Vec<String> = l.key.fields();
        rec.extend([
            num(l.base, 1),
            num(l.cand, 1),
            num(l.ratio, 4),
            num(l.ratio_ci.map(|c| c.0), 4),
            num(l.ratio_ci.map(|c| c.1), 4),
            l.p.map_or(String::new(), |p| format!("{p:.3e}")),
            analysis::compare::word(l.verdict).into(),
            flags(l),
            num(l.mde, 4),
            l.divided_by.map_or(String::new(), |c| c.as_str().into()),
        ]);
        w.write_record(&rec)?;
    }
    w.flush()?;
    Ok(())
}

/// The families of a comparison as CSV: scope, cases, ratio, interval, mde, p, verdict.
pub fn families_csv(cmp: &Comparison) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(std::io::stdout());
    w.write_record([
        "family",
        "global",
        "cases",
        "ratio",
        "ratio_ci_low",
        "ratio_ci_high",
        "mde",
        "p_value",
        "verdict",
    ])?;
    for f in &cmp.families {
        w.write_record([
            f.scope.to_string(),
            f.scope.is_global().to_string(),
            f.shift.cases.to_string(),
            format!("{:.4}", f.shift.ratio),
            format!("{:.4}", f.ci.0),
            format!("{:.4}", f.ci.1),
            format!("{:.4}", f.mde),
            format!("{:.3e}", f.shift.p),
            f.verdict.as_str().into(),
        ])?;
    }
    w.flush()?;
    Ok(())
}

/// The families table: the global families, then each op's.
pub(super) fn families_md(cmp: &Comparison) {
    println!("## Families: the shared shift of their cases\n");
    println!(
        "A family is cases judged together: all *host-bound* cases (their time is the host's \
         dispatch and launch, compared at equal host speed), all *device* cases (GPU-event \
         time), and each op in each mode. Its shift is the geometric mean of its cases' ratios; \
         a few percent in every case shows here before it shows in any one.\n"
    );
    println!("| family | cases | shift [CI] | mde | verdict |");
    println!("|---|---|---|---|---|");
    let mut fams: Vec<_> = cmp.families.iter().collect();
    fams.sort_by_key(|f| !f.scope.is_global());
    for f in fams {
        println!(
            "| {} | {} | {} [{}, {}] | ±{:.1}% | {} |",
            f.scope,
            f.shift.cases,
            pct(f.shift.ratio),
            pct(f.ci.0),
            pct(f.ci.1),
            100.0 * f.mde,
            verdict_word(Some(f.verdict), Some(f.mde), f.verdict == Verdict::Slower),
        );
    }
    let terms: Vec<String> = cmp
        .process_terms
        .iter()
        .filter(|t| cmp.families.iter().any(|f| family_kind(f) == Some(t.kind)))
        .map(|t| {
            format!(
                "{} ±{:.2}% ({})",
                t.kind.as_str(),
                100.0 * t.sd,
                match t.source {
                    analysis::compare::TermSource::Stored =>
                        "measured by opbench ab, stored in the runs",
                    analysis::compare::TermSource::Fallback =>
                        "this project's figure for the kind; the runs stored none",
                }
            )
        })
        .collect();
    if !terms.is_empty() {
        println!(
            "\nEach interval carries the process term (what one process shares among all its \
             cases of a crate, sd a process), pooled with the family's own executions: {}. \
             Families of fewer than {} cases are not judged.",
            terms.join(", "),
            analysis::compare::MIN_FAMILY
        );
    }
    println!(
        "\n`mde`: the smallest change the noise lets this comparison see (80% power). `same`: the \
         interval lies inside ±{:.1}% (a family) or ±{:.1}% (a case). `ambiguous (±X%)`: neither \
         `same` nor a discovery; a change smaller than X% could not be told from none.",
        100.0 * cmp.settings.family_threshold,
        100.0 * cmp.settings.threshold
    );
    println!();
}

/// A ratio to three decimals, or to three significant digits below 0.1 (a near-zero time's
/// interval would read as zero width).
fn ratio(r: f64) -> String {
    if r.abs() >= 0.1 || r == 0.0 {
        format!("{r:.3}")
    } else {
        format!("{r:.2e}")
    }
}

/// The kind of timing of a family's cases (`None` for the dispatch family).
fn family_kind(f: &analysis::compare::FamilyLine) -> Option<rundir::noise::TermKind> {
    use analysis::compare::FamilyScope;
    use rundir::noise::TermKind;
    match &f.scope {
        FamilyScope::AllHostBound => Some(TermKind::Host),
        FamilyScope::AllDevice => Some(TermKind::Device),
        FamilyScope::Dispatch => None,
        FamilyScope::Op { mode, .. } => Some(TermKind::of(*mode)),
    }
}

/// A verdict in words: `ambiguous (±X%)` with its resolution, ✗ where it fails.
pub(super) fn verdict_word(v: Option<Verdict>, mde: Option<f64>, fails: bool) -> String {
    let word = match (v, mde) {
        (Some(Verdict::Ambiguous), Some(m)) => format!("ambiguous (±{:.1}%)", 100.0 * m),
        _ => analysis::compare::word(v).to_string(),
    };
    if fails { format!("{word} ✗") } else { word }
}

/// The answer first: the exit code and why, or what the comparison could resolve.
pub(super) fn verdict_md(cmp: &Comparison) {
    if let Some(why) = &cmp.withheld {
        println!("**Speed verdicts withheld**: {why}.\n");
    }
    let reasons = cmp.reasons();
    if !reasons.is_empty() {
        println!("**Verdict: REGRESSION (exit 1)**, because:\n");
        for r in &reasons {
            println!("- {r}");
        }
        println!();
        return;
    }
    let mdes: Vec<f64> = cmp.lines.iter().filter_map(|l| l.mde).collect();
    let resolves = if mdes.is_empty() {
        String::new()
    } else {
        format!(
            " This comparison resolves a case to ±{:.1}% (median mde).",
            100.0 * stats::median(&mdes)
        )
    };
    println!(
        "**Verdict: no regression found (exit 0).** No case slower beyond {:.1}% and no family \
         beyond {:.1}%.{resolves}",
        100.0 * cmp.settings.threshold,
        100.0 * cmp.settings.family_threshold
    );
    let (nb, nc) = cmp.executions;
    let n = nb.min(nc).max(1);
    // an mde falls with √executions: how many a side the median case needs for ± threshold
    let needed = (!mdes.is_empty()).then(|| {
        let m = stats::median(&mdes) / cmp.settings.threshold;
        (n as f64 * m * m).ceil() as usize
    });
    if let Some(k) = needed.filter(|&k| k > n) {
        println!(
            "About {k} executions a side (OPBENCH_EXECUTIONS; {nb} and {nc} here) would \
             resolve ±{:.0}%; or `opbench ab` (scripts/bench --against) pairs the two builds \
             sample by sample, which the host's state between processes does not move.",
            100.0 * cmp.settings.threshold
        );
    }
    println!();
}

/// An execution of `run` that ran its cases slow throughout: over 1.2× its fastest
/// execution's time per call (the median over at least 3 cases of a timer at a batch), as
/// `opbench state` reads it; the slowest such, one line.
pub(super) fn slow_execution(run: &Run) -> Option<String> {
    const SLOW: f64 = 1.2;
    let levels = analysis::state::levels(run, Mode::Pipelined).ok()?;
    let ((timer, batch, e), level) = levels
        .into_iter()
        .filter(|(_, l)| l.cases >= 3 && l.per_call > SLOW)
        .max_by(|a, b| a.1.per_call.total_cmp(&b.1.per_call))?;
    Some(format!(
        "execution {e} ran {:.2}× its fastest execution's time per call ({}, B = {batch}, {} cases; `opbench state {}`)",
        level.per_call,
        timer.as_str(),
        level.cases,
        run.dir.display()
    ))
}

pub fn comparison_md(base: &Run, cand: &Run, cmp: &Comparison) {
    let s = cmp.settings;
    // which design made each side: a paired run's side (opbench ab) or separate executions
    let design = |r: &Run| match r
        .env
        .as_ref()
        .and_then(|e| e.settings.get("design"))
        .map(String::as_str)
    {
        Some("paired") => "one side of a paired run (opbench ab)",
        _ => "separate executions",
    };
    println!(
        "# opbench compare\n\nbase: `{}` ({})  \ncandidate: `{}` ({})\n",
        base.dir.display(),
        design(base),
        cand.dir.display(),
        design(cand)
    );
    verdict_md(cmp);
    for (side, run) in [("base", base), ("candidate", cand)] {
        if let Some(line) = slow_execution(run) {
            println!("Host state: the {side}'s {line}.\n");
        }
    }
    families_md(cmp);
    println!(
        "## Cases\n\n{} cases: {} slower, {} faster, {} same (within ±{}%), {} ambiguous, {} not compared \
         (not ok in both runs); flagged: {} kernel-changed, {} status-changed, {} new, {} gone \
         (false-discovery rate {})\n",
        cmp.lines.len(),
        cmp.count(Some(Verdict::Slower)),
        cmp.count(Some(Verdict::Faster)),
        cmp.count(Some(Verdict::Same)),
        100.0 * s.threshold,
        cmp.count(Some(Verdict::Ambiguous)),
        cmp.count(None),
        cmp.flagged(|f| matches!(f, Flag::KernelChanged(..))),
        cmp.flagged(|f| matches!(f, Flag::StatusChanged(..))),
        cmp.flagged(|f| *f == Flag::New),
        cmp.flagged(|f| *f == Flag::Gone),
        s.alpha
    );
    let listed = cases_table(cmp);
    if listed.iter().any(|l| l.flags.contains(&Flag::UpperBound)) {
        println!(
            "`upper-bound`: on a side the host's enqueue outlasted the lead the device clock \
             needs (`uncovered_chunks` > 0): its device time is only an upper bound and is not \
             compared."
        );
    }
    println!();
    setting_md(cmp);
}

/// The cases' table: those that moved, failed or carry a flag, then the ambiguous ones
/// that moved most; returns the first kind, for the notes under it.
fn cases_table(cmp: &Comparison) -> Vec<&Line> {
    let moved = |l: &&Line| matches!(l.verdict, Some(Verdict::Slower | Verdict::Faster));
    println!("| case | base µs | cand µs | ratio [CI] | mde | verdict | flags |");
    println!("|---|---|---|---|---|---|---|");
    let listed: Vec<&Line> = sorted(cmp)
        .into_iter()
        .filter(|l| moved(l) || l.fails || !l.flags.is_empty())
        .collect();
    // the ambiguous cases that moved most, after them
    let mut ambiguous: Vec<&Line> = cmp
        .lines
        .iter()
        .filter(|l| l.verdict == Some(Verdict::Ambiguous) && l.flags.is_empty() && !l.fails)
        .collect();
    ambiguous.sort_by(|a, b| {
        let m = |l: &Line| -(l.ratio.unwrap_or(1.0).ln().abs());
        m(a).total_cmp(&m(b))
    });
    const AMBIGUOUS_SHOWN: usize = 15;
    for l in listed
        .iter()
        .copied()
        .chain(ambiguous.iter().copied().take(AMBIGUOUS_SHOWN))
    {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            l.key,
            num(l.base.map(|x| x / 1e3), 2),
            num(l.cand.map(|x| x / 1e3), 2),
            match (l.ratio, l.ratio_ci) {
                (Some(r), Some((lo, hi))) => format!("{} [{}, {}]", ratio(r), ratio(lo), ratio(hi)),
                (Some(r), None) => ratio(r),
                _ => String::new(),
            },
            l.mde
                .map_or(String::new(), |m| format!("±{:.1}%", 100.0 * m)),
            if l.mde.is_none() && l.flags.contains(&Flag::SingleExecution) {
                "ambiguous (one execution a side: no interval between processes)".to_string()
            } else {
                verdict_word(l.verdict, l.mde, l.fails)
            },
            flags(l)
        );
    }
    println!(
        "\nListed: the cases that moved, failed or carry a flag, then the {} of {} ambiguous cases \
         that moved most; `--format csv` has every case.",
        ambiguous.len().min(AMBIGUOUS_SHOWN),
        ambiguous.len()
    );
    listed
}

/// How the comparison was made: environment, executions, control, drift.
pub(super) fn setting_md(cmp: &Comparison) {
    println!("## How it was compared\n");
    if cmp.env_diff.is_empty() {
        println!("- Environment: no differences in the fields that change kernels.");
    } else {
        println!("- Environment differences: {}.", cmp.env_diff.join("; "));
    }
    let (nb, nc) = cmp.executions;
    if cmp.paired {
        println!(
            "- The two sides of one paired run (opbench ab): each side's rounds are its processes, \
             matched round by round (both sides of a round shared its host), times compared raw."
        );
    }
    println!(
        "- Executions (processes): base {nb}, candidate {nc}. Host-bound, host-timed cases divided by: {} \
         (the µs columns are raw medians).",
        match cmp.control {
            Control::Host => "the build-independent host control (a build's dearer dispatch shows)",
            Control::Torch =>
                "the dispatch floor's torch control (a build's dearer dispatch is divided away; see the dispatch family)",
            Control::Raw => "nothing (raw)",
        }
    );
    let (d, h) = cmp.drift;
    println!(
        "- Boots: {}; drift between boots added (SD of the log ratio, case / shared): device {:.1}% / {:.1}%, host {:.1}% / {:.1}%.",
        if cmp.same_boot {
            "one (same boot id, or started within 3 hours)"
        } else {
            "two"
        },
        100.0 * d.case,
        100.0 * d.shared,
        100.0 * h.case,
        100.0 * h.shared
    );
    if nb < 2 || nc < 2 {
        println!(
            "- With one execution on a side the noise between processes is unknown: host-timed cases get no \
             speed verdict (flag `single-execution`), and a device-timed case is slower or faster only beyond \
             {:.0}%, the spread GPU-event times showed between processes of one build. Run both builds with \
             OPBENCH_EXECUTIONS=3 or more.",
            100.0 * analysis::compare::DEVICE_PROCESS_SPREAD
        );
    }
}
