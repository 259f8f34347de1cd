//! What would help: each row's arithmetic against the prediction it changes, the ranking,
//! and the rows a run cannot price, on a published CPU run (quick grid, B = 1, 2, 8).
#![allow(clippy::unwrap_used)]

mod common;

use analysis::fit::fit_run;
use analysis::help::{HOST_SPEEDUP, bandwidth_bound, levers};
use analysis::predict::{Query, predict_with};
use rundir::{OpKind, Phase};
use shapes::{ModelConfig, StepProfile};

const RUN: &str = "published/results/2026-12-01-intel-r-xeon-r-processor-cpu-torch2.11.0-stack-x1";

#[test]
fn each_row_is_the_prediction_with_one_thing_changed_and_they_rank_by_tokens_per_s() {
    let run = common::fixture(RUN);
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let q = common::cpu_query(&cfg, Phase::Decode, 1, 128, StepProfile::HfEager);
    let pred = predict_with(&run, &fits, &q).unwrap();
    let rows = levers(&run, &fits, &q, &pred, &bandwidth_bound(&run, &q, &pred));
    let row = |name: &str| rows.iter().find(|l| l.name.starts_with(name)).unwrap();

    let as_is = row("the step as it is");
    assert_eq!(as_is.predicted_ns, Some(pred.step_ns));
    assert!(
        as_is.measured_ns.is_some(),
        "the decode crate's step is in the run"
    );

    let fused = predict_with(
        &run,
        &fits,
        &Query {
            profile: StepProfile::Fused,
            ..q.clone()
        },
    )
    .unwrap();
    assert_eq!(row("fused kernels").predicted_ns, Some(fused.step_ns));
    let b8 = predict_with(
        &run,
        &fits,
        &Query {
            batch: 8,
            ..q.clone()
        },
    )
    .unwrap();
    let batch8 = row("batch 8");
    assert_eq!(batch8.predicted_ns, Some(b8.step_ns));
    assert!((batch8.tokens_per_s().unwrap() - 8e9 / b8.step_ns).abs() < 1e-6);
    assert!((batch8.per_stream().unwrap() - 1e9 / b8.step_ns).abs() < 1e-9);

    // on the CPU a faster host scales the whole step, down to the bandwidth bound at most
    let bound = bandwidth_bound(&run, &q, &pred).predicted_ns.unwrap();
    let host = row("a host").predicted_ns.unwrap();
    assert_eq!(host, (pred.step_ns / HOST_SPEEDUP).max(bound));
    // the bound: the bytes the step's calls move at the copy ceiling's rate
    let bytes: f64 = pred
        .plan
        .measured
        .iter()
        .map(|c| c.problem.bytes(4) as f64 * c.problem.calls_per_step as f64)
        .sum();
    let gbps = run
        .ok_rows()
        .filter(|r| r.op == OpKind::Ceiling && r.site == "copy")
        .filter_map(|r| r.gbps)
        .fold(0.0, f64::max);
    assert!(
        (bound - bytes / gbps).abs() < 1.0,
        "{bound} vs {}",
        bytes / gbps
    );

    // the fastest SDPA backend only ever takes time away, by its calls' difference
    let sdpa = row("the fastest SDPA backend");
    let saved = pred.step_ns - sdpa.predicted_ns.unwrap();
    assert!(saved >= 0.0 && saved < 0.1 * pred.step_ns, "{saved}");

    // ranked: priced rows by tokens/s, then the ones this run cannot price
    let priced: Vec<f64> = rows.iter().filter_map(|l| l.tokens_per_s()).collect();
    assert!(priced.windows(2).all(|w| w[0] >= w[1]), "{priced:?}");
    let first_unpriced = rows.iter().position(|l| l.step_ns().is_none());
    if let Some(i) = first_unpriced {
        assert!(rows[i..].iter().all(|l| l.step_ns().is_none()));
    }
    // the quick grid has no B = 64: that row says what to run
    let b64 = row("batch 64");
    assert!(b64.predicted_ns.is_none());
    assert!(
        b64.unpriced
            .as_deref()
            .unwrap()
            .contains("OPBENCH_PROFILE=default"),
        "{b64:?}"
    );
    // no graph or bf16 row on the CPU: they are GPU changes
    assert!(
        rows.iter()
            .all(|l| !l.name.contains("graphs") && !l.name.contains("bf16"))
    );
}

#[test]
fn on_the_h200_the_transformers_rows_say_what_to_run_and_the_batches_check_within_20_percent() {
    // gen20 (2026-12-02, H200): the peer's rows and the op crates', no graph rows
    let (_dir, run) = common::merged("gen20");
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let q = Query {
        device: "cuda:0".parse().unwrap(),
        dtype: rundir::DType::F16,
        ..common::cpu_query(&cfg, Phase::Decode, 1, 1024, StepProfile::Transformers)
    };
    let q = Query {
        host: analysis::predict::HostModel::default_for(&run, &q),
        ..q
    };
    let pred = predict_with(&run, &fits, &q).unwrap();
    let rows = levers(&run, &fits, &q, &pred, &bandwidth_bound(&run, &q, &pred));
    let row = |name: &str| rows.iter().find(|l| l.name.starts_with(name)).unwrap();
    for b in ["batch 8", "batch 64"] {
        let c = row(b).check().unwrap();
        assert!((0.8..=1.2).contains(&c), "{b}: predicted / measured {c}");
    }
    let graphs = row("CUDA/HIP graphs");
    assert!(graphs.predicted_ns.is_none());
    assert!(
        graphs
            .unpriced
            .as_deref()
            .unwrap()
            .contains("OPBENCH_MODES=graph")
    );
    let stat = row("static cache alone");
    assert!(
        stat.unpriced
            .as_deref()
            .unwrap()
            .contains("generate_static")
    );
}
