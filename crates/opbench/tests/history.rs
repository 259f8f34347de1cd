//! `opbench history` over hand-made histories with known truth: series per machine, build
//! order, replicates, gaps, change points, kernel and status changes, the exit code.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;
use common::{RESULTS, SAMPLES, opbench};

use std::io::Write;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal};

/// One case of a run: (op, site, batch, kv, status, kernel, median ns).
struct Row {
    op: &'static str,
    site: &'static str,
    batch: usize,
    kv: &'static str,
    status: &'static str,
    kernel: &'static str,
    ns: f64,
}

/// A run directory with env.json naming its machine and build, device-mode rows.
fn write_run(dir: &Path, gpu: bool, torch: &str, started: &str, rows: &[Row]) {
    std::fs::create_dir_all(dir).unwrap();
    let env = if gpu {
        format!(
            r#"{{"schema_version": 2, "run_id": "r", "started_at": "{started}", "backend": "cuda", "devices": ["cuda:0"],
                "device_name": "NVIDIA H200", "arch": "sm_90", "cpu_model": "Xeon",
                "libtorch_version": "{torch}", "runtime_version": "13.0", "git_revision": "abc",
                "build_config": "COMMIT_SHA=deadbeef{torch}, X=1", "threads": 16}}"#
        )
    } else {
        format!(
            r#"{{"schema_version": 2, "run_id": "r", "started_at": "{started}", "backend": "cpu", "devices": ["cpu"],
                "cpu_model": "Xeon", "libtorch_version": "{torch}", "git_revision": "abc", "threads": 2}}"#
        )
    };
    std::fs::write(dir.join("env.json"), env).unwrap();
    let (device, mode) = if gpu {
        ("cuda:0", "device")
    } else {
        ("cpu", "pipelined")
    };
    let header = format!("{RESULTS},uncovered_chunks,control_ns,executions,exec_cv");
    let mut r = std::fs::File::create(dir.join("results.csv")).unwrap();
    writeln!(r, "{header}").unwrap();
    let mut s = std::fs::File::create(dir.join("samples.csv")).unwrap();
    writeln!(s, "{SAMPLES},control_ns").unwrap();
    for c in rows {
        let timing = if c.status == "ok" {
            let m = c.ns;
            writeln!(
                s,
                "{},aten,{},qwen3-0.6b,decode,{},1,{},f16,{device},{mode},1,10,{},",
                c.op,
                c.site,
                c.batch,
                c.kv,
                m * 10.0
            )
            .unwrap();
            format!("1,{m},{m},{},{},1", m * 0.99, m * 1.01)
        } else {
            ",,,,,".to_string()
        };
        writeln!(
            r,
            "r,{},aten,{},qwen3-0.6b,decode,{},1,{},f16,x,{device},{mode},{},{timing},0,0,,,{},,,0,,1,",
            c.op, c.site, c.batch, c.kv, c.status, c.kernel
        )
        .unwrap();
    }
}

/// `opbench history DIR --format csv`: (exit code, change lines as column maps, stderr).
fn history_csv(
    dir: &Path,
    extra: &[&str],
) -> (i32, Vec<std::collections::HashMap<String, String>>, String) {
    let mut args = vec!["history", dir.to_str().unwrap(), "--format", "csv"];
    args.extend(extra);
    let (code, out, err) = opbench(&args);
    let mut rdr = csv::Reader::from_reader(out.as_bytes());
    let header: Vec<String> = rdr
        .headers()
        .map(|h| h.iter().map(String::from).collect())
        .unwrap_or_default();
    let rows = rdr
        .records()
        .map(|r| {
            let r = r.unwrap();
            header
                .iter()
                .cloned()
                .zip(r.iter().map(String::from))
                .collect()
        })
        .collect();
    (code, rows, err)
}

const N: usize = 24;

/// torch versions 2.9.0 … 2.14.3: build order, while the start times run backwards.
fn version(i: usize) -> String {
    format!("2.{}.{}", 9 + i / 4, i % 4)
}

