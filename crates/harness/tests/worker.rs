//! A bench binary's worker mode speaks the protocol: it lists, prepares, times and
//! releases cases on request, and answers bad input with an error reply, never an exit.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::worker::Worker;
use harness::{Config, Device, Floor};
use wire::protocol::{Reply, Request};

fn talk(lines: &[String]) -> Vec<Reply> {
    let mut config = Config::from_env().unwrap();
    config.control = true;
    let ops: [&dyn harness::Op; 1] = [&Floor];
    let mut w = Worker::new(&ops, config, vec![Device::CPU]);
    let input = lines.join("\n");
    let mut out = Vec::new();
    w.serve_io(input.as_bytes(), &mut out).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| Reply::parse(l).unwrap())
        .collect()
}

fn req(r: &Request) -> String {
    r.line().trim_end().to_string()
}

#[test]
fn a_worker_lists_prepares_times_and_releases_a_case() {
    let first = talk(&[
        req(&Request::Hello),
        req(&Request::Cases {
            filter: Some("floor/add/.*/pipelined".into()),
        }),
    ]);
    assert!(matches!(&first[0], Reply::Hello { protocol: 1, ops, .. } if ops == &["floor"]));
    let Reply::Cases { cases, .. } = &first[1] else {
        panic!("{:?}", first[1])
    };
    assert!(!cases.is_empty());
    let key = cases[0].key.clone();
    let replies = talk(&[
        req(&Request::Prepare {
            key: key.clone(),
            place: None,
        }),
        req(&Request::Sample {
            key: key.clone(),
            iters: 50,
        }),
        req(&Request::Release { key: key.clone() }),
        req(&Request::Sample {
            key: key.clone(),
            iters: 50,
        }),
        req(&Request::Quit),
        // after quit nothing is read
        req(&Request::Hello),
    ]);
    assert_eq!(replies.len(), 5);
    let Reply::Prepared(p) = &replies[0] else {
        panic!("{:?}", replies[0])
    };
    assert_eq!(p.status, rundir::Status::Ok);
    assert!(p.rel_err.is_some());
    let Reply::Sample(s) = &replies[1] else {
        panic!("{:?}", replies[1])
    };
    assert_eq!(s.calls, 50);
    assert!(s.total_ns > 0.0);
    assert!(s.control_ns.is_some() && s.host_ns.is_some());
    assert_eq!(replies[2], Reply::Released { key });
    // a released case must be prepared again before it is timed
    assert!(matches!(&replies[3], Reply::Error { message } if message.contains("not prepared")));
    assert_eq!(replies[4], Reply::Bye);
}

#[test]
fn bad_input_is_an_error_reply_and_the_worker_goes_on() {
    let replies = talk(&[
        "{\"req\": \"frobnicate\"}".into(),
        "not json at all".into(),
        req(&Request::Prepare {
            key: "floor/nope/x/none/decode/b1/q1/f32/cpu/pipelined".into(),
            place: None,
        }),
        req(&Request::Cases {
            filter: Some("(".into()),
        }),
        req(&Request::Hello),
    ]);
    assert_eq!(replies.len(), 5);
    for r in &replies[..4] {
        assert!(matches!(r, Reply::Error { .. }), "{r:?}");
    }
    assert!(matches!(&replies[2], Reply::Error { message } if message.contains("unknown case")));
    assert!(matches!(replies[4], Reply::Hello { .. }));
}

#[test]
fn modes_a_worker_does_not_time_are_listed_with_the_reason() {
    let mut config = Config::from_env().unwrap();
    config.modes = vec![harness::Mode::Pipelined, harness::Mode::PipelinedCold];
    let ops: [&dyn harness::Op; 1] = [&Floor];
    let mut w = Worker::new(&ops, config, vec![Device::CPU]);
    let Reply::Cases { cases, unsupported } = w.handle(&Request::Cases { filter: None }) else {
        panic!("cases")
    };
    assert!(cases.iter().all(|c| c.key.ends_with("/pipelined")));
    assert!(!unsupported.is_empty());
    assert!(
        unsupported
            .iter()
            .all(|n| n.reason.contains("scripts/bench"))
    );
}

