//! The run directory keeps to DESIGN.md and survives a process that dies mid-run.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::Path;
use std::process::Command;

use harness::record::{RESULTS_HEADER, SAMPLES_HEADER, read_csv};
use harness::{CaseKey, ResultRow, RunDir, SampleRow};

fn row(batch: usize) -> (ResultRow, Vec<SampleRow>) {
    let key = CaseKey {
        op: "floor".into(),
        variant: "add".into(),
        site: "add1".into(),
        model: "none".into(),
        phase: "decode".into(),
        batch,
        q_len: 1,
        kv_len: None,
        dtype: "f32".into(),
        device: "cpu".into(),
        mode: "pipelined".into(),
    };
    let r = ResultRow {
        run_id: "t".into(),
        op: key.op.clone(),
        variant: key.variant.clone(),
        site: key.site.clone(),
        model: key.model.clone(),
        phase: key.phase.clone(),
        batch,
        q_len: 1,
        kv_len: None,
        dtype: "f32".into(),
        dims: "numel=1".into(),
        device: "cpu".into(),
        mode: "pipelined".into(),
        status: "ok".into(),
        samples: Some(2),
        median_ns: Some(100.0),
        mean_ns: Some(100.0),
        ci_low_ns: Some(90.0),
        ci_high_ns: Some(110.0),
        mad_ns: Some(5.0),
        flops: 1,
        bytes: 12,
        gflops: Some(0.01),
        gbps: Some(0.12),
        kernel: None,
        max_rel_err: Some(0.0),
        note: None,
    };
    let s = vec![
        SampleRow::new(&key, 10, 1000.0),
        SampleRow::new(&key, 10, 1010.0),
    ];
    (r, s)
}

const DESIGN_RESULTS: &str = "run_id,op,variant,site,model,phase,batch,q_len,kv_len,dtype,dims,device,mode,status,samples,median_ns,mean_ns,ci_low_ns,ci_high_ns,mad_ns,flops,bytes,gflops,gbps,kernel,max_rel_err,note";
const DESIGN_SAMPLES: &str =
    "op,variant,site,model,phase,batch,q_len,kv_len,dtype,device,mode,iters,total_ns";

#[test]
fn headers_are_exactly_designs() {
    assert_eq!(RESULTS_HEADER.join(","), DESIGN_RESULTS);
    assert_eq!(SAMPLES_HEADER.join(","), DESIGN_SAMPLES);
    let dir = tempfile::tempdir().unwrap();
    let mut run = RunDir::open(dir.path(), "r1", "{}").unwrap();
    let (r, s) = row(1);
    run.write_case(&r, &s).unwrap();
    let text = std::fs::read_to_string(dir.path().join("runs/r1/results.csv")).unwrap();
    assert_eq!(text.lines().next().unwrap(), DESIGN_RESULTS);
    let text = std::fs::read_to_string(dir.path().join("runs/r1/samples.csv")).unwrap();
    assert_eq!(text.lines().next().unwrap(), DESIGN_SAMPLES);
    assert!(dir.path().join("runs/r1/env.json").is_file());
}

#[test]
fn a_second_process_appends_without_a_second_header() {
    let dir = tempfile::tempdir().unwrap();
    for b in [1, 2] {
        let mut run = RunDir::open(dir.path(), "r", &format!("{{\"first\": {b}}}")).unwrap();
        let (r, s) = row(b);
        run.write_case(&r, &s).unwrap();
    }
    let path = dir.path().join("runs/r/results.csv");
    let rows: Vec<ResultRow> = read_csv(&path, &RESULTS_HEADER).unwrap();
    assert_eq!(rows.iter().map(|r| r.batch).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(rows[0], row(1).0);
    let env = std::fs::read_to_string(dir.path().join("runs/r/env.json")).unwrap();
    assert!(
        env.contains("\"first\": 1"),
        "the first process describes the run"
    );
}

/// Child half of the crash test: write two cases, then die without unwinding.
#[test]
fn crash_child() {
    let Ok(out) = std::env::var("OPBENCH_CRASH_CHILD_OUT") else {
        return;
    };
    let mut run = RunDir::open(Path::new(&out), "crash", "{}").unwrap();
    for b in [1, 2] {
        let (r, s) = row(b);
        run.write_case(&r, &s).unwrap();
    }
    std::process::abort();
}

#[test]
fn rows_written_before_the_process_dies_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture"])
        .env("OPBENCH_CRASH_CHILD_OUT", dir.path())
        .status()
        .unwrap();
    assert!(!status.success(), "the child must have died");
    let run = dir.path().join("runs/crash");
    let rows: Vec<ResultRow> = read_csv(&run.join("results.csv"), &RESULTS_HEADER).unwrap();
    assert_eq!(rows.len(), 2);
    let samples: Vec<SampleRow> = read_csv(&run.join("samples.csv"), &SAMPLES_HEADER).unwrap();
    assert_eq!(samples.len(), 4);
}

#[test]
fn a_missing_column_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.csv");
    std::fs::write(&path, "run_id,op\nx,y\n").unwrap();
    let err = read_csv::<ResultRow>(&path, &RESULTS_HEADER).unwrap_err();
    assert!(
        err.contains("results.csv") && err.contains("missing column `variant`"),
        "{err}"
    );
}