/// A history of 24 H200 builds and 4 CPU builds with planted changes:
/// - linear b8 +20% from build 12;
/// - sdpa b1 from flash to math, +30%, from build 16;
/// - linear b64 unsupported from build 20;
/// - linear b1 missing from build 7 (a gap);
/// - build 5 run twice (replicates).
fn history_dir(root: &Path) -> PathBuf {
    let results = root.join("results");
    let mut rng = StdRng::seed_from_u64(5);
    let noise = Normal::new(0.0, 0.01).unwrap();
    let mut runs: Vec<(usize, &str)> = (0..N).map(|i| (i, "")).collect();
    runs.push((5, "-again"));
    for (i, suffix) in runs {
        let mut n = |base: f64| base * (1.0 + noise.sample(&mut rng));
        let mut rows = Vec::new();
        for b in [1usize, 8, 64] {
            let step = if b == 8 && i >= 12 { 1.2 } else { 1.0 };
            let broken = b == 64 && i >= 20;
            if b == 1 && i == 7 {
                continue;
            }
            rows.push(Row {
                op: "linear",
                site: "q_proj",
                batch: b,
                kv: "",
                status: if broken { "unsupported" } else { "ok" },
                kernel: "nvjet",
                ns: n(1e4 * b as f64 * step),
            });
            let math = b == 1 && i >= 16;
            rows.push(Row {
                op: "sdpa",
                site: "attn",
                batch: b,
                kv: "1025",
                status: "ok",
                kernel: if math { "math" } else { "flash" },
                ns: n(2e4 * b as f64 * if math { 1.3 } else { 1.0 }),
            });
        }
        // start times run backwards: order must come from the versions
        let started = format!("2026-11-{:02}T10:00:00Z", 28 - i);
        let name = format!("{}-h200-{}{suffix}", 28 - i, version(i));
        write_run(&results.join(name), true, &version(i), &started, &rows);
    }
    for i in 0..4 {
        let rows = vec![Row {
            op: "linear",
            site: "q_proj",
            batch: 1,
            kv: "",
            status: "ok",
            kernel: "",
            ns: 5e4,
        }];
        let started = format!("2026-11-0{}T10:00:00Z", i + 1);
        write_run(
            &results.join(format!("cpu-{i}")),
            false,
            &version(i),
            &started,
            &rows,
        );
    }
    // an unreadable run is named and skipped
    let bad = results.join("broken");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("results.csv"), "op,variant\nlinear\n").unwrap();
    // so is one from a schema this opbench does not know
    let future = results.join("future");
    write_run(&future, true, "2.11.0", "2026-11-30T00:00:00Z", &[]);
    let env = std::fs::read_to_string(future.join("env.json")).unwrap();
    std::fs::write(
        future.join("env.json"),
        env.replace("\"schema_version\": 2", "\"schema_version\": 99"),
    )
    .unwrap();
    results
}

fn case_of(row: &std::collections::HashMap<String, String>) -> (String, String, usize) {
    (
        row["op"].clone(),
        row["batch"].clone(),
        row["point"].parse().unwrap(),
    )
}

