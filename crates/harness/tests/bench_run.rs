//! A whole bench run through criterion: every case of the grid ends as a row, ok rows carry
//! their samples, and failures carry their reason.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::time::Duration;

use harness::select::Selection;
use harness::{Config, DType, Device, Failure, Mode, Op, Prepared, Status};
use rundir::Run;
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
    fn output(&mut self) -> Result<Tensor, TchError> {
        self.x.f_add_scalar(self.off)
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        self.x.f_to_kind(tch::Kind::Double)
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

/// These tests time real calls and compare the times: one at a time, so that another's
/// calls on the same cores do not move them (a planted 200-µs spin read +138 µs on a
/// 2-core VM with the other tests beside it, 2026-12-02).
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
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
        cold_on_cpu: false,
        out: out.to_path_buf(),
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
        control: true,
        l2_bytes: None,
        trace: None,
        call_cap: None,
    }
}

/// A criterion set up as the config asks (10 samples, its warm-up and measure times).
fn criterion_for(cfg: &Config) -> harness::timing::Fronts {
    harness::timing::Fronts::with(|c| {
        c.sample_size(10)
            .warm_up_time(cfg.warmup)
            .measurement_time(cfg.measure)
            .without_plots()
    })
}

#[test]
fn every_case_ends_as_a_row_with_its_samples_or_its_reason() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mut c = criterion_for(&cfg);
    let selection = Selection::parse(["--bench".to_string()]).unwrap();
    let summary = harness::run_op(&mut c, &Mixed, &selection, &cfg, &[Device::CPU]).unwrap();
    // 4 variants x 3 modes
    assert_eq!(summary.rows, 12);
    let run = summary.path.unwrap();
    assert!(run.join("env.json").is_file());
    let loaded = Run::load(&run).unwrap();
    let rows = &loaded.results;
    assert_eq!(rows.len(), 12);
    let status = |variant: &str, mode: Mode| {
        rows.iter()
            .find(|r| r.variant == variant && r.mode == mode)
            .unwrap()
            .clone()
    };
    for mode in [Mode::Pipelined, Mode::Synced] {
        let ok = status("right", mode);
        assert_eq!(ok.status, Status::Ok);
        assert_eq!(ok.samples, Some(10));
        let (lo, med, hi) = (
            ok.ci_low_ns.unwrap(),
            ok.median_ns.unwrap(),
            ok.ci_high_ns.unwrap(),
        );
        assert!(med > 0.0 && lo <= med && med <= hi, "{lo} {med} {hi}");
        assert_eq!(ok.max_rel_err, Some(0.0));
        let wrong = status("wrong", mode);
        assert_eq!(wrong.status, Status::Mismatch);
        assert!(wrong.median_ns.is_none() && wrong.max_rel_err.unwrap() > 0.1);
        let missing = status("missing", mode);
        assert_eq!(
            (missing.status, missing.note.as_deref()),
            (Status::Unsupported, Some("not in this build"))
        );
        let boom = status("boom", mode);
        assert_eq!(boom.status, Status::Error);
        assert!(boom.note.unwrap().contains("prepare blew up"));
    }
    // device mode on the CPU is refused with a reason, never faked
    let dev = status("right", Mode::Device);
    assert_eq!(dev.status, Status::Unsupported);
    assert!(dev.note.unwrap().contains("needs a GPU"));
    let samples = loaded.samples().unwrap();
    assert_eq!(samples.len(), 2, "the two ok rows have samples");
    assert!(
        samples
            .iter()
            .all(|(k, s)| k.variant == "right" && s.len() == 10)
    );
    // with the controls on, each sample carries both controls before and after it, the
    // host's counters over it, and (pipelined: host-timed, ≥ 4 calls) its slowest stretch
    for s in samples.values().flatten() {
        let st = &s.state;
        assert!(
            s.control_ns.is_some()
                && st.control_after_ns.is_some()
                && s.host_ns.is_some()
                && st.host_after_ns.is_some(),
            "{s:?}"
        );
        if s.key.mode == Mode::Pipelined && s.iters >= 4 {
            assert!(st.slowest_ns.is_some_and(|x| x > 0.0), "{s:?}");
        }
    }

    // a second run into the same run id resumes it: the cases it has are not measured
    // again, and nothing is written twice
    let again = harness::run_op(&mut c, &Mixed, &selection, &cfg, &[Device::CPU]).unwrap();
    assert_eq!(again.rows, 0);
    assert_eq!(Run::load(&run).unwrap().results.len(), 12);
    // a filtered run into a fresh run id writes only what the filter selects
    let only = Selection::parse(["--bench".to_string(), "right/.*/synced".to_string()]).unwrap();
    let fresh = Config {
        run_id: Some("t2".into()),
        ..cfg.clone()
    };
    let filtered = harness::run_op(&mut c, &Mixed, &only, &fresh, &[Device::CPU]).unwrap();
    assert_eq!(filtered.rows, 1);

    // a planted host spin shows in the host-timed time of every call, in its own execution
    // folder; the case order follows the seed
    let planted = Config {
        run_id: Some("t3".into()),
        execution: Some(2),
        seed: 7,
        plant_ns: 200_000,
        ..cfg.clone()
    };
    let p = harness::run_op(&mut c, &Mixed, &selection, &planted, &[Device::CPU]).unwrap();
    let path = p.path.unwrap();
    assert!(path.ends_with("runs/t3/executions/2"), "{}", path.display());
    let slow = Run::load(&path).unwrap();
    // the fastest sample per call: a spin adds to every call, where a host that stalls
    // only adds (a 2-core VM's synced median read 303 µs unplanted beside 223 µs planted
    // under another process's load, 2026-12-03)
    let fastest = |run: &Run, mode| {
        let key = run
            .results
            .iter()
            .find(|r| r.variant == "right" && r.mode == mode)
            .unwrap()
            .key
            .clone();
        run.samples().unwrap()[&key]
            .iter()
            .map(|s| s.total_ns / s.iters as f64)
            .fold(f64::INFINITY, f64::min)
    };
    for mode in [Mode::Pipelined, Mode::Synced] {
        let (before, after) = (fastest(&loaded, mode), fastest(&slow, mode));
        assert!(after - before > 150_000.0, "{mode}: {before} -> {after}");
    }
    assert!(
        slow.samples()
            .unwrap()
            .values()
            .flatten()
            .all(|s| s.execution == 2)
    );
    let order = |run: &Run| {
        run.results
            .iter()
            .map(|r| r.key.clone())
            .collect::<Vec<_>>()
    };
    let mut same_cases = order(&slow);
    same_cases.sort();
    let mut first = order(&loaded);
    first.sort();
    assert_eq!(same_cases, first);
}

