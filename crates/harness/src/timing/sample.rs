//! The engine's sample loop: one sample of N calls in a mode, its stretches, and the host
//! controls and state read around it (the criterion front and the worker both use it).

use super::*;

/// Time `iters` calls of `p` on `device` in `mode`.
///
/// The synchronize calls sit inside the timed region on purpose: without them a GPU bench
/// measures how fast the host can queue work, not the work.
pub fn time_calls(
    p: &mut dyn Prepared,
    device: Device,
    mode: Mode,
    iters: u64,
    clock: Option<&mut DeviceClock>,
) -> Result<Duration, TchError> {
    time_sample(p, device, mode, iters, clock).map(|t| t.total)
}

/// One sample's time: the whole, and in the host-timed modes the slowest and the median
/// stretch of its calls, per call ([`rundir::SampleState::slowest_ns`] and
/// [`rundir::SampleState::typical_ns`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleTime {
    pub total: Duration,
    /// `None` in the device-timed modes and for samples of fewer than 4 calls.
    pub stretches: Option<Stretches>,
}

/// The stretches of one host-timed sample's calls, per call (ns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stretches {
    pub slowest_ns: f64,
    /// The median stretch: the sample's own pace, which a burst inside it does not move.
    pub typical_ns: f64,
}

impl Stretches {
    /// The slowest and the median of a sample's stretches `paces` (per call), where the
    /// sample had at least 4 calls (`iters`).
    fn of(paces: &[f64], iters: u64) -> Option<Self> {
        (iters >= 4 && !paces.is_empty()).then(|| Stretches {
            slowest_ns: paces.iter().copied().fold(0.0, f64::max),
            typical_ns: stats::median(paces),
        })
    }

    /// Per call where one timed call is `calls` calls (a graph replay).
    pub fn per(self, calls: u64) -> Self {
        let k = calls.max(1) as f64;
        Stretches {
            slowest_ns: self.slowest_ns / k,
            typical_ns: self.typical_ns / k,
        }
    }
}

/// [`time_calls`], with the stretches of the calls of a host-timed sample.
pub fn time_sample(
    p: &mut dyn Prepared,
    device: Device,
    mode: Mode,
    iters: u64,
    clock: Option<&mut DeviceClock>,
) -> Result<SampleTime, TchError> {
    if mode.is_device() {
        let clock = clock.ok_or_else(|| TchError::Kind("device-side timing needs a GPU".into()))?;
        let total = if mode == Mode::DeviceCold {
            clock.time_cold(p, iters)
        } else {
            // device, and the graph modes, whose `p` is a replay
            clock.time(p, iters, mode == Mode::Device)
        }?;
        return Ok(SampleTime {
            total,
            stretches: None,
        });
    }
    // the stretches' clock readings go here, allocated before the timed region and read
    // after it
    let mut paces = Vec::with_capacity(rundir::STRETCHES as usize);
    device.sync();
    let t0 = Instant::now();
    match mode {
        Mode::Device | Mode::DeviceCold | Mode::Graph | Mode::GraphCold => {
            unreachable!("handled above")
        }
        // pipelined_cold's `p` takes its copies of the state in turn
        Mode::Pipelined | Mode::PipelinedCold => {
            run_in_stretches(p, iters, None, &mut paces)?;
            device.sync();
        }
        Mode::Synced => run_in_stretches(p, iters, Some(device), &mut paces)?,
    }
    let total = t0.elapsed();
    Ok(SampleTime {
        total,
        stretches: Stretches::of(&paces, iters),
    })
}

/// Run `iters` calls of `p` (each followed by a synchronize of `sync_each`) in up to
/// [`rundir::STRETCHES`] stretches of equal count, the clock read between stretches and
/// never inside a call; each stretch's time per call pushed onto `paces`.
pub(super) fn run_in_stretches(
    p: &mut dyn Prepared,
    iters: u64,
    sync_each: Option<Device>,
    paces: &mut Vec<f64>,
) -> Result<(), TchError> {
    let per = iters.div_ceil(rundir::STRETCHES).max(1);
    let mut done = 0;
    let mut at = Instant::now();
    while done < iters {
        let n = per.min(iters - done);
        for _ in 0..n {
            p.run()?;
            if let Some(d) = sync_each {
                d.sync();
            }
        }
        let now = Instant::now();
        paces.push((now - at).as_nanos() as f64 / n as f64);
        (at, done) = (now, done + n);
    }
    Ok(())
}

