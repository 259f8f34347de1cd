//! The prefill (time to first token) composed from the op crates' prefill rows and checked
//! against the decode crate's prefill step (issue 33), on a published CPU run.
#![allow(clippy::unwrap_used)]

mod common;

use analysis::predict::{HostModel, Query, predict};
use rundir::{DType, DeviceId, Mode, OpKind, Phase, Run};
use shapes::{ModelConfig, StepProfile};

#[test]
fn a_cpu_prefill_of_32_tokens_is_priced_from_the_prefill_rows_within_a_fifth() {
    let run = common::fixture(common::CPU_STACK);
    let cfg = ModelConfig::by_name("qwen3-0.6b").unwrap();
    let q = Query {
        model: &cfg,
        batch: 1,
        ctx: 32,
        phase: Phase::Prefill,
        profile: StepProfile::HfEager,
        device: DeviceId::CPU,
        dtype: DType::F32,
        mode: Mode::Pipelined,
        host: HostModel::AsMeasured,
    };
    let p = predict(&run, &q).unwrap();
    // every projection over the prompt's 32 tokens, attention causal over 32 × 32
    assert_eq!(p.plan.step.phase, Phase::Prefill);
    let q_proj = p
        .plan
        .measured
        .iter()
        .find(|c| c.problem.op == OpKind::Linear && c.problem.site == "q_proj")
        .unwrap();
    assert_eq!(q_proj.problem.dims.to_string(), "m=32 n=2048 k=1024");
    let attn = p
        .plan
        .measured
        .iter()
        .find(|c| c.problem.op == OpKind::Sdpa)
        .unwrap();
    assert!(attn.problem.dims.to_string().contains("q_len=32 kv_len=32"));
    assert!(attn.problem.dims.to_string().contains("causal=1"));
    // the decode crate's prefill step: 240.1 ms; predicted 245.9 ms (+2.4%)
    let measured = p.measured.as_ref().unwrap();
    assert_eq!(
        (measured.key.phase, measured.key.q_len),
        (Phase::Prefill, 32)
    );
    let r = p.step_ns / measured.median_ns.unwrap();
    assert!((r - 1.0).abs() < 0.05, "{r}");
    // no decode row stands in for a prefill one: a prompt the run has no rows for is refused
    let long = Query { ctx: 4096, ..q };
    assert!(predict(&run, &long).is_err());
}

/// A CPU run as predict reads it (the peer's rows sampled in rounds read pair by pair).
fn cpu_fixture(name: &str) -> Run {
    let run = common::fixture(&format!("cpu-2026-12-01/{name}"));
    analysis::predict::at_host_state(&run, analysis::predict::HostState::Typical).unwrap()
}

#[test]
fn on_the_cpu_the_prefill_of_128_tokens_is_priced_within_a_percent() {
    // hf-eager, B = 1: predicted 924.2 ms, the decode crate's prefill 923.1 ms (+0.1%)
    let run = cpu_fixture("prefill");
    let cfg = ModelConfig::by_name("qwen3-0.6b").unwrap();
    let q = common::cpu_query(&cfg, Phase::Prefill, 1, 128, StepProfile::HfEager);
    let p = predict(&run, &q).unwrap();
    let r = p.step_ns / p.measured.as_ref().unwrap().median_ns.unwrap();
    assert!((r - 1.0).abs() < 0.01, "{r}");
    // the fused prefill ran over the call cap: priced, not checked
    let fused = predict(
        &run,
        &Query {
            profile: StepProfile::Fused,
            ..q
        },
    )
    .unwrap();
    assert!(fused.measured.is_none());
}

#[test]
fn on_a_quiet_cpu_generates_token_is_priced_within_a_fifth_at_every_batch() {
    // gen3: the same command on the same kind of VM with nothing else running (4649e33),
    // issue 31's ±20% at every batch, for generate() per token and the HF step. The rule
    // is the bar, not the recorded figures: those move when the method improves (issue 70;
    // the in-sequence part less the cold rows' memory term moved the step from 1.119 /
    // 0.988 / 0.895 to 1.119 / 0.903 / 0.876 of its measurement, 2026-12-06)
    let run = cpu_fixture("gen3");
    let cfg = ModelConfig::by_name("qwen3-0.6b").unwrap();
    for b in [1, 2, 8] {
        let q = common::cpu_query(&cfg, Phase::Decode, b, 128, StepProfile::Transformers);
        let step = predict(&run, &q).unwrap();
        let measured = step.measured.as_ref().unwrap().median_ns.unwrap();
        let s = step.step_ns / measured;
        let r = analysis::generate::price(&run, &q, &step)
            .unwrap()
            .ratio()
            .unwrap();
        println!("B={b}: step {s:.3}, generate() {r:.3}");
        assert!((s - 1.0).abs() < 0.2, "B={b} step: {s}");
        assert!((r - 1.0).abs() < 0.2, "B={b}: {r}");
    }
}
