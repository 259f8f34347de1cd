//! The run directory: its columns, appends from several processes, rows kept when a process
//! dies, and readers that refuse what they cannot trust with one line naming it.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::Path;
use std::process::Command;

use rundir::{
    CaseKey, DType, DeviceId, Env, Mode, OpKind, Phase, ResultRow, Run, RunError, RunWriter,
    SCHEMA_VERSION, Sample, SeriesKey, Status,
};

fn key(batch: usize) -> CaseKey {
    SeriesKey {
        op: OpKind::Floor,
        variant: "add".into(),
        site: "add1".into(),
        model: "none".into(),
        phase: Phase::Decode,
        q_len: 1,
        kv_len: None,
        dtype: DType::F32,
        device: DeviceId::CPU,
        mode: Mode::Pipelined,
    }
    .at(batch)
}

fn row(batch: usize) -> (ResultRow, Vec<Sample>) {
    let mut r = ResultRow::new("r1", key(batch), "numel=1".into(), Status::Ok);
    r.samples = Some(2);
    r.median_ns = Some(100.5);
    r.mean_ns = Some(101.0);
    r.ci_low_ns = Some(99.0);
    r.ci_high_ns = Some(102.0);
    r.mad_ns = Some(0.0);
    r.flops = 1;
    r.bytes = 12;
    r.gflops = Some(0.01);
    r.gbps = Some(0.12);
    r.max_rel_err = Some(0.0);
    r.note = Some("a, \"quoted\" note".into());
    let s = |total_ns| Sample {
        key: key(batch),
        execution: 1,
        iters: 10,
        total_ns,
        control_ns: Some(800.0),
        host_ns: Some(52_000.0),
        state: rundir::SampleState {
            cpu_ns: Some(990.0),
            nivcsw: Some(0),
            steal: Some(0),
            sm_mhz: Some(1980),
            gpu_util: Some(23),
            gpu_temp: Some(41),
            throttle: Some(0),
            host_after_ns: Some(52_500.0),
            slowest_ns: Some(104.0),
            typical_ns: Some(101.0),
            control_after_ns: Some(805.0),
        },
        pair: Some(3),
    };
    (r, vec![s(1000.0), s(1010.0)])
}

fn env(run_id: &str) -> Env {
    Env {
        run_id: run_id.into(),
        started_at: "2026-12-01T10:00:00Z".into(),
        backend: "cuda".into(),
        devices: vec!["cuda:0".into()],
        device_name: Some("NVIDIA H200".into()),
        libtorch_version: "2.11.0".into(),
        ..Env::default()
    }
}

/// A run directory with one ok case, for the readers' tests to spoil.
fn written() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RunWriter::open(dir.path(), "r1", None, &env("r1")).unwrap();
    for b in [1, 8] {
        let (r, s) = row(b);
        w.write_case(&r, &s).unwrap();
    }
    let path = w.path.clone();
    (dir, path)
}

/// Replace `from` with `to` in one file of the run.
fn spoil(run: &Path, file: &str, from: &str, to: &str) {
    let p = run.join(file);
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.contains(from), "{file} lacks {from}");
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
}

fn load_err(run: &Path) -> String {
    Run::load(run).unwrap_err().to_string()
}

#[test]
fn written_rows_read_back_equal() {
    let (_d, run) = written();
    let loaded = Run::load(&run).unwrap();
    assert_eq!(loaded.schema, SCHEMA_VERSION);
    assert_eq!(loaded.results, vec![row(1).0, row(8).0]);
    let samples = loaded.samples().unwrap();
    assert_eq!(samples[&key(8)], row(8).1);
    let header = std::fs::read_to_string(run.join("results.csv")).unwrap();
    assert_eq!(
        header.lines().next().unwrap(),
        ResultRow::columns().join(",")
    );
    let env: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("env.json")).unwrap()).unwrap();
    assert_eq!(env["schema_version"], SCHEMA_VERSION);
}

