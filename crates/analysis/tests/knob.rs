//! A runtime knob measured in pairs, priced into the step: synthetic `opbench ab` tables
//! with a planted effect, on two published runs (the CPU's, and the H200's made for what
//! would help).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use analysis::fit::fit_run;
use analysis::knob::KnobPair;
use analysis::predict::{Query, predict_with};
use rundir::{OpKind, Phase, Run};
use shapes::{ModelConfig, StepProfile};
use stats::Verdict;

const CPU_RUN: &str = common::CPU_STACK;

/// Writes `dir/k-ab.csv` with `cases` (key text, ratio, verdict) and one host-bound family,
/// and the two sides' env.json, the candidate with `knob` set; returns the table's path.
fn pair(dir: &Path, knob: (&str, &str), cases: &[(String, f64, &str)]) -> PathBuf {
    pair_in(dir, knob, cases, &[])
}

/// [`pair`] with `families` (name, ratio, verdict) besides, each case in the family its
/// op's name begins (`linear …`), as `opbench ab` writes them.
fn pair_in(
    dir: &Path,
    knob: (&str, &str),
    cases: &[(String, f64, &str)],
    families: &[(&str, f64, &str)],
) -> PathBuf {
    for (side, env) in [
        ("base", BTreeMap::new()),
        ("cand", BTreeMap::from([(knob.0.into(), knob.1.into())])),
    ] {
        let d = dir.join(format!("k-{side}"));
        std::fs::create_dir_all(&d).unwrap();
        let e = rundir::Env {
            schema_version: rundir::SCHEMA_VERSION,
            run_id: format!("k-{side}"),
            started_at: "2026-12-06T17:00:00Z".into(),
            backend: "cpu".into(),
            devices: vec!["cpu".into()],
            cpu_model: "a test's".into(),
            libtorch_version: "2.11.0".into(),
            env,
            ..Default::default()
        };
        std::fs::write(d.join(rundir::layout::ENV), e.to_json()).unwrap();
    }
    let mut csv = String::from(
        "level,name,kind,verdict,ratio,ratio_low,ratio_high,pairs,resolution_pct,note,family\n",
    );
    csv.push_str("family,\"all host-bound cases\",\"host-bound\",slower,1.1,1.09,1.11,,,\"\",\n");
    for (name, ratio, verdict) in families {
        csv.push_str(&format!(
            "family,\"{name}\",\"host-bound\",{verdict},{ratio},{ratio},{ratio},,,\"\",\n"
        ));
    }
    for (name, ratio, verdict) in cases {
        let family = families
            .iter()
            .find(|f| name.starts_with(f.0.split(' ').next().unwrap()))
            .map_or("", |f| f.0);
        csv.push_str(&format!(
            "case,\"{name}\",\"host-bound\",{verdict},{ratio},{ratio},{ratio},16,,\"\",\"{family}\"\n"
        ));
    }
    let path = dir.join("k-ab.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

/// The published CPU run, its fits, and its hf-eager step of `cfg` at B = 1, L = 128.
fn cpu_step(
    cfg: &ModelConfig,
) -> (
    Run,
    analysis::fit::Fits,
    Query<'_>,
    analysis::predict::Prediction,
) {
    let run = common::fixture(CPU_RUN);
    let fits = fit_run(&run);
    let q = common::cpu_query(cfg, Phase::Decode, 1, 128, StepProfile::HfEager);
    let pred = predict_with(&run, &fits, &q).unwrap();
    (run, fits, q, pred)
}

/// Every ok row of `op` at `batch` in `run`, as ab names cases.
fn cases_of(run: &Run, op: OpKind, batch: usize, ratio: f64) -> Vec<(String, f64, &'static str)> {
    run.ok_rows()
        .filter(|r| r.op == op && r.batch == batch && r.phase == Phase::Decode)
        .map(|r| (r.key.to_string(), ratio, "slower"))
        .collect()
}

#[test]
fn a_planted_knob_moves_the_step_by_its_ops_share_and_says_leave_it_unset() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let (run, fits, q, pred) = cpu_step(&cfg);
    let tmp = tempfile::tempdir().unwrap();
    let mut cases = cases_of(&run, OpKind::Linear, 1, 1.10);
    cases.push((q.step_key(q.mode).to_string(), 1.04, "slower"));
    let knob = KnobPair::load(&pair(tmp.path(), ("OMP_NUM_THREADS", "1"), &cases)).unwrap();
    assert_eq!(knob.label(), "OMP_NUM_THREADS=1");

    let rows = common::levers(&run, &fits, &q, &pred, &[knob]);
    let row = rows
        .iter()
        .find(|l| l.name == "knob OMP_NUM_THREADS=1")
        .unwrap();
    // planted: +10% on every linear call; the step moves by 10% of what linear costs in it
    let linear = common::op_ns(&pred, OpKind::Linear, |c| c.per_call_ns);
    assert!(
        linear > 0.1 * pred.step_ns,
        "linear is a real share of the step"
    );
    let moved = row.predicted_ns.unwrap() - pred.step_ns;
    assert!(
        (moved / (0.10 * linear) - 1.0).abs() < 0.02,
        "moved {moved} ns, planted {}",
        0.10 * linear
    );
    // measured: the run's step moved by the pair's ratio of it
    let as_is = rows
        .iter()
        .find(|l| l.name == analysis::help::AS_IS)
        .unwrap();
    let m = row.measured_ns.unwrap() / as_is.measured_ns.unwrap();
    assert!((m - 1.04).abs() < 1e-9);
    // ... which is derived, not measured with the knob, and says so; the step as it is is
    // measured
    let how = row.derived.as_deref().unwrap();
    assert!(how.contains("1.040") && how.contains("slower"), "{how}");
    assert_eq!(as_is.derived, None);
    assert_eq!(row.verdict, Some(Verdict::Slower));
    assert!(
        row.action.starts_with("leave it unset: it costs +4.0%"),
        "{}",
        row.action
    );
    // a knob that costs time ranks below the step as it is
    let pos = |n: &str| rows.iter().position(|l| l.name == n).unwrap();
    assert!(pos(analysis::help::AS_IS) < pos("knob OMP_NUM_THREADS=1"));
}

#[test]
fn a_knob_that_helps_is_set_and_a_pair_of_other_cases_prices_nothing() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let (run, _, q, pred) = cpu_step(&cfg);
    let tmp = tempfile::tempdir().unwrap();
    let mut cases: Vec<_> = cases_of(&run, OpKind::RmsNorm, 1, 0.8)
        .into_iter()
        .map(|(n, r, _)| (n, r, "faster"))
        .collect();
    cases.push((q.step_key(q.mode).to_string(), 0.95, "faster"));
    let knob = KnobPair::load(&pair(tmp.path(), ("ATEN_CPU_CAPABILITY", "avx2"), &cases)).unwrap();
    let row = knob.lever(&run, &q, &pred);
    assert!(row.predicted_ns.unwrap() < pred.step_ns);
    assert_eq!(row.verdict, Some(Verdict::Faster));
    assert_eq!(
        row.action,
        "set ATEN_CPU_CAPABILITY=avx2 where the Python process starts"
    );

    // a pair at another batch times none of this step's cases: not priced, and says so
    let other = tempfile::tempdir().unwrap();
    let cases = cases_of(&run, OpKind::Linear, 8, 1.1);
    let knob = KnobPair::load(&pair(other.path(), ("OMP_NUM_THREADS", "1"), &cases)).unwrap();
    let row = knob.lever(&run, &q, &pred);
    assert!(row.predicted_ns.is_none() && row.measured_ns.is_none());
    assert_eq!(row.derived, None);
    assert!(
        row.unpriced
            .unwrap()
            .contains("timed none of this step's cases")
    );
}

