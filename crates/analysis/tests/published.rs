//! fit, predict and compare on the published runs in results/ (read-only fixtures, schema
//! 1), asserting on the returned structs. The numbers are those the CLI printed when the
//! runs were published (tests/golden of the opbench crate).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::path::PathBuf;

use analysis::AnalysisError;
use analysis::compare::{Flag, Settings, Verdict, compare};
use analysis::fit::fit_run;
use analysis::predict::{HostModel, HostState, Query, at_host_state, predict};
use rundir::{DType, DeviceId, Mode, Run};
use shapes::{ModelConfig, StepProfile};

const CPU: &str = "2026-11-29-intel-r-xeon-r-processor-cpu-torch2.11.0";
const H200: &str = "2026-11-29-nvidia-h200-cuda-torch2.11.0";
const H200_CROSSCHECK: &str = "2026-11-29-nvidia-h200-cuda-torch2.11.0-crosscheck";
const H200_COLD: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-graph-cold";
const H200_REPLICA: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-graphs-replica";
const H200_EAGER_X2: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-eager-x2";
const H200_LAYER_X2: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-layer-x2";
const H200_LAYER_X1: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-layer-x1";
const H200_TCHLAYER_X1: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-tchlayer-x1";
const H200_BESIDE_X2: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-beside-x2";
const H200_BESIDE_B_X1: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-beside-b-x1";
const H200_BESIDE_C_X1: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-beside-c-x1";
const H200_STACK_X2: &str = "2026-12-01-nvidia-h200-cuda-torch2.11.0-stack-x2";

/// An eager (pipelined) step on the H200 at L = 1024, host costs as measured.
fn h200_eager(cfg: &ModelConfig, profile: StepProfile, batch: usize) -> Query<'_> {
    Query {
        model: cfg,
        batch,
        ctx: 1024,
        phase: rundir::Phase::Decode,
        profile,
        device: "cuda:0".parse::<DeviceId>().unwrap(),
        dtype: DType::F16,
        mode: Mode::Pipelined,
        host: HostModel::AsMeasured,
    }
}

/// The measured pipelined step of `q` in `run`.
fn measured_step(run: &Run, q: &Query) -> f64 {
    run.row(&q.step_key(Mode::Pipelined))
        .unwrap()
        .median_ns
        .unwrap()
}

fn load(name: &str) -> Run {
    common::fixture(&format!("published/results/{name}"))
}

#[test]
fn published_runs_read_as_schema_1() {
    let run = load(H200);
    assert_eq!(run.schema, 1);
    // every line of its results.csv read (a round trip of the file's row count)
    let gz = std::fs::File::open(run.dir.join("results.csv.gz"))
        .map(|f| std::io::read_to_string(flate2::read::GzDecoder::new(f)).unwrap());
    let lines = match gz {
        Ok(text) => text.lines().count(),
        Err(_) => std::fs::read_to_string(run.dir.join("results.csv"))
            .unwrap()
            .lines()
            .count(),
    };
    assert_eq!(run.results.len(), lines - 1);
    assert!(run.results.iter().all(|r| r.uncovered_chunks.is_none()));
}

#[test]
fn fit_finds_every_series_with_three_batches() {
    let run = load(CPU);
    let fits = fit_run(&run);
    // every series with three batches or more is fitted
    let series: std::collections::BTreeMap<_, usize> =
        run.ok_rows().fold(Default::default(), |mut m, r| {
            *m.entry(r.key.series.clone()).or_default() += 1;
            m
        });
    let fittable = series.values().filter(|n| **n >= 3).count();
    assert!(
        fittable > 10 && fits.fitted.len() == fittable,
        "{} of {fittable}",
        fits.fitted.len()
    );
    for f in &fits.fitted {
        assert!(f.points.len() >= 3);
        let row = f.row();
        assert!(
            row.overhead_ci_low_us <= row.overhead_us && row.overhead_us <= row.overhead_ci_high_us
        );
        assert!(row.r2.is_finite());
    }
}

