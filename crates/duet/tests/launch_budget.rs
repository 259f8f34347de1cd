//! The launch measure and the budget on synthetic workers whose truth is planted: each
//! case launches a known number of kernels a call; a per-launch device cost is added to
//! every stream launch (the `device` rows) and to no graph replay (one launch a graph);
//! each process has its own launch term (µs a launch it shares among its stream-launched
//! cases) and its own small level on graph replays. Samples take real time, so that the
//! budget is kept by the clock.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use duet::driver::{Budget, Group, Settings};
use duet::protocol::{CaseName, PROTOCOL, Prepared, Reply, Request, Sampled};
use duet::verdict::CaseVerdict;
use duet::worker::{Worker, WorkerError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use stats::Verdict;

/// A worker of `n` cases in each of the `graph` and `device` modes: case i runs
/// `1 + i % 4` kernels a call of 3 + i µs of work in all.
struct Launcher {
    cases: Vec<(String, Vec<String>, f64, u32)>,
    /// Extra device ns each stream launch costs (the plant), and this process's launch term.
    per_launch_ns: f64,
    term_ns: f64,
    /// This process's level on graph replays.
    level: f64,
    rng: StdRng,
    /// Real time a sample takes, a fraction of what it says (none: instant), and a prepare.
    real: f64,
    prepare: Duration,
}

fn fields(i: usize, mode: &str) -> Vec<String> {
    let site = format!("site{i}");
    [
        "linear",
        "aten",
        &site,
        "qwen3-0.6b",
        "decode",
        "1",
        "1",
        "1024",
        "f16",
        "cuda:0",
        mode,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

impl Launcher {
    fn new(n: usize, per_launch_ns: f64, term_sd_ns: f64, rng: &mut StdRng) -> Self {
        let mut cases = Vec::new();
        for i in 0..n {
            for mode in ["graph", "device"] {
                let f = fields(i, mode);
                let key = format!("linear/aten/site{i}/qwen3-0.6b/decode/b1/q1/f16/cuda:0/{mode}");
                cases.push((key, f, 3_000.0 + 1_000.0 * i as f64, 1 + (i % 4) as u32));
            }
        }
        Launcher {
            cases,
            per_launch_ns,
            term_ns: term_sd_ns * rng.random_range(-1.7..1.7),
            level: 1.0 + 0.001 * rng.random_range(-1.7..1.7),
            rng: StdRng::seed_from_u64(rng.random()),
            real: 0.0,
            prepare: Duration::ZERO,
        }
    }

    /// A stream launch's device ns beyond its kernel: a fixed 1 µs gap, this process's
    /// term, and the plant.
    fn launch_ns(&self) -> f64 {
        1_000.0 + self.term_ns + self.per_launch_ns
    }
}

impl Worker for Launcher {
    fn call(&mut self, req: &Request) -> Result<Reply, WorkerError> {
        Ok(match req {
            Request::Hello => Reply::Hello {
                protocol: PROTOCOL,
                ops: vec!["linear".into()],
                env: serde_json::json!({"backend": "cuda", "devices": ["cuda:0"]}),
            },
            Request::Cases { .. } => Reply::Cases {
                cases: self
                    .cases
                    .iter()
                    .map(|(k, f, _, _)| CaseName {
                        key: k.clone(),
                        fields: f.clone(),
                        ..Default::default()
                    })
                    .collect(),
                unsupported: vec![],
            },
            Request::Prepare { key, .. } => {
                std::thread::sleep(self.prepare);
                Reply::Prepared(Prepared {
                    key: key.clone(),
                    status: rundir::Status::Ok,
                    rel_err: Some(1e-4),
                    dims: "m=1".into(),
                    ..Prepared::default()
                })
            }
            Request::Sample { key, iters } => {
                let &(_, _, work, launches) =
                    self.cases.iter().find(|c| &c.0 == key).expect("listed");
                let noise = 1.0 + 0.0005 * self.rng.random_range(-1.0..1.0);
                let per = if key.ends_with("/device") {
                    work + f64::from(launches) * self.launch_ns()
                } else {
                    // a replay of the captured calls: one launch for all, no per-launch cost
                    work * self.level
                };
                let total_ns = *iters as f64 * per * noise;
                if self.real > 0.0 {
                    let until =
                        Instant::now() + Duration::from_nanos((total_ns * self.real) as u64);
                    while Instant::now() < until {}
                }
                Reply::Sample(Sampled {
                    key: key.clone(),
                    calls: *iters,
                    total_ns,
                    ..Sampled::default()
                })
            }
            Request::Release { key } => Reply::Released { key: key.clone() },
            Request::Quit => Reply::Bye,
        })
    }

    fn label(&self) -> String {
        "launcher".into()
    }
}

/// Compare `n` cases a mode, the candidate's stream launches dearer by `plant_ns`, every
/// process with a launch term of sd `term_ns`.
fn compare(plant_ns: f64, term_ns: f64, n: usize, seed: u64, s: &Settings) -> duet::Verdicts {
    let outcome = run(plant_ns, term_ns, n, seed, s, (0.0, Duration::ZERO)).0;
    duet::judge(&outcome)
}

fn run(
    plant_ns: f64,
    term_ns: f64,
    n: usize,
    seed: u64,
    s: &Settings,
    (real, prepare): (f64, Duration),
) -> (duet::driver::Outcome, Option<String>) {
    let rng = Rc::new(RefCell::new(StdRng::seed_from_u64(seed)));
    let (r1, r2) = (rng.clone(), rng.clone());
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(move || {
            let mut w = Launcher::new(n, 0.0, term_ns, &mut r1.borrow_mut());
            (w.real, w.prepare) = (real, prepare);
            Ok(Box::new(w) as Box<dyn Worker>)
        }),
        cand: Box::new(move || {
            let mut w = Launcher::new(n, plant_ns, term_ns, &mut r2.borrow_mut());
            (w.real, w.prepare) = (real, prepare);
            Ok(Box::new(w) as Box<dyn Worker>)
        }),
    }];
    let mut plan = None;
    let outcome = duet::run(&mut groups, s, &mut |p| {
        if let Some(b) = &p.plan {
            plan = Some(b.line());
        }
    })
    .expect("runs");
    (outcome, plan)
}

fn settings() -> Settings {
    Settings {
        warmup: Duration::ZERO,
        budget: Budget::Total(Duration::from_secs(600)),
        ..Settings::default()
    }
}

fn family<'a>(v: &'a duet::Verdicts, name: &str) -> &'a duet::verdict::FamilyLine {
    v.families
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{name}: {:?}", v.families))
}

