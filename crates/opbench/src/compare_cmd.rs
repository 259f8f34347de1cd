//! `opbench compare BASE CAND`: a verdict per shared case, for a new ROCm / PyTorch build.
//!
//! For each case key in both runs, both `ok`: the ratio of medians (candidate / base) with a
//! bootstrap confidence interval at level 1 − alpha, and a two-sided Mann-Whitney U test on
//! the per-call times of the raw samples (samples.csv). A change counts only when it is
//! larger than the threshold *and* significant:
//!
//! - `slower`: ratio > 1 + threshold, p < alpha, and the interval lies above 1;
//! - `faster`: ratio < 1 − threshold, p < alpha, and the interval lies below 1;
//! - `same`: the whole interval lies within 1 ± threshold;
//! - `ambiguous`: anything else — the data cannot tell (too noisy, too few samples).
//!
//! Flags: `kernel-changed` (the `kernel` column differs), `status-changed` (ok became
//! unsupported/oom/mismatch/error, or back), `new`, `gone`. Exit code 1 when any case is
//! `slower`, fell back to the `math` kernel from another, or lost its `ok` status; else 0.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use harness::{CaseKey, ResultRow};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use statrs::distribution::{ContinuousCDF, Normal};

use crate::Failure;
use crate::run::Run;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The base run directory.
    base: PathBuf,
    /// The candidate run directory.
    cand: PathBuf,
    /// Smallest change that counts, in percent.
    #[arg(long, default_value_t = 5.0)]
    threshold: f64,
    /// Significance level of the test (and 1 − level of the ratio's interval).
    #[arg(long, default_value_t = 0.01)]
    alpha: f64,
    /// md or csv.
    #[arg(long, default_value = "md")]
    format: String,
}

/// The verdict on one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Slower,
    Faster,
    Ambiguous,
    Same,
    /// Not both ok: no speed verdict (see the flags).
    None,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Slower => "slower",
            Verdict::Faster => "faster",
            Verdict::Ambiguous => "ambiguous",
            Verdict::Same => "same",
            Verdict::None => "-",
        }
    }
}

/// One line of the comparison.
#[derive(Debug, Clone)]
pub struct Line {
    pub key: CaseKey,
    pub base: Option<f64>,
    pub cand: Option<f64>,
    pub ratio: Option<f64>,
    pub ratio_ci: Option<(f64, f64)>,
    pub p: Option<f64>,
    pub verdict: Verdict,
    pub flags: Vec<String>,
    /// A regression the exit code reports.
    pub fails: bool,
}