#[test]
fn on_a_gpu_a_knob_on_dispatch_is_not_cancelled_by_the_host_scale() {
    // the transformers step on the H200, its host costs scaled to the layer timed beside
    // the step (`controlled`): a knob that adds 10% to every linear call's dispatch moves
    // the step's host time; re-deriving the scale from the moved rows would undo it
    let run = common::fixture("help-2026-12-03");
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let q = common::h200_transformers(&run, &cfg);
    let pred = predict_with(&run, &fits, &q).unwrap();
    assert!(pred.host_bound() && pred.host_speed.is_some());
    let host_linear = common::op_ns(&pred, OpKind::Linear, |c| c.host_ns);
    let tmp = tempfile::tempdir().unwrap();
    let cases: Vec<_> = cases_of(&run, OpKind::Linear, 1, 1.10)
        .into_iter()
        .filter(|(n, ..)| !n.contains("/graph") && !n.contains("/device"))
        .collect();
    let knob = KnobPair::load(&pair(
        tmp.path(),
        ("TORCH_BLAS_PREFER_CUBLASLT", "1"),
        &cases,
    ))
    .unwrap();
    let held = knob.lever(&run, &q, &pred).predicted_ns.unwrap() - pred.step_ns;
    assert!(
        (held / (0.10 * host_linear) - 1.0).abs() < 0.05,
        "held {held} ns, planted {}",
        0.10 * host_linear
    );
    let (moved, _) = knob.applied(&run);
    let rescaled = predict_with(&moved, &fit_run(&moved), &q).unwrap().step_ns - pred.step_ns;
    assert!(
        rescaled.abs() < 0.5 * held,
        "the scale read again cancels most of it: {rescaled} vs {held}"
    );
}

