//! How the verbs print their results: tables for a terminal, CSV for a pipe.

use analysis::compare::{Comparison, Control, Flag, Line, Verdict};
use analysis::explain::Explanation;
use analysis::history::{ChangeKind, History};
use analysis::predict::{HostState, Prediction, Query, Source};
use rundir::{CaseKey, FitRow, Mode, Run};

/// `println!` for predict's lines: each at most [`WIDTH`] characters, a longer one broken
/// at spaces, its continuation indented 4 beyond it.
macro_rules! say {
    () => {
        println!()
    };
    ($($t:tt)*) => {
        $crate::print::wrapped(&format!($($t)*))
    };
}

mod answer;
mod compare;
mod history;
mod predict;
mod transformers;

pub use answer::*;
pub use compare::*;
pub use history::*;
pub use predict::*;
pub use transformers::*;

/// The widest line predict prints.
pub const WIDTH: usize = 160;

/// Print `text`, each of its lines broken at spaces to at most [`WIDTH`] characters.
pub(crate) fn wrapped(text: &str) {
    for line in wrap(text, WIDTH) {
        println!("{line}");
    }
}

/// `text`'s lines, each longer than `width` characters broken at its last space within
/// it (a word longer than the width stays whole), continued 4 spaces beyond its indent.
pub(crate) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.split('\n') {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let lead = " ".repeat(indent + 4);
        let mut rest = line.to_string();
        let mut first = true;
        loop {
            let cur = if first {
                rest.clone()
            } else {
                format!("{lead}{rest}")
            };
            if cur.chars().count() <= width {
                out.push(cur);
                break;
            }
            // the last space at or before the width, past the indent
            let head: String = cur.chars().take(width + 1).collect();
            let start = if first { indent } else { lead.len() };
            match head.rfind(' ').filter(|&i| i > start) {
                Some(i) => {
                    out.push(head[..i].trim_end().to_string());
                    rest = cur[i..].trim_start().to_string();
                }
                None => {
                    out.push(cur);
                    break;
                }
            }
            first = false;
        }
    }
    out
}

pub(super) fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

pub(super) fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or(String::new(), |x| format!("{x:.digits$}"))
}

/// `opbench state`: slow samples and the flags, per timer and execution.
pub fn state(
    table: &std::collections::BTreeMap<(analysis::state::Timer, u32), analysis::state::Tally>,
    mode: rundir::Mode,
    scope: analysis::state::Scope,
) {
    use analysis::state::{FLAGS, Scope};
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.1}%", 100.0 * v));
    let (lead, against) = match scope {
        Scope::Execution => ("", "their case's median in their execution"),
        Scope::Run => (
            "\nacross executions: ",
            "their case's median in its fastest execution",
        ),
    };
    println!(
        "{lead}{} samples over {}× {against} (slow), and the state flags they carry:",
        mode.as_str(),
        analysis::state::SLOW
    );
    print!(
        "{:<17} {:>4} {:>6} {:>8} {:>7} {:>7} {:>8} {:>7}",
        "timer", "exec", "slow", "flagged", "caught", "others", "flagged", "share"
    );
    for f in FLAGS {
        print!(" {:>13}", f.as_str());
    }
    println!();
    for ((timer, e), t) in table {
        print!(
            "{:<17} {:>4} {:>6} {:>8} {:>7} {:>7} {:>8} {:>7}",
            timer.as_str(),
            e,
            t.slow,
            t.slow_flagged,
            pct(t.caught()),
            t.others,
            t.others_flagged,
            pct(t.false_share())
        );
        for (slow, others) in t.by_flag {
            print!(" {:>13}", format!("{slow}/{others}"));
        }
        println!();
    }
    println!(
        "caught: the slow samples with a flag; share: the other samples with one (a flag's \
         column: slow/others that carry it)"
    );
}

/// `opbench state`'s second table: each execution's host level against the run's other
/// executions, per timer and batch (nothing for a run of one execution).
pub fn levels(
    levels: &std::collections::BTreeMap<analysis::state::LevelKey, analysis::state::Level>,
) {
    if levels.is_empty() {
        return;
    }
    println!(
        "\nthe host's level per execution: each case's host control and time per call (medians \
         over the execution's samples) against the case's fastest execution, the median over cases"
    );
    println!(
        "{:<17} {:>5} {:>4} {:>6} {:>8} {:>8}",
        "timer", "batch", "exec", "cases", "control", "per-call"
    );
    for ((timer, batch, e), l) in levels {
        println!(
            "{:<17} {:>5} {:>4} {:>6} {:>7.2}× {:>7.2}×",
            timer.as_str(),
            batch,
            e,
            l.cases,
            l.control,
            l.per_call
        );
    }
    println!(
        "host-level flags a case's samples in an execution where both its control and its \
         time per call ran over their thresholds against its fastest execution's"
    );
}

/// The fits table.
pub fn fits(rows: &[FitRow]) {
    println!(
        "{:<8} {:<13} {:<12} {:<8} {:<7} {:<5} {:<9} {:>6} {:>22} {:>26} {:>6} {:>6} {:<6}",
        "op",
        "variant",
        "site",
        "phase",
        "L+q",
        "dtype",
        "device",
        "mode",
        "overhead µs [95% CI]",
        "rate [95% CI]",
        "cross",
        "R²",
        "model"
    );
    for r in rows {
        let s = &r.series;
        let mode = s.mode.as_str();
        println!(
            "{:<8} {:<13} {:<12} {:<8} {:<7} {:<5} {:<9} {:>6} {:>22} {:>26} {:>6} {:>6.3} {:<6}",
            s.op.as_str(),
            s.variant,
            s.site,
            s.phase.as_str(),
            s.kv_len.map_or("-".into(), |k| k.to_string()),
            s.dtype.as_str(),
            s.device.to_string(),
            &mode[..mode.len().min(6)],
            format!(
                "{:.1} [{:.1}, {:.1}]",
                r.overhead_us, r.overhead_ci_low_us, r.overhead_ci_high_us
            ),
            match r.rate {
                Some(rate) => format!(
                    "{:.3} [{}, {}] {}",
                    rate,
                    opt(r.rate_ci_low, 3),
                    opt(r.rate_ci_high, 3),
                    r.rate_unit()
                ),
                None => "-".into(),
            },
            opt(r.crossover_batch, 1),
            r.r2,
            r.model_kind.as_str()
        );
    }
}

/// A prediction over its measurement: the ratio and the error in percent.
pub(super) fn ratio(predicted: f64, measured: f64) -> String {
    let r = predicted / measured;
    format!("{r:.3} ({:+.1}%)", 100.0 * (r - 1.0))
}

/// A percentage change from a ratio: `+6.1%`.
pub(super) fn pct(r: f64) -> String {
    format!("{:+.1}%", 100.0 * (r - 1.0))
}
