//! What a comparison leaves: `runs/<RUN>-base/` and `runs/<RUN>-cand/` (valid run
//! directories; every sample carries its pair), `runs/<RUN>-ab.csv` (one line per case and
//! per family) and `runs/<RUN>-compare.md` (the summary `opbench ab` prints).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rundir::{Env, ResultRow, RunWriter, Sample, Status};

use crate::protocol::{Prepared, Sampled};
use crate::state::{CaseRun, Outcome, Side};
use crate::verdict::{CaseLine, CaseVerdict, Verdicts, pct};

/// Where a comparison's files went.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub base: PathBuf,
    pub cand: PathBuf,
    pub csv: PathBuf,
    pub summary: PathBuf,
}

impl Written {
    /// Where a comparison `run` under `runs` (the `runs/` folder) lives: `<run>-base`,
    /// `-cand`, `-ab.csv`, `-compare.md`.
    pub fn at(runs: &Path, run: &str) -> Self {
        Written {
            base: runs.join(format!("{run}-base")),
            cand: runs.join(format!("{run}-cand")),
            csv: runs.join(format!("{run}-ab.csv")),
            summary: runs.join(format!("{run}-compare.md")),
        }
    }

    /// The verdicts of the comparison judged again (`opbench ab --judge`).
    pub fn judged_csv(runs: &Path, run: &str) -> PathBuf {
        runs.join(format!("{run}-judged-ab.csv"))
    }
}

/// A run id from the clock, in the run directory's format (`YYYYMMDDTHHMMSSZ`).
pub fn default_run_id() -> String {
    chrono::Utc::now()
        .format(rundir::layout::RUN_ID_FORMAT)
        .to_string()
}

/// Write the comparison under `runs` (the `runs/` folder) as `<run>-…`.
pub fn write(
    runs: &Path,
    run: &str,
    outcome: &Outcome,
    verdicts: &Verdicts,
    sides: [&str; 2],
) -> Result<Written, rundir::RunError> {
    let w = Written::at(runs, run);
    for (side, dir, other, what) in [
        (Side::Base, &w.base, &w.cand, sides[0]),
        (Side::Cand, &w.cand, &w.base, sides[1]),
    ] {
        side_dir(outcome, &verdicts.noise, side, dir, other, what)?;
    }
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e: std::io::Error| rundir::RunError::Io { path: p, source: e }
    };
    std::fs::write(&w.csv, ab_csv(verdicts)).map_err(io(&w.csv))?;
    std::fs::write(&w.summary, summary_md(outcome, verdicts, sides)).map_err(io(&w.summary))?;
    Ok(w)
}

/// A tolerance setting as stored: its percentage, or `from the term`.
fn pct_setting(t: Option<f64>) -> String {
    t.map_or("from the term".into(), |t| format!("{}", t * 100.0))
}

/// One side's run directory.
fn side_dir(
    outcome: &Outcome,
    noise: &rundir::noise::ProcessNoise,
    side: Side,
    dir: &Path,
    other: &Path,
    what: &str,
) -> Result<(), rundir::RunError> {
    let run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let raw = match side {
        Side::Base => &outcome.base_env,
        Side::Cand => &outcome.cand_env,
    };
    let mut env: Env = raw
        .clone()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    env.run_id = run_id.clone();
    // a worker that does not know the schema (scripts/peer.py): this opbench's
    if env.schema_version < rundir::OLDEST_READABLE {
        env.schema_version = rundir::SCHEMA_VERSION;
    }
    if env.started_at.is_empty() {
        env.started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    }
    let s = &outcome.settings;
    for (k, v) in [
        ("design", "paired".to_string()),
        ("paired_with", other.display().to_string()),
        ("side", format!("{} ({what})", side.as_str())),
        ("tolerance_pct", pct_setting(s.tolerance)),
        ("family_tolerance_pct", pct_setting(s.family_tolerance)),
        ("sample_ms", format!("{}", s.sample.as_millis())),
        ("budget", format!("{:?}", s.budget)),
        ("pairs_per_round", s.pairs.to_string()),
        (
            "pairs_after_round_2",
            format!("{},{}", outcome.pairs.0, outcome.pairs.1),
        ),
        ("rounds", s.looks.setting()),
        ("seed", s.seed.to_string()),
        ("cpus", s.cpus.clone().unwrap_or_else(|| "any".into())),
        (
            "timing_cpu",
            s.timing_cpu.clone().unwrap_or_else(|| "any".into()),
        ),
        ("placement", s.placement.as_str().to_string()),
        ("device_only_rounds", outcome.device_only_rounds.to_string()),
        (rundir::noise::ProcessNoise::SETTING, noise.setting()),
    ] {
        env.settings.insert(k.into(), v);
    }
    let mut w = RunWriter::at(dir, &run_id, &env)?;
    for c in &outcome.cases {
        if w.contains(&c.key) {
            continue;
        }
        let (row, samples) = side_row(c, side, &run_id);
        w.write_case(&row, &samples)?;
    }
    Ok(())
}