/// An op with model state (a "weight") and one without.
struct WithState;

struct S {
    x: Tensor,
    w: Tensor,
    copies: Vec<Tensor>,
    next: usize,
}

impl Prepared for S {
    fn run(&mut self) -> Result<(), TchError> {
        let w = if self.copies.is_empty() {
            &self.w
        } else {
            self.next = (self.next + 1) % self.copies.len();
            &self.copies[self.next]
        };
        self.x.f_mul(w).map(drop)
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        self.x.f_mul(&self.w)
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        self.x.f_mul(&self.w)?.f_to_kind(tch::Kind::Double)
    }
    fn state_bytes(&self) -> u64 {
        (self.w.numel() * 4) as u64
    }
    fn spread_state(&mut self, copies: usize) -> Result<(), TchError> {
        self.copies = (0..copies).map(|_| self.w.copy()).collect();
        Ok(())
    }
}

impl Op for WithState {
    fn kind(&self) -> OpKind {
        OpKind::Floor
    }
    fn variants(&self) -> Vec<&'static str> {
        vec!["weighted", "stateless", "claims_state"]
    }
    fn holds_state(&self, variant: &str, _problem: &Problem) -> bool {
        variant != "stateless"
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
        let x = Tensor::f_ones([1024], (tch::Kind::Float, tch::Device::Cpu))?;
        Ok(match variant {
            "weighted" => Box::new(S {
                w: x.f_mul_scalar(2.0)?,
                x,
                copies: Vec::new(),
                next: 0,
            }),
            _ => Box::new(P { x, off: 0.0 }),
        })
    }
}

