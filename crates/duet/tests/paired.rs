//! The driver and its verdicts on synthetic workers whose truth is planted: a host that
//! switches between a fast and a slow state at random (shared by both sides, as one
//! machine is), a side made slower by a known factor, a worker that dies mid-run, a case
//! one side does not list.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use duet::driver::{Group, Settings, Side};
use duet::protocol::{CaseName, PROTOCOL, Prepared, Reply, Request, Sampled};
use duet::verdict::CaseVerdict;
use duet::worker::{Worker, WorkerError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use stats::Verdict;

/// The machine both sides run on: its state (1.0 fast, `slow` slow) switches at random
/// before a sample of more than one call with probability `switch`. A sample right after the other side's
/// costs `refill` more (the caches the two share hold the other side's data).
struct Host {
    state: f64,
    slow: f64,
    switch: f64,
    rng: StdRng,
    refill: f64,
    last: Option<&'static str>,
}

impl Host {
    fn shared(slow: f64, switch: f64, seed: u64) -> Rc<RefCell<Host>> {
        Rc::new(RefCell::new(Host {
            state: 1.0,
            slow,
            switch,
            rng: StdRng::seed_from_u64(seed),
            refill: 0.0,
            last: None,
        }))
    }

    /// The factor of a sample by `who`: the other side's data to refill, or none.
    fn after(&mut self, who: &'static str) -> f64 {
        let cold = self.last.is_some_and(|l| l != who);
        self.last = Some(who);
        if cold { 1.0 + self.refill } else { 1.0 }
    }

    /// The state for the next sample of `calls` calls, and a noise factor. A change of
    /// state comes with time: never within one call.
    fn next(&mut self, noise: f64, calls: u64) -> f64 {
        if calls > 1 && self.rng.random_bool(self.switch) {
            self.state = if self.state == 1.0 { self.slow } else { 1.0 };
        }
        let n: f64 = self.rng.random_range(-1.0..1.0);
        self.state * (1.0 + noise * n)
    }
}

fn fields(i: usize, mode: &str) -> Vec<String> {
    [
        "linear",
        "aten",
        &format!("site{i}"),
        "qwen3-0.6b",
        "decode",
        "1",
        "1",
        "",
        "f16",
        "cuda:0",
        mode,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn key(f: &[String]) -> String {
    rundir::CaseKey::from_fields(f)
        .expect("a valid key")
        .to_string()
}

/// A synthetic worker: `cases` device cases of 2 µs a call and host cases of 5 µs,
/// slowed by `factor`; it dies at its `die_at`-th sample.
struct Fake {
    host: Rc<RefCell<Host>>,
    factor: f64,
    cases: Vec<(String, Vec<String>, f64)>,
    samples: usize,
    die_at: Option<usize>,
    label: &'static str,
    /// Device memory both sides share (units in use, capacity) and the keys that need a
    /// unit of it; what this worker holds.
    memory: Option<(Rc<RefCell<usize>>, usize, String)>,
    held: BTreeSet<String>,
    /// This process's own level (what a fresh process and its allocations share), and
    /// each sample's noise.
    level: f64,
    noise: f64,
    /// Where the device time depends on where a case's tensors sit: by how much (±). A
    /// case made without a placement sits where the process's allocations put it (its
    /// `level`); one made with `place` sits where the seed says. Each key's factor.
    placement: Option<f64>,
    placed: std::collections::BTreeMap<String, f64>,
    /// What preparing a case costs, in real time; a host-timed one costs `prepare_host` on top.
    prepare: Duration,
    prepare_host: Duration,
    /// A case whose every sample says 3 of its chunks ran uncovered.
    uncovered_on: Option<String>,
    /// The slowdown is a planted device spin its device samples report (`planted_ns`).
    spin: bool,
}

impl Drop for Fake {
    fn drop(&mut self) {
        // a process that ends gives back what it held
        if let Some((used, _, _)) = &self.memory {
            *used.borrow_mut() -= self.held.len();
        }
    }
}

impl Fake {
    fn new(host: &Rc<RefCell<Host>>, factor: f64, n: usize, label: &'static str) -> Self {
        let mut cases = Vec::new();
        for i in 0..n {
            for (mode, per) in [("device", 2_000.0), ("pipelined", 5_000.0)] {
                let f = fields(i, mode);
                cases.push((key(&f), f, per));
            }
        }
        Fake {
            host: host.clone(),
            factor,
            cases,
            samples: 0,
            die_at: None,
            label,
            memory: None,
            held: BTreeSet::new(),
            level: 1.0,
            noise: 0.01,
            placement: None,
            placed: Default::default(),
            prepare: Duration::ZERO,
            prepare_host: Duration::ZERO,
            uncovered_on: None,
            spin: false,
        }
    }
}

impl Worker for Fake {
    fn call(&mut self, req: &Request) -> Result<Reply, WorkerError> {
        Ok(match req {
            Request::Hello => Reply::Hello {
                protocol: PROTOCOL,
                ops: vec!["linear".into()],
                env: serde_json::json!({
                    "backend": "cuda", "devices": ["cuda:0"], "device_name": "a planted GPU",
                    "libtorch_version": "2.11.0", "tch_version": "0.24.0", "os": "linux",
                    "cpu_model": "planted", "opbench_version": "0.1.0", "schema_version": 6,
                }),
            },
            Request::Cases { .. } => Reply::Cases {
                cases: self
                    .cases
                    .iter()
                    .map(|(k, f, _)| CaseName {
                        key: k.clone(),
                        fields: f.clone(),
                        ..Default::default()
                    })
                    .collect(),
                unsupported: vec![],
            },
            Request::Prepare { key, place } => {
                std::thread::sleep(self.prepare);
                if !key.ends_with("/device") {
                    std::thread::sleep(self.prepare_host);
                }
                if !self.cases.iter().any(|c| &c.0 == key) {
                    return Ok(Reply::Error {
                        message: format!("unknown case {key}"),
                    });
                }
                if let Some(amp) = self.placement {
                    // the seed's bits mixed (splitmix64), so that the two sides' seeds of a
                    // pair, which differ in their last byte, draw unrelated places
                    let here = place.map_or(self.level, |s| {
                        let mut z = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                        z ^= z >> 31;
                        1.0 + amp * ((z % 10_000) as f64 / 5_000.0 - 1.0)
                    });
                    self.placed.insert(key.clone(), here);
                }
                if let Some((used, cap, big)) = &self.memory
                    && key == big
                    && !self.held.contains(key)
                {
                    if *used.borrow() >= *cap {
                        return Ok(Reply::Prepared(Prepared {
                            key: key.clone(),
                            status: rundir::Status::Oom,
                            reason: Some("CUDA out of memory (planted)".into()),
                            ..Prepared::default()
                        }));
                    }
                    *used.borrow_mut() += 1;
                    self.held.insert(key.clone());
                }
                Reply::Prepared(Prepared {
                    key: key.clone(),
                    status: rundir::Status::Ok,
                    rel_err: Some(1e-4),
                    dims: "m=1".into(),
                    ..Prepared::default()
                })
            }
            Request::Sample { key, iters } => {
                self.samples += 1;
                if self.die_at == Some(self.samples) {
                    return Err(WorkerError::Died {
                        what: self.label.into(),
                        why: "signal: 11 (SIGSEGV)".into(),
                    });
                }
                let per = self.cases.iter().find(|c| &c.0 == key).map_or(1.0, |c| c.2);
                let mut host = self.host.borrow_mut();
                let level = self.placed.get(key).copied().unwrap_or(self.level);
                let state = host.next(self.noise, *iters) * level * host.after(self.label);
                drop(host);
                let total_ns = *iters as f64 * per * self.factor * state;
                let spun = self.spin && key.ends_with("/device");
                Reply::Sample(Sampled {
                    key: key.clone(),
                    calls: *iters,
                    total_ns,
                    control_ns: Some(800.0 * state),
                    uncovered: self.uncovered_on.as_ref().filter(|k| *k == key).map(|_| 3),
                    planted_ns: spun.then(|| total_ns * (1.0 - 1.0 / self.factor)),
                    ..Sampled::default()
                })
            }
            Request::Release { key } => {
                if let Some((used, _, _)) = &self.memory
                    && self.held.remove(key)
                {
                    *used.borrow_mut() -= 1;
                }
                Reply::Released { key: key.clone() }
            }
            Request::Quit => Reply::Bye,
        })
    }

    fn label(&self) -> String {
        self.label.into()
    }
}

fn settings() -> Settings {
    Settings {
        warmup: Duration::ZERO,
        budget: duet::driver::Budget::Total(Duration::from_secs(600)),
        ..Settings::default()
    }
}

/// Run `n` cases a mode with the candidate slowed by `factor`.
fn compare(factor: f64, n: usize, slow: f64, seed: u64) -> duet::Verdicts {
    compare_on(Host::shared(slow, 0.15, seed), factor, n)
}

/// [`compare`] on a host made by the caller.
fn compare_on(host: Rc<RefCell<Host>>, factor: f64, n: usize) -> duet::Verdicts {
    let (h1, h2) = (host.clone(), host.clone());
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(move || Ok(Box::new(Fake::new(&h1, 1.0, n, "base")) as Box<dyn Worker>)),
        cand: Box::new(move || Ok(Box::new(Fake::new(&h2, factor, n, "cand")) as Box<dyn Worker>)),
    }];
    let outcome = duet::run(&mut groups, &settings(), &mut |_| {}).expect("runs");
    duet::judge(&outcome)
}

fn share(v: &duet::Verdicts, j: Verdict) -> f64 {
    let judged = v
        .cases
        .iter()
        .filter(|c| matches!(c.verdict, CaseVerdict::Judged(_)))
        .count();
    let hit = v
        .cases
        .iter()
        .filter(|c| c.verdict == CaseVerdict::Judged(j))
        .count();
    hit as f64 / judged as f64
}

#[test]
fn a_slow_state_both_sides_share_at_random_gives_no_verdict() {
    // the host runs 1.4× slower at random moments, a sample at a time: pairing cancels it
    for seed in 1..=3 {
        let v = compare(1.0, 20, 1.4, seed);
        assert_eq!(v.exit_code(), 0, "seed {seed}: {:?}", v.regressions);
        assert_eq!(share(&v, Verdict::Slower), 0.0);
        assert_eq!(share(&v, Verdict::Faster), 0.0);
        assert!(
            share(&v, Verdict::Same) >= 0.9,
            "seed {seed}: {:?}",
            v.counts()
        );
        for f in &v.families {
            assert_ne!(f.judgement, Verdict::Slower, "{}", f.name);
            assert_ne!(f.judgement, Verdict::Faster, "{}", f.name);
        }
    }
}

#[test]
fn a_sample_after_the_other_side_costing_more_gives_no_verdict() {
    // both sides on the same CPUs share its caches: a sample right after the other side's
    // refills them (a CPU's linear cases read +8% for it). An untimed call before each
    // sample takes that; without it the median of the pairs, bimodal at ±8%, read -2% to
    // -4% in A/A (2-core VM, 2026-12-04)
    for seed in 1..=3 {
        let host = Host::shared(1.0, 0.0, seed);
        host.borrow_mut().refill = 0.08;
        let v = compare_on(host, 1.0, 20);
        assert_eq!(v.exit_code(), 0, "seed {seed}: {:?}", v.regressions);
        assert_eq!(
            share(&v, Verdict::Faster),
            0.0,
            "seed {seed}: {:?}",
            v.counts()
        );
        assert!(
            share(&v, Verdict::Same) >= 0.9,
            "seed {seed}: {:?}",
            v.counts()
        );
        for f in &v.families {
            assert_eq!(f.judgement, Verdict::Same, "seed {seed}: {}", f.name);
        }
    }
}

#[test]
fn five_percent_on_one_side_is_found_per_case_and_globally() {
    let v = compare(1.05, 20, 1.4, 7);
    assert_eq!(v.exit_code(), 1);
    assert!(share(&v, Verdict::Slower) >= 0.8, "{:?}", v.counts());
    assert_eq!(share(&v, Verdict::Faster), 0.0);
    assert_eq!(share(&v, Verdict::Same), 0.0);
    for name in ["all host-bound cases", "all stream-launched device cases"] {
        let f = v.families.iter().find(|f| f.name == name).expect(name);
        assert_eq!(f.judgement, Verdict::Slower, "{name}");
        let (r, _, _) = f.pooled.ratio();
        assert!((r - 1.05).abs() < 0.01, "{name}: {r}");
    }
    assert!(v.regressions.iter().any(|r| r.contains("slower beyond")));
}

#[test]
fn same_never_claims_more_than_its_interval_resolves() {
    // +2% with the fewest rounds: what is not inside its tolerance is ambiguous, with its
    // resolution, never `same`
    let host = Host::shared(1.0, 0.0, 3);
    let (h1, h2) = (host.clone(), host.clone());
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(move || Ok(Box::new(Fake::new(&h1, 1.0, 10, "base")) as Box<dyn Worker>)),
        cand: Box::new(move || Ok(Box::new(Fake::new(&h2, 1.02, 10, "cand")) as Box<dyn Worker>)),
    }];
    let s = Settings {
        looks: stats::paired::Looks {
            first: 2,
            max: 2,
            alpha: 0.05,
        },
        ..settings()
    };
    let outcome = duet::run(&mut groups, &s, &mut |_| {}).expect("runs");
    let v = duet::judge(&outcome);
    for c in &v.cases {
        let (_, lo, hi) = c.ratio.expect("judged");
        let tol = 1.0 + c.tolerance.expect("judged").frac;
        let inside = lo >= 1.0 / tol && hi <= tol;
        assert_eq!(
            c.verdict == CaseVerdict::Judged(Verdict::Same),
            inside,
            "{c:?}"
        );
        if c.verdict == CaseVerdict::Judged(Verdict::Ambiguous) {
            assert!(c.resolution.is_some_and(|x| x > 0.0), "{c:?}");
        }
    }
}

