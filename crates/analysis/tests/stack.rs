//! What would help on the user's own stack: each row says whether it can run here (doctor's
//! checks in the run's stack.json, else the run's rows), those that can rank first; and the
//! row pricing every linear at the measured copy rate.
#![allow(clippy::unwrap_used)]

mod common;

use analysis::fit::fit_run;
use analysis::help::{COMPILED, Here, Lever, NO_COMPILE};
use analysis::predict::predict_with;
use rundir::{OpKind, Phase, Run};
use shapes::{ModelConfig, StepProfile};

/// The H200 run made for what would help, its levers at B = 1 with `stack` (doctor's JSON)
/// written into a copy's directory, or none.
fn h200_rows(stack: Option<&str>) -> Vec<Lever> {
    let mut run = common::fixture("help-2026-12-03");
    let tmp = tempfile::tempdir().unwrap();
    if let Some(s) = stack {
        std::fs::write(tmp.path().join(analysis::stack::STACK_JSON), s).unwrap();
    }
    run.dir = tmp.path().to_path_buf();
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let q = common::h200_transformers(&run, &cfg);
    let pred = predict_with(&run, &fits, &q).unwrap();
    common::levers(&run, &fits, &q, &pred, &[])
}

fn doctor(triton: bool, graph: bool) -> String {
    format!(
        r#"{{"triton": {{"importable": {triton}, "why": "ModuleNotFoundError: No module named 'triton'"}},
            "graph": {{"ok": {graph}, "why": "RuntimeError: capture failed"}}}}"#
    )
}

#[test]
fn a_stack_without_triton_ranks_graphs_without_compile_and_says_why_compile_is_out() {
    let pos = |rows: &[Lever], n: &str| rows.iter().position(|l| l.name == n).unwrap();
    // with Triton (doctor's check, and the peer's compiled rows ran): both can run; the
    // compiled row, measured faster in this run, may rank first
    let rows = h200_rows(Some(&doctor(true, true)));
    for n in [COMPILED, NO_COMPILE] {
        let l = &rows[pos(&rows, n)];
        assert!(matches!(l.here, Here::Runs(_)), "{n}: {:?}", l.here);
        assert!(l.predicted_ns.is_some(), "{n} priced from the graph rows");
    }
    assert!(
        rows[pos(&rows, NO_COMPILE)]
            .action
            .contains("torch.cuda.CUDAGraph")
    );
    // without Triton: torch.compile's row says why it is out, and ranks below every row
    // that can run here, graphs without compile among them
    let rows = h200_rows(Some(&doctor(false, true)));
    let compiled = &rows[pos(&rows, COMPILED)];
    match &compiled.here {
        Here::Not(why) => assert!(why.contains("Triton") && why.contains("No module"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(pos(&rows, NO_COMPILE) < pos(&rows, COMPILED));
    let first_not = rows
        .iter()
        .position(|l| l.batch == 1 && l.here.word() == "no")
        .unwrap();
    assert!(
        rows[..first_not]
            .iter()
            .all(|l| l.batch != 1 || l.here.word() != "no")
    );
    assert!(rows[0].name == NO_COMPILE, "{}", rows[0].name);
    // a stack whose graph capture fails: neither graphs row can run, each says why
    let rows = h200_rows(Some(&doctor(true, false)));
    for n in [COMPILED, NO_COMPILE] {
        let l = &rows[pos(&rows, n)];
        assert!(
            matches!(&l.here, Here::Not(w) if w.contains("capture failed")),
            "{n}: {:?}",
            l.here
        );
    }
}

/// The published CPU run with its copy ceiling's rate scaled by `k`, its hf-eager step at
/// B = 1, and that row.
fn cpu_bound_row(k: f64) -> (analysis::predict::Prediction, Lever) {
    let mut run: Run = common::fixture(common::CPU_STACK);
    for r in run
        .results
        .iter_mut()
        .filter(|r| r.op == OpKind::Ceiling && r.site == "copy")
    {
        r.gbps = r.gbps.map(|g| g * k);
    }
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let q = common::cpu_query(&cfg, Phase::Decode, 1, 128, StepProfile::HfEager);
    let pred = predict_with(&run, &fits, &q).unwrap();
    let rows = common::levers(&run, &fits, &q, &pred, &[]);
    let row = rows
        .into_iter()
        .find(|l| l.name.starts_with(analysis::ceiling::LINEAR_AT_BOUND))
        .unwrap();
    (pred, row)
}

#[test]
fn every_linear_at_the_copy_rate_takes_what_the_linears_cost_over_their_bytes() {
    let (pred, row) = cpu_bound_row(1.0);
    let linear = common::op_ns(&pred, OpKind::Linear, |c| c.per_call_ns);
    let at = row.predicted_ns.unwrap();
    assert!(at <= pred.step_ns && at >= pred.step_ns - linear);
    // each linear site says how far it is from its bound; the CPU has no knob for it
    for c in pred
        .components
        .iter()
        .filter(|c| c.op == Some(OpKind::Linear))
    {
        assert!(
            row.action.contains(&format!("{} ", c.site)),
            "{}",
            row.action
        );
    }
    assert!(matches!(&row.here, Here::Not(w) if w.contains("GPU settings")));
    // planted: a copy rate 10^6× faster makes every linear nearly free: the step less its
    // linears; a rate 10^6× slower puts every linear under its bound: no gain
    let (pred, fast) = cpu_bound_row(1e6);
    let linear = common::op_ns(&pred, OpKind::Linear, |c| c.per_call_ns);
    let want = pred.serial_ns - linear;
    assert!(
        (fast.predicted_ns.unwrap() - want).abs() < 1e-3 * pred.step_ns,
        "{} vs {want}",
        fast.predicted_ns.unwrap()
    );
    let (pred, slow) = cpu_bound_row(1e-6);
    assert!((slow.predicted_ns.unwrap() - pred.serial_ns).abs() < 1e-6);
}