#[test]
fn a_second_process_appends_without_a_second_header() {
    let dir = tempfile::tempdir().unwrap();
    for b in [1, 2] {
        let mut w = RunWriter::open(dir.path(), "r", None, &env(&format!("first {b}"))).unwrap();
        let (r, s) = row(b);
        w.write_case(&r, &s).unwrap();
    }
    let run = Run::load(&dir.path().join("runs/r")).unwrap();
    assert_eq!(
        run.results.iter().map(|r| r.batch).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(
        run.env.unwrap().run_id,
        "first 1",
        "the first process describes the run"
    );
}

/// Child half of the crash test: write two cases, then die without unwinding. Ignored: it
/// runs only as the child that `rows_written_before_the_process_dies_are_kept` starts.
#[test]
#[ignore = "the crash test's child process"]
fn crash_child() {
    let Ok(out) = std::env::var("RUNDIR_TEST_CRASH_CHILD_OUT") else {
        return;
    };
    let mut w = RunWriter::open(Path::new(&out), "crash", None, &env("crash")).unwrap();
    for b in [1, 2] {
        let (r, s) = row(b);
        w.write_case(&r, &s).unwrap();
    }
    std::process::abort();
}

#[test]
fn rows_written_before_the_process_dies_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--ignored"])
        .env("RUNDIR_TEST_CRASH_CHILD_OUT", dir.path())
        .status()
        .unwrap();
    assert!(!status.success(), "the child must have died");
    let run = Run::load(&dir.path().join("runs/crash")).unwrap();
    assert_eq!(run.results.len(), 2);
    assert_eq!(
        run.samples().unwrap().values().map(Vec::len).sum::<usize>(),
        4
    );
}

#[test]
fn a_missing_column_is_named() {
    let (_d, run) = written();
    spoil(
        &run,
        "results.csv",
        "run_id,op,variant",
        "run_id,op,flavour",
    );
    let e = load_err(&run);
    assert!(e.contains("results.csv: missing column `variant`"), "{e}");
}

#[test]
fn an_unknown_enum_value_names_the_column_and_the_value() {
    let (_d, run) = written();
    spoil(&run, "results.csv", ",pipelined,", ",pipelind,");
    let e = load_err(&run);
    assert!(
        e.contains("results.csv: line 2: column `mode`: `pipelind`: unknown value"),
        "{e}"
    );
    assert!(e.contains("device_cold"), "lists what is accepted: {e}");
}

#[test]
fn non_finite_zero_or_negative_times_are_refused() {
    for bad in ["inf", "NaN", "-100.5", "0"] {
        let (_d, run) = written();
        spoil(&run, "results.csv", ",100.5,", &format!(",{bad},"));
        let e = load_err(&run);
        assert!(
            e.contains("column `median_ns`") && e.contains(bad) && e.contains("finite and > 0"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn an_ok_row_without_a_median_is_refused() {
    let (_d, run) = written();
    spoil(&run, "results.csv", ",100.5,", ",,");
    let e = load_err(&run);
    assert!(e.contains("`median_ns`: empty in an `ok` row"), "{e}");
}

#[test]
fn a_duplicate_case_is_named_with_both_lines() {
    let (_d, run) = written();
    let text = std::fs::read_to_string(run.join("results.csv")).unwrap();
    let line2 = text.lines().nth(1).unwrap().to_string();
    std::fs::write(run.join("results.csv"), format!("{text}{line2}\n")).unwrap();
    let e = load_err(&run);
    assert!(
        e.contains("line 4: duplicate case floor/add/add1/none/decode/b1/q1/f32/cpu/pipelined (first on line 2)"),
        "{e}"
    );
}

#[test]
fn a_truncated_sample_line_is_an_error_not_a_sample() {
    let (_d, run) = written();
    let p = run.join("samples.csv");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, &text[..text.len() - 8]).unwrap();
    let e = Run::load(&run).unwrap().samples().unwrap_err().to_string();
    assert!(e.contains("samples.csv: line 5:"), "{e}");
    let (_d, run) = written();
    spoil(&run, "samples.csv", ",10,1000", ",10,-1000");
    let e = Run::load(&run).unwrap().samples().unwrap_err().to_string();
    assert!(e.contains("column `total_ns`: `-1000`"), "{e}");
    let (_d, run) = written();
    spoil(&run, "samples.csv", ",10,1000", ",0,1000");
    let e = Run::load(&run).unwrap().samples().unwrap_err().to_string();
    assert!(e.contains("column `iters`: 0"), "{e}");
}

#[test]
fn an_unknown_schema_version_is_named() {
    let (_d, run) = written();
    spoil(
        &run,
        "env.json",
        &format!("\"schema_version\": {SCHEMA_VERSION}"),
        "\"schema_version\": 99",
    );
    let e = load_err(&run);
    assert!(
        e.contains("env.json: schema version 99; this opbench reads versions 1 to"),
        "{e}"
    );
    spoil(
        &run,
        "env.json",
        "\"schema_version\": 99",
        "\"schema_version\": \"x\"",
    );
    assert!(load_err(&run).contains("env.json: invalid JSON"));
}

#[test]
fn schema_1_reads_its_upper_bound_from_the_note() {
    let (_d, run) = written();
    // a schema-1 run: no version in env.json, no uncovered_chunks column
    std::fs::write(
        run.join("env.json"),
        r#"{"run_id": "old", "started_at": "2026-11-29T10:00:00Z", "backend": "cuda",
            "devices": ["cuda:0"], "device_name": "NVIDIA H200", "libtorch_version": "2.11.0"}"#,
    )
    .unwrap();
    let text = std::fs::read_to_string(run.join("results.csv")).unwrap();
    let text = text
        .replace(",uncovered_chunks,control_ns,executions,exec_cv,", ",")
        .replace(",pipelined,", ",device,")
        .replace(
            "0,,,,,\"a, \"\"quoted\"\" note\"",
            "0,x; upper bound: in 3 of 12 chunks (warm-up included)",
        );
    std::fs::write(run.join("results.csv"), text).unwrap();
    let loaded = Run::load(&run).unwrap();
    assert_eq!(loaded.schema, 1);
    assert_eq!(loaded.results[0].uncovered_chunks, Some(3));
    assert!(loaded.results[0].is_upper_bound());
}

#[test]
fn an_uncovered_count_on_a_host_timed_row_is_refused() {
    let (_d, run) = written();
    spoil(&run, "results.csv", "0,,,,,\"a,", "0,2,,,,\"a,");
    let e = load_err(&run);
    assert!(e.contains("column `uncovered_chunks`"), "{e}");
}

#[test]
fn missing_things_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let e = Run::load(&dir.path().join("nope")).unwrap_err();
    assert!(matches!(e, RunError::NotADirectory(_)), "{e}");
    let e = Run::load(dir.path()).unwrap_err().to_string();
    assert!(e.ends_with("results.csv: missing"), "{e}");
}

#[test]
fn a_later_process_with_other_settings_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let with = |samples: &str, seed: &str| {
        let mut e = env("r");
        e.settings.insert("samples".into(), samples.into());
        e.settings.insert("seed".into(), seed.into());
        e
    };
    RunWriter::open(dir.path(), "r", None, &with("20", "1")).unwrap();
    // its own seed is every process's own
    RunWriter::open(dir.path(), "r", None, &with("20", "2")).unwrap();
    let e = RunWriter::open(dir.path(), "r", None, &with("10", "3")).unwrap_err();
    assert!(
        e.to_string().contains("other settings (samples: 20 -> 10)"),
        "{e}"
    );
}