#[test]
fn a_worker_that_dies_ends_its_case_as_error_and_the_run_goes_on() {
    let host = Host::shared(1.0, 0.0, 5);
    let (h1, h2) = (host.clone(), host.clone());
    let starts = Rc::new(RefCell::new(0));
    let s2 = starts.clone();
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(move || Ok(Box::new(Fake::new(&h1, 1.0, 6, "base")) as Box<dyn Worker>)),
        cand: Box::new(move || {
            *s2.borrow_mut() += 1;
            let mut f = Fake::new(&h2, 1.0, 6, "cand");
            // the first process the cases are timed by dies at its 50th sample: the third
            // case's 10th (2 single calls, 2 warm-up samples, then an untimed call and a
            // sample a pair: in its third pair)
            if *s2.borrow() == 2 {
                f.die_at = Some(50);
            }
            Ok(Box::new(f) as Box<dyn Worker>)
        }),
    }];
    let outcome = duet::run(&mut groups, &settings(), &mut |_| {}).expect("runs on");
    let died: Vec<_> = outcome.cases.iter().filter(|c| c.ended.is_some()).collect();
    assert_eq!(died.len(), 1, "one case ends");
    let e = died[0].ended.as_ref().expect("ended");
    assert_eq!(e.status, rundir::Status::Error);
    assert_eq!(e.side, Some(Side::Cand));
    assert!(e.reason.contains("SIGSEGV"), "{}", e.reason);
    // the pairs before the crash are kept
    assert!(!died[0].pairs.is_empty());
    let v = duet::judge(&outcome);
    let judged = v
        .cases
        .iter()
        .filter(|c| matches!(c.verdict, CaseVerdict::Judged(_)))
        .count();
    assert_eq!(
        judged,
        outcome.cases.len() - 1,
        "every other case is judged"
    );
    assert!(*starts.borrow() >= 4, "the dead side was restarted");

    // both sides' samples are written; the case's rows say why
    let dir = tempfile::tempdir().expect("tmp");
    let w = duet::write::write(dir.path(), "t", &outcome, &v, ["a", "b"]).expect("writes");
    let base = rundir::Run::load(&w.base).expect("a valid run directory");
    let cand = rundir::Run::load(&w.cand).expect("a valid run directory");
    let row = cand.row(&died[0].key).expect("its row");
    assert_eq!(row.status, rundir::Status::Error);
    let kept = base.samples().expect("samples");
    assert_eq!(kept[&died[0].key].len(), died[0].pairs.len());
    assert!(kept.values().flatten().all(|s| s.pair.is_some()));
}

