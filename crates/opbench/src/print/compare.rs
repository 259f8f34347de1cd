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

/// Op families shown on the default screen: those judged slower, faster or same, then the
/// ambiguous ones that moved most, up to this many in all.
const OP_FAMILIES_SHOWN: usize = 6;

/// The families table: the global families, then each op's (on the default screen the
/// few that matter, [`OP_FAMILIES_SHOWN`]; `all`: every one).
pub(super) fn families_md(cmp: &Comparison, all: bool) {
    say!(
        "## Families: the shared shift of their cases
"
    );
    say!(
        "A family: all *host-bound* cases (host dispatch, at equal host speed), all *device* \
         cases (GPU-event time), each op in each mode; its shift is the geometric mean of its \
         cases' ratios.\n"
    );
    println!("| family | cases | shift [CI] | can call | verdict |");
    println!("|---|---|---|---|---|");
    let (global, mut ops): (Vec<_>, Vec<_>) =
        cmp.families.iter().partition(|f| f.scope.is_global());
    let rank = |f: &&analysis::compare::FamilyLine| match f.verdict {
        Verdict::Slower => 0,
        Verdict::Faster => 1,
        Verdict::Same => 3,
        Verdict::Ambiguous => 2,
    };
    ops.sort_by(|a, b| {
        rank(a).cmp(&rank(b)).then(
            b.shift
                .ratio
                .ln()
                .abs()
                .total_cmp(&a.shift.ratio.ln().abs()),
        )
    });
    let shown = if all {
        ops.len()
    } else {
        OP_FAMILIES_SHOWN.min(ops.len())
    };
    for f in global.iter().chain(ops.iter().take(shown)) {
        let (lo, hi) = interval_pct(f.ci);
        println!(
            "| {} | {} | {} [{lo}, {hi}] | ±{:.1}% | {} |",
            f.scope,
            f.shift.cases,
            pct(f.shift.ratio),
            100.0 * f.mde,
            verdict_word(Some(f.verdict), Some(f.mde), f.verdict == Verdict::Slower),
        );
    }
    if shown < ops.len() {
        say!(
            "\n{} more op families, none slower (`--all` lists them).",
            ops.len() - shown
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
                    analysis::compare::TermSource::Stored => "measured, stored in the runs",
                    analysis::compare::TermSource::Fallback => "the kind's figure; none stored",
                }
            )
        })
        .collect();
    if !terms.is_empty() {
        say!(
            "\nEach interval carries the process term (sd a process): {}. Families of fewer \
             than {} cases are not judged. `can call`: the smallest shift it could call (mde, \
             80% power); `same`: inside ±{:.1}%; `ambiguous (±X%)`: neither `same` nor a \
             discovery, X its mde.",
            terms.join(", "),
            analysis::compare::MIN_FAMILY,
            100.0 * cmp.settings.family_threshold,
        );
    }
    println!();
}

/// An interval's ends as percentages, with as many decimals as make them differ (up to 4):
/// no printed interval reads as zero width unless it is.
fn interval_pct((lo, hi): (f64, f64)) -> (String, String) {
    let at = |d: usize| {
        (
            format!("{:+.*}%", d, 100.0 * (lo - 1.0)),
            format!("{:+.*}%", d, 100.0 * (hi - 1.0)),
        )
    };
    (1..4)
        .map(at)
        .find(|(a, b)| a != b)
        .unwrap_or_else(|| at(4))
}

/// A ratio and its interval's ends, with as many digits as make the ends differ (3 to 6;
/// three significant digits below 0.1): no printed interval reads as zero width unless it is.
fn ratio_ci(r: f64, (lo, hi): (f64, f64)) -> String {
    let f = |x: f64, d: usize| {
        if x.abs() >= 0.1 || x == 0.0 {
            format!("{x:.d$}")
        } else {
            format!("{x:.*e}", d - 1)
        }
    };
    let d = (3..6).find(|&d| f(lo, d) != f(hi, d)).unwrap_or(6);
    format!("{} [{}, {}]", f(r, d), f(lo, d), f(hi, d))
}

