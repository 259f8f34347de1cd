//! The trace pass on the CPU: which ATen ops one call dispatches, written as traces.csv and
//! kernels.csv, with no timed row.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use harness::select::Selection;
use harness::trace::TraceMode;
use harness::{Config, Device, Mode};
use rundir::{Activity, Run, TraceSource, TraceStatus};

#[test]
fn a_cpu_trace_lists_the_aten_ops_of_each_variant() {
    let dir = tempfile::tempdir().unwrap();
    let grid = shapes::Grid::load_default().unwrap();
    let cfg = Config {
        models: vec![shapes::ModelConfig::builtin("qwen3-0.6b").unwrap()],
        device: harness::DeviceChoice::Cpu,
        gpu_index: 0,
        dtypes: None,
        profile_name: "quick".into(),
        profile: grid.profile("quick").unwrap().clone(),
        modes: vec![Mode::Pipelined],
        cold_on_cpu: false,
        out: dir.path().to_path_buf(),
        run_id: Some("t".into()),
        samples: 10,
        warmup: Duration::from_millis(5),
        measure: Duration::from_millis(10),
        threads: None,
        cpus: None,
        timing_cpu: None,
        execution: None,
        seed: 1,
        plant_ns: 0,
        plant_pct: 0.0,
        plant_scope: harness::timing::PlantScope::Op,
        plant_device_pct: 0.0,
        plant_launch_ns: 0,
        control: false,
        l2_bytes: None,
        trace: Some(TraceMode::Kineto),
        call_cap: None,
    };
    let mut c = harness::timing::Fronts::with(|c| c.without_plots());
    let selection = Selection::parse([
        "--bench".to_string(),
        "input_norm/qwen3-0.6b/decode/b1/".into(),
    ])
    .unwrap();
    let summary =
        harness::run_op(&mut c, &rmsnorm::RmsNorm, &selection, &cfg, &[Device::CPU]).unwrap();
    assert_eq!(summary.rows, 3, "hf, aten, fused");
    let run = Run::load(&summary.path.unwrap()).unwrap();
    assert!(run.results.is_empty(), "a trace pass times nothing");
    let traces = run.traces().unwrap();
    assert_eq!(traces.len(), 3);
    assert!(traces.iter().all(|t| t.status == TraceStatus::Ok
        && t.source == TraceSource::Kineto
        && t.calls == 3
        && t.fallback.is_none()));
    let kernels = run.kernels().unwrap();
    let ops = |variant: &str| {
        let mut v: Vec<String> = kernels
            .iter()
            .filter(|k| k.key.series.variant == variant && k.kind == Activity::CpuOp)
            .map(|k| format!("{} x{}", k.name, k.per_call))
            .collect();
        v.sort();
        v
    };
    // transformers' Qwen3RMSNorm: to float, pow, mean, add eps, rsqrt, mul, to back, mul weight
    let hf = ops("hf");
    for op in [
        "aten::pow x1",
        "aten::mean x1",
        "aten::add x1",
        "aten::rsqrt x1",
        "aten::mul x2",
    ] {
        assert!(hf.contains(&op.to_string()), "{op} in {hf:?}");
    }
    assert_eq!(ops("aten"), ["aten::rms_norm x1"]);
    assert_eq!(ops("fused"), ["aten::_fused_rms_norm x1"]);
}