#[test]
fn a_case_one_side_does_not_list_is_a_row_not_a_crash() {
    let host = Host::shared(1.0, 0.0, 9);
    let (h1, h2) = (host.clone(), host.clone());
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(move || Ok(Box::new(Fake::new(&h1, 1.0, 4, "base")) as Box<dyn Worker>)),
        cand: Box::new(move || {
            let mut f = Fake::new(&h2, 1.0, 4, "cand");
            f.cases.pop();
            Ok(Box::new(f) as Box<dyn Worker>)
        }),
    }];
    let outcome = duet::run(&mut groups, &settings(), &mut |_| {}).expect("runs");
    let v = duet::judge(&outcome);
    let gone: Vec<_> = v
        .cases
        .iter()
        .filter(|c| c.note.contains("the candidate does not list"))
        .collect();
    assert_eq!(gone.len(), 1);
    assert_eq!(
        gone[0].verdict,
        CaseVerdict::NotTimed(rundir::Status::Unsupported)
    );
    let names: BTreeSet<&str> = v.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), 8);
}

#[cfg(unix)]
mod process {
    use super::*;
    use duet::worker::Spawn;

    fn sh(script: &str) -> Spawn {
        Spawn {
            exe: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![],
            label: "fake".into(),
        }
    }

    #[test]
    fn a_garbled_reply_and_a_dead_worker_are_errors_naming_the_worker() {
        let mut w = sh("read l; echo 'chatter from a library'; echo '{\"reply\": nonsense'")
            .start()
            .expect("starts");
        match w.call(&Request::Hello) {
            Err(WorkerError::Garbled { what, .. }) => assert_eq!(what, "fake"),
            other => panic!("{other:?}"),
        }
        let mut w = sh("read l; exit 3").start().expect("starts");
        match w.call(&Request::Hello) {
            Err(WorkerError::Died { why, .. }) => assert!(why.contains('3'), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}

/// Workers whose device holds one case of a kind at a time: `big`, while the other cases
/// fit twice.
fn with_one_device(factor: f64, seed: u64) -> (duet::driver::Outcome, String) {
    let host = Host::shared(1.0, 0.0, seed);
    let used = Rc::new(RefCell::new(0usize));
    let big = key(&fields(0, "device"));
    let make = |h: Rc<RefCell<Host>>, f: f64, label: &'static str| {
        let (used, big) = (used.clone(), big.clone());
        Box::new(move || {
            let mut w = Fake::new(&h, f, 4, label);
            w.memory = Some((used.clone(), 1, big.clone()));
            Ok(Box::new(w) as Box<dyn Worker>)
        }) as Box<dyn FnMut() -> Result<Box<dyn Worker>, WorkerError>>
    };
    let mut groups = vec![Group {
        name: "linear".into(),
        base: make(host.clone(), 1.0, "base"),
        cand: make(host.clone(), factor, "cand"),
    }];
    let outcome = duet::run(&mut groups, &settings(), &mut |_| {}).expect("runs");
    assert_eq!(*used.borrow(), 0, "every unit given back");
    (outcome, big)
}

#[test]
fn a_case_that_does_not_fit_twice_runs_unpaired_and_says_so() {
    for (factor, want) in [(1.05, Verdict::Slower), (1.0, Verdict::Same)] {
        let (outcome, big) = with_one_device(factor, 11);
        let run = outcome
            .cases
            .iter()
            .find(|c| c.name == big)
            .expect("the big case");
        assert!(run.ended.is_none(), "{:?}", run.ended);
        assert!(
            run.unpaired
                .as_deref()
                .is_some_and(|u| u.contains("does not fit"))
        );
        assert!(run.pairs.len() >= 16, "{} pairs", run.pairs.len());
        let others = outcome.cases.iter().filter(|c| c.name != big);
        assert!(
            others
                .clone()
                .all(|c| c.unpaired.is_none() && c.ended.is_none())
        );
        let v = duet::judge(&outcome);
        let line = v.cases.iter().find(|c| c.name == big).expect("its line");
        assert!(
            line.unpaired && line.note.starts_with("unpaired"),
            "{line:?}"
        );
        assert_eq!(
            line.verdict,
            CaseVerdict::Judged(want),
            "factor {factor}: {line:?}"
        );
        let (r, _, _) = line.ratio.expect("judged");
        assert!((r - factor).abs() < 0.02, "factor {factor}: read {r}");
        // it is listed with why, even when `same`
        let mut md = String::new();
        let dir = tempfile::tempdir().expect("tmp");
        let w = duet::write::write(dir.path(), "u", &outcome, &v, ["a", "b"]).expect("writes");
        md.push_str(&std::fs::read_to_string(&w.summary).expect("summary"));
        assert!(md.contains("does not fit in device memory twice"), "{md}");
    }
}

#[test]
fn a_stored_comparison_judged_again_gives_the_same_verdicts() {
    // a comparison with a planted +5%, written as `opbench ab` writes it, read back
    let host = Host::shared(1.4, 0.15, 9);
    let (h1, h2) = (host.clone(), host.clone());
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(move || Ok(Box::new(Fake::new(&h1, 1.0, 12, "base")) as Box<dyn Worker>)),
        cand: Box::new(move || Ok(Box::new(Fake::new(&h2, 1.05, 12, "cand")) as Box<dyn Worker>)),
    }];
    // looks other than the default's, so that reading them back is what is checked
    let looks = stats::paired::Looks {
        max: 6,
        ..stats::paired::Looks::default()
    };
    let s = Settings {
        looks,
        ..settings()
    };
    let outcome = duet::run(&mut groups, &s, &mut |_| {}).expect("runs");
    let v = duet::judge(&outcome);
    assert!(share(&v, Verdict::Slower) > 0.5, "{:?}", v.counts());
    let dir = tempfile::tempdir().expect("tmp");
    let w = duet::write::write(dir.path(), "t", &outcome, &v, ["a", "b"]).expect("writes");
    let base = rundir::Run::load(&w.base).expect("base");
    let cand = rundir::Run::load(&w.cand).expect("cand");
    let again = duet::replay::outcome(&base, &cand).expect("read back");
    assert_eq!(again.settings.pairs, outcome.settings.pairs);
    assert_eq!(again.settings.looks, looks, "the looks it was judged at");
    let v2 = duet::judge(&again);
    assert_eq!(v2.exit_code(), v.exit_code());
    assert_eq!(v2.counts(), v.counts());
    for c in &v.cases {
        let d = v2
            .cases
            .iter()
            .find(|d| d.name == c.name)
            .expect("the case");
        assert_eq!(d.verdict, c.verdict, "{}", c.name);
        assert_eq!(d.pairs, c.pairs, "{}", c.name);
        let (r, r2) = (c.ratio.expect("ratio").0, d.ratio.expect("ratio").0);
        assert!((r / r2 - 1.0).abs() < 1e-6, "{}: {r} {r2}", c.name);
    }
    let fam = |v: &duet::Verdicts| -> Vec<(String, Verdict)> {
        v.families
            .iter()
            .map(|f| (f.name.clone(), f.judgement))
            .collect()
    };
    assert_eq!(fam(&v2), fam(&v));
    // a run of separate executions is not a paired comparison
    let e = duet::replay::outcome(&base, &base).map(|_| ());
    assert!(e.is_ok(), "the same side twice reads as an A/A");
    let mut plain = base.clone();
    plain
        .env
        .as_mut()
        .expect("env")
        .settings
        .remove("pairs_per_round");
    let err = duet::replay::outcome(&plain, &cand).expect_err("not paired");
    assert!(err.to_string().contains("pairs_per_round"), "{err}");
}

