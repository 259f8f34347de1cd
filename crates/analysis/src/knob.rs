//! A runtime knob measured in pairs and priced into a step: `scripts/bench --knobs` runs
//! `opbench ab` of one build against itself with the knob set in the candidate's workers
//! only, and writes `runs/<RUN>-ab.csv` beside the two sides' run directories
//! (`<RUN>-base`, `<RUN>-cand`). A [`KnobPair`] is what such a comparison measured: the
//! knob (from the sides' env.json), each case's ratio candidate / base with its interval
//! and verdict, each family's pooled ratio, and the candidate side's own rows.
//!
//! Priced as every other change is ([`crate::help`]): the run the user asks about, each
//! row moved by its case's change, composed into a step by the same
//! [`crate::predict::predict_with`]. Every case the pair timed enters, decided or not, at
//! its ratio shrunk toward its family's ([`KnobPair::shrunk`]): an undecided case moves the
//! step by its estimate, not by nothing (which biased a price toward no change), and a case
//! found alone gives up part of its own selected ratio (the winner's curse). The price has
//! an interval ([`Priced`]): each family's cases at the low and at the high ends of their
//! intervals, the families' shifts added in quadrature. A host-timed row moves by its
//! case's host-timed change; a device-timed row (`device`, `graph`, their cold modes) by its
//! case's device-timed change, whichever device mode the pair timed (on a GPU `opbench ab`
//! times kernels as graph replays).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rundir::{CaseKey, Env, Mode, Run};
use stats::Verdict;

use crate::AnalysisError;
use crate::fit::fit_run;
use crate::help::Lever;
use crate::predict::{Prediction, Query, predict_holding, step_row};

/// z of a two-sided 95% interval: an interval's half-width over its standard error.
const Z95: f64 = 1.959_964;

/// The step's band of no change for a knob's priced verdict: inside ±1% is `same`.
pub const STEP_SAME: f64 = 0.01;

/// One line of `<RUN>-ab.csv` as `opbench ab` writes it (crates/duet/src/write.rs
/// `ab_csv`), read by column name. Tables before 2026-12-06 have no `family` column.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct AbLine {
    /// `family` or `case`.
    pub level: String,
    /// The case key's text, or the family's name.
    pub name: String,
    /// How it was timed: `host-bound`, `device`, ….
    pub kind: String,
    /// `same`, `slower`, `faster`, `ambiguous`, or another word where none was judged.
    pub verdict: String,
    /// Candidate over base, and its interval.
    pub ratio: Option<f64>,
    pub ratio_low: Option<f64>,
    pub ratio_high: Option<f64>,
    #[serde(default)]
    pub pairs: Option<u64>,
    #[serde(default)]
    pub resolution_pct: Option<f64>,
    #[serde(default)]
    pub note: String,
    /// The family a case is pooled in (empty for a family's own line).
    #[serde(default)]
    pub family: String,
}

/// A ratio and its interval, candidate over base.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio {
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
}

impl Ratio {
    /// Its log and the log's standard error (from the interval's width).
    fn log(&self) -> (f64, f64) {
        let se = ((self.high.max(self.ratio)).ln() - (self.low.min(self.ratio)).ln()) / (2.0 * Z95);
        (self.ratio.ln(), se.max(0.0))
    }

    fn from_log(x: f64, se: f64) -> Self {
        Ratio {
            ratio: x.exp(),
            low: (x - Z95 * se).exp(),
            high: (x + Z95 * se).exp(),
        }
    }
}

/// One case's change with the knob set.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseChange {
    /// Candidate (knob set) over base (unset), the pair's estimate and interval.
    pub ratio: Ratio,
    /// The pair's verdict; `None` where it judged none (failed, status changed).
    pub verdict: Option<Verdict>,
    /// The family the pair pooled it in, where the table names it.
    pub family: Option<String>,
}

