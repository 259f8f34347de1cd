//! The CLI on run directories with known truth: fit, predict, compare and their errors.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::io::Write;
use std::path::Path;
use std::process::Command;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

const RESULTS: &str = "run_id,op,variant,site,model,phase,batch,q_len,kv_len,dtype,dims,device,mode,status,samples,median_ns,mean_ns,ci_low_ns,ci_high_ns,mad_ns,flops,bytes,gflops,gbps,kernel,max_rel_err,note";
const SAMPLES: &str =
    "op,variant,site,model,phase,batch,q_len,kv_len,dtype,device,mode,iters,total_ns";

/// A case of a hand-made run: key fields, status, kernel, per-call samples (ns).
struct Case {
    op: &'static str,
    variant: &'static str,
    site: &'static str,
    batch: usize,
    kv: Option<usize>,
    mode: &'static str,
    status: &'static str,
    kernel: &'static str,
    /// No commas (written unquoted).
    note: &'static str,
    flops: u64,
    bytes: u64,
    times: Vec<f64>,
}

fn case(
    op: &'static str,
    variant: &'static str,
    site: &'static str,
    batch: usize,
    times: Vec<f64>,
) -> Case {
    Case {
        op,
        variant,
        site,
        batch,
        kv: None,
        mode: "pipelined",
        status: "ok",
        kernel: "",
        note: "",
        flops: 0,
        bytes: 0,
        times,
    }
}

fn write_run(dir: &Path, cases: &[Case]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("env.json"),
        "{\"libtorch_version\": \"2.11.0\", \"backend\": \"cuda\"}",
    )
    .unwrap();
    let mut r = std::fs::File::create(dir.join("results.csv")).unwrap();
    let mut s = std::fs::File::create(dir.join("samples.csv")).unwrap();
    writeln!(r, "{RESULTS}").unwrap();
    writeln!(s, "{SAMPLES}").unwrap();
    for c in cases {
        let kv = c.kv.map_or(String::new(), |k| k.to_string());
        let model = if c.op == "floor" {
            "none"
        } else {
            "qwen3-0.6b"
        };
        let mut rates = String::from(",");
        let timing = if c.status == "ok" {
            let m = stats::median(&c.times);
            rates = format!("{},{}", c.flops as f64 / m, c.bytes as f64 / m);
            for t in &c.times {
                writeln!(
                    s,
                    "{},{},{},{model},decode,{},1,{kv},f16,cuda:0,{},10,{}",
                    c.op,
                    c.variant,
                    c.site,
                    c.batch,
                    c.mode,
                    t * 10.0
                )
                .unwrap();
            }
            format!("{},{m},{m},{},{},1", c.times.len(), m * 0.99, m * 1.01)
        } else {
            ",,,,,".to_string()
        };
        writeln!(
            r,
            "t,{},{},{},{model},decode,{},1,{kv},f16,x,cuda:0,{},{},{timing},{},{},{rates},{},,{}",
            c.op, c.variant, c.site, c.batch, c.mode, c.status, c.flops, c.bytes, c.kernel, c.note
        )
        .unwrap();
    }
}

fn opbench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_opbench"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Verdicts by case id from `compare --format csv`.
fn verdicts(stdout: &str) -> Vec<(String, String, String)> {
    let mut rdr = csv::Reader::from_reader(stdout.as_bytes());
    rdr.records()
        .map(|r| {
            let r = r.unwrap();
            (
                format!("{}/{}", &r[1], &r[2]),
                r[17].to_string(),
                r[18].to_string(),
            )
        })
        .collect()
}

fn noisy(rng: &mut StdRng, median: f64, cv: f64, n: usize) -> Vec<f64> {
    let noise = Normal::new(0.0, cv).unwrap();
    (0..n)
        .map(|_| median * (1.0 + noise.sample(rng)).max(0.1))
        .collect()
}