#[test]
fn history_finds_the_planted_changes_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let results = history_dir(dir.path());
    let (code, rows, err) = history_csv(&results, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("skipped") && err.contains("broken"), "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains("future") && l.contains("schema version 99")),
        "{err}"
    );
    let mut found: Vec<(String, String, usize)> = rows.iter().map(case_of).collect();
    found.sort();
    assert_eq!(
        found,
        vec![
            ("linear".into(), "64".into(), 20),
            ("linear".into(), "8".into(), 12),
            ("sdpa".into(), "1".into(), 16),
        ],
        "{rows:?}"
    );
    let by = |op: &str, b: &str| {
        rows.iter()
            .find(|r| r["op"] == op && r["batch"] == b)
            .unwrap()
    };
    let l8 = by("linear", "8");
    let m: f64 = l8["magnitude"].parse().unwrap();
    assert!((m - 0.2).abs() < 0.03, "{m}");
    assert!(
        l8["build_change"].contains("torch 2.11.3 -> 2.12.0"),
        "{l8:?}"
    );
    assert!(l8["series"].contains("NVIDIA H200"));
    let s1 = by("sdpa", "1");
    assert_eq!(s1["change"], "step; kernel flash -> math");
    let l64 = by("linear", "64");
    assert_eq!(l64["change"], "status ok -> unsupported");
    assert_eq!(l64["newest"], "false");
    // the replicate run is part of build 5's point
    assert!(
        rows.iter().all(|r| !r["runs"].is_empty()),
        "every change names its runs"
    );
    let (_, md, _) = opbench(&["history", results.to_str().unwrap()]);
    assert!(md.contains("24 builds, 25 runs"), "{md}");
    assert!(md.contains("4 builds, 4 runs"), "{md}");
    assert!(
        md.contains("-h200-2.10.1 + ") && md.contains("-again"),
        "{md}"
    );
}

