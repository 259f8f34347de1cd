//! The comparison's answer: why it fails (the exit code's reasons), whether it gives a speed
//! verdict at all, its verdict in one word, and the cases that moved beyond a factor.

use rundir::{Run, Status};

use super::{Comparison, Flag, Line, Verdict};

/// The cases that moved beyond a factor ([`Comparison::beyond`]), and how many more did
/// from a base below the run's no-op call.
#[derive(Debug, Clone)]
pub struct Moved<'a> {
    pub cases: Vec<(&'a Line, f64)>,
    pub too_small: usize,
}

impl Comparison {
    /// Why the exit code is 1, one line a reason (empty: exit 0): each slower family with
    /// its shift, then the failing cases by why they fail, naming the first.
    pub fn reasons(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .families
            .iter()
            .filter(|f| f.verdict == Verdict::Slower)
            .map(|f| {
                format!(
                    "{}: {:+.1}% [{:+.1}%, {:+.1}%], wholly above +{:.1}%",
                    f.scope,
                    100.0 * (f.shift.ratio - 1.0),
                    100.0 * (f.ci.0 - 1.0),
                    100.0 * (f.ci.1 - 1.0),
                    100.0 * self.settings.family_threshold
                )
            })
            .collect();
        let failing = |why: &dyn Fn(&Line) -> bool| -> Vec<&Line> {
            self.lines.iter().filter(|l| l.fails && why(l)).collect()
        };
        let slower = failing(&|l| l.verdict == Some(Verdict::Slower));
        let status = failing(&|l| {
            l.flags
                .iter()
                .any(|f| matches!(f, Flag::StatusChanged(Status::Ok, _)))
        });
        let math = failing(&|l| {
            l.flags
                .iter()
                .any(|f| matches!(f, Flag::KernelChanged(b, k) if k == "math" && !b.is_empty()))
        });
        for (lines, what) in [
            (
                slower,
                format!("slower beyond {:.1}%", 100.0 * self.settings.threshold),
            ),
            (status, "ran ok and now fail (status-changed)".to_string()),
            (
                math,
                "fell back to the math kernel (kernel-changed)".to_string(),
            ),
        ] {
            if let Some(first) = lines.first() {
                let n = lines.len();
                out.push(format!(
                    "{n} case{} {what} (first: {})",
                    if n == 1 { "" } else { "s" },
                    first.key
                ));
            }
        }
        out
    }
    /// Why the comparison gives no speed verdict at all, if it gives none: the runs are one
    /// run, of two kinds of machine or of two timing methods ([`Comparison::withheld`]), or
    /// no case and no family could be judged (one execution a side of host-timed cases).
    pub fn no_speed_verdict(&self) -> Option<String> {
        if let Some(why) = &self.withheld {
            return Some(why.clone());
        }
        let judged = self.lines.iter().any(|l| l.mde.is_some()) || !self.families.is_empty();
        if judged {
            return None;
        }
        let single = self.flagged(|f| *f == Flag::SingleExecution);
        Some(if single > 0 {
            format!(
                "{single} host-timed case{} with one execution on a side: the noise between \
                 processes is unknown, so nothing could be judged; run both builds with \
                 OPBENCH_EXECUTIONS=3 or more, or pair them (scripts/bench --against)",
                if single == 1 { "" } else { "s" }
            )
        } else {
            "no case is ok with samples in both runs".to_string()
        })
    }
    /// The exit code: 1 on a regression, else 3 where no speed verdict was given
    /// ([`Comparison::no_speed_verdict`]), else 0.
    pub fn exit_code(&self) -> u8 {
        if self.fails() > 0 {
            1
        } else if self.no_speed_verdict().is_some() {
            3
        } else {
            0
        }
    }
    /// Cases whose raw medians moved beyond `factor` either way (candidate / base), the
    /// largest change first (by the size of the ratio, either way): named whatever the
    /// verdicts are. A case whose base median is below the base run's no-op call in its mode
    /// and device (the dispatch floor's `view`, tch's or Python's, the cheaper: a call that
    /// does nothing) times nothing a build could change, however far its ratio moves: it is
    /// left out and counted ([`Moved::too_small`]).
    pub fn beyond(&self, factor: f64, base: &Run) -> Moved<'_> {
        let noop = |l: &Line| {
            base.ok_rows()
                .filter(|r| r.op == rundir::OpKind::Floor && r.variant.ends_with("view"))
                .filter(|r| r.device == l.key.device && r.mode == l.key.mode)
                .filter_map(|r| r.median_ns)
                .min_by(f64::total_cmp)
        };
        let mut cases: Vec<(&Line, f64)> = self
            .lines
            .iter()
            .filter(|l| l.both_ok)
            .filter_map(|l| Some((l, l.cand? / l.base?)))
            .filter(|(_, r)| r.is_finite() && *r > 0.0 && r.ln().abs() > factor.ln())
            .collect();
        let before = cases.len();
        cases.retain(|(l, _)| !matches!((l.base, noop(l)), (Some(b), Some(n)) if b < n));
        let too_small = before - cases.len();
        cases.sort_by(|a, b| b.1.ln().abs().total_cmp(&a.1.ln().abs()));
        Moved { cases, too_small }
    }
    /// The comparison's verdict in one word, as its first line says it: `None` where it gives
    /// no speed verdict ([`Comparison::no_speed_verdict`]); `slower` on a regression (the exit
    /// code's 1); else from the global families (all host-bound, all device cases: where the
    /// run has none, from the judged cases): `same` only where every one is `same`, `faster`
    /// where one is faster and none ambiguous, else `ambiguous`. Ambiguous is never a pass:
    /// nothing slower was found, and no sameness shown.
    pub fn verdict(&self) -> Option<Verdict> {
        if self.fails() > 0 {
            return Some(Verdict::Slower);
        }
        if self.no_speed_verdict().is_some() {
            return None;
        }
        let global: Vec<Verdict> = self
            .families
            .iter()
            .filter(|f| f.scope.is_global())
            .map(|f| f.verdict)
            .collect();
        let judged: Vec<Verdict> = if global.is_empty() {
            self.lines
                .iter()
                .filter(|l| l.mde.is_some())
                .filter_map(|l| l.verdict)
                .collect()
        } else {
            global
        };
        Some(
            if judged.is_empty() || judged.contains(&Verdict::Ambiguous) {
                Verdict::Ambiguous
            } else if judged.contains(&Verdict::Faster) {
                Verdict::Faster
            } else {
                Verdict::Same
            },
        )
    }
}