#[test]
fn a_case_made_again_in_another_placement_keeps_its_check_and_is_timed() {
    let first = talk(&[req(&Request::Cases {
        filter: Some("floor/add/.*/pipelined".into()),
    })]);
    let Reply::Cases { cases, .. } = &first[0] else {
        panic!("{:?}", first[0])
    };
    let key = cases[0].key.clone();
    let prepare = |place| {
        req(&Request::Prepare {
            key: key.clone(),
            place,
        })
    };
    let sample = req(&Request::Sample {
        key: key.clone(),
        iters: 20,
    });
    let replies = talk(&[
        prepare(Some(1)),
        sample.clone(),
        prepare(Some(2)),
        sample.clone(),
        // a plain prepare of a prepared case keeps it as it is
        prepare(None),
        sample,
    ]);
    let errs: Vec<f64> = replies
        .iter()
        .filter_map(|r| match r {
            Reply::Prepared(p) if p.status == rundir::Status::Ok => p.rel_err,
            _ => None,
        })
        .collect();
    assert_eq!(errs.len(), 3, "{replies:?}");
    assert!(errs.iter().all(|&e| e == errs[0]), "{errs:?}");
    let calls: Vec<u64> = replies
        .iter()
        .filter_map(|r| match r {
            Reply::Sample(s) => Some(s.calls),
            _ => None,
        })
        .collect();
    assert_eq!(calls, [20, 20, 20]);
}

#[test]
fn a_graph_case_is_served_unsupported_on_the_cpu_and_replayed_on_a_gpu() {
    let mut config = Config::from_env().unwrap();
    config.modes = vec![harness::Mode::Pipelined, harness::Mode::Graph];
    let ops: [&dyn harness::Op; 1] = [&Floor];
    let mut w = Worker::new(&ops, config.clone(), vec![Device::CPU]);
    let filter = Some("floor/add/.*/graph".to_string());
    let Reply::Cases { cases, .. } = w.handle(&Request::Cases {
        filter: filter.clone(),
    }) else {
        panic!("cases")
    };
    let key = cases.first().expect("graph is a served mode").key.clone();
    let Reply::Prepared(p) = w.handle(&Request::Prepare {
        key: key.clone(),
        place: None,
    }) else {
        panic!("prepare")
    };
    assert_eq!(p.status, rundir::Status::Unsupported, "{p:?}");
    assert!(p.reason.unwrap().contains("needs a GPU"));
    let sampled = w.handle(&Request::Sample { key, iters: 4 });
    assert!(matches!(sampled, Reply::Error { .. }), "{sampled:?}");
    if harness::gpu_count() == 0 {
        return;
    }
    // on a GPU: captured once prepared (16 calls a replay), each sample replays it
    let gpu = harness::select_devices(harness::DeviceChoice::Gpu, 0).unwrap();
    let mut w = Worker::new(&ops, config, gpu);
    let Reply::Cases { cases, .. } = w.handle(&Request::Cases { filter }) else {
        panic!("cases")
    };
    let key = cases[0].key.clone();
    for place in [None, Some(3)] {
        let Reply::Prepared(p) = w.handle(&Request::Prepare {
            key: key.clone(),
            place,
        }) else {
            panic!("prepare")
        };
        assert_eq!(p.status, rundir::Status::Ok, "{p:?}");
        assert!(p.note.unwrap().contains("16 calls per graph"));
        let Reply::Sample(s) = w.handle(&Request::Sample {
            key: key.clone(),
            iters: 4,
        }) else {
            panic!("sample")
        };
        assert_eq!(s.calls, 64);
        assert!(s.total_ns > 0.0);
    }
}