fn judged(v: &duet::Verdicts, mode: &str, j: Verdict) -> usize {
    v.cases
        .iter()
        .filter(|c| c.name.ends_with(mode) && c.verdict == CaseVerdict::Judged(j))
        .count()
}

#[test]
fn an_aa_with_a_planted_launch_term_gives_no_verdict() {
    for seed in 1..=3 {
        // each process's launches ±50 ns (sd ~30 ns) around a 1 µs gap
        let v = compare(0.0, 30.0, 16, seed, &settings());
        assert_eq!(v.exit_code(), 0, "seed {seed}: {:?}", v.regressions);
        for c in &v.cases {
            assert!(
                !matches!(
                    c.verdict,
                    CaseVerdict::Judged(Verdict::Slower | Verdict::Faster)
                ),
                "seed {seed}: {c:?}"
            );
        }
        assert!(judged(&v, "/graph", Verdict::Same) >= 15, "seed {seed}");
        // graph rows at the floor of ±1% a case and ±0.5% a family
        let g = family(&v, "all device cases");
        assert_eq!(g.judgement, Verdict::Same);
        assert!((g.tolerance.frac - 0.005).abs() < 1e-9, "{:?}", g.tolerance);
    }
}

#[test]
fn half_a_microsecond_a_launch_is_found_by_the_launch_measure_and_not_by_graph_rows() {
    for seed in 1..=2 {
        let v = compare(500.0, 30.0, 16, seed, &settings());
        let launch = family(&v, "all stream-launched device cases");
        assert_eq!(launch.judgement, Verdict::Slower, "seed {seed}: {launch:?}");
        let graph = family(&v, "all device cases");
        assert_eq!(graph.judgement, Verdict::Same, "seed {seed}: {graph:?}");
        assert_eq!(judged(&v, "/graph", Verdict::Slower), 0, "seed {seed}");
        assert!(v.exit_code() == 1 && v.regressions.iter().any(|r| r.contains("stream-launched")));
        // the printout names each kind's measure and tolerance
        let s = Settings::default();
        let outcome = run(500.0, 30.0, 16, seed, &s, (0.0, Duration::ZERO)).0;
        let md = duet::write::summary_md(&outcome, &duet::judge(&outcome), ["a", "b"]);
        assert!(md.contains("device time of stream launches"), "{md}");
        assert!(md.contains("device time of graph replays"), "{md}");
        let csv = duet::write::ab_csv(&v);
        assert!(
            csv.lines()
                .next()
                .unwrap_or_default()
                .ends_with(",tolerance_pct")
        );
    }
}

