//! A whole bench run through criterion: every case of the grid ends as a row, ok rows carry
//! their samples, and failures carry their reason.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::time::Duration;

use harness::record::{RESULTS_HEADER, SAMPLES_HEADER, read_csv};
use harness::select::Selection;
use harness::{Check, Config, DType, Device, Failure, Mode, Op, Prepared, ResultRow, SampleRow};
use shapes::{OpKind, Problem};
use tch::{TchError, Tensor};

/// One op, four variants: right, wrong, missing, and one that panics while preparing.
struct Mixed;

struct P {
    x: Tensor,
    off: f64,
}

impl Prepared for P {
    fn run(&mut self) -> Result<(), TchError> {
        self.x.f_add_scalar(self.off).map(drop)
    }
    fn check(&mut self) -> Result<Check, TchError> {
        Ok(Check {
            output: self.x.f_add_scalar(self.off)?,
            reference: self.x.f_to_kind(tch::Kind::Double)?,
        })
    }
}

impl Op for Mixed {
    fn kind(&self) -> OpKind {
        OpKind::Floor
    }
    fn variants(&self) -> Vec<&'static str> {
        vec!["right", "wrong", "missing", "boom"]
    }
    fn problems(&self, _: &Config) -> Vec<Problem> {
        vec![Problem::floor()]
    }
    fn prepare(
        &self,
        variant: &str,
        _: &Problem,
        _: DType,
        _: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let x = Tensor::f_ones([64], (tch::Kind::Float, tch::Device::Cpu))?;
        match variant {
            "right" => Ok(Box::new(P { x, off: 0.0 })),
            "wrong" => Ok(Box::new(P { x, off: 0.5 })),
            "missing" => Err(Failure::unsupported("not in this build")),
            _ => panic!("prepare blew up"),
        }
    }
}

fn config(out: &std::path::Path) -> Config {
    let grid = shapes::Grid::load_default().unwrap();
    Config {
        models: vec![shapes::ModelConfig::builtin("qwen3-0.6b").unwrap()],
        device: harness::DeviceChoice::Cpu,
        gpu_index: 0,
        dtypes: None,
        profile_name: "quick".into(),
        profile: grid.profile("quick").unwrap().clone(),
        modes: vec![Mode::Pipelined, Mode::Synced, Mode::Device],
        out: out.to_path_buf(),
        run_id: Some("t".into()),
        samples: 10,
        warmup: Duration::from_millis(5),
        measure: Duration::from_millis(10),
        threads: None,
    }
}

#[test]
fn every_case_ends_as_a_row_with_its_samples_or_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mut c = criterion::Criterion::default()
        .sample_size(10)
        .warm_up_time(cfg.warmup)
        .measurement_time(cfg.measure)
        .without_plots();
    let selection = Selection::parse(["--bench".to_string()]).unwrap();
    let summary = harness::run_op(&mut c, &Mixed, &selection, &cfg, &[Device::CPU]);
    // 4 variants x 3 modes
    assert_eq!(summary.rows, 12);
    let run = summary.path.unwrap();
    assert!(run.join("env.json").is_file());
    let rows: Vec<ResultRow> = read_csv(&run.join("results.csv"), &RESULTS_HEADER).unwrap();
    assert_eq!(rows.len(), 12);
    let status = |variant: &str, mode: &str| {
        rows.iter()
            .find(|r| r.variant == variant && r.mode == mode)
            .unwrap()
            .clone()
    };
    for mode in ["pipelined", "synced"] {
        let ok = status("right", mode);
        assert_eq!(ok.status, "ok");
        assert_eq!(ok.samples, Some(10));
        assert!(
            ok.median_ns.unwrap() > 0.0
                && ok.ci_low_ns <= ok.median_ns
                && ok.median_ns <= ok.ci_high_ns
        );
        assert_eq!(ok.max_rel_err, Some(0.0));
        let wrong = status("wrong", mode);
        assert_eq!(wrong.status, "mismatch");
        assert!(wrong.median_ns.is_none() && wrong.max_rel_err.unwrap() > 0.1);
        let missing = status("missing", mode);
        assert_eq!(
            (missing.status.as_str(), missing.note.as_deref()),
            ("unsupported", Some("not in this build"))
        );
        let boom = status("boom", mode);
        assert_eq!(boom.status, "error");
        assert!(boom.note.unwrap().contains("prepare blew up"));
    }
    // device mode on the CPU is refused with a reason, never faked
    let dev = status("right", "device");
    assert_eq!(dev.status, "unsupported");
    assert!(dev.note.unwrap().contains("needs a GPU"));
    let samples: Vec<SampleRow> = read_csv(&run.join("samples.csv"), &SAMPLES_HEADER).unwrap();
    assert_eq!(samples.len(), 20, "10 samples for each ok row");
    assert!(
        samples
            .iter()
            .all(|s| s.variant == "right" && s.iters > 0 && s.total_ns > 0.0)
    );

    // a filtered second run appends only what the filter selects
    let only = Selection::parse(["--bench".to_string(), "right/.*/synced".to_string()]).unwrap();
    let again = harness::run_op(&mut c, &Mixed, &only, &cfg, &[Device::CPU]);
    assert_eq!(again.rows, 1);
    let rows: Vec<ResultRow> = read_csv(&run.join("results.csv"), &RESULTS_HEADER).unwrap();
    assert_eq!(rows.len(), 13);
}
