//! Preflight turns wrong answers, missing kernels and panics into rows, never crashes.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::{Check, DType, Device, Failure, Floor, Op, Prepared, Status, preflight};
use shapes::{OpKind, Problem};
use tch::{TchError, Tensor};

/// An op that adds one too many, fails like a missing kernel, or panics, on request.
struct Wrong(&'static str);

struct WrongPrepared {
    x: Tensor,
    how: &'static str,
}

impl Prepared for WrongPrepared {
    fn run(&mut self) -> Result<(), TchError> {
        Ok(())
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        self.x.f_add_scalar(1e-2)
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        self.x.f_to_kind(tch::Kind::Double)
    }
    fn check(&mut self) -> Result<Check, TchError> {
        match self.how {
            "off" => Ok(Check {
                output: self.output()?,
                reference: self.reference()?,
            }),
            "missing" => Err(TchError::Torch(
                "Could not run 'aten::foo' with arguments from the 'CPU' backend.\nException raised from x".into(),
            )),
            "oom" => Err(TchError::Torch("CUDA out of memory. Tried to allocate 2.00 GiB".into())),
            _ => panic!("boom"),
        }
    }
}

impl Op for Wrong {
    fn kind(&self) -> OpKind {
        OpKind::Floor
    }
    fn variants(&self) -> Vec<&'static str> {
        vec!["x"]
    }
    fn prepare(
        &self,
        _: &str,
        _: &Problem,
        _: DType,
        _: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let x = Tensor::f_ones([4], (tch::Kind::Float, tch::Device::Cpu))?;
        Ok(Box::new(WrongPrepared { x, how: self.0 }))
    }
}

fn refused(how: &'static str) -> harness::Refused {
    match preflight(
        &Wrong(how),
        "x",
        &Problem::floor(),
        DType::F32,
        Device::CPU,
        None,
    ) {
        Ok(_) => panic!("{how} was accepted"),
        Err(r) => r,
    }
}

#[test]
fn a_wrong_answer_is_a_mismatch_with_its_error() {
    let r = refused("off");
    assert_eq!(r.failure.status, Status::Mismatch);
    let err = r.rel_err.unwrap();
    assert!((err - 1e-2).abs() < 1e-6, "{err}");
    assert!(r.failure.reason.contains("exceeds"));
}

#[test]
fn missing_kernels_oom_and_panics_become_statuses() {
    let r = refused("missing");
    assert_eq!(r.failure.status, Status::Unsupported);
    assert!(
        !r.failure.reason.contains("Exception raised from"),
        "{}",
        r.failure.reason
    );
    assert_eq!(refused("oom").failure.status, Status::Oom);
    let p = refused("panic");
    assert_eq!(p.failure.status, Status::Error);
    assert!(p.failure.reason.contains("boom"));
}

#[test]
fn the_floor_passes_preflight_on_cpu() {
    let (mut p, err) = preflight(
        &Floor,
        "add",
        &Problem::floor(),
        DType::F32,
        Device::CPU,
        None,
    )
    .unwrap();
    assert_eq!(err, 0.0);
    let d = harness::time_calls(p.as_mut(), Device::CPU, harness::Mode::Synced, 100, None).unwrap();
    assert!(harness::time_calls(p.as_mut(), Device::CPU, harness::Mode::Device, 1, None).is_err());
    assert!(harness::DeviceClock::new(Device::CPU, None).is_err());
    assert!(d.as_nanos() > 0);
}

#[test]
fn the_view_floor_launches_nothing_and_checks() {
    let (mut p, err) = preflight(
        &Floor,
        "view",
        &Problem::floor(),
        DType::F32,
        Device::CPU,
        None,
    )
    .unwrap();
    assert_eq!(err, 0.0);
    p.run().unwrap();
}

#[test]
fn a_gpu_is_selected_exactly_when_it_is_visible() {
    use harness::DeviceChoice;
    let n = harness::gpu_count();
    // one past the last visible GPU is never there
    let err = harness::select_devices(DeviceChoice::Gpu, n).unwrap_err();
    assert!(err.contains("not visible"), "{err}");
    let all = harness::select_devices(DeviceChoice::All, 0).unwrap();
    if n == 0 {
        assert_eq!(all, vec![Device::CPU]);
    } else {
        let gpu = harness::select_devices(DeviceChoice::Gpu, 0).unwrap();
        assert_eq!(gpu, vec![Device::gpu(0)]);
        assert_eq!(all, vec![Device::CPU, Device::gpu(0)]);
        assert!(["cuda:0", "hip:0"].contains(&gpu[0].to_string().as_str()));
    }
    assert_eq!(Device::CPU.to_string(), "cpu");
}

