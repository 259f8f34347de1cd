//! What a run will cost before it starts, and how far it has got while it runs.
//!
//! `scripts/bench` first lists the cases (criterion's `--list`) with `OPBENCH_PLAN_FILE`
//! set: each bench binary appends one line per case key with its estimated seconds, and
//! the script prints the plan (cases per crate, estimated wall time). It then runs the
//! bench with `OPBENCH_PLAN_CASES` / `OPBENCH_PLAN_START` set, and every process prints a
//! progress line after each case: case i of N, elapsed, an ETA.
//!
//! The estimate per case key is the criterion budget (warm-up + measurement, but at least
//! `samples` calls), the host-speed control, criterion's own analysis, and once per case
//! preparing its random inputs and the float64 reference check. Call, preparation and check
//! times come from the case's FLOPs and bytes at rates a quick probe measured on this
//! machine (an f32 and an f64 matmul, a copy, a random fill); a
//! call over the cap costs one call and is skipped. GPU calls are taken as short: their
//! keys cost the budget.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shapes::Problem;
use tch::{Kind, Tensor};

use rundir::CaseKey;

use crate::{Config, DType, Device};

/// Rates of this machine's CPU, from a ~0.2 s probe.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    pub f32_flops: f64,
    pub f64_flops: f64,
    pub bytes_per_s: f64,
    /// Bytes of random f32 values generated per second: what preparing a case's inputs
    /// (a whole model's weights, for the decode crate) costs.
    pub random_bytes_per_s: f64,
    /// Bytes of f32 weights a projection of one row streams per second (a GEMV: a decode
    /// call at B = 1), and of two rows (a small batch's GEMM, which many CPU BLAS run at
    /// half the GEMV's rate or less).
    pub gemv_bytes_per_s: f64,
    pub gemm2_bytes_per_s: f64,
}

/// The best of three: FLOP/s of an n³ matmul, bytes/s of a 32 MiB copy, of a 32 MiB
/// random fill and of 64 MiB of weights through a projection of one row and of two. A
/// libtorch error (none is expected on the CPU) gives modest default rates: the plan is an
/// estimate, never a reason to stop.
pub fn probe() -> Rates {
    try_probe().unwrap_or(Rates {
        f32_flops: 20e9,
        f64_flops: 10e9,
        bytes_per_s: 5e9,
        random_bytes_per_s: 0.5e9,
        gemv_bytes_per_s: 5e9,
        gemm2_bytes_per_s: 2.5e9,
    })
}

fn try_probe() -> Result<Rates, tch::TchError> {
    let cpu = tch::Device::Cpu;
    let best = |f: &mut dyn FnMut() -> Result<Duration, tch::TchError>| {
        let mut b = Duration::MAX;
        for _ in 0..3 {
            b = b.min(f()?);
        }
        Ok::<Duration, tch::TchError>(b)
    };
    // sizes large enough for the BLAS to reach its speed (a few ms each)
    let mm = |kind: Kind, n: i64| -> Result<f64, tch::TchError> {
        let a = Tensor::f_ones([n, n], (kind, cpu))?;
        let t = best(&mut || {
            let t0 = Instant::now();
            let _product = a.f_matmul(&a)?;
            Ok(t0.elapsed())
        })?;
        Ok(2.0 * (n * n * n) as f64 / t.as_secs_f64().max(1e-9))
    };
    let src = Tensor::f_ones([8 << 20], (Kind::Float, cpu))?;
    let mut dst = src.f_zeros_like()?;
    let copy = best(&mut || {
        let t0 = Instant::now();
        dst.f_copy_(&src)?;
        Ok(t0.elapsed())
    })?;
    let random = best(&mut || {
        let t0 = Instant::now();
        let _filled = Tensor::f_randn([8 << 20], (Kind::Float, cpu))?;
        Ok(t0.elapsed())
    })?;
    // 64 MiB of weights, past most CPUs' last cache level, through one and two rows
    let w = Tensor::f_randn([8192, 2048], (Kind::Float, cpu))?;
    let streamed = |rows: i64| -> Result<f64, tch::TchError> {
        let x = Tensor::f_randn([rows, 2048], (Kind::Float, cpu))?;
        let t = best(&mut || {
            let t0 = Instant::now();
            let _y = x.f_linear::<Tensor>(&w, None)?;
            Ok(t0.elapsed())
        })?;
        Ok((64 << 20) as f64 / t.as_secs_f64().max(1e-9))
    };
    Ok(Rates {
        random_bytes_per_s: (32 << 20) as f64 / random.as_secs_f64().max(1e-9),
        f32_flops: mm(Kind::Float, 1024)?,
        f64_flops: mm(Kind::Double, 512)?,
        // read + write
        bytes_per_s: 2.0 * (32 << 20) as f64 / copy.as_secs_f64().max(1e-9),
        gemv_bytes_per_s: streamed(1)?,
        gemm2_bytes_per_s: streamed(2)?,
    })
}