/// Two-sided Mann-Whitney U test (normal approximation with tie correction).
pub fn mann_whitney(a: &[f64], b: &[f64]) -> f64 {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    if a.is_empty() || b.is_empty() {
        return 1.0;
    }
    let mut all: Vec<(f64, usize)> = a
        .iter()
        .map(|&x| (x, 0))
        .chain(b.iter().map(|&x| (x, 1)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    let mut ranks = vec![0.0; n];
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let r = (i + j) as f64 / 2.0 + 1.0;
        for rank in ranks.iter_mut().take(j + 1).skip(i) {
            *rank = r;
        }
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let r1: f64 = all
        .iter()
        .zip(&ranks)
        .filter(|(x, _)| x.1 == 0)
        .map(|(_, r)| r)
        .sum();
    let u1 = r1 - n1 * (n1 + 1.0) / 2.0;
    let mu = n1 * n2 / 2.0;
    let nt = n1 + n2;
    let var = n1 * n2 / 12.0 * ((nt + 1.0) - tie_term / (nt * (nt - 1.0)));
    if var <= 0.0 {
        return 1.0;
    }
    // continuity correction
    let z = ((u1 - mu).abs() - 0.5).max(0.0) / var.sqrt();
    match Normal::new(0.0, 1.0) {
        Ok(norm) => (2.0 * (1.0 - norm.cdf(z))).min(1.0),
        Err(_) => 1.0,
    }
}

/// Percentile bootstrap interval of median(cand) / median(base) at `level`.
pub fn ratio_ci(base: &[f64], cand: &[f64], level: f64, resamples: usize) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(7);
    let mut draw = |xs: &[f64], buf: &mut Vec<f64>| {
        buf.clear();
        for _ in 0..xs.len() {
            buf.push(xs[rng.random_range(0..xs.len())]);
        }
        stats::median(buf)
    };
    let (mut bb, mut cb) = (Vec::new(), Vec::new());
    let mut ratios: Vec<f64> = (0..resamples)
        .map(|_| {
            let b = draw(base, &mut bb);
            let c = draw(cand, &mut cb);
            c / b
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let a = (1.0 - level) / 2.0;
    (
        stats::estimate::quantile_sorted(&ratios, a),
        stats::estimate::quantile_sorted(&ratios, 1.0 - a),
    )
}

/// The verdict from per-call times of both runs.
pub fn verdict(
    base: &[f64],
    cand: &[f64],
    threshold: f64,
    alpha: f64,
) -> (Verdict, f64, (f64, f64), f64) {
    let ratio = stats::median(cand) / stats::median(base);
    let ci = ratio_ci(base, cand, 1.0 - alpha, 2000);
    let p = mann_whitney(base, cand);
    let v = if ratio > 1.0 + threshold && p < alpha && ci.0 > 1.0 {
        Verdict::Slower
    } else if ratio < 1.0 - threshold && p < alpha && ci.1 < 1.0 {
        Verdict::Faster
    } else if ci.0 >= 1.0 - threshold && ci.1 <= 1.0 + threshold {
        Verdict::Same
    } else {
        Verdict::Ambiguous
    };
    (v, ratio, ci, p)
}

/// Per-call times of each case from a run's samples.csv.
fn per_call(run: &Run) -> Result<BTreeMap<CaseKey, Vec<f64>>, Failure> {
    Ok(run
        .samples()?
        .into_iter()
        .map(|(k, rows)| {
            let times = rows
                .iter()
                .filter(|s| s.iters > 0 && s.total_ns.is_finite() && s.total_ns >= 0.0)
                .map(|s| s.total_ns / s.iters as f64)
                .collect();
            (k, times)
        })
        .collect())
}

/// Compare two runs.
pub fn compare(base: &Run, cand: &Run, threshold: f64, alpha: f64) -> Result<Vec<Line>, Failure> {
    let bs = per_call(base)?;
    let cs = per_call(cand)?;
    let index = |run: &Run| -> BTreeMap<CaseKey, ResultRow> {
        run.results.iter().map(|r| (r.key(), r.clone())).collect()
    };
    let (bi, ci) = (index(base), index(cand));
    let keys: BTreeSet<&CaseKey> = bi.keys().chain(ci.keys()).collect();
    let mut out = Vec::new();
    for key in keys {
        let (b, c) = (bi.get(key), ci.get(key));
        let mut line = Line {
            key: key.clone(),
            base: b.and_then(|r| r.median_ns),
            cand: c.and_then(|r| r.median_ns),
            ratio: None,
            ratio_ci: None,
            p: None,
            verdict: Verdict::None,
            flags: Vec::new(),
            fails: false,
        };
        match (b, c) {
            (Some(_), None) => line.flags.push("gone".into()),
            (None, Some(_)) => line.flags.push("new".into()),
            (Some(b), Some(c)) => {
                if b.status != c.status {
                    line.flags
                        .push(format!("status-changed ({} -> {})", b.status, c.status));
                    line.fails |= b.status == "ok";
                }
                if b.kernel != c.kernel {
                    let (bk, ck) = (
                        b.kernel.as_deref().unwrap_or(""),
                        c.kernel.as_deref().unwrap_or(""),
                    );
                    line.flags.push(format!("kernel-changed ({bk} -> {ck})"));
                    // falling back to the composite kernel is the regression users must see
                    line.fails |= ck == "math" && bk != "math";
                }
                if b.status == "ok" && c.status == "ok" {
                    match (bs.get(key), cs.get(key)) {
                        (Some(x), Some(y)) if x.len() >= 2 && y.len() >= 2 => {
                            let (v, ratio, ci, p) = verdict(x, y, threshold, alpha);
                            line.verdict = v;
                            line.ratio = Some(ratio);
                            line.ratio_ci = Some(ci);
                            line.p = Some(p);
                            line.fails |= v == Verdict::Slower;
                        }
                        _ => {
                            line.verdict = Verdict::Ambiguous;
                            line.ratio = line.cand.zip(line.base).map(|(c, b)| c / b);
                            line.flags.push("no samples".into());
                        }
                    }
                }
            }
            (None, None) => {}
        }
        out.push(line);
    }
    Ok(out)
}

/// env.json fields whose difference can change kernels or timings.
const ENV_FIELDS: &[&str] = &[
    "libtorch_version",
    "tch_version",
    "backend",
    "runtime_version",
    "device_name",
    "arch",
    "driver_version",
    "cudnn_version",
    "miopen_version",
    "hipblaslt_version",
    "sdp_enabled",
    "env",
    "threads",
    "cpu_model",
    "os",
    "git_revision",
];

fn env_diff(base: &Run, cand: &Run) -> Vec<String> {
    let (Ok(b), Ok(c)) = (base.env(), cand.env()) else {
        return vec!["env.json missing in one run: environments not compared".into()];
    };
    let mut out = Vec::new();
    for f in ENV_FIELDS {
        let (x, y) = (&b[*f], &c[*f]);
        if x != y {
            out.push(format!("{f}: {x} -> {y}"));
        }
    }
    if b["build_config"] != c["build_config"] {
        out.push("build_config: differs (see env.json of each run)".into());
    }
    out
}

fn key_cols(k: &CaseKey) -> [String; 11] {
    [
        k.op.clone(),
        k.variant.clone(),
        k.site.clone(),
        k.model.clone(),
        k.phase.clone(),
        k.batch.to_string(),
        k.q_len.to_string(),
        k.kv_len.map_or(String::new(), |v| v.to_string()),
        k.dtype.clone(),
        k.device.clone(),
        k.mode.clone(),
    ]
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or(String::new(), |x| format!("{x:.digits$}"))
}

pub fn run(args: &Args) -> Result<u8, Failure> {
    if !(args.threshold >= 0.0 && args.threshold < 100.0) {
        return Err(Failure::input(format!(
            "--threshold {}: expected a percentage in [0, 100)",
            args.threshold
        )));
    }
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        return Err(Failure::input(format!(
            "--alpha {}: expected a level in (0, 1)",
            args.alpha
        )));
    }
    if args.format != "md" && args.format != "csv" {
        return Err(Failure::input(format!(
            "--format {}: expected md or csv",
            args.format
        )));
    }
    let base = Run::load(&args.base)?;
    let cand = Run::load(&args.cand)?;
    let lines = compare(&base, &cand, args.threshold / 100.0, args.alpha)?;
    let fails = lines.iter().filter(|l| l.fails).count();
    let count = |v: Verdict| lines.iter().filter(|l| l.verdict == v).count();
    let flagged = |f: &str| {
        lines
            .iter()
            .filter(|l| l.flags.iter().any(|x| x.starts_with(f)))
            .count()
    };
    let mut sorted: Vec<&Line> = lines.iter().collect();
    sorted.sort_by(|a, b| {
        (!a.fails, a.verdict, a.flags.is_empty()).cmp(&(!b.fails, b.verdict, b.flags.is_empty()))
    });
    if args.format == "csv" {
        let mut w = csv::Writer::from_writer(std::io::stdout());
        let io = |e: csv::Error| Failure {
            code: 1,
            message: format!("stdout: {e}"),
        };
        w.write_record([
            "op",
            "variant",
            "site",
            "model",
            "phase",
            "batch",
            "q_len",
            "kv_len",
            "dtype",
            "device",
            "mode",
            "base_median_ns",
            "cand_median_ns",
            "ratio",
            "ratio_ci_low",
            "ratio_ci_high",
            "p_value",
            "verdict",
            "flags",
        ])
        .map_err(io)?;
        for l in &sorted {
            let mut rec: Vec<String> = key_cols(&l.key).to_vec();
            rec.extend([
                num(l.base, 1),
                num(l.cand, 1),
                num(l.ratio, 4),
                num(l.ratio_ci.map(|c| c.0), 4),
                num(l.ratio_ci.map(|c| c.1), 4),
                l.p.map_or(String::new(), |p| format!("{p:.3e}")),
                l.verdict.as_str().into(),
                l.flags.join("; "),
            ]);
            w.write_record(&rec).map_err(io)?;
        }
        w.flush().map_err(|e| Failure {
            code: 1,
            message: format!("stdout: {e}"),
        })?;
    } else {
        println!(
            "# opbench compare\n\nbase: `{}`  \ncandidate: `{}`\n",
            base.dir.display(),
            cand.dir.display()
        );
        let diff = env_diff(&base, &cand);
        if diff.is_empty() {
            println!("Environment: no differences in the fields that change kernels.\n");
        } else {
            println!("Environment differences:\n");
            for d in diff {
                println!("- {d}");
            }
            println!();
        }
        println!(
            "{} cases: {} slower, {} faster, {} same, {} ambiguous; {} kernel-changed, {} status-changed, {} new, {} gone \
             (threshold {}%, alpha {})\n",
            lines.len(),
            count(Verdict::Slower),
            count(Verdict::Faster),
            count(Verdict::Same),
            count(Verdict::Ambiguous),
            flagged("kernel-changed"),
            flagged("status-changed"),
            flagged("new"),
            flagged("gone"),
            args.threshold,
            args.alpha
        );
        println!("| case | base µs | cand µs | ratio [CI] | p | verdict | flags |");
        println!("|---|---|---|---|---|---|---|");
        for l in sorted
            .iter()
            .filter(|l| l.verdict != Verdict::Same || !l.flags.is_empty())
        {
            println!(
                "| {} | {} | {} | {} | {} | {}{} | {} |",
                l.key,
                num(l.base.map(|x| x / 1e3), 2),
                num(l.cand.map(|x| x / 1e3), 2),
                match (l.ratio, l.ratio_ci) {
                    (Some(r), Some((lo, hi))) => format!("{r:.3} [{lo:.3}, {hi:.3}]"),
                    (Some(r), None) => format!("{r:.3}"),
                    _ => String::new(),
                },
                l.p.map_or(String::new(), |p| format!("{p:.1e}")),
                l.verdict.as_str(),
                if l.fails { " ✗" } else { "" },
                l.flags.join("; ")
            );
        }
        println!("\n(`same` cases without flags are not listed.)");
    }
    Ok(u8::from(fails > 0))
}
