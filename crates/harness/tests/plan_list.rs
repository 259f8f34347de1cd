//! The plan (list mode with `OPBENCH_PLAN_FILE`) holds the case keys a run times: a cold
//! mode of a variant without model state ([`harness::Op::holds_state`]) is not one of them.
//! One test function, since it sets a process-wide variable.
#![allow(clippy::unwrap_used)]

use harness::select::Selection;
use harness::{Config, DType, Device, Failure, Mode, Op, Prepared};
use shapes::{OpKind, Problem};

/// An op with a weighted and a stateless variant; list mode never prepares either.
struct TwoKinds;

impl Op for TwoKinds {
    fn kind(&self) -> OpKind {
        OpKind::Floor
    }
    fn variants(&self) -> Vec<&'static str> {
        vec!["weighted", "stateless"]
    }
    fn holds_state(&self, variant: &str, _problem: &Problem) -> bool {
        variant == "weighted"
    }
    fn problems(&self, _: &Config) -> Vec<Problem> {
        vec![Problem::floor()]
    }
    fn prepare(
        &self,
        _: &str,
        _: &Problem,
        _: DType,
        _: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        Err(Failure::error("list mode prepares nothing"))
    }
}

#[test]
fn the_plan_holds_no_cold_case_of_a_variant_without_state() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.csv");
    // SAFETY: this test binary has one test function, so no other thread reads the
    // environment while it changes.
    unsafe { std::env::set_var("OPBENCH_PLAN_FILE", &plan) };
    let mut cfg = Config::from_env().unwrap();
    cfg.device = harness::DeviceChoice::Cpu;
    cfg.modes = vec![Mode::Pipelined, Mode::PipelinedCold, Mode::GraphCold];
    cfg.out = dir.path().to_path_buf();
    // criterion learns list mode from the binary's arguments, which a test does not have:
    // it runs the listed no-op benchmarks, so briefly
    let mut c = harness::timing::Fronts::with(|c| {
        c.sample_size(10)
            .warm_up_time(std::time::Duration::from_millis(1))
            .measurement_time(std::time::Duration::from_millis(10))
            .nresamples(1000)
            .without_plots()
    });
    let selection = Selection::parse(["--bench".to_string(), "--list".to_string()]).unwrap();
    harness::run_op(&mut c, &TwoKinds, &selection, &cfg, &[Device::CPU]).unwrap();
    // SAFETY: as above.
    unsafe { std::env::remove_var("OPBENCH_PLAN_FILE") };
    let text = std::fs::read_to_string(&plan).unwrap();
    // `crate,key,seconds,skipped`: the key's variant and its mode
    let mut keys: Vec<(String, String)> = text
        .lines()
        .map(|l| {
            let key = l.split(',').nth(1).unwrap();
            let parts: Vec<&str> = key.split('/').collect();
            (parts[1].to_string(), parts.last().unwrap().to_string())
        })
        .collect();
    keys.sort();
    // graph_cold on the CPU copies nothing (it is an `unsupported` row, as graph is): both
    // variants keep it; pipelined_cold only the weighted one
    assert_eq!(
        keys,
        [
            ("stateless".into(), "graph_cold".into()),
            ("stateless".into(), "pipelined".into()),
            ("weighted".into(), "graph_cold".into()),
            ("weighted".into(), "pipelined".into()),
            ("weighted".into(), "pipelined_cold".into()),
        ],
        "{text}"
    );
}