/// Estimated seconds of one case key, and whether the cap skips it.
pub fn estimate(
    config: &Config,
    rates: &Rates,
    problem: &Problem,
    dt: DType,
    device: Device,
    keys_of_case: usize,
) -> (f64, bool) {
    let call = call_seconds(rates, problem, dt, device);
    if cap_for(config, problem).is_some_and(|cap| call > cap.as_secs_f64()) {
        return (call, true);
    }
    let samples = config.samples as f64;
    let measure = config.measure.as_secs_f64().max(samples * call);
    // the torch control before and after each sample, ~200 µs each
    let control = if config.control { samples * 4e-4 } else { 0.0 };
    // criterion's analysis and report per benchmark
    let analysis = 0.03;
    let per_key = config.warmup.as_secs_f64() + measure + control + analysis;
    (
        per_key + setup_seconds(rates, problem, dt) / keys_of_case.max(1) as f64,
        false,
    )
}

/// Estimated seconds of a case timed beside another's `pipelined` samples ([`crate::Op::beside`]):
/// its setup, and one call before each sample and each warm-up round (about as many).
pub fn estimate_beside(
    config: &Config,
    rates: &Rates,
    problem: &Problem,
    dt: DType,
    device: Device,
) -> f64 {
    let runs = 2.0 * config.samples as f64;
    setup_seconds(rates, problem, dt) + runs * call_seconds(rates, problem, dt, device)
}

/// One call of `problem`, from the machine's rates (a GPU call: its launch).
fn call_seconds(rates: &Rates, problem: &Problem, dt: DType, device: Device) -> f64 {
    if device.is_gpu() {
        return 20e-6;
    }
    // f16 / bf16 have no fast CPU GEMM on most machines
    let slow = if dt == DType::F32 { 1.0 } else { 8.0 };
    // weights stream at a projection's rate, one row's or a small batch's (slower than a
    // copy on most CPUs); a whole step's KV cache, and every other op's bytes, at a copy's
    let projection = |rows: usize| {
        let rate = if rows > 1 {
            rates.gemm2_bytes_per_s
        } else {
            rates.gemv_bytes_per_s
        };
        rate.min(rates.bytes_per_s)
    };
    let elem = dt.size() as f64;
    let streaming = match (problem.dims, problem.step_work) {
        (shapes::Dims::Linear { m, .. }, _) => problem.bytes(dt.size()) as f64 / projection(m),
        (shapes::Dims::Step { .. }, Some(w)) => {
            w.weight_elems as f64 * elem / projection(problem.batch * problem.q_len)
                + w.kv_elems as f64 * elem / rates.bytes_per_s
        }
        _ => problem.bytes(dt.size()) as f64 / rates.bytes_per_s,
    };
    (problem.flops() as f64 * slow / rates.f32_flops)
        .max(streaming)
        .max(5e-6)
}

/// Once per case, shared by its modes: random inputs (a model's weights for the decode
/// crate), then the float64 reference on the CPU.
fn setup_seconds(rates: &Rates, problem: &Problem, dt: DType) -> f64 {
    let (flops, bytes) = (problem.flops() as f64, problem.bytes(dt.size()) as f64);
    let prepare = bytes / rates.random_bytes_per_s;
    let check = flops / rates.f64_flops + 2.0 * bytes / rates.bytes_per_s;
    prepare + check
}

/// The call cap of a case: `OPBENCH_CALL_CAP_MS`, except for the ceilings and the floor,
/// fixed-size calibration cases that the report needs whatever they cost.
pub fn cap_for(config: &Config, problem: &Problem) -> Option<Duration> {
    match problem.op {
        shapes::OpKind::Ceiling | shapes::OpKind::Floor => None,
        _ => config.call_cap,
    }
}

/// `OPBENCH_PLAN_FILE`: where list mode appends `crate,key,seconds,skipped` lines.
pub fn plan_file() -> Option<PathBuf> {
    settings::var_os("OPBENCH_PLAN_FILE").map(PathBuf::from)
}