#[test]
fn predict_composes_the_plan_and_says_the_h200_step_is_host_bound() {
    let run = load(H200);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    for profile in StepProfile::ALL {
        for batch in [1, 8, 64] {
            let q = Query {
                model: &cfg,
                batch,
                ctx: 1024,
                phase: rundir::Phase::Decode,
                profile,
                device: "cuda:0".parse().unwrap(),
                dtype: DType::F16,
                mode: Mode::Pipelined,
                host: HostModel::AsMeasured,
            };
            let p = predict(&run, &q).unwrap();
            assert!(p.gpu && p.host_bound(), "{profile} B={batch}");
            assert_eq!(p.step_ns, p.host_ns.max(p.device_ns));
            // every planned call is priced, measured sites and other calls alike
            assert_eq!(
                p.components.len(),
                p.plan.measured.len() + p.plan.other.len()
            );
            let calls: usize = p.components.iter().map(|c| c.calls).sum();
            let views: usize = p
                .plan
                .other
                .iter()
                .filter(|o| o.name == "views")
                .map(|o| o.calls)
                .sum();
            assert_eq!(calls, p.plan.calls() + views);
        }
    }
}

#[test]
fn predict_names_what_the_run_lacks() {
    let run = load(CPU);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let q = Query {
        model: &cfg,
        batch: 1,
        ctx: 128,
        phase: rundir::Phase::Decode,
        profile: StepProfile::HfEager,
        device: DeviceId::CPU,
        dtype: DType::F16,
        mode: Mode::Pipelined,
        host: HostModel::AsMeasured,
    };
    let e = predict(&run, &q).unwrap_err();
    assert!(matches!(e, AnalysisError::Input(_)));
    // a run with no rows of that dtype names what to time, not the floor it lacks
    assert!(
        e.to_string()
            .contains("the run has no f16 pipelined rows on cpu")
            && e.to_string().contains("OPBENCH_DTYPE=f16"),
        "{e}"
    );
}

#[test]
fn compare_gives_the_published_verdicts() {
    let s = Settings::new(0.05, 0.01).unwrap();
    let same = compare(&load(CPU), &load(CPU), s).unwrap();
    assert_eq!(same.fails(), 0);
    assert_eq!(
        same.count(Some(Verdict::Slower)) + same.count(Some(Verdict::Faster)),
        0
    );
    let (b, k) = (load(H200), load(H200_CROSSCHECK));
    let c = compare(&b, &k, s).unwrap();
    // a line for every case of either run
    let keys: std::collections::BTreeSet<_> =
        b.results.iter().chain(&k.results).map(|r| &r.key).collect();
    assert_eq!(c.lines.len(), keys.len());
    assert_eq!(c.executions, (1, 1));
    // one process a side: host-timed cases get no speed verdict (a single-process
    // comparison of them called 339 slower or faster before); device rows are slower or
    // faster only beyond the spread GPU-event times show between processes (20%): the 27
    // device rows this pair called faster at 5% were 0.919–0.950, inside what A/A pairs of
    // executions showed (up to 15.2%), and are ambiguous.
    let counts = [
        Verdict::Slower,
        Verdict::Faster,
        Verdict::Same,
        Verdict::Ambiguous,
    ];
    // no speed verdict between two single processes; `same` only within ±5% (recorded
    // 2026-12-06: 111 same, 609 ambiguous)
    let [slower, faster, same_n, _] = counts.map(|v| c.count(Some(v)));
    assert_eq!((slower, faster), (0, 0));
    assert!(same_n > 0);
    for l in c.lines.iter().filter(|l| l.verdict == Some(Verdict::Same)) {
        let r = l.ratio.unwrap();
        assert!((1.0 / 1.05..=1.05).contains(&r), "{}: same at {r}", l.key);
    }
    for l in c
        .lines
        .iter()
        .filter(|l| !l.key.mode.is_device() && l.ratio.is_some())
    {
        assert_eq!(l.verdict, Some(Verdict::Ambiguous), "{}", l.key);
        assert!(l.flags.contains(&Flag::SingleExecution), "{}", l.key);
    }
    assert_eq!(
        c.env_diff,
        vec!["git_revision: \"4e1b5c343b32\" -> \"65d8960ab001\""]
    );
    assert!(Settings::new(1.5, 0.01).is_err() && Settings::new(0.05, 0.0).is_err());
}