#[test]
fn where_rounds_differ_more_than_pairs_visits_take_fewer_pairs_and_replay_keeps_rounds() {
    // each fresh process runs at its own level (±2%), its samples within 0.05% of it: the
    // process term rules, so after two rounds a visit takes 2 pairs, not 8; a stored run
    // read back numbers its pairs' rounds as they ran
    let host = Host::shared(1.0, 0.0, 11);
    let levels = Rc::new(RefCell::new(StdRng::seed_from_u64(5)));
    let make = |factor: f64, label: &'static str| {
        let (h, l) = (host.clone(), levels.clone());
        move || {
            let mut f = Fake::new(&h, factor, 8, label);
            f.level = 1.0 + 0.02 * l.borrow_mut().random_range(-1.0..1.0);
            f.noise = 0.0005;
            Ok(Box::new(f) as Box<dyn Worker>)
        }
    };
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(make(1.0, "base")),
        cand: Box::new(make(1.0, "cand")),
    }];
    let outcome = duet::run(&mut groups, &settings(), &mut |_| {}).expect("runs");
    assert_eq!(outcome.pairs, (2, 2));
    let undecided = outcome
        .cases
        .iter()
        .find(|c| c.visits > 2)
        .expect("a third round");
    assert_eq!(
        undecided.pairs.len(),
        16 + 2 * (undecided.visits as usize - 2)
    );
    let v = duet::judge(&outcome);
    let dir = tempfile::tempdir().expect("tmp");
    let w = duet::write::write(dir.path(), "t", &outcome, &v, ["a", "b"]).expect("writes");
    let base = rundir::Run::load(&w.base).expect("base");
    let cand = rundir::Run::load(&w.cand).expect("cand");
    let again = duet::replay::outcome(&base, &cand).expect("read back");
    assert_eq!(again.pairs, outcome.pairs);
    for c in &outcome.cases {
        let d = again
            .cases
            .iter()
            .find(|d| d.name == c.name)
            .expect("the case");
        let rounds =
            |x: &duet::driver::CaseRun| x.pairs.iter().map(|p| p.round).collect::<Vec<_>>();
        assert_eq!(rounds(d), rounds(c), "{}", c.name);
    }
    assert_eq!(duet::judge(&again).counts(), v.counts());
}