/// A case's row and samples on one side.
fn side_row(c: &CaseRun, side: Side, run_id: &str) -> (ResultRow, Vec<Sample>) {
    let prep: Option<&Prepared> = match side {
        Side::Base => c.base.as_ref(),
        Side::Cand => c.cand.as_ref(),
    };
    let dims = prep.map(|p| p.dims.clone()).unwrap_or_default();
    let mut row = ResultRow::new(run_id, c.key.clone(), dims, Status::Ok);
    if let Some(p) = prep {
        row.flops = p.flops;
        row.bytes = p.bytes;
        row.kernel = p.kernel.clone();
        row.note = p.note.clone();
        row.max_rel_err = p.rel_err;
        row.status = p.status;
        if row.status != Status::Ok {
            row.note = p.reason.clone();
        }
    }
    let sampled = |s: &Sampled, pair: u32| Sample {
        key: c.key.clone(),
        execution: 1,
        iters: s.calls,
        total_ns: s.total_ns,
        control_ns: s.control_ns,
        host_ns: s.host_ns,
        state: s.state,
        pair: Some(pair),
    };
    let samples: Vec<Sample> = c
        .pairs
        .iter()
        .map(|p| match side {
            Side::Base => sampled(&p.base, p.index),
            Side::Cand => sampled(&p.cand, p.index),
        })
        .collect();
    if let Some(e) = &c.ended {
        if row.status == Status::Ok {
            // this side was fine; the case ended on the other, or mid-run
            row.status = if e.side == Some(side) {
                e.status
            } else {
                Status::Skipped
            };
            row.note = Some(if e.side == Some(side) {
                e.reason.clone()
            } else {
                format!(
                    "not timed in pairs: the other side ended as {}: {}",
                    e.status, e.reason
                )
            });
        }
        if row.status != Status::Ok {
            // the samples taken before the end stay in samples.csv, the row carries none
            return (row, samples);
        }
    }
    if samples.is_empty() {
        row.status = Status::Error;
        row.note = Some("no pairs were taken".into());
        return (row, samples);
    }
    let pairs: Vec<(u64, f64)> = samples.iter().map(|s| (s.iters, s.total_ns)).collect();
    row.summarize(&pairs);
    row.uncovered_chunks = c
        .uncovered()
        .map(|(b, k)| if side == Side::Base { b } else { k });
    let controls: Vec<f64> = samples.iter().filter_map(|s| s.control_ns).collect();
    if !controls.is_empty() {
        row.control_ns = Some(stats::median(&controls));
    }
    row.flagged = rundir::flagged(&samples);
    (row, samples)
}

/// `<RUN>-ab.csv`: one line per family and per case.
pub fn ab_csv(v: &Verdicts) -> String {
    let mut out = String::from(
        "level,name,kind,verdict,ratio,ratio_low,ratio_high,pairs,resolution_pct,note,family,tolerance_pct\n",
    );
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let num = |x: Option<f64>| x.map_or(String::new(), |x| format!("{x:.5}"));
    for f in &v.families {
        let (r, lo, hi) = f.pooled.ratio();
        let _ = writeln!(
            out,
            "family,{},{},{},{r:.5},{lo:.5},{hi:.5},,,{},,{:.3}",
            q(&f.name),
            q(f.kind.as_str()),
            f.judgement.as_str(),
            q(&format!("{} cases", f.pooled.cases)),
            f.tolerance.frac * 100.0
        );
    }
    for c in &v.cases {
        let _ = writeln!(
            out,
            "case,{},{},{},{},{},{},{},{},{},{},{}",
            q(&c.name),
            q(c.kind.map_or("", |k| k.as_str())),
            c.verdict.word(),
            num(c.ratio.map(|r| r.0)),
            num(c.ratio.map(|r| r.1)),
            num(c.ratio.map(|r| r.2)),
            c.pairs,
            num(c.resolution.map(|r| r * 100.0)),
            q(&c.note),
            q(c.family.as_deref().unwrap_or_default()),
            num(c.tolerance.map(|t| t.frac * 100.0))
        );
    }
    out
}