#[test]
fn history_of_the_published_runs_is_one_series_per_machine() {
    let results =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/published/results");
    let h = analysis::history::history(
        std::slice::from_ref(&results),
        &analysis::history::Settings::default(),
    )
    .unwrap();
    assert!(h.skipped.is_empty(), "{:?}", h.skipped);
    // every published run with env.json, by backend and timing method: runs timed with
    // other warm-up, measurement or samples are a series of their own, never a change point
    let mut by_series = std::collections::BTreeMap::<(String, String), usize>::new();
    for e in std::fs::read_dir(&results).unwrap().flatten() {
        if let Ok(t) = std::fs::read_to_string(e.path().join("env.json")) {
            let env: rundir::Env = serde_json::from_str(&t).unwrap();
            let method = analysis::build::method_of(&env);
            *by_series.entry((env.backend, method)).or_default() += 1;
        }
    }
    assert_eq!(
        h.series.len(),
        by_series.len(),
        "one series per machine and method"
    );
    assert!(
        h.series.len() >= 2,
        "an H200 series and a CPU series at least"
    );
    for s in &h.series {
        let runs: usize = s.points.iter().map(|p| p.runs.len()).sum();
        let k = (s.machine.backend.clone(), s.machine.method.clone());
        assert_eq!(runs, by_series[&k], "{}", s.label());
    }
    let h200 = h
        .series
        .iter()
        .find(|s| s.machine.backend == "cuda")
        .unwrap();
    assert_eq!(h200.machine.device, "NVIDIA H200");
    // the planted-slowdown runs (the calibration fixtures) are points of their own, marked
    // with the setting and its scope
    let calibration =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/calibration-2026-12-01");
    let planted = analysis::history::history(
        std::slice::from_ref(&calibration),
        &analysis::history::Settings::default(),
    )
    .unwrap();
    let labels: Vec<String> = planted.series[0]
        .points
        .iter()
        .map(|p| p.build.label())
        .collect();
    for plant in [
        "plant_pct=10, plant_scope=op",
        "plant_pct=10, plant_scope=torch",
        "plant_device_pct=3",
    ] {
        assert_eq!(
            labels.iter().filter(|l| l.ends_with(plant)).count(),
            1,
            "{plant}: {labels:?}"
        );
    }
    let out = tempfile::tempdir().unwrap();
    analysis::history_report::write_history_report(&h, out.path()).unwrap();
    let svgs = std::fs::read_dir(out.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".svg"))
        .count();
    assert!(svgs >= 5, "{svgs} trend plots");
}

const H200_GRAPHS: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-graphs-trace";
const H200_AFTER_TRACE: &str = "2026-11-30-nvidia-h200-cuda-torch2.11.0-linear-after-trace";

/// Every decode-grid case of qwen3-0.6b has a graph row, ok or with the reason it is not;
/// the graphed steps replay faster than eager at every batch.
#[test]
fn graph_rows_cover_the_decode_grid() {
    let run = load(H200_GRAPHS);
    assert_eq!(run.schema, 4);
    let pipelined: Vec<&rundir::ResultRow> = run
        .results
        .iter()
        .filter(|r| r.mode == Mode::Pipelined && r.op != rundir::OpKind::Ceiling)
        .collect();
    assert!(pipelined.len() > 100);
    for p in pipelined {
        let g = run
            .row(&p.key.in_mode(Mode::Graph))
            .unwrap_or_else(|| panic!("no graph row for {}", p.key));
        assert!(
            g.is_ok() || g.note.as_deref().is_some_and(|n| !n.is_empty()),
            "{}",
            g.key
        );
    }
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    for profile in [StepProfile::Fused, StepProfile::HfEager] {
        for b in [1, 8, 64] {
            let q = Query {
                model: &cfg,
                batch: b,
                ctx: 1024,
                phase: rundir::Phase::Decode,
                profile,
                device: "cuda:0".parse::<DeviceId>().unwrap(),
                dtype: DType::F16,
                mode: Mode::Graph,
                host: HostModel::AsMeasured,
            };
            let graph = run.row(&q.step_key(Mode::Graph)).unwrap();
            let eager = run.row(&q.step_key(Mode::Pipelined)).unwrap();
            let (g, e) = (graph.median_ns.unwrap(), eager.median_ns.unwrap());
            assert!(e / g > 1.5, "{profile} B={b}: eager {e} graph {g}");
            // what predict --mode graph printed when the run was published
            let p = predict(&run, &q).unwrap();
            assert!(
                (0.7..1.0).contains(&(p.step_ns / g)),
                "{profile} B={b}: {}",
                p.step_ns / g
            );
        }
    }
}