#[test]
fn where_pairs_differ_more_than_rounds_visits_take_more_pairs_up_to_the_most() {
    // each sample within ±5% (an H200 host's dispatch-bound samples: a pair's sd 2.9%),
    // each fresh process at its own level within ±0.2%, and a visit's preparation costing
    // what ten pairs do: after two rounds of 8 pairs a visit takes more, at most
    // `max_pairs`
    let host = Host::shared(1.0, 0.0, 17);
    let levels = Rc::new(RefCell::new(StdRng::seed_from_u64(3)));
    let make = |label: &'static str| {
        let (h, l) = (host.clone(), levels.clone());
        move || {
            let mut f = Fake::new(&h, 1.0, 6, label);
            f.level = 1.0 + 0.002 * l.borrow_mut().random_range(-1.0..1.0);
            f.noise = 0.05;
            f.prepare = Duration::from_millis(1);
            Ok(Box::new(f) as Box<dyn Worker>)
        }
    };
    for most in [32, 12] {
        let mut groups = vec![Group {
            name: "linear".into(),
            base: Box::new(make("base")),
            cand: Box::new(make("cand")),
        }];
        let s = Settings {
            sample: Duration::from_micros(100),
            max_pairs: most,
            ..settings()
        };
        let outcome = duet::run(&mut groups, &s, &mut |_| {}).expect("runs");
        let host_timed = outcome.pairs.0;
        assert!(host_timed > 8 && host_timed <= most, "{most}: {host_timed}");
    }
}