/// What one paired comparison of a knob measured.
#[derive(Debug, Clone)]
pub struct KnobPair {
    /// Where it was read from (`<RUN>-ab.csv`).
    pub path: PathBuf,
    /// The variables the candidate set otherwise than the base, `(name, value)`
    /// (`value` empty where the candidate left unset what the base set).
    pub setting: Vec<(String, String)>,
    /// Each case's change, by its case key with its mode made generic ([`class_key`]).
    pub cases: BTreeMap<String, CaseChange>,
    /// The families' verdicts and pooled ratios by name (`all host-bound cases`,
    /// `linear pipelined (host-bound)`, …).
    pub families: BTreeMap<String, (Verdict, Ratio)>,
    /// The candidate side's run (`<RUN>-cand`: its rows timed with the knob set), where it
    /// could be read.
    pub cand: Option<Run>,
}

/// A knob's price of the step: its point and its interval (ns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Priced {
    pub ns: f64,
    pub low: f64,
    pub high: f64,
}

/// The mode a ratio carries over within: host-timed modes as `pipelined`, device-timed
/// (`device`, `graph` and their cold modes) as `device`.
pub fn class_of(mode: Mode) -> Mode {
    if mode.is_device() {
        Mode::Device
    } else {
        Mode::Pipelined
    }
}

/// A case's key with its mode made its class ([`class_of`]).
pub fn class_key(key: &CaseKey) -> String {
    key.in_mode(class_of(key.mode)).to_string()
}