/// Every GPU case has a trace; linear cases name their GEMM kernel at every batch; and
/// cuBLASLt's own log names the same kernel (tile and cluster shape) for each of them.
#[test]
fn traces_name_every_gemm_and_the_logs_agree() {
    let run = load(H200_GRAPHS);
    let traces = analysis::traced::Traces::load(&run).unwrap();
    for r in run.results.iter().filter(|r| r.mode == Mode::Pipelined) {
        let t = traces
            .of(&r.key)
            .unwrap_or_else(|| panic!("no trace of {}", r.key));
        match r.status {
            rundir::Status::Ok => assert_eq!(t.status, rundir::TraceStatus::Ok, "{}", r.key),
            _ => assert!(
                t.note
                    .as_deref()
                    .unwrap()
                    .starts_with("trace unavailable: ")
            ),
        }
    }
    let logs_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/published/results")
        .join(H200_GRAPHS);
    let logs = Run {
        dir: logs_dir.join("cublaslt-logs"),
        ..load(H200_GRAPHS)
    };
    let logged = analysis::traced::Traces::load(&logs).unwrap();
    let linear: Vec<_> = traces
        .rows
        .values()
        .filter(|t| t.key.series.op == rundir::OpKind::Linear)
        .collect();
    assert_eq!(linear.len(), 30);
    for t in linear {
        let kernel = t.dominant_kernel.as_deref().unwrap();
        assert!(kernel.starts_with("nvjet_sm90"), "{kernel}");
        let log = logged
            .of(&t.key)
            .unwrap()
            .dominant_kernel
            .as_deref()
            .unwrap();
        assert_eq!(
            analysis::traced::log_names_kernel(log, kernel),
            Some(true),
            "{}: log {log}, trace {kernel}",
            t.key
        );
    }
}

/// The linear cases timed again after the trace pass: device and graph rows unchanged.
#[test]
fn a_trace_pass_leaves_timing_unchanged() {
    let (a, b) = (load(H200_GRAPHS), load(H200_AFTER_TRACE));
    let cmp = compare(&a, &b, Settings::new(0.05, 0.01).unwrap()).unwrap();
    let lines: Vec<_> = cmp
        .lines
        .iter()
        .filter(|l| l.key.series.op == rundir::OpKind::Linear && l.key.mode.is_device())
        .filter(|l| l.verdict.is_some())
        .collect();
    assert!(lines.len() >= 50, "{}", lines.len());
    let same = lines
        .iter()
        .filter(|l| l.verdict == Some(Verdict::Same))
        .count();
    assert!(same * 10 >= lines.len() * 9, "{same} of {}", lines.len());
}

/// Issue #16's target, in two processes of one boot: the graphed decode step predicted
/// from the op cases' graph (cold where they read model state) rows within ±10% of the
/// decode crate's measured graphed step, both profiles, B = 1, 8, 64.
#[test]
fn graph_predictions_are_within_ten_percent_in_two_runs() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    for name in [H200_COLD, H200_REPLICA] {
        let run = load(name);
        for profile in [StepProfile::Fused, StepProfile::HfEager] {
            for b in [1, 8, 64] {
                let q = Query {
                    model: &cfg,
                    batch: b,
                    ctx: 1024,
                    phase: rundir::Phase::Decode,
                    profile,
                    device: "cuda:0".parse::<DeviceId>().unwrap(),
                    dtype: DType::F16,
                    mode: Mode::Graph,
                    host: HostModel::AsMeasured,
                };
                let measured = run
                    .row(&q.step_key(Mode::Graph))
                    .unwrap()
                    .median_ns
                    .unwrap();
                let p = predict(&run, &q).unwrap();
                let ratio = p.step_ns / measured;
                assert!(
                    (0.9..=1.1).contains(&ratio),
                    "{name} {profile} B={b}: predicted / measured {ratio:.3}"
                );
                // the GEMMs and attention were priced from their cold rows, and the
                // switching cost was measured
                let from_cold = p
                    .components
                    .iter()
                    .filter(|c| c.device_source == analysis::predict::DeviceSource::GraphCold)
                    .count();
                assert!(from_cold >= 5, "{name} {profile} B={b}: {from_cold}");
                assert!(p.switch_ns.is_some_and(|s| s > 0.0), "{name}");
            }
        }
    }
}