/// The host-speed controls timed right before a sample: the dispatch floor's per-call time
/// (moves with the build and the host) and the build-independent host work (moves with the
/// host alone, [`crate::hostspeed`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Controls {
    pub(crate) torch: Option<f64>,
    pub(crate) host: Option<f64>,
    /// The host's and GPU's state over the sample.
    pub(crate) state: rundir::SampleState,
}

/// The sample's state: the host's counters since `before`, the GPU's now.
pub(super) fn sample_state(
    before: &machine::state::HostCounters,
    probe: Option<&machine::state::GpuProbe>,
) -> rundir::SampleState {
    let h = machine::state::HostCounters::read().since(before);
    let g = probe.map(|p| p.read()).unwrap_or_default();
    rundir::SampleState {
        cpu_ns: h.cpu_ns,
        nivcsw: h.nivcsw,
        steal: h.steal,
        sm_mhz: g.sm_mhz,
        gpu_util: g.util_pct,
        gpu_temp: g.temp_c,
        throttle: g.throttle,
        host_after_ns: None,
        slowest_ns: None,
        typical_ns: None,
        control_after_ns: None,
    }
}

impl Controls {
    /// The controls right before a sample: the torch control where there is one (planted
    /// with a `torch`-scope plant), and then the build-independent host control.
    pub(crate) fn before(
        control: Option<&mut (dyn Prepared + '_)>,
        device: Device,
        plant: Plant,
    ) -> Self {
        let has = control.is_some();
        Controls {
            torch: control.and_then(|c| control_ns(c, device, plant)),
            host: has.then(|| crate::hostspeed::HostControl::shared().time_ns()),
            state: rundir::SampleState::default(),
        }
    }

    /// With the sample's `state` and the controls again right after it: a slow burst
    /// that began during the sample shows in them.
    pub(crate) fn after(
        mut self,
        state: rundir::SampleState,
        control: Option<&mut (dyn Prepared + '_)>,
        device: Device,
        plant: Plant,
    ) -> Self {
        self.state = state;
        self.state.host_after_ns = self
            .host
            .map(|_| crate::hostspeed::HostControl::shared().time_ns());
        self.state.control_after_ns = control.and_then(|c| control_ns(c, device, plant));
        self
    }
}

/// One sample of `iters` calls of `p` and the host's and GPU's state over it, its
/// stretches per call (a graph replay's stretch is many calls): what the criterion front
/// and the worker both record.
pub(crate) fn sample_in_state(
    p: &mut dyn Prepared,
    (device, mode, iters): (Device, Mode, u64),
    clock: Option<&mut DeviceClock>,
    plant: Plant,
    probe: Option<&machine::state::GpuProbe>,
) -> Result<(SampleTime, rundir::SampleState), TchError> {
    let calls = p.calls_per_run().max(1);
    let before = machine::state::HostCounters::read();
    let t = time_calls_planted(p, device, mode, iters, clock, plant)?;
    let mut state = sample_state(&before, probe);
    let stretches = t.stretches.map(|s| s.per(calls));
    state.slowest_ns = stretches.map(|s| s.slowest_ns);
    state.typical_ns = stretches.map(|s| s.typical_ns);
    Ok((t, state))
}

/// The host-speed control: the dispatch floor's per-call time over ~200 µs of back-to-back
/// calls, right before a sample. Its ratio to a case's time cancels the host's speed when
/// the host switches state between samples or processes (docs/method.md).
/// With a `torch`-scope plant ([`PlantScope::Torch`]) its calls are planted too.
pub(crate) fn control_ns(control: &mut dyn Prepared, device: Device, plant: Plant) -> Option<f64> {
    use rundir::{TORCH_CONTROL_CHUNK as CHUNK, TORCH_CONTROL_SPAN as SPAN};
    let plant = plant.for_other_calls();
    // unplanted, the control's calls are timed bare: the wrapper reads the clock twice a call
    let mut planted;
    let control: &mut dyn Prepared = if plant.is_active() {
        planted = Planted::new(control, plant);
        &mut planted
    } else {
        control
    };
    device.sync();
    let t0 = Instant::now();
    let mut calls = 0u64;
    while t0.elapsed() < SPAN || calls == 0 {
        for _ in 0..CHUNK {
            control.run().ok()?;
        }
        calls += CHUNK;
    }
    device.sync();
    Some(t0.elapsed().as_nanos() as f64 / calls as f64)
}
