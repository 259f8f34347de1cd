//! The prefill (time to first token) composed from the op crates' prefill rows and checked
//! against the decode crate's prefill step (issue 33), on a published CPU run.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use analysis::predict::{HostModel, Query, predict};
use rundir::{DType, DeviceId, Mode, OpKind, Phase, Run};
use shapes::{ModelConfig, StepProfile};

#[test]
fn a_cpu_prefill_of_32_tokens_is_priced_from_the_prefill_rows_within_a_fifth() {
    let run = Run::load(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/published/results/2026-12-01-intel-r-xeon-r-processor-cpu-torch2.11.0-stack-x1"),
    )
    .unwrap();
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
    assert!((r - 1.024).abs() < 0.005, "{r}");
    // no decode row stands in for a prefill one: a prompt the run has no rows for is refused
    let long = Query { ctx: 4096, ..q };
    assert!(predict(&run, &long).is_err());
}