/// Device cases whose time depends on where their tensors sit (±4%), each process's
/// small cases all where its allocations put them (its own level), their samples within
/// 0.05%; the candidate slowed by `factor`, the cases placed as `placement` says.
fn compare_placed(factor: f64, placement: duet::driver::Placement, seed: u64) -> duet::Verdicts {
    let outcome = run_placed(factor, placement, seed);
    duet::judge(&outcome)
}

/// [`compare_placed`]'s comparison, before it is judged.
fn run_placed(factor: f64, placement: duet::driver::Placement, seed: u64) -> duet::driver::Outcome {
    let host = Host::shared(1.0, 0.0, seed);
    let levels = Rc::new(RefCell::new(StdRng::seed_from_u64(seed)));
    let make = |factor: f64, label: &'static str| {
        let (h, l) = (host.clone(), levels.clone());
        move || {
            let mut f = Fake::new(&h, factor, 12, label);
            f.cases.retain(|c| c.0.ends_with("/device"));
            f.level = 1.0 + 0.04 * l.borrow_mut().random_range(-1.0..1.0);
            f.placement = Some(0.01);
            f.noise = 0.0005;
            Ok(Box::new(f) as Box<dyn Worker>)
        }
    };
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(make(1.0, "base")),
        cand: Box::new(make(factor, "cand")),
    }];
    let s = Settings {
        placement,
        seed,
        looks: stats::paired::Looks {
            first: 2,
            max: 4,
            alpha: 0.05,
        },
        ..settings()
    };
    duet::run(&mut groups, &s, &mut |_| {}).expect("runs")
}

#[test]
fn a_comparison_says_and_stores_where_its_device_cases_were_placed() {
    use duet::driver::Placement;
    let outcome = run_placed(1.0, Placement::EachPair, 1);
    let v = duet::judge(&outcome);
    assert!(
        duet::write::summary_md(&outcome, &v, ["a", "b"])
            .contains("each device-timed pair in a fresh placement")
    );
    let dir = tempfile::tempdir().expect("tmp");
    let w = duet::write::write(dir.path(), "t", &outcome, &v, ["a", "b"]).expect("writes");
    let base = rundir::Run::load(&w.base).expect("base");
    let cand = rundir::Run::load(&w.cand).expect("cand");
    let stored = |r: &rundir::Run| {
        r.env
            .as_ref()
            .and_then(|e| e.settings.get("placement").cloned())
    };
    assert_eq!(stored(&base).as_deref(), Some("each-pair"));
    let again = duet::replay::outcome(&base, &cand).expect("read back");
    assert_eq!(again.settings.placement, Placement::EachPair);
    let once = run_placed(1.0, Placement::Once, 1);
    let text = duet::write::summary_md(&once, &duet::judge(&once), ["a", "b"]);
    assert!(!text.contains("fresh placement"), "{text}");
}

#[test]
fn a_planted_device_spin_is_reported_as_its_events_timed_it() {
    let host = Host::shared(1.0, 0.0, 3);
    let make = |factor: f64, label: &'static str| {
        let h = host.clone();
        move || {
            let mut f = Fake::new(&h, factor, 6, label);
            f.spin = true;
            f.noise = 0.0005;
            Ok(Box::new(f) as Box<dyn Worker>)
        }
    };
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(make(1.0, "base")),
        cand: Box::new(make(1.05, "cand")),
    }];
    let outcome = duet::run(&mut groups, &settings(), &mut |_| {}).expect("runs");
    let text = duet::write::summary_md(&outcome, &duet::judge(&outcome), ["a", "b"]);
    assert!(
        text.contains("base +0.00% [+0.00, +0.00], candidate +5.00% [+5.00, +5.00] (median over 6 device cases"),
        "{text}"
    );
    // no plant, no line
    let plain = run_placed(1.05, duet::driver::Placement::Once, 3);
    let text = duet::write::summary_md(&plain, &duet::judge(&plain), ["a", "b"]);
    assert!(!text.contains("Planted device spin"), "{text}");
}

#[test]
fn a_fresh_placement_each_pair_averages_what_a_process_shares_among_its_device_cases() {
    use duet::driver::Placement;
    // placed once a visit, a round's cases all carry its two processes' levels; placed
    // afresh each pair, the pairs average them
    for seed in 1..=3 {
        let each = compare_placed(1.0, Placement::EachPair, seed);
        assert_eq!(
            each.exit_code(),
            0,
            "seed {seed}: {:?} {:?}",
            each.regressions,
            each.cases
                .iter()
                .filter(|c| c.verdict != CaseVerdict::Judged(Verdict::Same))
                .collect::<Vec<_>>()
        );
        assert!(
            share(&each, Verdict::Same) >= 0.9,
            "seed {seed}: {:?}",
            each.counts()
        );
        let slow = compare_placed(1.05, Placement::EachPair, seed);
        assert!(
            share(&slow, Verdict::Slower) >= 0.9,
            "seed {seed}: {:?}",
            slow.counts()
        );
    }
}