/// pipelined_cold times a case over copies of its state (enough to pass twice the given
/// last-level cache, at most 64) and says so; a variant with no state gets no such row.
#[test]
fn pipelined_cold_spreads_the_state_and_skips_stateless_cases() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.modes = vec![Mode::Pipelined, Mode::PipelinedCold];
    // 4 KiB of state against a 16 KiB "cache": 8 copies
    cfg.l2_bytes = Some(16 << 10);
    let mut c = criterion_for(&cfg);
    let selection = Selection::parse(["--bench".to_string()]).unwrap();
    let summary = harness::run_op(&mut c, &WithState, &selection, &cfg, &[Device::CPU]).unwrap();
    let loaded = Run::load(&summary.path.unwrap()).unwrap();
    let modes: Vec<(String, Mode)> = loaded
        .results
        .iter()
        .map(|r| (r.variant.clone(), r.mode))
        .collect();
    // the stateless variant has no cold case; one whose op claims a state its prepared
    // case lacks gets an error row that says so
    assert_eq!(modes.len(), 5, "{modes:?}");
    let cold = |variant: &str| {
        loaded
            .results
            .iter()
            .find(|r| r.mode == Mode::PipelinedCold && r.variant == variant)
    };
    assert!(cold("stateless").is_none());
    let claims = cold("claims_state").unwrap();
    assert_eq!(claims.status, Status::Error);
    assert!(
        claims.note.as_deref().unwrap().contains("holds none"),
        "{claims:?}"
    );
    let cold = cold("weighted").unwrap();
    assert_eq!(cold.status, Status::Ok);
    assert!(
        cold.note
            .as_deref()
            .unwrap()
            .contains("8 copies of the state taken in turn"),
        "{:?}",
        cold.note
    );
}

/// An op whose cases each have a case timed beside them ([`Op::beside`]): `slow` spins
/// 300 µs a call, and its own pipelined samples are made with that; `bad` fails its check.
struct WithBeside;

struct Spin(Duration);

impl Prepared for Spin {
    fn run(&mut self) -> Result<(), TchError> {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < self.0 {
            std::hint::spin_loop();
        }
        Ok(())
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        Tensor::f_ones([4], (tch::Kind::Float, tch::Device::Cpu))
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        Tensor::f_ones([4], (tch::Kind::Double, tch::Device::Cpu))
    }
    fn calls_per_run(&self) -> u64 {
        2
    }
}

/// Checks right, then fails every timed call.
struct FailsToRun;

impl Prepared for FailsToRun {
    fn run(&mut self) -> Result<(), TchError> {
        Err(TchError::Torch("out of memory on the second call".into()))
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        Tensor::f_ones([4], (tch::Kind::Float, tch::Device::Cpu))
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        Tensor::f_ones([4], (tch::Kind::Double, tch::Device::Cpu))
    }
}

impl Op for WithBeside {
    fn kind(&self) -> OpKind {
        OpKind::Floor
    }
    fn variants(&self) -> Vec<&'static str> {
        vec!["fast", "broken", "failing"]
    }
    fn problems(&self, _: &Config) -> Vec<Problem> {
        vec![Problem::floor()]
    }
    fn beside(&self, _: &str, problem: &Problem) -> Option<Problem> {
        (problem.site == "add1").then(|| Problem {
            site: "aside",
            ..problem.clone()
        })
    }
    fn prepare(
        &self,
        variant: &str,
        problem: &Problem,
        _: DType,
        _: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let x = Tensor::f_ones([4], (tch::Kind::Float, tch::Device::Cpu))?;
        Ok(match (variant, problem.site) {
            // one run: 2 calls of 150 µs
            (_, "aside") if variant == "fast" => Box::new(Spin(Duration::from_micros(300))),
            (_, "aside") if variant == "failing" => Box::new(FailsToRun),
            (_, "aside") => Box::new(P { x, off: 0.5 }),
            _ => Box::new(P { x, off: 0.0 }),
        })
    }
}