/// graph_cold reads the weights from memory: every projection whose weights fit the L2
/// (60 MiB on the H200) costs more than when replayed warm; lm_head (297 MiB) does not.
#[test]
fn graph_cold_pays_for_reading_weights_from_memory() {
    let run = load(H200_COLD);
    let linear: Vec<_> = run
        .ok_rows()
        .filter(|r| r.op == rundir::OpKind::Linear && r.mode == Mode::GraphCold)
        .collect();
    // 10 sites (q, k, v, o, gate, up, down, lm_head, fused qkv and gate_up) at B = 1, 8, 64
    assert_eq!(linear.len(), 30);
    for cold in linear {
        let warm = run.row(&cold.key.in_mode(Mode::Graph)).unwrap();
        let ratio = cold.median_ns.unwrap() / warm.median_ns.unwrap();
        if cold.site == "lm_head" {
            assert!((0.97..1.03).contains(&ratio), "{}: {ratio}", cold.key);
        } else if cold.batch == 1 && matches!(cold.site.as_str(), "k_proj" | "v_proj" | "o_proj") {
            // the slow 8x64-tile kernel cuBLASLt picks for these at B = 1 (the -graphs-trace
            // run's traces) is not held up by memory: cold costs the same or less (measured,
            // not understood: k and v 6.5 µs cold against 7.3 warm)
            assert!((0.8..1.05).contains(&ratio), "{}: {ratio}", cold.key);
        } else {
            assert!(ratio > 1.05, "{}: {ratio}", cold.key);
        }
        assert!(
            cold.note
                .as_deref()
                .unwrap()
                .contains("copies of the state")
        );
    }
}

/// On the CPU a step reads every layer's weights from memory: predict prices the
/// projections, attention and the cache appends from their `pipelined_cold` rows, and
/// composes the HF transformers step within ±20% of the one measured at every batch of the
/// quick grid. The tch steps moved 16–19% (CV) between the executions of the run these
/// bars were set on (`-cold-x3`, 2026-11-30); they are held to ±25%. The bars hold
/// unchanged on the later single execution read here (the three-execution run left the
/// fixtures on 2026-12-06: see tests/fixtures/published/README.md).
#[test]
fn cpu_predictions_price_the_step_with_its_weights_cold() {
    use analysis::predict::Source;
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let run = common::fixture(common::CPU_STACK);
    for (profile, bound, cold_sites) in [
        (StepProfile::Transformers, 0.20, 11),
        (StepProfile::HfEager, 0.25, 11),
        (StepProfile::Fused, 0.25, 6),
    ] {
        for b in [1, 2, 8] {
            let q = Query {
                model: &cfg,
                batch: b,
                ctx: 128,
                phase: rundir::Phase::Decode,
                profile,
                device: DeviceId::CPU,
                dtype: DType::F32,
                mode: Mode::Pipelined,
                host: HostModel::AsMeasured,
            };
            let row = run.row(&q.step_key(Mode::Pipelined)).unwrap();
            let p = predict(&run, &q).unwrap();
            let ratio = p.step_ns / row.median_ns.unwrap();
            assert!(
                (1.0 - bound..=1.0 + bound).contains(&ratio),
                "{profile} B={b}: predicted / measured {ratio:.3}"
            );
            let cold = p
                .components
                .iter()
                .filter(|c| c.source == Source::Cold)
                .count();
            assert_eq!(cold, cold_sites, "{profile} B={b}");
        }
    }
}

/// The transformers step's calls from Python run hf-eager's kernels: its device time is
/// theirs, cold penalties (`graph_cold` − `graph`) included, at every batch.
#[test]
fn the_transformers_step_runs_the_hf_eager_kernels() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let run = load(H200_EAGER_X2);
    for batch in [1, 8, 64] {
        let q = |profile| h200_eager(&cfg, profile, batch);
        let py = predict(&run, &q(StepProfile::Transformers)).unwrap();
        let tch = predict(&run, &q(StepProfile::HfEager)).unwrap();
        assert!(
            (py.device_ns - tch.device_ns).abs() < 1.0,
            "B={batch}: {} against {}",
            py.device_ns,
            tch.device_ns
        );
        let cold = |p: &analysis::predict::Prediction| {
            p.components
                .iter()
                .filter(|c| c.device_source == analysis::predict::DeviceSource::EventsCold)
                .count()
        };
        assert!(cold(&py) >= 5 && cold(&py) == cold(&tch), "B={batch}");
    }
}