#[test]
fn the_same_op_from_python_is_a_family_of_its_own() {
    // the bench binary's linear cases and scripts/peer.py's (variant `py-aten`) in one
    // comparison: two families of `linear pipelined`, one of them from Python
    let host = Host::shared(1.0, 0.0, 7);
    let (h1, h2) = (host.clone(), host.clone());
    let with_python = |h: &Rc<RefCell<Host>>, label| {
        let mut w = Fake::new(h, 1.0, 4, label);
        for i in 0..4 {
            let mut f = fields(i, "pipelined");
            f[1] = "py-aten".into();
            w.cases.push((key(&f), f, 9_000.0));
        }
        w
    };
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(move || Ok(Box::new(with_python(&h1, "base")) as Box<dyn Worker>)),
        cand: Box::new(move || Ok(Box::new(with_python(&h2, "cand")) as Box<dyn Worker>)),
    }];
    let outcome = duet::run(&mut groups, &settings(), &mut |_| {}).expect("runs");
    let names: Vec<String> = duet::judge(&outcome)
        .families
        .into_iter()
        .map(|f| f.name)
        .filter(|n| n.starts_with("linear pipelined"))
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("linear pipelined from Python")),
        "{names:?}"
    );
    assert!(names.iter().any(|n| !n.contains("Python")), "{names:?}");
}

#[test]
fn a_comparison_says_and_stores_its_timing_cpu_where_it_has_gpu_cases() {
    let mut outcome = run_placed(1.0, duet::driver::Placement::Once, 1);
    outcome.settings.timing_cpu = Some("15".into());
    let v = duet::judge(&outcome);
    let text = duet::write::summary_md(&outcome, &v, ["a", "b"]);
    assert!(text.contains("(a GPU case's samples on CPU 15)"), "{text}");
    let dir = tempfile::tempdir().expect("tmp");
    let w = duet::write::write(dir.path(), "t", &outcome, &v, ["a", "b"]).expect("writes");
    let base = rundir::Run::load(&w.base).expect("base");
    let cand = rundir::Run::load(&w.cand).expect("cand");
    let again = duet::replay::outcome(&base, &cand).expect("read back");
    assert_eq!(again.settings.timing_cpu.as_deref(), Some("15"));
    // no GPU case: nothing to say of it
    for c in &mut outcome.cases {
        c.key.series.device = rundir::DeviceId::CPU;
    }
    let text = duet::write::summary_md(&outcome, &v, ["a", "b"]);
    assert!(!text.contains("GPU case's samples"), "{text}");
}

#[test]
fn a_device_case_whose_chunks_ran_uncovered_is_marked_an_upper_bound() {
    let host = Host::shared(1.0, 0.0, 21);
    let bound = key(&fields(1, "device"));
    let (h1, h2, k) = (host.clone(), host.clone(), bound.clone());
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(move || Ok(Box::new(Fake::new(&h1, 1.0, 3, "base")) as Box<dyn Worker>)),
        cand: Box::new(move || {
            let mut w = Fake::new(&h2, 1.0, 3, "cand");
            w.uncovered_on = Some(k.clone());
            Ok(Box::new(w) as Box<dyn Worker>)
        }),
    }];
    let outcome = duet::run(&mut groups, &settings(), &mut |_| {}).expect("runs");
    let v = duet::judge(&outcome);
    for line in &v.cases {
        assert_eq!(
            line.note.starts_with("upper bound: in 0 base and "),
            line.name == bound,
            "{line:?}"
        );
    }
    let dir = tempfile::tempdir().expect("tmp");
    let w = duet::write::write(dir.path(), "u", &outcome, &v, ["a", "b"]).expect("writes");
    let run = outcome
        .cases
        .iter()
        .find(|c| c.name == bound)
        .expect("its run");
    let base = rundir::Run::load(&w.base).expect("base");
    let cand = rundir::Run::load(&w.cand).expect("cand");
    let key = &run.key;
    assert_eq!(base.row(key).expect("base row").uncovered_chunks, Some(0));
    let told = cand.row(key).expect("cand row").uncovered_chunks;
    assert_eq!(told, Some(3 * run.pairs.len() as u64));
    assert!(told.is_some_and(|n| n >= 6), "{told:?}");
    // a case no worker said anything of keeps the column empty
    let other = outcome
        .cases
        .iter()
        .find(|c| c.name != bound)
        .expect("another");
    assert_eq!(cand.row(&other.key).expect("row").uncovered_chunks, None);
    // judged again from the stored runs, it is still an upper bound
    let again = duet::judge(&duet::replay::outcome(&base, &cand).expect("read back"));
    let line = again
        .cases
        .iter()
        .find(|c| c.name == bound)
        .expect("its line");
    assert!(
        line.note.starts_with("upper bound: in 0 base and "),
        "{line:?}"
    );
}

