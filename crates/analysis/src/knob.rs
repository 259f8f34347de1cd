//! A runtime knob measured in pairs and priced into a step: `scripts/bench --knobs` runs
//! `opbench ab` of one build against itself with the knob set in the candidate's workers
//! only, and writes `runs/<RUN>-ab.csv` beside the two sides' run directories
//! (`<RUN>-base`, `<RUN>-cand`). A [`KnobPair`] is what such a comparison measured: the
//! knob (from the sides' env.json), each case's ratio candidate / base and verdict.
//!
//! Priced as every other change is ([`crate::help`]): the run the user asks about, each
//! row moved by the change the pair found in it ([`KnobPair::found`]), composed into a step
//! by the same [`crate::predict::predict_with`]. Only found changes move a row: a case the
//! pair judged `slower` or `faster` by its own ratio, else a case of a family judged so by
//! the family's pooled ratio; nothing else (a step priced from the peer's rows takes
//! differences of rows, and their undecided ±5% would be priced as if found). A host-timed
//! row moves by its case's host-timed change; a device-timed row (`device`, `graph`, their
//! cold modes) by its case's device-timed change, whichever device mode the pair timed (on
//! a GPU `opbench ab` times kernels as graph replays).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rundir::{CaseKey, Env, Mode, Run};
use stats::Verdict;

use crate::AnalysisError;
use crate::fit::fit_run;
use crate::help::Lever;
use crate::predict::{Prediction, Query, predict_holding, step_row};

/// One case's change with the knob set.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseChange {
    /// Candidate (knob set) over base (unset), the pair's estimate.
    pub ratio: f64,
    /// The pair's verdict; `None` where it judged none (failed, status changed).
    pub verdict: Option<Verdict>,
    /// The family the pair pooled it in, where the table names it.
    pub family: Option<String>,
}