/// Three leases of the 2026-11-30 runs, each with the peer's decoder-layer rows: in the
/// fast host state with the context host model, predict composes the HF transformers step
/// within ±15% of the one measured in 8 of the 9 cases (B = 1, 8, 64; the ninth −15.3%, a
/// step measured mostly in the slow state), its context factor is the layer's own (its
/// calls in sequence over each alone, 1.1–1.3 at B = 1) and transformers' own code per
/// layer is measured (15–65 µs), not the old parts. With the as-measured host model (each
/// row's cost alone) the same steps miss by over 20% in the first two leases.
#[test]
fn the_transformers_step_composes_from_its_layer_in_three_leases() {
    use analysis::predict::ContextFrom;
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let mut within = 0;
    for name in [H200_LAYER_X2, H200_LAYER_X1, H200_TCHLAYER_X1] {
        let fast = at_host_state(&load(name), HostState::Fast).unwrap();
        for b in [1, 8, 64] {
            let q = |host| Query {
                host,
                ..h200_eager(&cfg, StepProfile::Transformers, b)
            };
            let measured = measured_step(&fast, &q(HostModel::Context));
            let p = predict(&fast, &q(HostModel::Context)).unwrap();
            let err = p.step_ns / measured - 1.0;
            assert!(err.abs() <= 0.16, "{name} B={b}: {err:.3}");
            within += usize::from(err.abs() <= 0.15);
            let c = p.context.unwrap();
            assert_eq!(c.from, ContextFrom::Layer { batch: 1 }, "{name} B={b}");
            assert!((1.1..1.3).contains(&c.factor), "{name} B={b}: {}", c.factor);
            let own = p.components.iter().find(|c| c.site == "layer_own").unwrap();
            assert_eq!(own.source, analysis::predict::Source::Measured);
            assert!(
                (10e3..80e3).contains(&own.host_ns),
                "{name} B={b}: {}",
                own.host_ns
            );
            if name != H200_TCHLAYER_X1 {
                let plain = predict(&fast, &q(HostModel::AsMeasured)).unwrap();
                assert!(plain.step_ns / measured - 1.0 < -0.2, "{name} B={b}");
            }
        }
    }
    // the bar: at least 8 of the 9 within ±15% (the ninth, −15.3%, measured mostly slow)
    assert!(within >= 8, "{within} of 9");
}

/// The `controlled` host model with the peer's layer rows: every cost measured alone scaled
/// so that one layer's calls cost what the peer's process measured them at each alone, then
/// the layer's context: the HF transformers step within ±11% in all nine cases of the three
/// leases, fast host state (−10.7 to +5.0%).
#[test]
fn the_transformers_step_priced_at_its_own_process_in_three_leases() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    for name in [H200_LAYER_X2, H200_LAYER_X1, H200_TCHLAYER_X1] {
        let fast = at_host_state(&load(name), HostState::Fast).unwrap();
        for b in [1, 8, 64] {
            let q = Query {
                host: HostModel::Controlled,
                ..h200_eager(&cfg, StepProfile::Transformers, b)
            };
            let measured = measured_step(&fast, &q);
            let err = predict(&fast, &q).unwrap().step_ns / measured - 1.0;
            assert!(err.abs() <= 0.11, "{name} B={b}: {err:.3}");
        }
    }
}

/// The decode crate's own layer rows (third lease): each tch profile's context factor is
/// its layer's calls in order over the same calls each repeated 8 times in a row, at B = 1.
/// With it the hf-eager step composes within ±5% at B = 1, 8, 64 in both host states; the
/// fused step comes closer than with the rows alone at every batch, yet stays 6–18% low.
/// The `controlled` model also scales the rows to the step's own process (its layer's calls
/// each alone over what the rows price them at: the op crates ran in other processes):
/// then both steps compose within ±12% (hf-eager +1 to +4%, fused −1 to −12%).
#[test]
fn the_tch_steps_take_their_own_layers_context() {
    use analysis::predict::ContextFrom;
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let run = load(H200_TCHLAYER_X1);
    for state in HostState::ALL {
        let run = at_host_state(&run, state).unwrap();
        for b in [1, 8, 64] {
            for profile in [StepProfile::HfEager, StepProfile::Fused] {
                let q = |host| Query {
                    host,
                    ..h200_eager(&cfg, profile, b)
                };
                let measured = measured_step(&run, &q(HostModel::Context));
                let p = predict(&run, &q(HostModel::Context)).unwrap();
                let c = p.context.unwrap();
                assert_eq!(c.from, ContextFrom::Layer { batch: 1 });
                assert!((1.0..1.2).contains(&c.factor), "{profile}: {}", c.factor);
                let err = p.step_ns / measured - 1.0;
                let plain =
                    predict(&run, &q(HostModel::AsMeasured)).unwrap().step_ns / measured - 1.0;
                match profile {
                    StepProfile::HfEager => {
                        assert!(err.abs() <= 0.05, "{state:?} hf-eager B={b}: {err:.3}")
                    }
                    _ => assert!(
                        err.abs() < plain.abs() && (-0.18..-0.06).contains(&err),
                        "{state:?} fused B={b}: {err:.3} against {plain:.3}"
                    ),
                }
                let controlled = predict(&run, &q(HostModel::Controlled)).unwrap();
                assert!(matches!(
                    controlled.host_speed,
                    Some(analysis::predict::HostSpeed::Layer { batch: 1, .. })
                ));
                let err = controlled.step_ns / measured - 1.0;
                assert!(err.abs() <= 0.12, "{state:?} {profile} B={b}: {err:.3}");
            }
        }
    }
}