/// An op whose calls sleep: the first `slow_first` calls for 60 ms, the others not at all.
struct Sleepy(usize);

struct SleepyPrepared {
    x: Tensor,
    calls: usize,
    slow_first: usize,
}

impl Prepared for SleepyPrepared {
    fn run(&mut self) -> Result<(), TchError> {
        self.calls += 1;
        if self.calls <= self.slow_first {
            std::thread::sleep(std::time::Duration::from_millis(60));
        }
        Ok(())
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        self.x.f_add_scalar(0.0)
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        self.x.f_to_kind(tch::Kind::Double)
    }
}

impl Op for Sleepy {
    fn kind(&self) -> OpKind {
        OpKind::Floor
    }
    fn variants(&self) -> Vec<&'static str> {
        vec!["x"]
    }
    fn prepare(
        &self,
        _: &str,
        _: &Problem,
        _: DType,
        _: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let x = Tensor::f_ones([4], (tch::Kind::Float, tch::Device::Cpu))?;
        Ok(Box::new(SleepyPrepared {
            x,
            calls: 0,
            slow_first: self.0,
        }))
    }
}

/// A first call over the cap (one-time setup) does not skip a case; two do.
#[test]
fn only_a_second_call_over_the_cap_skips_a_case() {
    let cap = Some(std::time::Duration::from_millis(30));
    let run = |slow| {
        preflight(
            &Sleepy(slow),
            "x",
            &Problem::floor(),
            DType::F32,
            Device::CPU,
            cap,
        )
    };
    assert!(run(0).is_ok());
    assert!(run(1).is_ok(), "a slow first call alone skipped the case");
    let r = run(2).err().unwrap();
    assert_eq!(r.failure.status, Status::Skipped);
    assert!(
        r.failure.reason.starts_with("two calls took "),
        "{}",
        r.failure.reason
    );
}

/// A call that spins 20 µs, but for call `stall_at`, which spins 2 ms.
struct Spin {
    calls: u64,
    stall_at: u64,
}

impl Prepared for Spin {
    fn run(&mut self) -> Result<(), TchError> {
        let us = if self.calls == self.stall_at {
            2000
        } else {
            20
        };
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_micros(us) {
            std::hint::spin_loop();
        }
        self.calls += 1;
        Ok(())
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        Ok(Tensor::from(0.0))
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        Ok(Tensor::from(0.0))
    }
}

#[test]
fn a_host_timed_sample_keeps_the_slowest_and_the_median_stretch_of_its_calls() {
    use harness::Mode;
    // 128 calls in 32 stretches of 4: the stretch with the 2-ms call runs at ≥ 500 µs a
    // call, the sample's mean at ~36 µs
    for mode in [Mode::Pipelined, Mode::Synced] {
        let mut p = Spin {
            calls: 0,
            stall_at: 70,
        };
        let t = harness::time_sample(&mut p, Device::CPU, mode, 128, None).unwrap();
        let mean = t.total.as_nanos() as f64 / 128.0;
        let s = t.stretches.unwrap();
        let slowest = s.slowest_ns;
        assert!(
            slowest >= 500_000.0 && slowest > 5.0 * mean,
            "{slowest} vs {mean}"
        );
        // the median stretch is the calls' own pace: the stall moves the mean, not it
        assert!(s.typical_ns < 0.8 * mean, "{s:?} vs {mean}");
        assert!(s.typical_ns > 0.0 && s.typical_ns <= slowest);
        assert!(
            slowest * 4.0 <= t.total.as_nanos() as f64,
            "a stretch is within its sample"
        );
        // an even sample: its slowest stretch is no faster than its mean (how much slower
        // is this machine's noise: a 2-core VM's preemption can triple a 4-call stretch)
        let mut even = Spin {
            calls: 0,
            stall_at: u64::MAX,
        };
        let t = harness::time_sample(&mut even, Device::CPU, mode, 128, None).unwrap();
        let mean = t.total.as_nanos() as f64 / 128.0;
        let slowest = t.stretches.unwrap().slowest_ns;
        assert!(slowest >= 0.99 * mean, "{slowest} vs {mean}");
        assert!(slowest * 4.0 <= t.total.as_nanos() as f64);
    }
    // fewer than 4 calls: no stretches to tell; a device-timed mode: none
    let mut p = Spin {
        calls: 0,
        stall_at: u64::MAX,
    };
    let t = harness::time_sample(&mut p, Device::CPU, Mode::Pipelined, 3, None).unwrap();
    assert_eq!(t.stretches, None);
    assert!(harness::time_sample(&mut p, Device::CPU, Mode::Device, 8, None).is_err());
}
