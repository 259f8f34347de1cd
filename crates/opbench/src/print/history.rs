//! history's printers.

use super::*;

/// `opbench history` as markdown: each series' points, then every change.
pub fn history_md(h: &History) {
    println!("# opbench history\n");
    println!("{}\n", verdict(h));
    for (i, s) in h.series.iter().enumerate() {
        let changes = h.changes.iter().filter(|c| c.series == i).count();
        println!(
            "- series {i}: {} — {} builds, {} runs, {} cases, {changes} changes",
            s.label(),
            s.points.len(),
            s.points.iter().map(|p| p.runs.len()).sum::<usize>(),
            s.cases.len()
        );
        for (j, p) in s.points.iter().enumerate() {
            println!("  - {j}: {} — {}", p.build.label(), p.names());
        }
    }
    println!("\n{}", analysis::history_report::changes_md(h));
    // what it could see: the newest build's own test needs two builds before it; a change
    // inside the history needs `min_size` builds on each side
    let cp = &h.settings.cp;
    let short: Vec<String> = h
        .series
        .iter()
        .enumerate()
        .filter(|(_, s)| s.points.len() < 3)
        .map(|(i, s)| match s.points.len() {
            1 => format!("series {i} (1 build)"),
            n => format!("series {i} ({n} builds)"),
        })
        .collect();
    println!(
        "What it can detect: a step of at least {:.0}% with p < {} (t-test over builds), at the \
         newest build once two builds precede it, inside the history with {} builds on each side.",
        100.0 * cp.min_magnitude,
        cp.max_p,
        cp.min_size
    );
    if !short.is_empty() {
        println!(
            "{} cannot show a change yet: run each build into results/ (scripts/bench, \
             `opbench publish`) until a series has 3 builds.",
            short.join(", ")
        );
    }
    let n = h.newest_regressions();
    if n > 0 {
        println!("{n} regressions begin at the newest build of their series (exit code 1).");
    }
}

/// The first line: the exit code and why, what a change point is, and what the history
/// could not see.
fn verdict(h: &History) -> String {
    let n = h.newest_regressions();
    let short = h.series.iter().filter(|s| s.points.len() < 3).count();
    let head = if n > 0 {
        let mut cases: Vec<String> = h
            .changes
            .iter()
            .filter(|c| c.newest && c.is_regression())
            .map(|c| c.key.to_string())
            .collect();
        cases.truncate(3);
        format!(
            "**Verdict: {n} regressions begin at the newest build — exit 1**, e.g. {}.",
            cases.join(", ")
        )
    } else {
        format!(
            "**Verdict: no regression at the newest build — exit 0**; {} change points in all \
             (a case whose time steps by ≥ {:.0}% between builds and stays there).",
            h.changes.len(),
            100.0 * h.settings.cp.min_magnitude
        )
    };
    if short > 0 {
        format!(
            "{head} {short} of {} series have under 3 builds and cannot show a change yet \
             (see the end).",
            h.series.len()
        )
    } else {
        head
    }
}

/// `opbench history --format csv`: one line per change.
pub fn history_csv(h: &History) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(std::io::stdout());
    let mut header: Vec<&str> = vec!["series"];
    header.extend(CaseKey::COLUMNS);
    header.extend([
        "point",
        "runs",
        "before_ns",
        "after_ns",
        "magnitude",
        "p_value",
        "change",
        "build_change",
        "newest",
        "regression",
    ]);
    w.write_record(&header)?;
    for c in &h.changes {
        let s = &h.series[c.series];
        let mut rec = vec![s.label()];
        rec.extend(c.key.fields());
        let (p, what) = match &c.kind {
            ChangeKind::Step { p, .. } => (
                format!("{p:.3e}"),
                c.kernel.as_ref().map_or("step".to_string(), |(a, b)| {
                    format!("step; kernel {a} -> {b}")
                }),
            ),
            ChangeKind::Status(a, b) => (String::new(), format!("status {a} -> {b}")),
        };
        rec.extend([
            c.point.to_string(),
            s.points[c.point].names(),
            num(c.before_ns, 1),
            num(c.after_ns, 1),
            num(c.magnitude(), 4),
            p,
            what,
            c.build_change.join("; "),
            c.newest.to_string(),
            c.is_regression().to_string(),
        ]);
        w.write_record(&rec)?;
    }
    w.flush()?;
    Ok(())
}