#[test]
fn an_env_json_that_is_not_an_object_or_lacks_a_field_names_it() {
    let (_d, run) = written();
    let text = std::fs::read_to_string(run.join("env.json")).unwrap();
    for (env, says) in [
        ("[]".to_string(), "expected a JSON object, found an array"),
        ("{}".to_string(), "missing field `schema_version`"),
        (
            text.replace(
                "\"libtorch_version\": \"2.11.0\"",
                "\"libtorch_version\": \"\"",
            ),
            "missing field `libtorch_version`",
        ),
        (
            text.replace("\"backend\": \"cuda\"", "\"backend\": \"rocm\""),
            "field `backend`: \"rocm\" is not cpu, cuda or hip",
        ),
        (
            text.replace(
                "\"started_at\": \"2026-12-01T10:00:00Z\"",
                "\"started_at\": \"soon\"",
            ),
            "field `started_at`: \"soon\" does not begin with a date",
        ),
        (
            text.replace("\"device_name\": \"NVIDIA H200\"", "\"device_name\": null"),
            "missing field `device_name`",
        ),
    ] {
        assert_ne!(env, text, "{says}: the replacement must apply");
        std::fs::write(run.join("env.json"), &env).unwrap();
        let e = load_err(&run);
        assert!(e.contains("env.json: ") && e.contains(says), "{says}: {e}");
    }
}