#[test]
fn a_regression_in_the_newest_build_exits_1_and_the_report_draws_trends() {
    let dir = tempfile::tempdir().unwrap();
    let results = history_dir(dir.path());
    // build 24: linear b1 30% slower
    let rows: Vec<Row> = [1usize, 8, 64]
        .iter()
        .flat_map(|&b| {
            [
                Row {
                    op: "linear",
                    site: "q_proj",
                    batch: b,
                    kv: "",
                    status: if b == 64 { "unsupported" } else { "ok" },
                    kernel: "nvjet",
                    ns: 1e4 * b as f64 * if b == 1 { 1.3 } else { 1.2 },
                },
                Row {
                    op: "sdpa",
                    site: "attn",
                    batch: b,
                    kv: "1025",
                    status: "ok",
                    kernel: if b == 1 { "math" } else { "flash" },
                    ns: 2e4 * b as f64 * if b == 1 { 1.3 } else { 1.0 },
                },
            ]
        })
        .collect();
    write_run(
        &results.join("newest"),
        true,
        "2.15.0",
        "2026-11-01T00:00:00Z",
        &rows,
    );
    let out = dir.path().join("report");
    let (code, changes, err) = history_csv(&results, &["--out", out.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    let newest: Vec<_> = changes.iter().filter(|r| r["newest"] == "true").collect();
    assert_eq!(newest.len(), 1, "{changes:?}");
    assert_eq!(
        (newest[0]["op"].as_str(), newest[0]["batch"].as_str()),
        ("linear", "1")
    );
    assert_eq!(newest[0]["regression"], "true");
    assert_eq!(newest[0]["point"], "24");
    let md = std::fs::read_to_string(out.join("history.md")).unwrap();
    assert!(md.contains("## Series") && md.contains("trend-"), "{md}");
    let svg = std::fs::read_to_string(out.join("trend-1-nvidia-h200-linear.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("linear"));
    // a stricter minimum magnitude drops it
    let (code, _, _) = history_csv(&results, &["--min-magnitude", "40"]);
    assert_eq!(code, 0, "a 30% step is under a 40% minimum");
}

/// Device rows of `n` linear cases, each `ns × factor`, with a run's drift between boots:
/// a shared shift `shared` and a per-case one drawn with SD `case`.
fn drifting_rows(rng: &mut StdRng, n: usize, factor: f64, shared: f64, case: f64) -> Vec<Row> {
    let noise = Normal::new(0.0, case).unwrap();
    (0..n)
        .map(|i| Row {
            op: "linear",
            site: Box::leak(format!("s{i}").into_boxed_str()),
            batch: 1,
            kv: "",
            status: "ok",
            kernel: "",
            ns: (5_000.0 + 500.0 * i as f64) * factor * shared * (1.0 + noise.sample(rng)),
        })
        .collect()
}

#[test]
fn a_step_of_one_build_is_found_and_a_drift_between_boots_is_not() {
    // ten builds of one run each, every run its own boot: a shared drift of SD 1% and a
    // per-case one of 1.5% (what same-build H200 runs showed across days); build 5 makes
    // every case 8% slower. Then the same builds with no step: nothing is found.
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(21);
    for (root, step) in [("step", 1.08), ("flat", 1.0)] {
        for i in 0..10 {
            let shared = 1.0 + Normal::new(0.0, 0.01).unwrap().sample(&mut rng);
            let factor = if i >= 5 { step } else { 1.0 };
            let rows = drifting_rows(&mut rng, 20, factor, shared, 0.015);
            let started = format!("2026-12-{:02}T00:00:00Z", i + 1);
            let d = dir.path().join(root).join(format!("h200-2.{}.0", 10 + i));
            write_run(&d, true, &format!("2.{}.0", 10 + i), &started, &rows);
        }
    }
    let (_, rows, err) = history_csv(&dir.path().join("step"), &[]);
    let at: Vec<usize> = rows.iter().map(|r| r["point"].parse().unwrap()).collect();
    // found at build 5 in at least 16 of the 20 cases (17 with this seed), nowhere else
    assert!(at.len() >= 16 && at.iter().all(|&p| p == 5), "{at:?} {err}");
    let (code, rows, err) = history_csv(&dir.path().join("flat"), &[]);
    assert!(rows.is_empty(), "{rows:?} {err}");
    assert_eq!(code, 0);
}

#[test]
fn runs_of_one_build_by_two_opbench_revisions_are_one_point() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(22);
    for (i, rev) in ["abc", "def"].iter().enumerate() {
        let rows = drifting_rows(&mut rng, 5, if i == 1 { 1.06 } else { 1.0 }, 1.0, 0.005);
        let d = dir.path().join(format!("h200-{rev}"));
        write_run(&d, true, "2.11.0", "2026-12-01T00:00:00Z", &rows);
        let env = std::fs::read_to_string(d.join("env.json")).unwrap();
        std::fs::write(
            d.join("env.json"),
            env.replace("\"abc\"", &format!("\"{rev}\"")),
        )
        .unwrap();
    }
    let (code, rows, _) = history_csv(dir.path(), &[]);
    assert!(rows.is_empty(), "{rows:?}");
    assert_eq!(code, 0);
    let (_, md, _) = opbench(&["history", dir.path().to_str().unwrap()]);
    assert!(md.contains("1 builds, 2 runs"), "{md}");
}

#[test]
fn history_bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let results = history_dir(dir.path());
    let r = results.to_str().unwrap();
    for (args, needle) in [
        (vec!["history", r, "--window", "2"], "--window 2"),
        (vec!["history", r, "--max-p", "0"], "--max-p 0"),
        (
            vec!["history", r, "--min-magnitude", "100"],
            "--min-magnitude",
        ),
        (vec!["history", "/nonexistent/opbench"], "not a directory"),
        (vec!["history", r, "--mode", "sideways"], "sideways"),
    ] {
        let (code, _, err) = opbench(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // a folder with no readable run
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(empty.join("broken")).unwrap();
    std::fs::write(empty.join("broken/results.csv"), "x\n").unwrap();
    let (code, _, err) = opbench(&["history", empty.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no readable run"), "{err}");
}

#[test]
fn history_says_what_it_cannot_detect() {
    // the repository's reference runs: one build per machine, too few for any change
    let results = concat!(env!("CARGO_MANIFEST_DIR"), "/../../results");
    let (code, md, err) = opbench(&["history", results]);
    assert_eq!(code, 0, "{err}");
    assert!(
        md.contains("What it can detect: a step of at least 5%"),
        "{md}"
    );
    assert!(
        md.contains("(1 build)") && md.contains("cannot show a change yet"),
        "{md}"
    );
    // a history long enough says nothing of the kind
    let dir = tempfile::tempdir().unwrap();
    let long = history_dir(dir.path());
    let (_, md, _) = opbench(&["history", long.to_str().unwrap()]);
    assert!(!md.contains("cannot show a change yet"), "{md}");
}