#[test]
fn compare_finds_planted_changes_and_leaves_noise_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(42);
    let drift = Normal::new(0.0, 0.01).unwrap();
    // 400 noise-only cases, 50 planted +10%, 50 planted +20%, 50 planted -20%
    let (mut base, mut cand) = (Vec::new(), Vec::new());
    for i in 0..550 {
        let m = rng.random_range(5_000.0..500_000.0);
        let factor = match i {
            0..400 => 1.0,
            400..450 => 1.10,
            450..500 => 1.20,
            _ => 0.80,
        };
        // per-run drift of the case (±1%) on top of 3% sample noise
        let mb = m * (1.0 + drift.sample(&mut rng));
        let mc = m * factor * (1.0 + drift.sample(&mut rng));
        let site: &'static str = Box::leak(format!("s{i}").into_boxed_str());
        base.push(case(
            "linear",
            "aten",
            site,
            1,
            noisy(&mut rng, mb, 0.03, 20),
        ));
        cand.push(case(
            "linear",
            "aten",
            site,
            1,
            noisy(&mut rng, mc, 0.03, 20),
        ));
    }
    write_run(&dir.path().join("base"), &base);
    write_run(&dir.path().join("cand"), &cand);
    let (code, out, err) = opbench(&[
        "compare",
        dir.path().join("base").to_str().unwrap(),
        dir.path().join("cand").to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert_eq!(code, 1, "a slower case fails the comparison: {err}");
    let v = verdicts(&out);
    let of = |range: std::ops::Range<usize>, verdict: &str| {
        v.iter()
            .filter(|(id, vd, _)| {
                let i: usize = id.trim_start_matches("aten/s").parse().unwrap();
                range.contains(&i) && vd == verdict
            })
            .count()
    };
    let false_pos = of(0..400, "slower") + of(0..400, "faster");
    eprintln!(
        "noise-only: {false_pos}/400 called slower/faster, {} same, {} ambiguous; planted +10%: {}/50, +20%: {}/50, -20%: {}/50",
        of(0..400, "same"),
        of(0..400, "ambiguous"),
        of(400..450, "slower"),
        of(450..500, "slower"),
        of(500..550, "faster")
    );
    assert!(false_pos <= 4, "false positives {false_pos}/400");
    // the rest are `ambiguous` (the 99% interval of the ratio reaches past ±5%), never a verdict
    assert!(
        of(0..400, "same") >= 250,
        "noise-only cases should mostly be `same`"
    );
    assert!(of(400..450, "slower") >= 40);
    assert_eq!(of(450..500, "slower"), 50);
    assert_eq!(of(500..550, "faster"), 50);
}

#[test]
fn compare_flags_kernel_and_status_changes_and_new_and_gone() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let t = |rng: &mut StdRng| noisy(rng, 10_000.0, 0.01, 20);
    let mut flash = case("sdpa", "auto", "attn", 1, t(&mut rng));
    flash.kernel = "flash";
    let mut math = case("sdpa", "auto", "attn", 1, t(&mut rng));
    math.kernel = "math";
    let mut lost = case("rmsnorm", "fused", "q_norm", 1, vec![]);
    lost.status = "unsupported";
    write_run(
        &dir.path().join("a"),
        &[
            flash,
            case("rmsnorm", "fused", "q_norm", 1, t(&mut rng)),
            case("rope", "hf", "cache", 1, t(&mut rng)),
        ],
    );
    write_run(
        &dir.path().join("b"),
        &[math, lost, case("rope", "halves", "q", 1, t(&mut rng))],
    );
    let (code, out, _) = opbench(&[
        "compare",
        dir.path().join("a").to_str().unwrap(),
        dir.path().join("b").to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert_eq!(code, 1);
    let v = verdicts(&out);
    let flags = |id: &str| v.iter().find(|x| x.0 == id).unwrap().2.clone();
    assert!(flags("auto/attn").contains("kernel-changed (flash -> math)"));
    assert!(flags("fused/q_norm").contains("status-changed (ok -> unsupported)"));
    assert!(flags("hf/cache").contains("gone"));
    assert!(flags("halves/q").contains("new"));
}

#[test]
fn compare_of_a_run_with_itself_is_all_same_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let cases: Vec<Case> = (0..20)
        .map(|i| {
            case(
                "linear",
                "aten",
                ["a", "b", "c", "d"][i % 4],
                i + 1,
                noisy(&mut rng, 1e4, 0.01, 15),
            )
        })
        .collect();
    write_run(&dir.path().join("r"), &cases);
    let r = dir.path().join("r");
    let (code, out, _) = opbench(&[
        "compare",
        r.to_str().unwrap(),
        r.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0);
    let v = verdicts(&out);
    assert!(
        v.iter().all(|(_, v, _)| v == "same" || v == "ambiguous"),
        "{v:?}"
    );
    assert!(v.iter().filter(|(_, v, _)| v == "same").count() >= 10);
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let (code, _, err) = opbench(&["fit", missing.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("nope") && err.lines().count() == 1, "{err}");
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("results.csv"), "run_id,op,variant\n").unwrap();
    let (code, _, err) = opbench(&["fit", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("missing column `site`"), "{err}");
    let (code, _, err) = opbench(&["shapes", "--model", "qwen3-9b"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown model `qwen3-9b`"), "{err}");
    let (code, _, err) = opbench(&[
        "compare",
        bad.to_str().unwrap(),
        bad.to_str().unwrap(),
        "--alpha",
        "2",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--alpha"), "{err}");
}

#[test]
fn fit_writes_designs_columns_and_recovers_a_planted_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    // rmsnorm work = bytes; t = 5 µs + bytes / (100 GB/s)
    let cases: Vec<Case> = [1usize, 2, 4, 8, 16, 32, 64]
        .iter()
        .map(|&b| {
            let bytes = (b * 1_000_000) as u64;
            let t = 5_000.0 + bytes as f64 / 100.0;
            let mut c = case("rmsnorm", "aten", "input_norm", b, vec![t; 5]);
            c.bytes = bytes;
            c
        })
        .collect();
    write_run(&run, &cases);
    let (code, out, err) = opbench(&["fit", run.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1 fits written"), "{out}");
    let text = std::fs::read_to_string(run.join("fits.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "op,variant,site,model,phase,q_len,kv_len,dtype,device,mode,work,n_points,overhead_us,overhead_ci_low_us,\
         overhead_ci_high_us,rate,rate_ci_low,rate_ci_high,rate_unit,r2,crossover_batch,model_kind"
    );
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(row[10], "bytes");
    let overhead: f64 = row[12].parse().unwrap();
    let rate: f64 = row[15].parse().unwrap();
    assert!((overhead - 5.0).abs() < 0.05, "{overhead}");
    assert!((rate - 100.0).abs() < 1.0, "{rate}");
    assert_eq!(row[18], "GB/s");
    // crossover: bytes / 100 = 5000 ns at 0.5 MB, below the smallest batch -> empty
    assert_eq!(row[20], "");
    assert_eq!(row[21], "affine");
}

#[test]
fn predict_composes_a_hand_made_run() {
    // every site of qwen3-0.6b hf-eager at B=1, L=128 priced at a known time, on a GPU:
    // host = the B=1 time, device from `device` rows = a quarter of it
    let cfg = shapes::ModelConfig::builtin("qwen3-0.6b").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    let mut cases = Vec::new();
    let mut host_total = 0.0;
    let mut device_total = 0.0;
    for p in shapes::derive(&cfg, shapes::Step::decode(1, 128)) {
        let variant = match (p.op, p.site) {
            (shapes::OpKind::Linear, "qkv_proj" | "gate_up_proj") => continue,
            (shapes::OpKind::Linear, _) => "aten",
            (shapes::OpKind::RmsNorm, _) => "hf",
            (shapes::OpKind::Rope, "cache") => "hf",
            (shapes::OpKind::Rope, _) => "rotate_half",
            (shapes::OpKind::Sdpa, _) => "auto",
            (shapes::OpKind::KvCache, _) => "cat",
            _ => continue,
        };
        let t = 10_000.0;
        host_total += t * p.calls_per_step as f64;
        device_total += t / 4.0 * p.calls_per_step as f64;
        let site: &'static str = p.site;
        let op: &'static str = p.op.as_str();
        let mut c = case(op, variant, site, 1, vec![t; 5]);
        c.kv = p.kv_len;
        cases.push(c);
        let mut d = case(op, variant, site, 1, vec![t / 4.0; 5]);
        d.kv = p.kv_len;
        d.mode = "device";
        cases.push(d);
    }
    let floor = |variant: &'static str, mode: &'static str, t: f64| {
        let mut c = case("floor", variant, "add1", 1, vec![t; 5]);
        c.mode = mode;
        c
    };
    cases.push(floor("add", "pipelined", 4_000.0));
    cases.push(floor("view", "pipelined", 1_000.0));
    cases.push(floor("add", "device", 2_000.0));
    // unmeasured calls of hf-eager: 5 kernels per layer + 3 per step; 8 views per layer + 6
    let kernels = (5 * 28 + 3) as f64;
    let views = (8 * 28 + 6) as f64;
    host_total += kernels * 4_000.0 + views * 1_000.0;
    device_total += kernels * 2_000.0;
    // the decode crate's measured step: pipelined, and its device time by GPU events
    let mut step = case("decode", "hf-eager", "step", 1, vec![2.0 * host_total; 5]);
    step.kv = Some(129);
    let mut step_device = case("decode", "hf-eager", "step", 1, vec![device_total / 0.8; 5]);
    step_device.kv = Some(129);
    step_device.mode = "device";
    step_device.note =
        "one decode step; upper bound: in 3 of 12 chunks the host outlasted the lead";
    cases.extend([step, step_device]);
    write_run(&run, &cases);
    let (code, out, err) = opbench(&[
        "predict",
        run.to_str().unwrap(),
        "--model",
        "qwen3-0.6b",
        "--batch",
        "1",
        "--ctx",
        "128",
    ]);
    assert_eq!(code, 0, "{err}");
    let step_ms = host_total.max(device_total) / 1e6;
    assert!(
        out.contains(&format!("predicted: {step_ms:.3} ms/step")),
        "want {step_ms:.3}:\n{out}"
    );
    assert!(
        out.contains(&format!("host dispatch+launch {:.3} ms", host_total / 1e6)),
        "{out}"
    );
    assert!(
        out.contains(&format!("kernels {:.3} ms", device_total / 1e6)),
        "{out}"
    );
    assert!(out.contains("host-bound"));
    assert!(
        out.contains("predicted / measured = 0.500 (-50.0%)"),
        "{out}"
    );
    assert!(
        out.contains("measured device time of the step")
            && out.contains("predicted kernels / measured = 0.800 (-20.0%)"),
        "{out}"
    );
    assert!(
        out.contains("\n  upper bound: in 3 chunks the host's enqueue outlasted the lead"),
        "{out}"
    );
    // with a measured copy ceiling of 1 GB/s, a site whose bytes take longer than its
    // (cache-warm) time alone is priced at its bytes over the ceiling
    let mut copy = case("ceiling", "copy", "copy", 1, vec![268_435_456.0; 5]);
    copy.bytes = 268_435_456;
    cases.push(copy);
    write_run(&run, &cases);
    let (code, out, err) = opbench(&[
        "predict",
        run.to_str().unwrap(),
        "--model",
        "qwen3-0.6b",
        "--batch",
        "1",
        "--ctx",
        "128",
    ]);
    assert_eq!(code, 0, "{err}");
    let lm_head = out.lines().find(|l| l.contains("lm_head")).unwrap();
    assert!(lm_head.contains("ceiling"), "{lm_head}");
    // lm_head alone: 151936 x 1024 halves read from memory at 1 GB/s
    let step: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("predicted: "))
        .and_then(|l| l.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(step > 151936.0 * 1024.0 * 2.0 / 1e6, "{step} ms");
    // a site without a measurement or fit is named
    let (code, _, err) = opbench(&[
        "predict",
        run.to_str().unwrap(),
        "--model",
        "qwen3-0.6b",
        "--batch",
        "2",
        "--ctx",
        "128",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("no measurement or fit for"), "{err}");
}

#[test]
fn report_and_publish_a_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let mut rng = StdRng::seed_from_u64(9);
    let mut cases: Vec<Case> = [1usize, 2, 4, 8]
        .iter()
        .map(|&b| {
            let mut c = case(
                "linear",
                "aten",
                "q_proj",
                b,
                noisy(&mut rng, 1e4 * b as f64, 0.01, 10),
            );
            c.flops = 1_000_000 * b as u64;
            c.bytes = 4_000_000;
            c
        })
        .collect();
    cases.push(case("floor", "add", "add1", 1, vec![5_000.0; 10]));
    write_run(&run, &cases);
    std::fs::write(
        run.join("env.json"),
        r#"{"run_id": "r1", "started_at": "2026-11-29T10:00:00Z", "backend": "cuda", "device_name": "NVIDIA H200",
            "libtorch_version": "2.11.0", "settings": {"profile": "quick"}}"#,
    )
    .unwrap();
    let results = dir.path().join("results");
    let args = [
        "publish",
        run.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ];
    let (code, out, err) = opbench(&args);
    assert_eq!(code, 0, "{err}");
    let dest = results.join("2026-11-29-nvidia-h200-cuda-torch2.11.0");
    assert!(out.contains("published"), "{out}");
    for f in [
        "README.md",
        "results.csv",
        "samples.csv",
        "env.json",
        "fits.csv",
        "report.md",
        "cuda-0-linear.svg",
    ] {
        assert!(dest.join(f).is_file(), "{f} missing");
    }
    let readme = std::fs::read_to_string(dest.join("README.md")).unwrap();
    assert!(
        readme.contains("OPBENCH_PROFILE=quick") && readme.contains("NVIDIA H200"),
        "{readme}"
    );
    let svg = std::fs::read_to_string(dest.join("cuda-0-linear.svg")).unwrap();
    assert!(svg.contains("batch") && svg.contains("dispatch floor"));
    // never rewritten
    let (code, _, err) = opbench(&args);
    assert_eq!(code, 2);
    assert!(err.contains("already published"), "{err}");
    // a second run of the same build and day goes under a tag
    let mut tagged = args.to_vec();
    tagged.extend(["--tag", "second"]);
    let (code, _, err) = opbench(&tagged);
    assert_eq!(code, 0, "{err}");
    assert!(
        results
            .join("2026-11-29-nvidia-h200-cuda-torch2.11.0-second/results.csv")
            .is_file()
    );
    let last = tagged.len() - 1;
    tagged[last] = "../x";
    let (code, _, err) = opbench(&tagged);
    assert_eq!(code, 2);
    assert!(err.contains("--tag `../x`"), "{err}");
}

#[test]
fn env_describes_this_machine_only_in_a_torch_build() {
    let (code, out, err) = opbench(&["env", "--device", "cpu"]);
    if cfg!(feature = "torch") {
        assert_eq!(code, 0, "{err}");
        let env: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(env["schema_version"], rundir::SCHEMA_VERSION);
        assert_eq!(env["backend"], "cpu");
        assert!(env["libtorch_version"].as_str().unwrap().starts_with("2."));
    } else {
        assert_eq!(code, 2);
        assert!(err.contains("built without libtorch"), "{err}");
    }
    let (code, _, err) = opbench(&["env", "--device", "tpu"]);
    assert_eq!(code, 2);
    assert!(err.contains("tpu"), "{err}");
}
