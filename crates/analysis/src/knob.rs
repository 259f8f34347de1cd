//! A runtime knob measured in pairs and priced into a step: `scripts/bench --knobs` runs
//! `opbench ab` of one build against itself with the knob set in the candidate's workers
//! only, and writes `runs/<RUN>-ab.csv` beside the two sides' run directories
//! (`<RUN>-base`, `<RUN>-cand`). A [`KnobPair`] is what such a comparison measured: the
//! knob (from the sides' env.json), each case's ratio candidate / base and verdict.
//!
//! Priced as every other change is ([`crate::help`]): the run the user asks about, each
//! row the pair measured moved by its measured ratio ([`KnobPair::applied`]), composed into
//! a step by the same [`crate::predict::predict_with`]. A host-timed row moves by the
//! pair's host-timed ratio of its case; a device-timed row (`device`, `graph`, their cold
//! modes) by the pair's device-timed ratio of its case, whichever device mode the pair
//! timed (on a GPU `opbench ab` times kernels as graph replays).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rundir::{CaseKey, Env, Mode, Run};
use stats::Verdict;

use crate::AnalysisError;
use crate::fit::fit_run;
use crate::help::Lever;
use crate::predict::{Prediction, Query, predict_holding, step_row};

/// One case's change with the knob set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CaseChange {
    /// Candidate (knob set) over base (unset), the pair's estimate.
    pub ratio: f64,
    /// The pair's verdict; `None` where it judged none (failed, status changed).
    pub verdict: Option<Verdict>,
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

/// A case's key with its mode made one of two: host-timed rows as `pipelined`,
/// device-timed as `device`: the class a ratio carries over within.
pub fn class_key(key: &CaseKey) -> String {
    let mode = if key.mode.is_device() {
        Mode::Device
    } else {
        Mode::Pipelined
    };
    key.in_mode(mode).to_string()
}

impl KnobPair {
    /// Reads `<RUN>-ab.csv` and the sides' env.json beside it; a one-line error names a
    /// file that cannot be read or a line that is not ab's.
    pub fn load(ab_csv: &Path) -> Result<Self, AnalysisError> {
        let bad = |m: String| AnalysisError::Input(format!("{}: {m}", ab_csv.display()));
        let stem = ab_csv
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix("-ab.csv"))
            .ok_or_else(|| bad("not an `opbench ab` table (<RUN>-ab.csv)".into()))?;
        let side = |s: &str| -> Result<Option<Env>, AnalysisError> {
            Ok(Run::env_of(&ab_csv.with_file_name(format!("{stem}-{s}")))?)
        };
        let setting = setting_of(side("base")?.as_ref(), side("cand")?.as_ref());
        let mut reader = csv::Reader::from_path(ab_csv).map_err(|e| bad(e.to_string()))?;
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
                    pair.cases.insert(key, CaseChange { ratio, verdict });
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

    /// The change of `key`'s class, where the pair measured it.
    pub fn change(&self, key: &CaseKey) -> Option<CaseChange> {
        self.cases.get(&class_key(key)).copied()
    }

    /// `run` with every ok row the pair measured moved by its ratio (median, mean, its
    /// interval and spread alike; the host control beside it is left: it times no knob's
    /// op), and how many rows moved.
    pub fn applied(&self, run: &Run) -> (Run, usize) {
        let mut out = run.clone();
        let mut moved = 0;
        for r in out.results.iter_mut().filter(|r| r.is_ok()) {
            let Some(c) = self.change(&r.key) else {
                continue;
            };
            for v in [
                &mut r.median_ns,
                &mut r.mean_ns,
                &mut r.ci_low_ns,
                &mut r.ci_high_ns,
                &mut r.mad_ns,
            ] {
                *v = v.map(|x| x * c.ratio);
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
    let mode: Mode = mode.parse().ok()?;
    let class = if mode.is_device() {
        Mode::Device
    } else {
        Mode::Pipelined
    };
    Some(format!("{head}/{class}"))
}

/// The recorded variables (env.json `env`) the candidate set otherwise than the base.
fn setting_of(base: Option<&Env>, cand: Option<&Env>) -> Vec<(String, String)> {
    let empty = BTreeMap::new();
    let b = base.map_or(&empty, |e| &e.env);
    let c = cand.map_or(&empty, |e| &e.env);
    let mut out: Vec<(String, String)> = c
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.extend(
        b.keys()
            .filter(|k| !c.contains_key(*k))
            .map(|k| (k.clone(), String::new())),
    );
    out
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
        let host_bound = self.families.get(HOST_BOUND).map(|f| f.0);
        let verdict = step.and_then(|c| c.verdict).or(host_bound);
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
        let (moved, _) = self.applied(run);
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
        let action = match verdict {
            Some(Verdict::Faster) => format!("set {label} where the Python process starts"),
            Some(Verdict::Slower) => {
                // measured where the pair timed the step, else as priced
                let priced_change = priced.as_ref().ok().map(|ns| ns / pred.step_ns);
                let cost = step.map(|c| c.ratio).or(priced_change).map(|r| r - 1.0);
                format!(
                    "leave it unset: it costs {}",
                    cost.map_or("time".into(), |c| format!("{:+.1}% a step", c * 100.0))
                )
            }
            Some(Verdict::Same) => "either way: the pair found no difference".into(),
            _ => "undecided: a larger --budget narrows the pair".into(),
        };
        let mut lever = match priced {
            Ok(ns) => Lever::priced(name, action, q.batch, ns, measured),
            Err(why) => Lever::unpriced(name, action, q.batch, measured, why),
        };
        lever.verdict = verdict;
        lever
    }
}

/// The family of an ab table that pools its host-bound cases.
const HOST_BOUND: &str = "all host-bound cases";
