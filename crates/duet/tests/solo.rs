//! The single-run driver (`duet::solo`, what `opbench peer` runs) on a synthetic worker
//! with planted cases: a group sampled in interleaved rounds with its companion before each
//! of its holder's samples, an error over its tolerance that is never timed, a refused
//! sample, and a worker that dies mid-run.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use duet::driver::Factory;
use duet::protocol::{CaseName, PROTOCOL, Prepared, Reply, Request, Sampled, Sampling};
use duet::solo::{self, SoloCase, SoloSettings};
use duet::worker::{Worker, WorkerError};

/// A worker whose cases take `per` ns a call; it logs every sample request it gets, and
/// dies at its `die_at`-th sample (counted over every worker the factory makes).
struct Fake {
    cases: Vec<(CaseName, f64, f64)>,
    log: Rc<RefCell<Vec<String>>>,
    die_at: Option<usize>,
}

fn name(key: &str, sampling: Sampling) -> CaseName {
    CaseName {
        key: key.into(),
        fields: vec![key.into()],
        sampling,
    }
}

impl Worker for Fake {
    fn call(&mut self, req: &Request) -> Result<Reply, WorkerError> {
        let find = |k: &str| self.cases.iter().find(|c| c.0.key == k);
        Ok(match req {
            Request::Hello => Reply::Hello {
                protocol: PROTOCOL,
                ops: vec!["peer".into()],
                env: serde_json::json!({}),
            },
            Request::Cases { .. } => Reply::Cases {
                cases: self.cases.iter().map(|c| c.0.clone()).collect(),
                unsupported: vec![],
            },
            Request::Prepare { key, .. } => match find(key) {
                None => Reply::Error {
                    message: format!("unknown case {key}"),
                },
                Some((_, _, err)) => Reply::Prepared(Prepared {
                    key: key.clone(),
                    status: rundir::Status::Ok,
                    rel_err: Some(*err),
                    check: Some(rundir::Check::Op),
                    ..Prepared::default()
                }),
            },
            Request::Sample { key, iters } => {
                self.log.borrow_mut().push(key.clone());
                if self.die_at == Some(self.log.borrow().len()) {
                    return Err(WorkerError::Died {
                        what: "fake".into(),
                        why: "signal: 11 (SIGSEGV)".into(),
                    });
                }
                if key == "refuses" {
                    return Ok(Reply::Error {
                        message: "RuntimeError: planted".into(),
                    });
                }
                let per = find(key).map_or(1.0, |c| c.1);
                Reply::Sample(Sampled {
                    key: key.clone(),
                    calls: *iters,
                    total_ns: *iters as f64 * per,
                    ..Sampled::default()
                })
            }
            Request::Release { key } => Reply::Released { key: key.clone() },
            Request::Quit => Reply::Bye,
        })
    }

    fn label(&self) -> String {
        "fake".into()
    }
}

fn settings() -> SoloSettings {
    SoloSettings {
        samples: 4,
        warmup: Duration::ZERO,
        measure: Duration::from_micros(400),
        seed: 3,
        deadline: None,
    }
}

/// Runs the driver over `cases`; returns what ended and the sample requests in order.
fn drive(cases: Vec<(CaseName, f64, f64)>, die_at: Option<usize>) -> (Vec<SoloCase>, Vec<String>) {
    let (out, log, _) = drive_until(cases, die_at, None);
    (out, log)
}

/// [`drive`] with a deadline; also returns how many cases were left untimed.
fn drive_until(
    cases: Vec<(CaseName, f64, f64)>,
    die_at: Option<usize>,
    deadline: Option<std::time::Instant>,
) -> (Vec<SoloCase>, Vec<String>, usize) {
    let log = Rc::new(RefCell::new(Vec::new()));
    let (c2, l2) = (cases.clone(), log.clone());
    let mut factory: Factory<'_> = Box::new(move || {
        Ok(Box::new(Fake {
            cases: c2.clone(),
            log: l2.clone(),
            die_at,
        }) as Box<dyn Worker>)
    });
    let judge = |_: &CaseName, p: &Prepared| match p.rel_err {
        Some(e) if e > 1e-3 => Err(format!("relative error {e:e} over 1e-3")),
        _ => Ok(()),
    };
    let mut out = Vec::new();
    let left = solo::run(
        &mut factory,
        None,
        &|_| false,
        &judge,
        &SoloSettings {
            deadline,
            ..settings()
        },
        &mut |c| out.push(c),
    )
    .unwrap();
    let log = log.borrow().clone();
    (out, log, left)
}

fn group(block: &str, before: Option<&str>) -> Sampling {
    Sampling {
        group: Some("step-b1".into()),
        kind: Some(duet::protocol::GroupKind::Step),
        block: Some(block.into()),
        before: before.map(str::to_string),
        max_iters: Some(16),
        min_iters: None,
    }
}