#[test]
fn where_a_full_round_no_longer_fits_the_device_cases_take_rounds_of_their_own() {
    // every case at its fresh process's level (±2%), so none is decided early; a host-timed
    // visit costs 100 ms a side to prepare, a device-timed one nothing: a full round takes
    // 0.8 s. With a budget of 2 s the two first rounds leave ~0.4 s, too little for a
    // third full round and plenty for the device-timed cases alone, each round in fresh
    // processes (the margin keeps it so on a loaded machine)
    let host = Host::shared(1.0, 0.0, 23);
    let levels = Rc::new(RefCell::new(StdRng::seed_from_u64(7)));
    let make = |label: &'static str, prepare_host: Duration| {
        let (h, l) = (host.clone(), levels.clone());
        move || {
            let mut f = Fake::new(&h, 1.0, 4, label);
            f.level = 1.0 + 0.02 * l.borrow_mut().random_range(-1.0..1.0);
            f.noise = 0.0005;
            f.prepare_host = prepare_host;
            Ok(Box::new(f) as Box<dyn Worker>)
        }
    };
    let run = |budget: Duration, prepare_host: Duration| {
        let mut groups = vec![Group {
            name: "linear".into(),
            base: Box::new(make("base", prepare_host)),
            cand: Box::new(make("cand", prepare_host)),
        }];
        // samples that say 0.1 ms, so the plan's pair cost, read from what the samples
        // say, is the fake's real time too (the preparation is)
        let s = Settings {
            budget: duet::driver::Budget::Total(budget),
            sample: Duration::from_micros(100),
            ..settings()
        };
        duet::run(&mut groups, &s, &mut |_| {}).expect("runs")
    };
    let visits = |o: &duet::driver::Outcome, device: bool| {
        o.cases
            .iter()
            .filter(|c| c.key.mode.is_device() == device)
            .map(|c| c.visits)
            .max()
            .unwrap_or(0)
    };
    let short = run(Duration::from_secs(2), Duration::from_millis(100));
    let (host_rounds, device_rounds) = (visits(&short, false), visits(&short, true));
    assert!(
        short.device_only_rounds >= 1,
        "{}",
        short.device_only_rounds
    );
    assert!(host_rounds < 8, "{host_rounds}");
    assert_eq!(
        device_rounds,
        host_rounds + short.device_only_rounds,
        "{host_rounds}"
    );
    let v = duet::judge(&short);
    let dir = tempfile::tempdir().expect("tmp");
    let w = duet::write::write(dir.path(), "d", &short, &v, ["a", "b"]).expect("writes");
    let md = std::fs::read_to_string(&w.summary).expect("summary");
    assert!(md.contains("for the device-timed cases alone"), "{md}");
    let base = rundir::Run::load(&w.base).expect("base");
    let cand = rundir::Run::load(&w.cand).expect("cand");
    let again = duet::replay::outcome(&base, &cand).expect("read back");
    assert_eq!(again.device_only_rounds, short.device_only_rounds);
    // where every round fits, none is the device cases' alone
    let long = run(Duration::from_secs(60), Duration::ZERO);
    assert_eq!(long.device_only_rounds, 0);
    assert_eq!(visits(&long, false), visits(&long, true));
}

/// Workers whose every process runs at its own level (uniform ±`term`, samples within
/// 0.05%); each factory call's label is logged in order.
fn levelled(
    term: f64,
    factor: f64,
    seed: u64,
    started: &Rc<RefCell<Vec<&'static str>>>,
) -> Vec<Group<'static>> {
    let host = Host::shared(1.0, 0.0, seed);
    let levels = Rc::new(RefCell::new(StdRng::seed_from_u64(seed)));
    let make = |factor: f64, label: &'static str| {
        let (h, l, s) = (host.clone(), levels.clone(), started.clone());
        move || {
            s.borrow_mut().push(label);
            let mut f = Fake::new(&h, factor, 12, label);
            f.level = 1.0 + term * l.borrow_mut().random_range(-1.0..1.0);
            f.noise = 0.0005;
            Ok(Box::new(f) as Box<dyn Worker>)
        }
    };
    vec![Group {
        name: "rmsnorm".into(),
        base: Box::new(make(1.0, "base")),
        cand: Box::new(make(factor, "cand")),
    }]
}

#[test]
fn a_planted_process_term_is_carried_measured_and_stored_and_the_sides_start_in_turns() {
    // every process at its own level within ±4% (sd 2.3%): pairs cannot cancel it, rounds
    // carry it. An A/A gives no verdict; +10% is found; the term the run prints and stores
    // is the planted one's size; round r's first worker is the base's in even rounds
    let started = Rc::new(RefCell::new(Vec::new()));
    let sd = 0.04 / 3f64.sqrt();
    for seed in [21, 22] {
        let mut groups = levelled(0.04, 1.0, seed, &started);
        let outcome = duet::run(&mut groups, &settings(), &mut |_| {}).expect("runs");
        let v = duet::judge(&outcome);
        assert_eq!(v.exit_code(), 0, "seed {seed}: {:?}", v.regressions);
        let kind = rundir::noise::TermKind::Device;
        let stored = v.noise.0.get(&kind).copied().expect("a device term");
        assert!(
            stored > sd / 2.0 && stored < sd * 2.0,
            "stored {stored}, planted {sd}"
        );
        for f in &v.families {
            let (_, lo, hi) = f.pooled.ratio();
            assert!(lo < 1.0 && hi > 1.0, "{}: [{lo}, {hi}]", f.name);
        }
        let dir = tempfile::tempdir().expect("tmp");
        let w = duet::write::write(dir.path(), "t", &outcome, &v, ["a", "b"]).expect("writes");
        let env = rundir::Run::load(&w.base).expect("base").env.expect("env");
        let back = rundir::noise::ProcessNoise::of(&env).expect("stored");
        assert!((back.0[&kind] - stored).abs() < 1e-5);
    }
    // the first listing, then each round: base first in even rounds, cand first in odd
    let order = started.borrow().clone();
    let firsts: Vec<&str> = order.chunks(2).map(|c| c[0]).collect();
    assert!(firsts.len() >= 4, "{order:?}");
    for (i, f) in firsts.iter().skip(1).take(3).enumerate() {
        assert_eq!(*f, if i % 2 == 0 { "base" } else { "cand" }, "{order:?}");
    }
    let mut groups = levelled(0.04, 1.10, 23, &started);
    let outcome = duet::run(&mut groups, &settings(), &mut |_| {}).expect("runs");
    let v = duet::judge(&outcome);
    assert_eq!(v.exit_code(), 1);
    let all = v
        .families
        .iter()
        .find(|f| f.name == "all stream-launched device cases")
        .expect("the device family");
    let (r, lo, _) = all.pooled.ratio();
    assert!(lo > 1.015 && (r - 1.10).abs() < 0.03, "{r} {lo}");
}