/// What one paired comparison of a knob measured.
#[derive(Debug, Clone, PartialEq)]
pub struct KnobPair {
    /// Where it was read from (`<RUN>-ab.csv`).
    pub path: PathBuf,
    /// The variables the candidate set otherwise than the base, `(name, value)`
    /// (`value` empty where the candidate left unset what the base set).
    pub setting: Vec<(String, String)>,
    /// Each case's change, by its case key with its mode made generic ([`class_key`]).
    pub cases: BTreeMap<String, CaseChange>,
    /// The families' verdicts by name (`all host-bound cases`, `all device cases`, …).
    pub families: BTreeMap<String, (Verdict, f64)>,
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
    /// Reads `<RUN>-ab.csv` and the sides' env.json beside it; a one-line error names a
    /// file that cannot be read or a line that is not ab's.
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
        let side = |s: &str| -> Result<Option<Env>, AnalysisError> {
            Ok(Run::env_of(&ab_csv.with_file_name(format!("{stem}-{s}")))?)
        };
        let setting = setting_of(side("base")?.as_ref(), side("cand")?.as_ref());
        let mut reader = csv::Reader::from_path(ab_csv).map_err(|e| bad(e.to_string()))?;
        // tables before 2026-12-06 name no family
        let family_at = reader
            .headers()
            .map_err(|e| bad(e.to_string()))?
            .iter()
            .position(|h| h == "family");
        let mut pair = KnobPair {
            path: ab_csv.to_path_buf(),
            setting,
            cases: BTreeMap::new(),
            families: BTreeMap::new(),
        };
        for rec in reader.records() {
            let rec = rec.map_err(|e| bad(e.to_string()))?;
            let field = |i: usize| rec.get(i).unwrap_or_default();
            let verdict = field(3).parse::<Verdict>().ok();
            let Ok(ratio) = field(4).parse::<f64>() else {
                continue;
            };
            match field(0) {
                "family" => {
                    if let Some(v) = verdict {
                        pair.families.insert(field(1).to_string(), (v, ratio));
                    }
                }
                "case" => {
                    let key = case_class(field(1))
                        .ok_or_else(|| bad(format!("`{}` is not a case key", field(1))))?;
                    let family = family_at
                        .map(field)
                        .filter(|f| !f.is_empty())
                        .map(str::to_string);
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

    /// What the pair measured of `key`'s class, found or not.
    pub fn change(&self, key: &CaseKey) -> Option<&CaseChange> {
        self.cases.get(&class_key(key))
    }

    /// The change the pair found in `key`'s class (see the module): its own ratio where
    /// the case was judged `slower` or `faster`, else its family's where the family was;
    /// `None` where the pair found none or did not time it.
    pub fn found(&self, key: &CaseKey) -> Option<f64> {
        let found = |v: Option<Verdict>| matches!(v, Some(Verdict::Slower | Verdict::Faster));
        let c = self.change(key)?;
        if found(c.verdict) {
            return Some(c.ratio);
        }
        let (v, ratio) = self.families.get(c.family.as_deref()?)?;
        found(Some(*v)).then_some(*ratio)
    }

    /// `run` with every ok row moved by the change the pair found in it ([`Self::found`]:
    /// median, mean, its interval and spread alike; the host control beside it is left: it
    /// times no knob's op), and how many rows moved.
    pub fn applied(&self, run: &Run) -> (Run, usize) {
        let mut out = run.clone();
        let mut moved = 0;
        for r in out.results.iter_mut().filter(|r| r.is_ok()) {
            let Some(ratio) = self.found(&r.key) else {
                continue;
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
    /// the pair's ratios ([`Self::applied`]) by the composition `pred` came from, its host
    /// speed held at `pred`'s ([`predict_holding`]); measured, the run's step moved by the
    /// pair's ratio of it, where the pair timed the step. Its action: set it where the pair
    /// found it faster, leave it unset where slower (with what it costs), else say so.
    pub fn lever(&self, run: &Run, q: &Query, pred: &Prediction) -> Lever {
        let label = self.label();
        let name = format!("knob {label}");
        let step = self.change(&q.step_key(q.mode));
        let measured = step_row(run, q, q.mode)
            .and_then(|r| r.median_ns)
            .zip(step)
            .map(|(m, c)| m * c.ratio);
        // the rows of this step's own shape the pair timed (another batch's would move
        // only the fits)
        let timed = run
            .ok_rows()
            .filter(|r| r.batch == q.batch && r.model == q.model.name)
            .any(|r| self.change(&r.key).is_some());
        let (moved, n) = self.applied(run);
        let priced = if !timed {
            Err(format!(
                "the pair ({}) timed none of this step's cases: run it with this model and batch",
                self.path.display()
            ))
        } else {
            let fits = fit_run(&moved);
            predict_holding(&moved, &fits, q, pred.host_speed)
                .map(|p| p.step_ns)
                .map_err(|e| e.to_string())
        };
        let priced_change = priced.as_ref().ok().map(|ns| ns / pred.step_ns);
        let (verdict, from) = verdict_of(step.and_then(|c| c.verdict), priced_change, n);
        let action = match verdict {
            Some(Verdict::Faster) => format!("set {label} where the Python process starts{from}"),
            Some(Verdict::Slower) => {
                // measured where the pair found the step slower, else as priced
                let cost = match from {
                    "" => step.map(|c| c.ratio),
                    _ => priced_change,
                };
                format!(
                    "leave it unset: it costs {}{from}",
                    cost.map_or("time".into(), |c| format!(
                        "{:+.1}% a step",
                        (c - 1.0) * 100.0
                    ))
                )
            }
            Some(Verdict::Same) if from.is_empty() => {
                "either way: the pair found no difference".into()
            }
            Some(Verdict::Same) => format!("either way: it moves the step under ±1%{from}"),
            _ => "undecided: a larger --budget narrows the pair".into(),
        };
        let mut lever = match priced {
            Ok(ns) => Lever::priced(name, action, q.batch, ns, measured),
            Err(why) => Lever::unpriced(name, action, q.batch, measured, why),
        };
        lever.verdict = verdict;
        lever.derived = lever.measured_ns.and(step).map(|c| {
            format!(
                "this run's step × the pair's ratio of the step ({:.3}, {})",
                c.ratio,
                c.verdict.map_or("undecided", |v| v.as_str())
            )
        });
        lever
    }
}

/// The knob's verdict on the step, and where it comes from (`""`: the step's own pairs):
/// the step's where they decided it; else, where the pair found changes in `moved` of the
/// step's rows, the direction they move the priced step (`ratio`, predicted over as is)
/// beyond ±1%, or `same` within; else the step's undecided verdict.
fn verdict_of(
    step: Option<Verdict>,
    ratio: Option<f64>,
    moved: usize,
) -> (Option<Verdict>, &'static str) {
    const OPS: &str = " (as its ops price the step; the step's own pairs undecided)";
    match (step, ratio) {
        (Some(v), _) if v.is_decided() => (Some(v), ""),
        (_, Some(r)) if moved > 0 && r > 1.01 => (Some(Verdict::Slower), OPS),
        (_, Some(r)) if moved > 0 && r < 1.0 / 1.01 => (Some(Verdict::Faster), OPS),
        (_, Some(_)) if moved > 0 => (Some(Verdict::Same), OPS),
        _ => (step, ""),
    }
}