#[test]
fn a_sample_taken_in_an_unusual_state_is_flagged_and_counted_per_case() {
    let (_d, run) = written();
    let loaded = Run::load(&run).unwrap();
    let samples = loaded.samples().unwrap();
    let case: Vec<Sample> = samples.values().next().unwrap().clone();
    // the written samples record a clean state: none flagged
    assert_eq!(rundir::flagged(&case), Some(0));
    // a sample as recorded before 2026-12-02: no torch control after it, so the flag reads
    // the build-independent control (`host_ns`, `host_after_ns`)
    let mut base = case[0].clone();
    base.state.control_after_ns = None;
    let with = |f: &dyn Fn(&mut Sample)| {
        let mut s = base.clone();
        f(&mut s);
        s
    };
    use rundir::SampleFlag::*;
    let none = rundir::CaseMedians::default();
    let host = |before, after| rundir::CaseMedians {
        host: Some(before),
        host_after: after,
        ..none
    };
    assert_eq!(
        with(&|s| s.state.steal = Some(3)).flags(&host(52_000.0, None)),
        [Steal]
    );
    // 1000 ns of sample: one involuntary switch is within the allowance, two are not
    assert!(with(&|s| s.state.nivcsw = Some(1)).flags(&none).is_empty());
    assert_eq!(with(&|s| s.state.nivcsw = Some(2)).flags(&none), [Switched]);
    // the control before alone (no median after): over 1.2× its median
    assert_eq!(
        with(&|s| s.host_ns = Some(52_000.0 * 1.21)).flags(&host(52_000.0, None)),
        [HostSlow]
    );
    assert!(
        with(&|s| s.host_ns = Some(52_000.0 * 1.19))
            .flags(&host(52_000.0, None))
            .is_empty()
    );
    // before and after: their mean ratio — 1.3 before and 1.0 after is 1.15, clean; 1.3
    // and 1.15 is 1.225, slow
    let both = host(52_000.0, Some(52_500.0));
    assert!(
        with(&|s| s.host_ns = Some(52_000.0 * 1.3))
            .flags(&both)
            .is_empty()
    );
    assert_eq!(
        with(&|s| {
            s.host_ns = Some(52_000.0 * 1.3);
            s.state.host_after_ns = Some(52_500.0 * 1.15);
        })
        .flags(&both),
        [HostSlow]
    );
    // with the torch control recorded before and after (since 2026-12-02) the flag reads
    // it, not the build-independent control: 1.3 and 1.15 of the torch control is slow
    // whatever the chase says, 1.3 and 1.0 is clean though the chase read 1.5
    let medians = rundir::CaseMedians {
        control: Some(800.0),
        control_after: Some(805.0),
        ..both
    };
    let torch = |before: f64, after: f64, chase: f64| {
        with(&|s| {
            s.control_ns = Some(800.0 * before);
            s.state.control_after_ns = Some(805.0 * after);
            s.host_ns = Some(52_000.0 * chase);
            s.state.host_after_ns = Some(52_500.0 * chase);
        })
        .flags(&medians)
    };
    assert_eq!(torch(1.3, 1.15, 1.0), [HostSlow]);
    assert!(torch(1.3, 1.0, 1.5).is_empty());
    assert_eq!(
        with(&|s| s.state.control_after_ns = Some(805.0 * 1.3)).host_control_ratio(&medians),
        Some(1.15),
        "the mean of before (1.0) and after (1.3)"
    );
    // a stretch of its calls over 2× the case's median per call (100 ns): stalled
    let paced = rundir::CaseMedians {
        per_call: Some(100.0),
        ..none
    };
    assert!(with(&|_| ()).flags(&paced).is_empty());
    assert_eq!(
        with(&|s| s.state.slowest_ns = Some(201.0)).flags(&paced),
        [Stalled]
    );
    // a throttle reason flags a sample whose clock is below its case's usual clock by more
    // than 2%, or with no clock to compare; not one at its case's usual (capped) clock
    assert_eq!(
        with(&|s| s.state.throttle = Some(0x4)).flags(&none),
        [GpuThrottled]
    );
    let capped = rundir::CaseMedians {
        sm_mhz: Some(1485.0),
        ..none
    };
    let at = |mhz| {
        with(&|s| {
            s.state.throttle = Some(0x4);
            s.state.sm_mhz = Some(mhz);
        })
        .flags(&capped)
    };
    assert!(at(1485).is_empty() && at(1530).is_empty() && at(1460).is_empty());
    assert_eq!(at(1440), [GpuThrottled]);
    assert!(
        with(&|s| s.state.sm_mhz = Some(1000))
            .flags(&capped)
            .is_empty(),
        "a low clock without a throttle reason is the GPU's own choice"
    );
    // per execution: a host control slow against its own execution's median only (1.6×
    // before, 1.0× after: 1.3), and a stretch slow against its execution's pace
    let mut mixed = Vec::new();
    for (e, host, slowest) in [
        (1, 50_000.0, 104.0),
        (1, 50_000.0, 104.0),
        (1, 80_000.0, 104.0),
        (2, 80_000.0, 104.0),
        (2, 80_000.0, 104.0),
        (2, 80_000.0, 250.0),
    ] {
        mixed.push(with(&|s| {
            s.execution = e;
            s.host_ns = Some(host);
            s.state.slowest_ns = Some(slowest);
        }));
    }
    assert_eq!(
        rundir::flag_each(&mixed),
        Some(vec![false, false, true, false, false, true])
    );
    assert_eq!(rundir::flagged(&mixed), Some(2));
    // between executions (host-level): an execution whose control and time per call both
    // ran over 1.2× and 1.3× the case's fastest execution's, throughout; a control that
    // moved while the case's time did not, or a time that moved while the control did not,
    // is no level; the fastest execution is never flagged
    let per_call = base.per_call_ns();
    let level = |runs: &[(u32, f64, f64)]| {
        let samples: Vec<Sample> = runs
            .iter()
            .flat_map(|&r| std::iter::repeat_n(r, 3))
            .map(|(e, host, slower)| {
                with(&|s| {
                    s.execution = e;
                    s.host_ns = Some(host);
                    s.state.host_after_ns = Some(host);
                    s.state.slowest_ns = None;
                    s.total_ns = per_call * slower * s.iters as f64;
                })
            })
            .collect();
        let medians = rundir::case_medians(&samples);
        let flags: Vec<bool> = samples
            .iter()
            .map(|s| s.flags(&medians[&s.execution]).contains(&HostLevel))
            .collect();
        flags
            .chunks(3)
            .map(|c| c.iter().all(|&f| f))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        level(&[(1, 50_000.0, 1.0), (2, 80_000.0, 1.5)]),
        [false, true]
    );
    assert_eq!(
        level(&[(1, 80_000.0, 1.5), (2, 50_000.0, 1.0)]),
        [true, false]
    );
    assert_eq!(
        level(&[(1, 50_000.0, 1.0), (2, 80_000.0, 1.2), (3, 52_000.0, 1.6)]),
        [false, false, false]
    );
    // one execution: nothing to compare
    assert_eq!(level(&[(1, 80_000.0, 1.5)]), [false]);
    // samples that record no state: nothing to tell
    let bare = Sample::bare(&base.key, 1, &[(10, 1000.0)]);
    assert_eq!(rundir::flagged(&bare), None);
}