/// A time in µs from ns, to about four significant digits (a graph replay's sub-µs floor
/// stays readable).
fn us(ns: Option<f64>) -> String {
    ns.map_or(String::new(), |ns| {
        let x = ns / 1e3;
        match x.abs() {
            a if a >= 100.0 => format!("{x:.1}"),
            a if a >= 1.0 => format!("{x:.2}"),
            _ => format!("{x:.4}"),
        }
    })
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

/// The change a stored comparison should resolve; where it cannot, its first line says so
/// and how to pair the builds instead.
const RESOLVE: f64 = 0.05;

/// The smallest change the comparison could call: the finest of its global families'
/// mdes and its cases' median mde (`None`: nothing was judged).
fn resolution(cmp: &Comparison) -> Option<(f64, &'static str)> {
    let mdes: Vec<f64> = cmp.lines.iter().filter_map(|l| l.mde).collect();
    let case = (!mdes.is_empty()).then(|| (stats::median(&mdes), "a case (median)"));
    cmp.families
        .iter()
        .filter(|f| f.scope.is_global())
        .map(|f| (f.mde, "a global family"))
        .chain(case)
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

/// The answer first: the verdict line with its exit code and why, in words that match the
/// verdict ([`Comparison::verdict`]: ambiguous never reads as a pass), then what the
/// comparison could resolve, and every change beyond 2× whatever the verdicts. Every line
/// at most 160 characters.
pub(super) fn verdict_md(cmp: &Comparison, base: &Run) {
    let reasons = cmp.reasons();
    let none = cmp.no_speed_verdict();
    let can = resolution(cmp);
    let unresolved = can.filter(|(m, _)| *m > RESOLVE).map(|(m, what)| {
        format!(
            " It cannot resolve ±{:.0}%: the finest it could call is ±{:.1}% ({what}); pair \
             the builds instead: `scripts/bench --against OLD_PYTHON` (`opbench ab`).",
            100.0 * RESOLVE,
            100.0 * m
        )
    });
    if !reasons.is_empty() {
        say!("**Verdict: REGRESSION (exit 1)**, because:\n");
        for r in &reasons {
            say!("- {r}");
        }
        if let Some(why) = &none {
            say!("\nNo speed verdict otherwise: {why}.");
        }
    } else if let Some(why) = &none {
        say!("**Verdict: no speed verdict: {why} (exit 3).**");
    } else {
        let (m, what) = can.unwrap_or((f64::NAN, "-"));
        let limits = format!(
            "No case slower beyond {:.1}% and no family beyond {:.1}%; the smallest change it \
             could call: ±{:.1}% ({what}).{}",
            100.0 * cmp.settings.threshold,
            100.0 * cmp.settings.family_threshold,
            100.0 * m,
            unresolved.unwrap_or_default()
        );
        match cmp.verdict() {
            Some(Verdict::Ambiguous) => {
                let open: Vec<String> = cmp
                    .families
                    .iter()
                    .filter(|f| f.scope.is_global() && f.verdict == Verdict::Ambiguous)
                    .map(|f| format!("{} ±{:.1}%", f.scope, 100.0 * f.mde))
                    .collect();
                let which = if open.is_empty() {
                    "its cases".to_string()
                } else {
                    open.join(", ")
                };
                say!(
                    "**Verdict: ambiguous (±{:.1}%), not a pass (exit 0: nothing slower was found, and \
                     nothing shown the same: {which}).** {limits}",
                    100.0 * m
                )
            }
            Some(Verdict::Faster) => {
                say!("**Verdict: faster, no regression found (exit 0).** {limits}")
            }
            _ => say!("**Verdict: same, no regression found (exit 0).** {limits}"),
        }
    }
    let single = cmp.flagged(|f| *f == Flag::SingleExecution);
    if none.is_none() && single > 0 {
        say!(
            "\nNo speed verdict for {single} host-timed cases: one execution on a side \
             (OPBENCH_EXECUTIONS=3 or more gives them one)."
        );
    }
    moved_md(&cmp.beyond(2.0, base));
    println!();
}

/// The cases that moved beyond 2×, a line each, the largest change first, and how many
/// from a base below the run's no-op call were left out.
fn moved_md(moved: &analysis::compare::Moved) {
    const NAMED: usize = 5;
    let n = moved.cases.len();
    let small = match moved.too_small {
        0 => String::new(),
        k => format!(
            "; {k} more from a base below the base run's no-op call (the floor's `view`), left out as \
             timing nothing"
        ),
    };
    if n == 0 && moved.too_small == 0 {
        return;
    }
    say!(
        "\n{n} case{} moved beyond 2× (raw medians, whatever the verdicts; the largest change first{small}){}",
        if n == 1 { "" } else { "s" },
        if n > 0 { ":" } else { "." }
    );
    for (l, r) in moved.cases.iter().take(NAMED) {
        say!("- {} {} → {} µs ({r:.2}×)", l.key, us(l.base), us(l.cand));
    }
    if n > NAMED {
        say!("- … {} more (`--format csv` lists every case)", n - NAMED);
    }
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

/// compare's Markdown screen: the verdict first, then the families and the cases that
/// matter, then how it was compared; `all`: every family and case.
pub fn comparison_md(base: &Run, cand: &Run, cmp: &Comparison, all: bool) {
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
    say!(
        "# opbench compare\n\nbase: `{}` ({})  \ncandidate: `{}` ({})\n",
        base.dir.display(),
        design(base),
        cand.dir.display(),
        design(cand)
    );
    verdict_md(cmp, base);
    for (side, run) in [("base", base), ("candidate", cand)] {
        if let Some(line) = slow_execution(run) {
            say!("Host state: the {side}'s {line}.\n");
        }
    }
    if cmp.withheld.is_none() {
        families_md(cmp, all);
    }
    if cmp.lines.iter().all(|l| l.ratio.is_none_or(|r| r == 1.0)) && cmp.withheld.is_some() {
        // one run on both sides: every ratio is 1, and a table of them says nothing
        say!(
            "{} cases, each the same numbers on both sides.\n",
            cmp.lines.len()
        );
        setting_md(cmp);
        return;
    }
    let judged = cmp.withheld.is_none();
    let verdicts = if judged {
        format!(
            "{} slower, {} faster, {} same (within ±{}%), {} ambiguous",
            cmp.count(Some(Verdict::Slower)),
            cmp.count(Some(Verdict::Faster)),
            cmp.count(Some(Verdict::Same)),
            100.0 * s.threshold,
            cmp.count(Some(Verdict::Ambiguous)),
        )
    } else {
        format!(
            "{} compared, speed verdicts withheld",
            cmp.count(Some(Verdict::Ambiguous))
        )
    };
    say!(
        "## Cases\n\n{} cases: {verdicts}, {} not compared (not ok in both runs); flagged: {} \
         kernel-changed, {} status-changed, {} new, {} gone (false-discovery rate {})\n",
        cmp.lines.len(),
        cmp.count(None),
        cmp.flagged(|f| matches!(f, Flag::KernelChanged(..))),
        cmp.flagged(|f| matches!(f, Flag::StatusChanged(..))),
        cmp.flagged(|f| *f == Flag::New),
        cmp.flagged(|f| *f == Flag::Gone),
        s.alpha
    );
    let listed = cases_table(cmp, all);
    if listed.iter().any(|l| l.flags.contains(&Flag::UpperBound)) {
        say!(
            "`upper-bound`: on a side the host's enqueue outlasted the lead the device clock \
             needs (`uncovered_chunks` > 0): its device time is only an upper bound and is not \
             compared."
        );
    }
    println!();
    setting_md(cmp);
}

/// Rows of the cases' table on the default screen (`--all`: every case).
const CASES_SHOWN: usize = 20;

/// A case's row of the cases' table.
fn case_row(l: &Line) -> String {
    let ratio = match (l.ratio, l.ratio_ci) {
        (Some(r), Some(ci)) => ratio_ci(r, ci),
        (Some(r), None) => format!("{r:.3}"),
        _ => String::new(),
    };
    let of = match l.divided_by {
        Some(Control::Host) => "÷ host control",
        Some(Control::Torch) => "÷ torch control",
        Some(Control::Raw) => "raw",
        None if l.ratio.is_some() => "raw",
        None => "",
    };
    format!(
        "| {} | {} | {} | {ratio} | {of} | {} | {} | {} |",
        l.key,
        us(l.base),
        us(l.cand),
        l.mde
            .filter(|_| !l.flags.contains(&Flag::Withheld))
            .map_or(String::new(), |m| format!("±{:.1}%", 100.0 * m)),
        if l.flags.contains(&Flag::Withheld) {
            "none (withheld)".to_string()
        } else if l.mde.is_none() && l.flags.contains(&Flag::SingleExecution) {
            "none (one execution a side)".to_string()
        } else {
            verdict_word(l.verdict, l.mde, l.fails)
        },
        flags(l)
    )
}

/// The cases' table: those that failed, moved or carry a flag, then the ambiguous ones
/// that moved most; on the default screen the first [`CASES_SHOWN`] rows. Returns the
/// rows shown, for the notes under it.
fn cases_table(cmp: &Comparison, all: bool) -> Vec<&Line> {
    let moved = |l: &&Line| matches!(l.verdict, Some(Verdict::Slower | Verdict::Faster));
    let changed = |l: &&Line| {
        l.flags
            .iter()
            .any(|f| matches!(f, Flag::KernelChanged(..) | Flag::StatusChanged(..)))
    };
    let flagged: Vec<&Line> = sorted(cmp)
        .into_iter()
        .filter(|l| moved(l) || l.fails || !l.flags.is_empty())
        .collect();
    let mut ambiguous: Vec<&Line> = cmp
        .lines
        .iter()
        .filter(|l| l.verdict == Some(Verdict::Ambiguous) && l.flags.is_empty() && !l.fails)
        .collect();
    ambiguous.sort_by(|a, b| {
        let m = |l: &Line| -(l.ratio.unwrap_or(1.0).ln().abs());
        m(a).total_cmp(&m(b))
    });
    let rows: Vec<&Line> = if all {
        flagged.iter().chain(&ambiguous).copied().collect()
    } else {
        // what fails, moved or changed kernel or status first; then the ambiguous that
        // moved most; then the other flagged (one execution a side, new, gone)
        let (first, rest): (Vec<&Line>, Vec<&Line>) = flagged
            .iter()
            .partition(|l| moved(l) || l.fails || changed(l));
        let mut rows: Vec<&Line> = first.into_iter().take(CASES_SHOWN - 5).collect();
        rows.extend(ambiguous.iter().take(5));
        rows.extend(rest.into_iter().take(CASES_SHOWN - rows.len()));
        rows.extend(ambiguous.iter().skip(5).take(CASES_SHOWN - rows.len()));
        rows
    };
    if rows.is_empty() {
        say!("No case moved, failed or carries a flag.");
        return rows;
    }
    println!(
        "| case | base µs (raw median) | cand µs (raw median) | ratio [CI] | ratio of | can call \
         | verdict | flags |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for l in &rows {
        println!("{}", case_row(l));
    }
    let total = flagged.len() + ambiguous.len();
    say!(
        "\nListed: {} of the {total} cases that failed, moved, carry a flag or are ambiguous (those \
         first, then the ambiguous that moved most){}. `ratio of`: `÷ host control`, the ratio \
         at equal host speed (each time over its execution's host control); `raw`, of the \
         times themselves. `can call`: the smallest change it could call (mde, 80% power).",
        rows.len(),
        if rows.len() < total {
            "; `--all` lists every one, `--format csv` every case"
        } else {
            ""
        }
    );
    rows
}

/// How the comparison was made: environment, executions, control, drift.
pub(super) fn setting_md(cmp: &Comparison) {
    say!("## How it was compared\n");
    if cmp.env_diff.is_empty() {
        say!("- Environment: no differences in the fields that change kernels.");
    } else {
        say!("- Environment differences: {}.", cmp.env_diff.join("; "));
    }
    let (nb, nc) = cmp.executions;
    if cmp.paired {
        say!(
            "- The two sides of one paired run (opbench ab): each side's rounds are its processes, \
             matched round by round (both sides of a round shared its host), times compared raw."
        );
    }
    say!(
        "- Executions (processes): base {nb}, candidate {nc}. Host-bound, host-timed cases divided by: {}.",
        match cmp.control {
            Control::Host => "the build-independent host control (a build's dearer dispatch shows)",
            Control::Torch =>
                "the dispatch floor's torch control (a build's dearer dispatch is divided away; see the dispatch family)",
            Control::Raw => "nothing (raw)",
        }
    );
    let (d, h) = cmp.drift;
    say!(
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
        say!(
            "- With one execution on a side the noise between processes is unknown: host-timed cases get no \
             speed verdict (flag `single-execution`), and a device-timed case is slower or faster only beyond \
             {:.0}%, what two processes' device terms alone can make. Run both builds with \
             OPBENCH_EXECUTIONS=3 or more.",
            100.0 * cmp.single_floor()
        );
    }
}
