//! The planted slowdowns of calibration: a host spin after each call, scoped to the op's
//! own calls or to every torch call the process times.

use super::*;

/// A planted host slowdown (`OPBENCH_PLANT_NS`, `OPBENCH_PLANT_PCT`): calibration knobs
/// that spin on the host after every call. Zero plants nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Plant {
    /// A fixed spin per call.
    pub ns: u64,
    /// A spin of this percentage of the call's own host time.
    pub pct: f64,
    /// Which calls are planted (`OPBENCH_PLANT_SCOPE`).
    pub scope: PlantScope,
}

/// Which torch calls a host plant slows down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PlantScope {
    /// The timed case's own calls: a slower op.
    #[default]
    Op,
    /// Every torch call the process times, the dispatch floor's control included: a build
    /// whose every call is dearer. The build-independent host control is never planted.
    Torch,
}

impl PlantScope {
    /// `op` (or empty) or `torch`; anything else is a one-line error naming the variable.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" | "op" => Ok(PlantScope::Op),
            "torch" => Ok(PlantScope::Torch),
            other => Err(format!("OPBENCH_PLANT_SCOPE={other}: expected op or torch")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PlantScope::Op => "op",
            PlantScope::Torch => "torch",
        }
    }
}

impl Plant {
    /// The plant `OPBENCH_PLANT_NS`, `OPBENCH_PLANT_PCT` and `OPBENCH_PLANT_SCOPE` ask for.
    pub fn from_config(c: &Config) -> Self {
        Plant {
            ns: c.plant_ns,
            pct: c.plant_pct,
            scope: c.plant_scope,
        }
    }

    /// Whether it spins at all.
    pub fn is_active(self) -> bool {
        self.ns > 0 || self.pct > 0.0
    }

    /// The plant for the process's other torch calls (the control, the case beside): the
    /// same spin with a `torch` scope, none with `op`.
    pub fn for_other_calls(self) -> Plant {
        match self.scope {
            PlantScope::Torch => self,
            PlantScope::Op => Plant::default(),
        }
    }
}

/// [`time_calls`] with a [`Plant`] after every call in the host-timed modes.
pub fn time_calls_planted(
    p: &mut dyn Prepared,
    device: Device,
    mode: Mode,
    iters: u64,
    clock: Option<&mut DeviceClock>,
    plant: Plant,
) -> Result<SampleTime, TchError> {
    if !plant.is_active() || mode.is_device() {
        return time_sample(p, device, mode, iters, clock);
    }
    let mut planted = Planted::new(p, plant);
    time_sample(&mut planted, device, mode, iters, clock)
}

/// A case whose every call is followed by a host spin.
pub(super) struct Planted<'a> {
    inner: &'a mut dyn Prepared,
    plant: Plant,
    /// One clock read's cost, read before any call is timed.
    clock: Duration,
}

impl<'a> Planted<'a> {
    /// `inner` planted with `plant`; the clock read's cost is measured here, outside the
    /// timed calls.
    pub(super) fn new(inner: &'a mut dyn Prepared, plant: Plant) -> Self {
        Planted {
            inner,
            plant,
            clock: clock_read(),
        }
    }
}

/// How long the call and its spin take together, from the read before the call. `took` is
/// that read to the one after the call, which holds one read's cost (`clock`) beside the
/// call's own time; the call's own time grows by the plant; and the reads outside the
/// deadline (the one before the call, and the one that ends the spin, on average half a
/// read past it) are taken off. So a short call reads the nominal slowdown, not the
/// plant's own clock reads on top of it.
pub fn planted_total(plant: Plant, took: Duration, clock: Duration) -> Duration {
    let call = took.saturating_sub(clock);
    let total = call + Duration::from_nanos(plant.ns) + call.mul_f64(plant.pct / 100.0);
    total.saturating_sub(clock.mul_f64(1.5))
}

/// One clock read's cost here: the median of 65 back-to-back reads, measured once.
fn clock_read() -> Duration {
    static COST: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *COST.get_or_init(|| {
        let mut reads: Vec<Duration> = (0..65)
            .map(|_| {
                let t = Instant::now();
                t.elapsed()
            })
            .collect();
        reads.sort_unstable();
        reads[reads.len() / 2]
    })
}

impl Prepared for Planted<'_> {
    fn run(&mut self) -> Result<(), TchError> {
        // the spin ends at a deadline from the call's start, so the plant's own clock
        // reads are inside the slowdown it plants, not on top of it
        let t0 = Instant::now();
        self.inner.run()?;
        let total = planted_total(self.plant, t0.elapsed(), self.clock);
        // a bare loop of clock reads (no pause hint, whose own cost would overshoot)
        while t0.elapsed() < total {}
        Ok(())
    }
    fn output(&mut self) -> Result<tch::Tensor, TchError> {
        self.inner.output()
    }
    fn reference(&mut self) -> Result<tch::Tensor, TchError> {
        self.inner.reference()
    }
}