#[test]
fn a_budget_is_kept_by_fewer_pairs_or_fewer_cases_or_refused() {
    // 24 cases; a sample aims at 2 ms and takes what it says; the plan's prior prices a
    // visit at 0.1 s of prepare beyond its samples (here none): 6 s fits 21 of them at 3
    // pairs a visit, 10 s all of them at 8; later rounds go on while they fit
    let s = |budget: f64| Settings {
        budget: Budget::Total(Duration::from_secs_f64(budget)),
        sample: Duration::from_millis(2),
        warmup: Duration::ZERO,
        ..Settings::default()
    };
    for (budget, cases) in [(6.0, 21), (10.0, 24)] {
        let t0 = Instant::now();
        let (outcome, plan) = run(0.0, 30.0, 12, 5, &s(budget), (1.0, Duration::ZERO));
        let took = t0.elapsed().as_secs_f64();
        assert!(took <= budget * 1.1, "{budget} s budget took {took:.2} s");
        let plan = plan.expect("the plan is told first");
        assert!(plan.contains("estimate"), "{plan}");
        let skipped = outcome
            .cases
            .iter()
            .filter(|c| {
                c.ended
                    .as_ref()
                    .is_some_and(|e| e.reason.starts_with("not run"))
            })
            .count();
        assert_eq!(24 - skipped, cases, "{plan}");
        assert_eq!(plan.contains("listed as not run"), cases < 24, "{plan}");
    }
    // visits three times dearer than planned (0.15 s a side to prepare): no visit starts
    // that would end past the budget, and the cases the first round did not reach are
    // listed as not run
    let t0 = Instant::now();
    let (outcome, _) = run(0.0, 30.0, 12, 5, &s(6.0), (1.0, Duration::from_millis(150)));
    let took = t0.elapsed().as_secs_f64();
    assert!(took <= 6.6, "a 6 s budget took {took:.2} s");
    assert!(
        outcome.cases.iter().any(|c| c
            .ended
            .as_ref()
            .is_some_and(|e| e.reason.contains("no longer fitted"))),
        "took {took:.2} s"
    );
    // and every case it ran took both obligatory rounds, so each has a verdict
    let ran: Vec<_> = outcome.cases.iter().filter(|c| c.ended.is_none()).collect();
    assert!(
        !ran.is_empty() && ran.iter().all(|c| c.visits >= 2),
        "took {took:.2} s"
    );
    // a budget that fits not half of the grid is refused, naming the least it needs
    let rng = Rc::new(RefCell::new(StdRng::seed_from_u64(1)));
    let (r1, r2) = (rng.clone(), rng.clone());
    let mut groups = vec![Group {
        name: "linear".into(),
        base: Box::new(move || {
            Ok(Box::new(Launcher::new(12, 0.0, 0.0, &mut r1.borrow_mut())) as Box<dyn Worker>)
        }),
        cand: Box::new(move || {
            Ok(Box::new(Launcher::new(12, 0.0, 0.0, &mut r2.borrow_mut())) as Box<dyn Worker>)
        }),
    }];
    let t0 = Instant::now();
    let e = duet::run(&mut groups, &s(3.0), &mut |_| {}).expect_err("refused");
    assert!(
        t0.elapsed() < Duration::from_millis(200),
        "refused up front"
    );
    let line = e.to_string();
    assert!(
        line.contains("needs at least") && !line.contains('\n'),
        "{line}"
    );
}

/// The verdict line says the verdict reached: a quiet A/A `same`, a noisy one (a launch
/// term of sd 2 µs a process on 4 cases) ambiguous and not a pass, a planted +0.5 µs a
/// launch a regression; never "no regression found" beside an undecided global line.
#[test]
fn the_verdict_line_says_the_verdict_reached() {
    let quiet = compare(0.0, 0.0, 16, 1, &settings());
    let all_same = quiet
        .families
        .iter()
        .filter(|f| f.global)
        .all(|f| f.judgement == Verdict::Same);
    assert!(all_same, "{:?}", quiet.families);
    assert!(
        quiet.headline().starts_with("**Verdict: same"),
        "{}",
        quiet.headline()
    );
    let noisy = compare(0.0, 2_000.0, 4, 2, &settings());
    assert!(
        noisy
            .families
            .iter()
            .any(|f| f.global && f.judgement == Verdict::Ambiguous),
        "{:?}",
        noisy.families
    );
    let h = noisy.headline();
    assert!(
        h.contains("ambiguous, not a pass") && h.contains("stream-launched"),
        "{h}"
    );
    assert!(!h.contains("same"), "{h}");
    let planted = compare(500.0, 30.0, 16, 3, &settings());
    assert!(
        planted.headline().contains("REGRESSION (exit 1)"),
        "{}",
        planted.headline()
    );
}