impl KnobPair {
    /// Reads `<RUN>-ab.csv` and the sides' env.json beside it (and the candidate side's
    /// rows, where they can be read); a one-line error names a file that cannot be read or
    /// a line that is not ab's.
    pub fn load(ab_csv: &Path) -> Result<Self, AnalysisError> {
        let bad = |m: String| AnalysisError::Input(format!("{}: {m}", ab_csv.display()));
        let stem = ab_csv
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| {
                // `opbench ab --judge` writes <RUN>-judged-ab.csv beside the same sides
                n.strip_suffix("-judged-ab.csv")
                    .or_else(|| n.strip_suffix("-ab.csv"))
            })
            .ok_or_else(|| bad("not an `opbench ab` table (<RUN>-ab.csv)".into()))?;
        let side_dir = |s: &str| ab_csv.with_file_name(format!("{stem}-{s}"));
        let side =
            |s: &str| -> Result<Option<Env>, AnalysisError> { Ok(Run::env_of(&side_dir(s))?) };
        let setting = setting_of(side("base")?.as_ref(), side("cand")?.as_ref());
        let mut reader = csv::Reader::from_path(ab_csv).map_err(|e| bad(e.to_string()))?;
        let mut pair = KnobPair {
            path: ab_csv.to_path_buf(),
            setting,
            cases: BTreeMap::new(),
            families: BTreeMap::new(),
            cand: Run::load(&side_dir("cand")).ok(),
        };
        for line in reader.deserialize::<AbLine>() {
            let line = line.map_err(|e| bad(e.to_string()))?;
            let verdict = line.verdict.parse::<Verdict>().ok();
            let Some(ratio) = line.ratio.filter(|r| *r > 0.0) else {
                continue;
            };
            let ratio = Ratio {
                ratio,
                low: line.ratio_low.filter(|r| *r > 0.0).unwrap_or(ratio),
                high: line.ratio_high.filter(|r| *r > 0.0).unwrap_or(ratio),
            };
            match line.level.as_str() {
                "family" => {
                    if let Some(v) = verdict {
                        pair.families.insert(line.name, (v, ratio));
                    }
                }
                "case" => {
                    let key = case_class(&line.name)
                        .ok_or_else(|| bad(format!("`{}` is not a case key", line.name)))?;
                    let family = Some(line.family).filter(|f| !f.is_empty());
                    let change = CaseChange {
                        ratio,
                        verdict,
                        family,
                    };
                    pair.cases.insert(key, change);
                }
                other => return Err(bad(format!("level `{other}`: expected family or case"))),
            }
        }
        Ok(pair)
    }

    /// `NAME=VALUE` of the knob (several joined by spaces), or `(no knob differs)`.
    pub fn label(&self) -> String {
        if self.setting.is_empty() {
            return "(no knob differs)".into();
        }
        let words: Vec<String> = self
            .setting
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        words.join(" ")
    }

    /// What the pair measured of `key`'s class.
    pub fn change(&self, key: &CaseKey) -> Option<&CaseChange> {
        self.cases.get(&class_key(key))
    }

    /// The ratio `key`'s class enters the price at: its case's estimate shrunk toward its
    /// family's pooled ratio, as a random-effects mean does. In logs, with `x` the case's
    /// estimate, `s` its standard error (from its interval), `X` the family's (its line in
    /// the table; else the inverse-variance mean of its cases) and `t²` the spread between
    /// the family's cases beyond their own noise (DerSimonian–Laird: the mean of `(x − X)²`
    /// less the mean of `s²`, at least 0): `w = t² / (t² + s²)`, the estimate `w·x + (1−w)·X`,
    /// its standard error `√(w·s² + (1−w)²·S²)` (`S`: the family's). A case in no family,
    /// or alone in its, keeps its own. `None` where the pair did not time it or judged
    /// nothing of it.
    pub fn shrunk(&self, key: &CaseKey) -> Option<Ratio> {
        let c = self.change(key)?;
        c.verdict?;
        let (x, s) = c.ratio.log();
        let Some(name) = c.family.as_deref() else {
            return Some(c.ratio);
        };
        let members: Vec<(f64, f64)> = self
            .cases
            .values()
            .filter(|m| m.verdict.is_some() && m.family.as_deref() == Some(name))
            .map(|m| m.ratio.log())
            .collect();
        if members.len() < 2 {
            return Some(c.ratio);
        }
        let (fx, fs) = match self.families.get(name) {
            Some((_, r)) => r.log(),
            None => pooled(&members),
        };
        let n = members.len() as f64;
        let spread = members.iter().map(|(m, _)| (m - fx).powi(2)).sum::<f64>() / n;
        let noise = members.iter().map(|(_, e)| e * e).sum::<f64>() / n;
        let t2 = (spread - noise).max(0.0);
        let w = if t2 + s * s > 0.0 {
            t2 / (t2 + s * s)
        } else {
            1.0
        };
        let est = w * x + (1.0 - w) * fx;
        let se = (w * s * s + (1.0 - w).powi(2) * fs * fs).sqrt();
        Some(Ratio::from_log(est, se))
    }

    /// `run` with every ok row moved by its case's ratio ([`Self::shrunk`]), the cases of
    /// family `end.0` (`""`: those in none) at `end.1` of their interval (`-1` low, `1`
    /// high; `0`, or another family: the estimate) — median, mean, its interval and spread
    /// alike; the host control beside it is left: it times no knob's op — and how many
    /// rows moved.
    pub fn applied_at(&self, run: &Run, end: (&str, i8)) -> (Run, usize) {
        let mut out = run.clone();
        let mut moved = 0;
        for r in out.results.iter_mut().filter(|r| r.is_ok()) {
            let Some(s) = self.shrunk(&r.key) else {
                continue;
            };
            let family = self
                .change(&r.key)
                .and_then(|c| c.family.as_deref())
                .unwrap_or("");
            let ratio = match end {
                (f, -1) if f == family => s.low,
                (f, 1) if f == family => s.high,
                _ => s.ratio,
            };
            for v in [
                &mut r.median_ns,
                &mut r.mean_ns,
                &mut r.ci_low_ns,
                &mut r.ci_high_ns,
                &mut r.mad_ns,
            ] {
                *v = v.map(|x| x * ratio);
            }
            moved += 1;
        }
        (out, moved)
    }

    /// [`Self::applied_at`] at every case's estimate.
    pub fn applied(&self, run: &Run) -> (Run, usize) {
        self.applied_at(run, ("", 0))
    }

    /// The families of the cases the pair timed (`""`: cases in none).
    fn case_families(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .cases
            .values()
            .filter(|c| c.verdict.is_some())
            .map(|c| c.family.clone().unwrap_or_default())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The step of `q` priced on `run` moved by the pair ([`Self::applied_at`]), its host
    /// speed held at `held`: at every estimate, and its interval — each family's cases at
    /// their low and at their high ends with the rest at their estimates, the shifts from
    /// the point added in quadrature (the families independent, a family's cases moving
    /// together), and how many rows moved.
    pub fn price(
        &self,
        run: &Run,
        q: &Query,
        held: Option<crate::predict::HostSpeed>,
    ) -> Result<(Priced, usize), AnalysisError> {
        let at = |end: (&str, i8)| -> Result<(f64, usize), AnalysisError> {
            let (moved, n) = self.applied_at(run, end);
            let fits = fit_run(&moved);
            Ok((predict_holding(&moved, &fits, q, held)?.step_ns, n))
        };
        let (ns, n) = at(("", 0))?;
        let (mut up, mut down) = (0.0_f64, 0.0_f64);
        for f in self.case_families() {
            for end in [-1, 1] {
                let (v, _) = at((&f, end))?;
                let d = v - ns;
                if d > 0.0 {
                    up += d * d;
                } else {
                    down += d * d;
                }
            }
        }
        Ok((
            Priced {
                ns,
                low: ns - down.sqrt(),
                high: ns + up.sqrt(),
            },
            n,
        ))
    }
}