/// The report prices each profile with `controlled` where the run has that profile's layer
/// rows on the GPU, else as each row measured it alone: the CPU never scales.
#[test]
fn the_report_prices_a_profile_with_its_layer_where_the_run_has_it() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let on_gpu = |run: &Run, p| HostModel::default_for(run, &h200_eager(&cfg, p, 1));
    let tch = [StepProfile::HfEager, StepProfile::Fused];
    let all = load(H200_TCHLAYER_X1);
    for p in StepProfile::EVERY {
        assert_eq!(on_gpu(&all, p), HostModel::Controlled, "{p}");
    }
    let peer_only = load(H200_LAYER_X1);
    assert_eq!(
        on_gpu(&peer_only, StepProfile::Transformers),
        HostModel::Controlled
    );
    for p in tch {
        assert_eq!(on_gpu(&peer_only, p), HostModel::AsMeasured, "{p}");
    }
    let before = load(H200_EAGER_X2);
    let cpu = common::fixture(common::CPU_STACK);
    for p in StepProfile::EVERY {
        assert_eq!(on_gpu(&before, p), HostModel::AsMeasured);
        let on_cpu = Query {
            ctx: 128,
            device: DeviceId::CPU,
            dtype: DType::F32,
            ..h200_eager(&cfg, p, 1)
        };
        assert_eq!(HostModel::default_for(&cpu, &on_cpu), HostModel::AsMeasured);
    }
}

/// Three runs in two leases with the decode crate's `layer_beside` rows (one decoder layer
/// of each tch step timed before every sample of the step, at its batch): `controlled`
/// scales the tch steps' host costs so that one layer's calls cost what that layer did —
/// exactly — applies no context factor on top, and composes hf-eager and fused within ±10%
/// of the measured step at B = 1, 8, 64 in both host states; transformers within ±15%
/// where the run has the peer's rows (not `-beside-c-x1`). In `-beside-b-x1` the hf-eager
/// B = 8 step ran in the slow state (1.6× its B = 1 step), and its layer beside it did too.
#[test]
fn the_tch_steps_priced_at_the_layer_beside_them_in_two_leases() {
    use analysis::predict::{HostSpeed, beside_ns};
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    for (name, peer) in [
        (H200_BESIDE_X2, true),
        (H200_BESIDE_B_X1, true),
        (H200_BESIDE_C_X1, false),
    ] {
        let run = load(name);
        for state in HostState::ALL {
            let run = at_host_state(&run, state).unwrap();
            for profile in StepProfile::EVERY {
                if profile == StepProfile::Transformers && !peer {
                    continue;
                }
                for b in [1, 8, 64] {
                    let q = Query {
                        host: HostModel::Controlled,
                        ..h200_eager(&cfg, profile, b)
                    };
                    let p = predict(&run, &q).unwrap();
                    let err = p.step_ns / measured_step(&run, &q) - 1.0;
                    let what = format!("{name} {state:?} {profile} B={b}: {err:.3}");
                    if profile == StepProfile::Transformers {
                        assert!(beside_ns(&run, &q).is_none());
                        assert!(err.abs() <= 0.15, "{what}");
                        continue;
                    }
                    assert!(err.abs() <= 0.10, "{what}");
                    assert!(
                        matches!(p.host_speed, Some(HostSpeed::Beside { batch, .. }) if batch == b),
                        "{what}"
                    );
                    assert!(p.context.is_none(), "{what}");
                    let beside = beside_ns(&run, &q).unwrap();
                    let per_layer = p.per_layer_ns(cfg.num_hidden_layers);
                    assert!((per_layer / beside - 1.0).abs() < 1e-9, "{what}");
                }
            }
        }
    }
    // the slow hf-eager B = 8 step, and its layer beside it
    let run = load(H200_BESIDE_B_X1);
    let q = |b| Query {
        host: HostModel::Controlled,
        ..h200_eager(&cfg, StepProfile::HfEager, b)
    };
    let (one, eight) = (measured_step(&run, &q(1)), measured_step(&run, &q(8)));
    assert!(eight / one > 1.5, "{one} {eight}");
    let (l1, l8) = (
        beside_ns(&run, &q(1)).unwrap(),
        beside_ns(&run, &q(8)).unwrap(),
    );
    assert!(l8 / l1 > 1.4, "{l1} {l8}");
}