/// The case beside another is timed before each of the other's pipelined samples (one run
/// each, none in other modes) and written as a row of its own with as many samples; a
/// beside case that fails its check is a `mismatch` row, and the other case is timed all
/// the same.
#[test]
fn a_case_beside_another_is_timed_before_each_of_its_samples() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mut c = criterion_for(&cfg);
    let selection = Selection::parse(["--bench".to_string()]).unwrap();
    let summary = harness::run_op(&mut c, &WithBeside, &selection, &cfg, &[Device::CPU]).unwrap();
    let run = Run::load(&summary.path.unwrap()).unwrap();
    let row = |variant: &str, site: &str, mode: Mode| {
        run.results
            .iter()
            .find(|r| r.variant == variant && r.site == site && r.mode == mode)
            .cloned()
    };
    // 3 variants × (3 modes + 1 beside)
    assert_eq!(run.results.len(), 12);
    for mode in [Mode::Synced, Mode::Device] {
        assert!(row("fast", "aside", mode).is_none());
    }
    let aside = row("fast", "aside", Mode::Pipelined).unwrap();
    assert_eq!(aside.status, Status::Ok);
    assert_eq!(aside.samples, Some(10));
    let per_call = aside.median_ns.unwrap();
    assert!((150_000.0..400_000.0).contains(&per_call), "{per_call}");
    let samples = run.samples().unwrap();
    let of = |r: &rundir::ResultRow| samples.get(&r.key).unwrap().clone();
    assert_eq!(of(&aside).len(), 10);
    assert!(of(&aside).iter().all(|s| s.iters == 2));
    // the case itself is as it would be alone: a 64-element add, not the spin
    let main = row("fast", "add1", Mode::Pipelined).unwrap();
    assert_eq!(of(&main).len(), 10);
    assert!(main.median_ns.unwrap() < 100_000.0, "{:?}", main.median_ns);
    let broken = row("broken", "aside", Mode::Pipelined).unwrap();
    assert_eq!(broken.status, Status::Mismatch);
    assert_eq!(
        row("broken", "add1", Mode::Pipelined).unwrap().status,
        Status::Ok
    );
    // a case beside that fails while timed: the case's row says whose failure it was, and
    // the beside row names the case it was timed beside
    let failing = row("failing", "add1", Mode::Pipelined).unwrap();
    assert_eq!(failing.status, Status::Oom, "{:?}", failing.note);
    let note = failing.note.as_deref().unwrap();
    assert!(
        note.starts_with("the case timed beside it failed: ") && note.contains("out of memory"),
        "{note}"
    );
    let aside = row("failing", "aside", Mode::Pipelined).unwrap();
    assert_eq!(aside.status, Status::Oom);
    assert!(
        aside
            .note
            .as_deref()
            .unwrap()
            .contains("timed beside floor/failing/add1"),
        "{:?}",
        aside.note
    );
    assert_eq!(
        row("failing", "add1", Mode::Synced).unwrap().status,
        Status::Ok
    );
}

/// An op whose one case is refused before timing (its prepare fails) and has a case beside
/// it: the beside case is counted in the plan, so it ends as a row too.
struct RefusedWithBeside;

impl Op for RefusedWithBeside {
    fn kind(&self) -> OpKind {
        OpKind::Floor
    }
    fn variants(&self) -> Vec<&'static str> {
        vec!["refused"]
    }
    fn problems(&self, _: &Config) -> Vec<Problem> {
        vec![Problem::floor()]
    }
    fn beside(&self, variant: &str, problem: &Problem) -> Option<Problem> {
        WithBeside.beside(variant, problem)
    }
    fn prepare(
        &self,
        _: &str,
        problem: &Problem,
        _: DType,
        _: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        if problem.site == "aside" {
            let x = Tensor::f_ones([4], (tch::Kind::Float, tch::Device::Cpu))?;
            return Ok(Box::new(P { x, off: 0.0 }));
        }
        Err(Failure::unsupported("no such kernel in this build"))
    }
}

#[test]
fn a_case_refused_before_timing_leaves_a_row_for_the_case_beside_it() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mut c = criterion_for(&cfg);
    let selection = Selection::parse(["--bench".to_string()]).unwrap();
    let summary =
        harness::run_op(&mut c, &RefusedWithBeside, &selection, &cfg, &[Device::CPU]).unwrap();
    let run = Run::load(&summary.path.unwrap()).unwrap();
    // 3 modes of the refused case + its case beside
    assert_eq!(run.results.len(), 4);
    assert!(run.results.iter().all(|r| r.status == Status::Unsupported));
    let aside = run.results.iter().find(|r| r.site == "aside").unwrap();
    assert_eq!(aside.mode, Mode::Pipelined);
    let note = aside.note.as_deref().unwrap();
    assert!(
        note.contains("timed beside floor/refused/add1") && note.contains("no such kernel"),
        "{note}"
    );
}