/// The inverse-variance mean of `(log, se)` estimates, and its standard error (their plain
/// mean and spread where some has no width).
fn pooled(xs: &[(f64, f64)]) -> (f64, f64) {
    if xs.iter().all(|(_, s)| *s > 0.0) {
        let w: f64 = xs.iter().map(|(_, s)| 1.0 / (s * s)).sum();
        let m = xs.iter().map(|(x, s)| x / (s * s)).sum::<f64>() / w;
        (m, (1.0 / w).sqrt())
    } else {
        let n = xs.len() as f64;
        let m = xs.iter().map(|(x, _)| x).sum::<f64>() / n;
        let v = xs.iter().map(|(x, _)| (x - m).powi(2)).sum::<f64>() / n;
        (m, (v / n).sqrt())
    }
}

/// A case key's text (`op/variant/…/mode`, as ab names cases) with its mode made generic
/// as [`class_key`] does, or `None` where the text ends in no mode.
fn case_class(name: &str) -> Option<String> {
    let (head, mode) = name.rsplit_once('/')?;
    Some(format!("{head}/{}", class_of(mode.parse().ok()?)))
}

/// The recorded variables (env.json `env`) the candidate set otherwise than the base
/// ([`crate::compare::knobs_differing`]), by name.
fn setting_of(base: Option<&Env>, cand: Option<&Env>) -> Vec<(String, String)> {
    let none = Env::default();
    crate::compare::knobs_differing(base.unwrap_or(&none), cand.unwrap_or(&none))
        .into_iter()
        .map(|(k, _, v)| (k.to_string(), v.unwrap_or_default().to_string()))
        .collect()
}