/// The report's graph-replay table lists the decode steps, one row per profile and batch,
/// not the layer cases a run also timed in `graph` mode.
#[test]
fn the_graph_replay_table_lists_the_steps_only() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/published/results")
        .join(H200_BESIDE_B_X1);
    let tmp = tempfile::tempdir().unwrap();
    for f in ["env.json", "results.csv.gz", "samples.csv.gz"] {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    let report = analysis::report::write_report(tmp.path()).unwrap();
    let md = std::fs::read_to_string(report).unwrap();
    let table: Vec<&str> = md
        .split("### Graph replay")
        .nth(1)
        .unwrap()
        .lines()
        .skip_while(|l| !l.starts_with("|---"))
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(table.len(), 6, "{table:#?}");
    let layer_rows = load(H200_BESIDE_B_X1)
        .results
        .iter()
        .filter(|r| r.mode == Mode::Graph && r.site.starts_with("layer"))
        .count();
    assert!(layer_rows > 0);
}

/// the 2026-12-01 runs: transformers' own code per layer from every decoder layer called in
/// turn (`stack` − `stack_flat`). On the H200 (one lease, two executions, fast state,
/// `controlled`) the tch steps stay within ±10% and the HF step within ±15%, its own code
/// 20–40 µs a layer as before; on the 2-core CPU (one execution) the HF step, priced with
/// its layer's calls in sequence, comes within ±20% at B = 1, 2, 8, where the same run
/// without that part is priced lower at every batch.
#[test]
fn the_layers_in_turn_price_transformers_own_code_on_both_machines() {
    use analysis::predict::IN_SEQUENCE;
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let run = at_host_state(&load(H200_STACK_X2), HostState::Fast).unwrap();
    for profile in StepProfile::EVERY {
        for b in [1, 8, 64] {
            let q = Query {
                host: HostModel::Controlled,
                ..h200_eager(&cfg, profile, b)
            };
            let p = predict(&run, &q).unwrap();
            let err = p.step_ns / measured_step(&run, &q) - 1.0;
            let bound = if profile == StepProfile::Transformers {
                0.15
            } else {
                0.10
            };
            assert!(err.abs() <= bound, "{profile} B={b}: {err:.3}");
            assert!(p.sequence.is_none(), "{profile} B={b}");
            if profile == StepProfile::Transformers {
                let own = p.components.iter().find(|c| c.site == "layer_own").unwrap();
                assert!(
                    (20e3..=40e3).contains(&own.host_ns),
                    "B={b}: {}",
                    own.host_ns
                );
                let d =
                    analysis::predict::in_sequence(&run, &q, &[("stack", "stack_flat")]).unwrap();
                assert!((own.host_ns - d.ns()).abs() < 1e-6);
            }
        }
    }
    let run = common::fixture(common::CPU_STACK);
    for b in [1, 2, 8] {
        let q = Query {
            model: &cfg,
            batch: b,
            ctx: 128,
            phase: rundir::Phase::Decode,
            profile: StepProfile::Transformers,
            device: DeviceId::CPU,
            dtype: DType::F32,
            mode: Mode::Pipelined,
            host: HostModel::AsMeasured,
        };
        let p = predict(&run, &q).unwrap();
        let measured = measured_step(&run, &q);
        let err = p.step_ns / measured - 1.0;
        assert!(err.abs() <= 0.20, "B={b}: {err:.3}");
        // the in-sequence part is the layer's excess in sequence beyond what its cold rows
        // price for memory (2026-12-06: on this run the memory term covers it at every
        // batch, and the step reads 0.88 / 0.95 / 0.85 of its measurement)
        let rows = p
            .sequence
            .expect("the CPU transformers step has its layer rows");
        assert!(rows.memory_ns > 0.0, "B={b}");
        let seq = p.components.iter().find(|c| c.site == IN_SEQUENCE).unwrap();
        assert!((seq.per_call_ns - rows.excess_ns()).abs() < 1e-6, "B={b}");
    }
}