/// The summary: the answer and its reasons first, then the families, then the cases that
/// moved, failed or stayed undecided.
pub fn summary_md(outcome: &Outcome, v: &Verdicts, sides: [&str; 2]) -> String {
    let s = &outcome.settings;
    let mut o = String::new();
    let counts = v.counts();
    let n = |w: &str| counts.get(w).copied().unwrap_or(0);
    let _ = writeln!(o, "# opbench ab: {} → {}\n", sides[0], sides[1]);
    // a comparison read back from its run directories (`opbench ab --judge`) has no time
    let took = if outcome.took.is_zero() {
        "judged again from its stored runs".to_string()
    } else {
        format!(
            "in {:.0} s (budget {:.0} s)",
            outcome.took.as_secs_f64(),
            outcome.budget.as_secs_f64()
        )
    };
    let _ = writeln!(
        o,
        "Paired: both builds alive at once, taking turns sample by sample (A B, B A, …), \
         {} pairs a case in each of the first two rounds, then {} (host-timed) and {} \
         (device-timed) as those rounds' spreads make best, each round in fresh processes{}{}{}{}; \
         {} cases {took}.\n",
        s.pairs,
        outcome.pairs.0,
        outcome.pairs.1,
        s.cpus
            .as_ref()
            .map_or(String::new(), |c| format!(", both sides on CPUs {c}")),
        s.timing_cpu
            .as_ref()
            .filter(|c| c.as_str() != "any")
            .filter(|_| outcome.cases.iter().any(|c| c.key.device.is_gpu()))
            .map_or(String::new(), |c| format!(
                " (a GPU case's samples on CPU {c})"
            )),
        if s.placement == crate::state::Placement::EachPair {
            ", each device-timed pair in a fresh placement"
        } else {
            ""
        },
        match outcome.device_only_rounds {
            0 => String::new(),
            n => format!(
                "; {n} more round{} for the device-timed cases alone, a full one no longer fitting",
                if n == 1 { "" } else { "s" }
            ),
        },
        outcome.cases.len(),
    );
    let _ = writeln!(o, "{}\n", v.headline());
    if !v.regressions.is_empty() {
        for r in &v.regressions {
            let _ = writeln!(o, "- {r}");
        }
        o.push('\n');
    }
    let _ = writeln!(
        o,
        "Cases: {} same (within their kind's tolerance, below), {} slower, {} faster, {} ambiguous, {} status-changed, {} not timed.\n",
        n("same"),
        n("slower"),
        n("faster"),
        n("ambiguous"),
        n("status-changed"),
        v.cases.len()
            - n("same")
            - n("slower")
            - n("faster")
            - n("ambiguous")
            - n("status-changed"),
    );
    noise_md(&mut o, &v.noise);
    plant_md(&mut o, outcome);
    let amb: Vec<f64> = v.cases.iter().filter_map(|c| c.resolution).collect();
    if !amb.is_empty() {
        let _ = writeln!(
            o,
            "`ambiguous (±X%)`: the case's interval straddles its tolerance; a change smaller \
             than X% could not be told from none in its share of the budget (median X here: \
             {:.1}%). A larger `--budget` narrows it.\n",
            stats::median(&amb) * 100.0
        );
    }
    budget_md(&mut o, outcome);
    tolerances_md(&mut o, v);
    families_md(&mut o, v);
    cases_md(&mut o, &v.cases);
    o
}

/// The noise figure this comparison ran with: what one process shared among its cases.
fn noise_md(o: &mut String, noise: &rundir::noise::ProcessNoise) {
    if noise.0.is_empty() {
        return;
    }
    let terms: Vec<String> = noise
        .0
        .iter()
        .map(|(k, sd)| format!("{} ±{:.2}%", k.as_str(), sd * 100.0))
        .collect();
    let _ = writeln!(
        o,
        "Process term of this machine in this run (what one process shares among all its \
         cases of a crate, sd a process, from the rounds; stored in both sides' env.json for \
         `opbench compare`): {}. A case's rounds cannot agree more closely than this.\n",
        terms.join(", ")
    );
}