/// [`pair_in`] with each case's and family's interval: `(name, ratio, width, verdict)`, the
/// interval `ratio / (1 + width)` to `ratio × (1 + width)`.
fn pair_wide(
    dir: &Path,
    cases: &[(String, f64, f64, &str)],
    families: &[(&str, f64, f64, &str)],
) -> PathBuf {
    let path = pair_in(dir, ("K", "1"), &[], &[]);
    let mut csv = std::fs::read_to_string(&path).unwrap();
    for (name, r, w, v) in families {
        let (lo, hi) = (r / (1.0 + w), r * (1.0 + w));
        csv.push_str(&format!(
            "family,\"{name}\",\"host-bound\",{v},{r},{lo},{hi},,,\"\",\n"
        ));
    }
    for (name, r, w, v) in cases {
        let (lo, hi) = (r / (1.0 + w), r * (1.0 + w));
        let family = families
            .iter()
            .find(|f| name.starts_with(f.0.split(' ').next().unwrap()))
            .map_or("", |f| f.0);
        csv.push_str(&format!(
            "case,\"{name}\",\"host-bound\",{v},{r},{lo},{hi},16,,\"\",\"{family}\"\n"
        ));
    }
    std::fs::write(&path, csv).unwrap();
    path
}

/// The step of `q` on `run` with the rows of `cases` (key text) × `ratio`: the planted truth.
fn truth(
    run: &Run,
    q: &Query,
    pred: &analysis::predict::Prediction,
    cases: &[String],
    ratio: f64,
) -> f64 {
    let mut moved = run.clone();
    for r in moved.results.iter_mut() {
        if cases.contains(&analysis::knob::class_key(&r.key)) {
            r.median_ns = r.median_ns.map(|x| x * ratio);
            r.mean_ns = r.mean_ns.map(|x| x * ratio);
        }
    }
    let fits = fit_run(&moved);
    analysis::predict::predict_holding(&moved, &fits, q, pred.host_speed)
        .unwrap()
        .step_ns
        - pred.step_ns
}

/// The pipelined linear cases at B = 1 of `run`, one per case class (ab's cases).
fn linear_names(run: &Run) -> Vec<String> {
    run.ok_rows()
        .filter(|r| r.op == OpKind::Linear && r.batch == 1 && r.phase == Phase::Decode)
        .filter(|r| r.mode == rundir::Mode::Pipelined)
        .map(|r| r.key.to_string())
        .collect()
}

