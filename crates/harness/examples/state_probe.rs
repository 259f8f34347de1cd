//! Which host control sees the slow state of a host-bound torch sample (issue 31's probe,
//! docs/findings.md item 9). On a GPU machine, for SECS seconds: samples of CALLS
//! back-to-back one-element adds on `cuda:0`, each with controls timed right before and
//! right after it — the harness's L2 chase (`HostControl`, one pass and the faster of
//! two), a chase through 16 MiB (the last-level cache) and a pure ALU loop — and the
//! sample's calls in stretches of 50 (fastest, median and slowest stretch). One CSV line a
//! sample.
//!
//! ```sh
//! cargo build --release -p harness --example state_probe
//! LD_LIBRARY_PATH=<torch>/lib target/release/examples/state_probe 70 1200 p6.csv
//! ```

use harness::hostspeed::HostControl;
use std::hint::black_box;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};

/// A dependent multiply chain: no memory traffic.
fn alu(steps: u64) -> f64 {
    let t0 = Instant::now();
    let mut h: u64 = 1;
    for i in 0..steps {
        h = black_box(h.wrapping_mul(0x0100_0000_01B3) ^ i);
    }
    black_box(h);
    t0.elapsed().as_nanos() as f64
}

/// (L2 faster of two, L2 first pass, L2 second pass, LLC chase, ALU).
fn controls(l2: &HostControl, llc: &HostControl) -> [f64; 5] {
    let a = l2.pass_ns();
    let b = l2.pass_ns();
    [a.min(b), a, b, llc.pass_ns(), alu(30_000)]
}

fn probe(secs: f64, calls: usize, out: &str) -> Result<usize, String> {
    harness::load_gpu_library().ok_or("no GPU library of libtorch loads")?;
    let dev = Device::Cuda(0);
    let mut x = Tensor::f_ones([64], (Kind::Half, dev)).map_err(|e| e.to_string())?;
    let y = Tensor::f_ones([64], (Kind::Half, dev)).map_err(|e| e.to_string())?;
    let mut add = || x.f_add_(&y).map(|_| ()).map_err(|e| e.to_string());
    for _ in 0..2000 {
        add()?;
    }
    tch::Cuda::synchronize(0);
    // the harness's control itself, and the same chase through 16 MiB
    let (l2, llc) = (HostControl::new(), HostControl::with(4 << 20, 2_000));
    let file = std::fs::File::create(out).map_err(|e| format!("{out}: {e}"))?;
    let mut f = std::io::BufWriter::new(file);
    let io = |e: std::io::Error| format!("{out}: {e}");
    writeln!(f, "i,ns,l2min_b,l2a_b,l2b_b,llc_b,alu_b,l2min_a,l2a_a,l2b_a,llc_a,alu_a,sub_min,sub_med,sub_max,nsub").map_err(io)?;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut marks: Vec<Instant> = Vec::with_capacity(calls / 50 + 2);
    let mut i = 0;
    while Instant::now() < end {
        let before = controls(&l2, &llc);
        marks.clear();
        let t0 = Instant::now();
        marks.push(t0);
        for k in 0..calls {
            add()?;
            if k % 50 == 49 {
                marks.push(Instant::now());
            }
        }
        let ns = t0.elapsed().as_nanos() as f64;
        let after = controls(&l2, &llc);
        let mut sub: Vec<f64> = marks
            .windows(2)
            .map(|w| (w[1] - w[0]).as_nanos() as f64)
            .collect();
        sub.sort_by(f64::total_cmp);
        let n = sub.len();
        let (lo, mid, hi) = match n {
            0 => (f64::NAN, f64::NAN, f64::NAN),
            _ => (sub[0], sub[n / 2], sub[n - 1]),
        };
        let c: Vec<String> = before.iter().chain(&after).map(f64::to_string).collect();
        writeln!(f, "{i},{ns},{},{lo},{mid},{hi},{n}", c.join(",")).map_err(io)?;
        i += 1;
    }
    tch::Cuda::synchronize(0);
    Ok(i)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(secs), Some(calls), Some(out)) = (
        args.first().and_then(|s| s.parse::<f64>().ok()),
        args.get(1).and_then(|s| s.parse::<usize>().ok()),
        args.get(2),
    ) else {
        eprintln!("state_probe: usage: state_probe SECS CALLS OUT.csv");
        return ExitCode::from(2);
    };
    match probe(secs, calls, out) {
        Ok(n) => {
            eprintln!("state_probe: {n} samples into {out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("state_probe: {e}");
            ExitCode::FAILURE
        }
    }
}