impl KnobPair {
    /// The knob as a row of what would help `q`: the step priced on `run`'s rows moved by
    /// the pair's ratios by the composition `pred` came from, its host speed held at
    /// `pred`'s ([`Self::price`]), with its interval. Measured: the candidate side's step,
    /// where the pair timed the step with the knob set (the peer's step in its pair); else,
    /// where the pair timed the step's ratio only, the run's step × that ratio, labelled
    /// derived. Its verdict: the step's own pairs' where they decided it; else the priced
    /// interval's against ±[`STEP_SAME`] ([`verdict_of`]). Its action: set it where faster,
    /// leave it unset where slower (with what it costs), else say so.
    pub fn lever(&self, run: &Run, q: &Query, pred: &Prediction) -> Lever {
        let label = self.label();
        let name = format!("knob {label}");
        let step_key = q.step_key(q.mode);
        let step = self.change(&step_key);
        let with_knob = self
            .cand
            .as_ref()
            .and_then(|c| step_row(c, q, q.mode))
            .filter(|_| step.is_some())
            .and_then(|r| r.median_ns);
        let derived = step_row(run, q, q.mode)
            .and_then(|r| r.median_ns)
            .zip(step)
            .map(|(m, c)| (m * c.ratio.ratio, c));
        // the rows of this step's own shape the pair timed (another batch's would move
        // only the fits)
        let timed = run
            .ok_rows()
            .filter(|r| r.batch == q.batch && r.model == q.model.name)
            .any(|r| self.shrunk(&r.key).is_some());
        let priced = if !timed {
            Err(format!(
                "the pair ({}) timed none of this step's cases: run it with this model and batch",
                self.path.display()
            ))
        } else {
            self.price(run, q, pred.host_speed)
                .map_err(|e| e.to_string())
        };
        let change = priced.as_ref().ok().map(|(p, _)| {
            (
                p.ns / pred.step_ns,
                p.low / pred.step_ns,
                p.high / pred.step_ns,
            )
        });
        let (verdict, from) = verdict_of(step.and_then(|c| c.verdict), change);
        let pct = |c: f64| format!("{:+.1}%", (c - 1.0) * 100.0);
        let span = change.map_or(String::new(), |(c, lo, hi)| {
            format!("{} [{}, {}] a step", pct(c), pct(lo), pct(hi))
        });
        let action = match verdict {
            Some(Verdict::Faster) => format!("set {label} where the Python process starts{from}"),
            Some(Verdict::Slower) => match (from, step) {
                ("", Some(c)) => format!(
                    "leave it unset: it costs {} a step (the step's own pairs)",
                    pct(c.ratio.ratio)
                ),
                _ => format!("leave it unset: it costs {span}{from}"),
            },
            Some(Verdict::Same) if from.is_empty() => {
                "either way: the pair found no difference".into()
            }
            Some(Verdict::Same) => format!("either way: {span}, inside ±1%{from}"),
            _ if !span.is_empty() => {
                format!("undecided: priced {span}; a larger --budget narrows the pair")
            }
            _ => "undecided: a larger --budget narrows the pair".into(),
        };
        let measured = with_knob.or(derived.map(|(m, _)| m));
        let mut lever = match &priced {
            Ok((p, _)) => Lever::priced(name, action, q.batch, p.ns, measured),
            Err(why) => Lever::unpriced(name, action, q.batch, measured, why.clone()),
        };
        lever.interval = priced.ok().map(|(p, _)| (p.low, p.high));
        lever.verdict = verdict;
        lever.derived = match (with_knob, derived) {
            (Some(_), _) | (None, None) => None,
            (None, Some((_, c))) => Some(format!(
                "this run's step × the pair's ratio of the step ({:.3}, {}): the knob side's \
                 rows were not found",
                c.ratio.ratio,
                c.verdict.map_or("undecided", |v| v.as_str())
            )),
        };
        lever.here = crate::help::Here::Runs(
            "measured here in pairs (its knob applies to this arch)".into(),
        );
        lever
    }
}

/// The knob's verdict on the step, and where it comes from (`""`: the step's own pairs):
/// the step's where they decided it; else the priced step's interval (`change`: the point,
/// low and high over the step as is): `slower` where the whole interval lies above
/// +[`STEP_SAME`], `faster` where wholly below −, `same` where wholly inside, else
/// `ambiguous`; without a price, the step's undecided verdict.
pub fn verdict_of(
    step: Option<Verdict>,
    change: Option<(f64, f64, f64)>,
) -> (Option<Verdict>, &'static str) {
    const OPS: &str = " (its priced interval; the step's own pairs undecided)";
    let (up, down) = (1.0 + STEP_SAME, 1.0 / (1.0 + STEP_SAME));
    match (step, change) {
        (Some(v), _) if v.is_decided() => (Some(v), ""),
        (_, Some((_, lo, _))) if lo > up => (Some(Verdict::Slower), OPS),
        (_, Some((_, _, hi))) if hi < down => (Some(Verdict::Faster), OPS),
        (_, Some((_, lo, hi))) if lo >= down && hi <= up => (Some(Verdict::Same), OPS),
        (_, Some(_)) => (Some(Verdict::Ambiguous), OPS),
        _ => (step, ""),
    }
}