#[test]
fn undecided_cases_enter_the_price_with_their_estimate_and_its_interval() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let (run, _, q, pred) = cpu_step(&cfg);
    let fam = "linear pipelined (host-bound)";
    let names = linear_names(&run);
    assert!(names.len() >= 4, "{names:?}");
    // planted: every other linear case +10%, the rest unchanged, each undecided (±15%
    // wide); the family's pooled line +5%, undecided too
    let moved: Vec<String> = names.iter().step_by(2).cloned().collect();
    let cases: Vec<_> = names
        .iter()
        .map(|n| {
            let r = if moved.contains(n) { 1.10 } else { 1.0 };
            (n.clone(), r, 0.15, "ambiguous")
        })
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let knob = KnobPair::load(&pair_wide(
        tmp.path(),
        &cases,
        &[(fam, 1.05, 0.06, "ambiguous")],
    ))
    .unwrap();
    let row = knob.lever(&run, &q, &pred);
    let linear = common::op_ns(&pred, OpKind::Linear, |c| c.per_call_ns);
    let planted = truth(&run, &q, &pred, &moved, 1.10);
    assert!(
        planted > 0.02 * linear,
        "the plant moves the step: {planted}"
    );
    let got = row.predicted_ns.unwrap() - pred.step_ns;
    // about half of +10% of linear: not the zero an only-found rule gives
    assert!(
        (got / (0.05 * linear) - 1.0).abs() < 0.25,
        "moved {got} ns, half of +10% of linear is {}",
        0.05 * linear
    );
    let (lo, hi) = row.interval.unwrap();
    let (lo, hi) = (lo - pred.step_ns, hi - pred.step_ns);
    assert!(
        lo < planted && planted < hi,
        "[{lo}, {hi}] misses the planted {planted}"
    );
    assert!(lo < got && got < hi);
    // the interval straddles +1% of the step or not: the verdict is the interval's
    let v = row.verdict.unwrap();
    if lo / pred.step_ns > 0.01 {
        assert_eq!(v, Verdict::Slower);
    } else {
        assert_eq!(v, Verdict::Ambiguous);
        assert!(
            row.action.starts_with("undecided: priced +"),
            "{}",
            row.action
        );
    }

    // the A/A: every case undecided at no change: the price's interval holds the step, and
    // no verdict beyond it
    let aa: Vec<_> = names
        .iter()
        .map(|n| (n.clone(), 1.0, 0.15, "ambiguous"))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let knob = KnobPair::load(&pair_wide(
        tmp.path(),
        &aa,
        &[(fam, 1.0, 0.06, "ambiguous")],
    ))
    .unwrap();
    let row = knob.lever(&run, &q, &pred);
    let (lo, hi) = row.interval.unwrap();
    assert!((row.predicted_ns.unwrap() - pred.step_ns).abs() < 1e-6 * pred.step_ns);
    assert!(lo < pred.step_ns && pred.step_ns < hi);
    assert!(!matches!(
        row.verdict,
        Some(Verdict::Slower | Verdict::Faster)
    ));
}

#[test]
fn a_case_found_alone_is_shrunk_toward_its_family() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let (run, _, _, _) = cpu_step(&cfg);
    let fam = "linear pipelined (host-bound)";
    let names = linear_names(&run);
    // one case +30% (its interval ±10%: found), the family's others at no change (±10%);
    // the family pools at about +4%
    let mut cases: Vec<_> = names
        .iter()
        .map(|n| (n.clone(), 1.0, 0.10, "ambiguous"))
        .collect();
    cases[0] = (names[0].clone(), 1.30, 0.10, "slower");
    let tmp = tempfile::tempdir().unwrap();
    let knob = KnobPair::load(&pair_wide(
        tmp.path(),
        &cases,
        &[(fam, 1.04, 0.03, "ambiguous")],
    ))
    .unwrap();
    let key_of = |n: &str| {
        run.ok_rows()
            .find(|r| r.key.to_string() == n)
            .unwrap()
            .key
            .clone()
    };
    let key = key_of(&names[0]);
    let s = knob.shrunk(&key).unwrap();
    assert!(s.ratio < 1.30 && s.ratio > 1.04, "{s:?}");
    assert!(s.low <= s.ratio && s.ratio <= s.high);
    // an unchanged case of the same family moves toward the family's, no further
    let other = key_of(&names[1]);
    let o = knob.shrunk(&other).unwrap();
    assert!(o.ratio >= 1.0 && o.ratio < 1.04, "{o:?}");
    // a family whose cases agree beyond their noise keeps each case's own
    let spread: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                n.clone(),
                if i % 2 == 0 { 1.5 } else { 0.7 },
                0.01,
                "slower",
            )
        })
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let knob = KnobPair::load(&pair_wide(
        tmp.path(),
        &spread,
        &[(fam, 1.05, 0.01, "ambiguous")],
    ))
    .unwrap();
    let s = knob.shrunk(&key).unwrap();
    assert!((s.ratio - 1.5).abs() < 0.01, "{s:?}");
}