#[test]
fn a_group_takes_turns_round_by_round_with_its_companion_right_before_its_holder() {
    let cases = vec![
        (name("step", group("step", Some("beside"))), 1000.0, 1e-4),
        (name("synced", group("step", None)), 1100.0, 1e-4),
        (name("generate", group("generate", None)), 5000.0, 1e-4),
        (
            name(
                "beside",
                Sampling {
                    max_iters: Some(8),
                    min_iters: Some(8),
                    ..Sampling::default()
                },
            ),
            300_000.0,
            1e-4,
        ),
        (name("alone", Sampling::default()), 50.0, 1e-4),
    ];
    let (out, log) = drive(cases, None);
    let by = |k: &str| out.iter().find(|c| c.name.key == k).unwrap();
    // a step group of 4 samples runs its rule's 8 rounds: one sample of each case a round
    for k in ["step", "synced", "generate", "beside"] {
        assert_eq!(by(k).samples.len(), 8, "{k}");
        assert_eq!(by(k).prepared.status, rundir::Status::Ok);
    }
    // the companion is sampled right before each of its holder's samples, after warm-up
    let timed: Vec<&String> = log
        .iter()
        .skip_while(|k| *k != "beside" && *k != "step")
        .collect();
    let steps = log.iter().filter(|k| *k == "step").count();
    assert!(steps >= 8);
    let pairs = log
        .windows(2)
        .filter(|w| w[0] == "beside" && w[1] == "step");
    assert_eq!(pairs.count(), 8, "{timed:?}");
    // calls a sample fill the aim (400 µs / 4 samples = 100 µs) within the cap of 16
    assert_eq!(by("step").iters, 16);
    assert_eq!(
        by("generate").iters,
        16.min((100_000.0f64 / 5000.0).ceil() as u64)
    );
    // a fixed count holds where one call alone would fill the aim
    assert_eq!(by("beside").iters, 8);
    // a case alone takes the run's samples back to back
    assert_eq!(by("alone").samples.len(), 4);
    assert_eq!(by("alone").iters, 2000);
}

#[test]
fn an_error_over_its_tolerance_is_never_timed_and_a_refusal_ends_its_case_only() {
    let cases = vec![
        (name("off", Sampling::default()), 100.0, 0.5),
        (name("refuses", Sampling::default()), 100.0, 1e-4),
        (name("fine", Sampling::default()), 100.0, 1e-4),
    ];
    let (out, log) = drive(cases, None);
    let by = |k: &str| out.iter().find(|c| c.name.key == k).unwrap();
    assert_eq!(by("off").prepared.status, rundir::Status::Mismatch);
    assert!(
        by("off")
            .prepared
            .reason
            .as_ref()
            .unwrap()
            .contains("over 1e-3")
    );
    assert!(!log.iter().any(|k| k == "off"), "a mismatch is not sampled");
    assert_eq!(by("refuses").prepared.status, rundir::Status::Error);
    assert!(
        by("refuses")
            .prepared
            .reason
            .as_ref()
            .unwrap()
            .contains("planted")
    );
    assert_eq!(by("fine").prepared.status, rundir::Status::Ok);
    assert_eq!(by("fine").samples.len(), 4);
}

#[test]
fn a_worker_that_dies_ends_what_it_held_and_a_fresh_one_goes_on() {
    let cases = vec![
        (name("first", Sampling::default()), 100.0, 1e-4),
        (name("dies", group("step", None)), 100.0, 1e-4),
        (name("with", group("step", None)), 100.0, 1e-4),
        (name("after", Sampling::default()), 100.0, 1e-4),
    ];
    // "first" takes 3 calibration samples (one of a call, two warm-up looks) and its 4;
    // the group's two cases 3 each; the worker dies at its 15th sample, in the rounds
    let (out, log) = drive(cases, Some(15));
    assert!(
        log[13..15].iter().all(|k| k == "dies" || k == "with"),
        "{log:?}"
    );
    let by = |k: &str| out.iter().find(|c| c.name.key == k).unwrap();
    assert_eq!(by("first").prepared.status, rundir::Status::Ok);
    assert_eq!(by("first").samples.len(), 4);
    for k in ["dies", "with"] {
        assert_eq!(by(k).prepared.status, rundir::Status::Error, "{k}");
        assert!(by(k).prepared.reason.as_ref().unwrap().contains("SIGSEGV"));
        assert!(by(k).samples.is_empty());
    }
    assert_eq!(by("after").prepared.status, rundir::Status::Ok);
    assert_eq!(by("after").samples.len(), 4);
}

#[test]
fn after_its_deadline_the_driver_starts_nothing_and_counts_what_it_left() {
    let cases = vec![
        (name("a", Sampling::default()), 100.0, 1e-4),
        (name("b", group("step", None)), 100.0, 1e-4),
        (name("c", group("step", None)), 100.0, 1e-4),
    ];
    let (out, log, left) = drive_until(cases, None, Some(std::time::Instant::now()));
    assert!(out.is_empty() && log.is_empty());
    assert_eq!(left, 3);
}