/// Append plan lines; a failure to write is reported and ignored (it is only a plan).
pub fn write_plan(lines: &[String]) {
    let Some(path) = plan_file() else { return };
    let res = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(lines.concat().as_bytes()));
    if let Err(e) = res {
        eprintln!("opbench: plan file {}: {e}", path.display());
    }
}

/// The progress a process reports: set by scripts/bench for the run it planned.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Case keys the plan holds.
    pub cases: usize,
    /// Rows the run held when the plan was made.
    pub base: usize,
    /// When the bench started (seconds since the epoch).
    pub start: u64,
    /// The plan's estimate per case key (seconds), when its file is readable.
    pub estimates: std::collections::HashMap<String, f64>,
}

impl Progress {
    /// From `OPBENCH_PLAN_CASES`, `OPBENCH_PLAN_BASE`, `OPBENCH_PLAN_START` and the plan in
    /// `OPBENCH_PLAN_FILE`; none when unset or unreadable (progress is a courtesy, never a
    /// reason to stop).
    pub fn from_env() -> Option<Self> {
        let num = |k: &str| settings::var(k)?.parse::<u64>().ok();
        let estimates = plan_file()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|text| {
                text.lines()
                    .filter_map(|l| {
                        let f: Vec<&str> = l.split(',').collect();
                        Some((f.get(1)?.to_string(), f.get(2)?.parse().ok()?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Progress {
            cases: usize::try_from(num("OPBENCH_PLAN_CASES")?).ok()?,
            base: num("OPBENCH_PLAN_BASE").map_or(0, |b| b as usize),
            start: num("OPBENCH_PLAN_START")?,
            estimates,
        })
    }

    /// `case 37 of 360 · 1m12s elapsed · ~5m20s left` for a run now holding `done` (the
    /// case keys written so far, older rows included).
    ///
    /// With the plan's estimates, what is left is the estimate of the cases not done yet,
    /// scaled by how the done ones compared with theirs; without, the mean time per case.
    pub fn line<'a>(&self, done: impl Iterator<Item = &'a CaseKey>) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let keys: Vec<String> = done.map(ToString::to_string).collect();
        let n_done = keys.len().saturating_sub(self.base).min(self.cases);
        let elapsed = now.saturating_sub(self.start);
        let left = if n_done == 0 {
            "estimating".to_string()
        } else if self.estimates.is_empty() {
            let rest = elapsed as f64 / n_done as f64 * (self.cases - n_done) as f64;
            format!("~{} left", hms(rest as u64))
        } else {
            let done_est: f64 = keys.iter().filter_map(|k| self.estimates.get(k)).sum();
            let total: f64 = self.estimates.values().sum();
            let speed = if done_est > 0.0 {
                elapsed as f64 / done_est
            } else {
                1.0
            };
            format!(
                "~{} left",
                hms(((total - done_est).max(0.0) * speed) as u64)
            )
        };
        format!(
            "case {n_done} of {} · {} elapsed · {left}",
            self.cases,
            hms(elapsed)
        )
    }
}

/// `1h02m`, `5m20s`, `42s`.
pub fn hms(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_count_from_the_plan() {
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            - 100;
        let key = |b: usize| -> CaseKey {
            rundir::SeriesKey {
                op: shapes::OpKind::Linear,
                variant: "aten".into(),
                site: "q_proj".into(),
                model: "m".into(),
                phase: shapes::Phase::Decode,
                q_len: 1,
                kv_len: None,
                dtype: DType::F32,
                device: rundir::DeviceId::CPU,
                mode: rundir::Mode::Pipelined,
            }
            .at(b)
        };
        let keys: Vec<CaseKey> = (0..60).map(key).collect();
        let mut p = Progress {
            cases: 200,
            base: 10,
            start,
            estimates: Default::default(),
        };
        // 100 s for 50 cases: about 300 s for the other 150
        let l = p.line(keys.iter());
        assert!(l.starts_with("case 50 of 200 · 1m4"), "{l}");
        assert!(l.contains("~5m0"), "{l}");
        assert!(p.line(keys[..10].iter()).ends_with("estimating"));
        // with estimates: the 60 done were planned at 1 s each and took 100 s; the rest
        // (planned 10 s) take 10 × 100 / 60 s
        p.estimates = keys.iter().map(|k| (k.to_string(), 1.0)).collect();
        p.estimates.insert("other".into(), 10.0);
        let l = p.line(keys.iter());
        assert!(l.ends_with("~16s left") || l.ends_with("~17s left"), "{l}");
        assert_eq!(hms(3725), "1h02m");
    }

    /// A CPU call streams its weights at the probe's projection rates: one row's for a
    /// B = 1 decode step, two rows' for B = 8 (on a 2-core VM, 2026-12-02, a qwen3-0.6b f32
    /// step took 185 ms at B = 1 and 472 ms at B = 8, for about as many bytes).
    #[test]
    fn a_cpu_call_streams_at_the_projection_rate_of_its_rows()
    -> Result<(), Box<dyn std::error::Error>> {
        let rates = Rates {
            f32_flops: 1e13,
            f64_flops: 1e12,
            bytes_per_s: 3e10,
            random_bytes_per_s: 1e9,
            gemv_bytes_per_s: 1.6e10,
            gemm2_bytes_per_s: 7e9,
        };
        let cfg = shapes::ModelConfig::builtin("qwen3-0.6b")?;
        let step = |b| {
            shapes::derive(&cfg, shapes::Step::decode(b, 128))
                .into_iter()
                .find(|p| p.op == shapes::OpKind::Decode && p.site == "step")
                .ok_or("no step")
        };
        // its weights at the projection's rate, its KV cache at the copy's
        for (b, rate) in [(1, 1.6e10), (8, 7e9)] {
            let p = step(b)?;
            let w = p.step_work.ok_or("no step work")?;
            let call = call_seconds(&rates, &p, DType::F32, Device::CPU);
            let want = (w.weight_elems * 4) as f64 / rate + (w.kv_elems * 4) as f64 / 3e10;
            assert!((call - want).abs() < 1e-9 * want, "B={b}: {call} vs {want}");
        }
        // a projection at B = 8 streams at the small GEMM's rate, an element-wise call at
        // the copy's
        let at8 = shapes::derive(&cfg, shapes::Step::decode(8, 128));
        let find = |op| at8.iter().find(|p| p.op == op).ok_or("no problem");
        let linear = find(shapes::OpKind::Linear)?;
        let call = call_seconds(&rates, linear, DType::F32, Device::CPU);
        assert!((call - linear.bytes(4) as f64 / 7e9).abs() < 1e-9 * call);
        let norm = find(shapes::OpKind::RmsNorm)?;
        let call = call_seconds(&rates, norm, DType::F32, Device::CPU);
        assert!(call == 5e-6 || (call - norm.bytes(4) as f64 / 3e10).abs() < 1e-9 * call);
        // never faster than a copy streams
        let slow_copy = Rates {
            bytes_per_s: 1e9,
            ..rates
        };
        let call = call_seconds(&slow_copy, linear, DType::F32, Device::CPU);
        assert!((call - linear.bytes(4) as f64 / 1e9).abs() < 1e-9 * call);
        Ok(())
    }

    /// A case timed beside another costs its setup and one call per sample and warm-up
    /// round — no warm-up or measure budget of its own, unlike a case key.
    #[test]
    fn a_case_beside_costs_its_calls_not_a_budget() -> Result<(), Box<dyn std::error::Error>> {
        let rates = Rates {
            f32_flops: 1e10,
            f64_flops: 1e9,
            bytes_per_s: 1e10,
            random_bytes_per_s: 1e9,
            gemv_bytes_per_s: 1e10,
            gemm2_bytes_per_s: 5e9,
        };
        let mut config = Config::from_env()?;
        config.samples = 10;
        let cfg = shapes::ModelConfig::builtin("qwen3-0.6b")?;
        let layer = shapes::derive(&cfg, shapes::Step::decode(8, 128))
            .into_iter()
            .find(|p| p.op == shapes::OpKind::Decode)
            .map(|p| Problem {
                site: "layer_beside",
                ..p
            })
            .ok_or("no decode problem")?;
        let call = call_seconds(&rates, &layer, DType::F32, Device::CPU);
        let beside = estimate_beside(&config, &rates, &layer, DType::F32, Device::CPU);
        let setup = setup_seconds(&rates, &layer, DType::F32);
        assert!((beside - (setup + 20.0 * call)).abs() < 1e-9 * beside);
        let (key, _) = estimate(&config, &rates, &layer, DType::F32, Device::CPU, 1);
        assert!(key > config.warmup.as_secs_f64() + setup, "{key}");
        // on a GPU a call is its launch
        let gpu = estimate_beside(&config, &rates, &layer, DType::F32, Device::gpu(0));
        assert!((gpu - (setup + 20.0 * 20e-6)).abs() < 1e-9);
        Ok(())
    }
}