#[test]
fn the_peers_rows_are_told_from_the_harness_rows_by_their_variant() {
    use rundir::Timer;
    // the peer's Python op rows (`py-*`, and `python` for its framework rows without
    // transformers) and HF rows: their torch control is Python's, never the host-speed divisor
    for (variant, timer) in [
        ("aten", Timer::Rust),
        ("hf-eager", Timer::Rust),
        ("transformers", Timer::PeerHf),
        ("py-aten", Timer::PeerOps),
        ("python", Timer::PeerOps),
    ] {
        assert_eq!(Timer::of(variant), timer, "{variant}");
        assert_eq!(timer.divides_by_control(), timer == Timer::Rust);
    }
}

#[test]
fn the_state_at_a_process_end_joins_env_json_beside_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = env("r1");
    e.host_state
        .insert("gpu_sm_mhz_start".into(), "1980".into());
    let w = RunWriter::open(dir.path(), "r1", None, &e).unwrap();
    w.note_state(&[("gpu_sm_mhz_end".into(), "1965".into())])
        .unwrap();
    w.note_state(&[]).unwrap();
    let env = Run::env_of(&w.path).unwrap().unwrap();
    assert_eq!(env.host_state["gpu_sm_mhz_start"], "1980");
    assert_eq!(env.host_state["gpu_sm_mhz_end"], "1965");
}

/// Every key a worker is told to report is a field of `SampleState` (a misspelt one would be
/// dropped silently: the state's fields are optional), and the fields it is not told of are
/// the GPU's, which opbench reads itself.
#[test]
fn the_worker_state_keys_are_sample_state_fields() {
    use rundir::{SampleState, WORKER_STATE_KEYS};
    for key in WORKER_STATE_KEYS {
        let json = format!("{{\"{key}\": 7}}");
        let state: SampleState = serde_json::from_str(&json).unwrap();
        assert_ne!(
            state,
            SampleState::default(),
            "{key} is not a SampleState field"
        );
    }
    let all = serde_json::to_value(SampleState::default()).unwrap();
    let rest: Vec<&String> = all
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| !WORKER_STATE_KEYS.contains(&k.as_str()))
        .collect();
    assert_eq!(rest, ["gpu_temp", "gpu_util", "sm_mhz", "throttle"]);
}