/// What a planted device spin delivered (a calibration's `OPBENCH_PLANT_DEVICE_PCT` or
/// `OPBENCH_PLANT_LAUNCH_NS`), by
/// the spins' own events: the median over device cases and its range, per side.
fn plant_md(o: &mut String, outcome: &Outcome) {
    let shares: Vec<(f64, f64)> = outcome.cases.iter().filter_map(CaseRun::planted).collect();
    if shares.is_empty() {
        return;
    }
    let side = |f: fn(&(f64, f64)) -> f64| {
        let mut v: Vec<f64> = shares.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        format!(
            "+{:.2}% [+{:.2}, +{:.2}]",
            stats::median(&v) * 100.0,
            v[0] * 100.0,
            v[v.len() - 1] * 100.0
        )
    };
    let per_call: Vec<(f64, f64)> = outcome
        .cases
        .iter()
        .filter_map(CaseRun::planted_per_call)
        .collect();
    let ns = |f: fn(&(f64, f64)) -> f64| {
        let v: Vec<f64> = per_call.iter().map(f).collect();
        stats::median(&v)
    };
    let _ = writeln!(
        o,
        "Planted device spin (a calibration), by its own events, over its calls' device time: \
         base {}, candidate {} (median over {} device cases [least, most]); a call: base \
         {:.0} ns, candidate {:.0} ns (median).\n",
        side(|s| s.0),
        side(|s| s.1),
        shares.len(),
        ns(|s| s.0),
        ns(|s| s.1)
    );
}

/// The budget's plan of the obligatory rounds.
fn budget_md(o: &mut String, outcome: &Outcome) {
    if let Some(p) = &outcome.budget_plan {
        let line = p.line();
        let _ = writeln!(o, "Budget: {}.\n", line.trim_start_matches("opbench ab: "));
    }
}

/// Which tolerance each kind's verdicts used, and by which measure it was judged; and
/// what the graph rows cannot see.
fn tolerances_md(o: &mut String, v: &Verdicts) {
    let kinds: std::collections::BTreeSet<crate::verdict::Kind> =
        v.cases.iter().filter_map(|c| c.kind).collect();
    if kinds.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "## Tolerances and measures\n\n| kind | measure | case tolerance | family tolerance |\n|---|---|---|---|"
    );
    for k in &kinds {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            k.as_str(),
            k.measure(),
            v.tolerances.case(*k).describe(),
            v.tolerances.family(*k).describe()
        );
    }
    o.push('\n');
    if kinds.contains(&crate::verdict::Kind::Device)
        && !kinds.contains(&crate::verdict::Kind::Launch)
    {
        let _ = writeln!(
            o,
            "Graph replays carry no per-launch device cost: a build or setting that changes \
             what each launch costs the device (kernel arguments, the command processor's \
             path, queue setup) is not in these device verdicts; the stream-launched \
             `device` mode (the launch measure) sees it.\n"
        );
    }
}

fn families_md(o: &mut String, v: &Verdicts) {
    let _ = writeln!(
        o,
        "## Families\n\nThe median over a family's cases of their paired ratios; the interval \
         is over cases, widened by the process term (what one round's processes share among \
         their cases, measured from round to round). `same`: the interval lies inside the \
         family's tolerance (its column).\n"
    );
    let _ = writeln!(
        o,
        "| family | cases | change | 95% interval | tolerance | verdict |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    for f in &v.families {
        let (r, lo, hi) = f.pooled.ratio();
        let word = match f.judgement {
            stats::Verdict::Ambiguous => {
                format!("ambiguous (±{:.1}%)", ((hi - lo) / 2.0) * 100.0)
            }
            j => j.as_str().to_string(),
        };
        let proc = if f.process_measured {
            ""
        } else {
            " (process term not measured)"
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | [{}, {}] | ±{:.1}% | {word}{proc} |",
            f.name,
            f.pooled.cases,
            pct(r),
            pct(lo),
            pct(hi),
            f.tolerance.frac * 100.0
        );
    }
    o.push('\n');
}

fn cases_md(o: &mut String, cases: &[CaseLine]) {
    let _ = writeln!(
        o,
        "## Cases that moved, failed or stayed undecided\n\n| case | verdict | change | interval | pairs | note |\n|---|---|---|---|---|---|"
    );
    let mut listed: Vec<&CaseLine> = cases
        .iter()
        .filter(|c| c.verdict != CaseVerdict::Judged(stats::Verdict::Same) || c.unpaired)
        .collect();
    listed.sort_by(|a, b| {
        let r = |c: &CaseLine| c.ratio.map_or(0.0, |r| -(r.0 - 1.0).abs());
        r(a).total_cmp(&r(b))
    });
    for c in listed {
        let (chg, int) = c
            .ratio
            .map_or((String::new(), String::new()), |(r, lo, hi)| {
                (pct(r), format!("[{}, {}]", pct(lo), pct(hi)))
            });
        let word = match c.resolution {
            Some(x) => format!("ambiguous (±{:.1}%)", x * 100.0),
            None => c.verdict.word(),
        };
        let _ = writeln!(
            o,
            "| {} | {word} | {chg} | {int} | {} | {} |",
            c.name, c.pairs, c.note
        );
    }
}
