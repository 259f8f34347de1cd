//! Device-side timing: what the kernels take, without the host's dispatch and launch.
//!
//! GPU events bracket n back-to-back calls on the stream PyTorch uses ([`atenx::DeviceTimer`],
//! c10's device-generic event, so one binary serves CUDA and ROCm). Events alone are not
//! enough: when the host launches more slowly than the GPU runs (the usual decode case), the
//! GPU idles between kernels and the events would time the host again. So before each chunk
//! of calls the stream is given a *lead*: a delay kernel long enough for the host to queue
//! the whole chunk behind it. The calls then run back to back, and the events see only
//! device time. The delay is `at::cuda::sleep` (a spin kernel in libtorch's GPU library)
//! where it can be found, else a chain of matrix products; its length is set from the
//! host's measured enqueue time, and a chunk whose enqueue outlasted its lead is redone with
//! a longer one. The lead is itself timed by events: whether it covered the enqueue is
//! judged by how long it ran on the device, and the delay's rate is re-fitted from every
//! lead. (A rate measured once at start is off by the clock's ratio when the GPU's clock
//! was still low then: the H200 idles at 345 MHz and runs at 1,980. Every lead of that
//! process was then shorter than asked, and the check, comparing the enqueue with the lead
//! as asked, passed.)
//!
//! A chunk whose enqueue still outlasts its lead after 4 ever longer leads is taken as it is
//! and counted ([`Coverage`]): its events include GPU time spent waiting for the host, and
//! the row says so. The likely cause is a call that launches more kernels than the GPU's
//! launch queue holds (a whole eager decode step): the host blocks on the full queue until
//! the lead ends, then the GPU catches up with it.
//!
//! These are *warm* figures: the same buffers every call, so a decode-sized case may be
//! served from L2. [`DeviceClock::time_cold`] flushes L2 (writes a buffer twice its size)
//! before every call and times each call with its own events.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tch::{Kind, TchError, Tensor};

use crate::Device;
use crate::device::load_gpu_library;
use crate::op::Prepared;

/// Calls per chunk: well inside the launch queue's depth, so the host never blocks on a
/// full queue while the lead runs.
const CHUNK: u64 = 256;

type SleepFn = unsafe extern "C" fn(i64);

enum Delay {
    /// `at::cuda::sleep(cycles)`, with the cycles per ns measured at start.
    Sleep { f: SleepFn, cycles_per_ns: f64 },
    /// Matrix products of a square matrix, with the time of one measured at start.
    Matmul { a: Tensor, ns_per_op: f64 },
}

/// Events, a delay kernel and the host's enqueue rate for one GPU.
pub struct DeviceClock {
    device: Device,
    timer: atenx::DeviceTimer,
    /// Events around the lead: how long it ran.
    lead_timer: atenx::DeviceTimer,
    /// Events around a planted spin (`OPBENCH_PLANT_DEVICE_PCT`): what it delivered.
    plant_timer: atenx::DeviceTimer,
    delay: Delay,
    host_ns_per_call: f64,
    flush: Option<Tensor>,
    l2_bytes: u64,
    coverage: Coverage,
    plant: DevicePlant,
}

/// A planted device slowdown (`OPBENCH_PLANT_DEVICE_PCT`): a spin kernel of `pct` percent
/// of the chunk's own device time, enqueued after each chunk's calls inside its events.
/// The calls' device time per call is estimated from the case's previous covered chunk of
/// as many calls: its events less the spin planted in it, as the spin's own events timed
/// it. A case's first chunk of a size (criterion's warm-up; a paired worker's calibration)
/// is not planted. The spin is asked for what the last spin of that chunk size delivered
/// short of its ask, so it delivers what is asked, and what it delivered is counted
/// ([`DeviceClock::take_planted`]). By chunk size, because a spin has a fixed cost of its
/// own (~3 µs on an H100, 2026-12-06): the 1-call warm sample before each paired sample
/// asked ~1 µs and ran ~4, and its ratio, applied to the next sample's spin, made that
/// one a quarter of its ask. One spin per chunk of up to 256 calls keeps that cost under
/// 0.5% of a chunk of 2 µs kernels.
///
/// A planted launch cost (`OPBENCH_PLANT_LAUNCH_NS`) is a fixed `launch_ns` a stream-launched
/// call, planted the same way: one spin of `launch_ns` × the chunk's calls after the chunk,
/// inside its events, in the `device` mode only. Graph replays do not pay it, as they do not
/// pay the per-launch work a build adds to each launch's path (kernel arguments, the command
/// processor's queue). One spin a chunk rather than one a call: a spin of its own costs ~3 µs,
/// so a 0.5 µs cost cannot be planted call by call; the device time added is the same. Per
/// *call*: a call that launches k kernels is planted `launch_ns`, not k × `launch_ns`, so a
/// plant of 0.5 µs a call is at most 0.5 µs a launch, never more.
#[derive(Debug, Clone, Default)]
struct DevicePlant {
    pct: f64,
    /// Device ns a stream-launched call (not a graph replay).
    launch_ns: f64,
    /// Each case's estimates by chunk size, by the case's address and the chunk's calls.
    cases: HashMap<(usize, u64), CasePlant>,
    /// Device ns of the planted spins kept since the last take, as their events timed them.
    ran_ns: f64,
}

/// One case's plant estimates.
#[derive(Debug, Clone, Copy)]
struct CasePlant {
    /// The case's device time per call, unplanted, from its last covered chunk.
    per_call_ns: f64,
    /// What the case's last spin ran over what it was asked (1 until one ran).
    delivered: f64,
}

impl DevicePlant {
    /// Whether anything is planted.
    fn on(&self) -> bool {
        self.pct > 0.0 || self.launch_ns > 0.0
    }

    /// The spin to plant after a chunk of `chunk` calls of `case`, where one is planted;
    /// `launched`: the calls were stream launches (not graph replays).
    fn ask(&self, case: usize, chunk: u64, launched: bool) -> Option<Spin> {
        let c = self.cases.get(&(case, chunk)).filter(|_| self.on())?;
        let launch = if launched { self.launch_ns } else { 0.0 };
        let per_call = self.pct / 100.0 * c.per_call_ns + launch;
        (per_call > 0.0).then(|| Spin {
            case: (case, chunk),
            asked: per_call * chunk as f64 / c.delivered,
        })
    }

    /// A planted spin ran `ran` ns on the device (its own events).
    fn ran(&mut self, spin: Spin, ran: f64) {
        if let Some(c) = self.cases.get_mut(&spin.case)
            && ran.is_finite()
            && ran > 0.0
        {
            c.delivered = ran / spin.asked;
        }
    }

    /// A covered chunk of `calls` calls of `case` took `calls_ns` on the device, less its
    /// spin: what the next chunk of as many calls is planted by.
    fn learn(&mut self, case: usize, calls: u64, calls_ns: f64) {
        if !self.on() {
            return;
        }
        let per_call_ns = calls_ns.max(1.0) / calls.max(1) as f64;
        self.cases
            .entry((case, calls))
            .and_modify(|c| c.per_call_ns = per_call_ns)
            .or_insert(CasePlant {
                per_call_ns,
                delivered: 1.0,
            });
    }
}

/// A planted spin: the case and chunk size it was planted for and the ns it was asked.
#[derive(Debug, Clone, Copy, Default)]
struct Spin {
    case: (usize, u64),
    asked: f64,
}

/// How many timed chunks ran behind a lead that outlasted the host's enqueue.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    pub chunks: u64,
    /// Chunks whose enqueue still outlasted the lead after every retry: their events
    /// include host gaps, so the time is an upper bound.
    pub uncovered: u64,
}

impl Coverage {
    /// The row note for a case with uncovered chunks, `None` when every chunk was covered.
    pub fn note(&self) -> Option<String> {
        (self.uncovered > 0).then(|| {
            format!(
                "{UPPER_BOUND} in {} of {} chunks (warm-up included) the host's enqueue outlasted the lead \
                 even after {RETRIES} tries, so GPU idle time waiting for the host is included \
                 (a call that launches more kernels than the launch queue holds blocks the host \
                 until the GPU drains it; or the host stalled)",
                self.uncovered, self.chunks
            )
        })
    }
}

/// How a row's note begins the part that says its device time is an upper bound (the
/// row's `uncovered_chunks` column is what code reads; schema-1 runs had only this note).
const UPPER_BOUND: &str = "upper bound:";

/// Leads tried per chunk before it is taken as it is (and counted as uncovered).
const RETRIES: u32 = 4;

impl std::fmt::Debug for DeviceClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceClock")
            .field("device", &self.device)
            .field("delay", &self.delay_name())
            .finish()
    }
}

/// A delay's rate (work per ns: cycles, or products) re-fitted from one lead: `asked` ns
/// at `rate` ran `ran` ns on the device. A reading that is not a positive time keeps the
/// rate.
fn refit(rate: f64, asked: f64, ran: f64) -> f64 {
    if ran.is_finite() && ran > 0.0 && asked > 0.0 {
        rate * asked / ran
    } else {
        rate
    }
}

/// Whether a lead that ran `ran` ns covered a chunk of `chunk` calls the host enqueued in
/// `host` ns; only then is `host_ns_per_call` (what the next lead is sized by) learned from
/// it. An uncovered enqueue may have waited for the lead itself (a call that launches more
/// kernels than the launch queue holds blocks until the GPU drains it), and sizing the next
/// lead by it grew the leads 1.5× a try and chunk without bound: the hf-eager step at
/// B = 1 never finished its device samples on an H100 (2026-12-05).
fn learn_enqueue(host_ns_per_call: &mut f64, host: f64, ran: f64, chunk: u64) -> bool {
    let covered = host < ran;
    if covered {
        *host_ns_per_call = host / chunk.max(1) as f64;
    }
    covered
}

/// The matrix products a lead of `ns` takes at `ns_per_op` each.
fn products(ns: f64, ns_per_op: f64) -> usize {
    (ns / ns_per_op).ceil() as usize
}

/// `at::cuda::sleep` from the loaded GPU library (the HIP build keeps the `at::cuda`
/// namespace), by its mangled name.
fn find_sleep() -> Option<SleepFn> {
    let lib = load_gpu_library()?;
    // SAFETY: the library is already loaded (this only takes another reference); the symbol
    // is `void at::cuda::sleep(int64_t)`, whose calling convention on x86-64 SysV and
    // Windows x64 is the C one for one integer argument.
    unsafe {
        let lib = libloading::Library::new(&lib).ok()?;
        let names: [&[u8]; 2] = [b"_ZN2at4cuda5sleepEl\0", b"?sleep@cuda@at@@YAX_J@Z\0"];
        let f = names
            .iter()
            .find_map(|n| lib.get::<SleepFn>(n).ok().map(|s| *s))?;
        std::mem::forget(lib);
        Some(f)
    }
}

/// The last-level cache of `device` that the cold modes defeat: `override_bytes`
/// (`OPBENCH_L2_BYTES`), else what the GPU runtime says of its L2 or, on the CPU, the last
/// cache level in sysfs (Linux); unknown: 256 MiB, the largest last level in use (MI300X's
/// Infinity Cache).
pub fn last_level_cache(device: Device, override_bytes: Option<u64>) -> u64 {
    override_bytes
        .or_else(|| match device.backend {
            crate::Backend::Cpu => crate::env::cpu_last_level_cache(),
            crate::Backend::Hip => crate::gpu_facts::hip(device.index).l2_cache_bytes,
            crate::Backend::Cuda => crate::gpu_facts::cuda(device.index).l2_cache_bytes,
        })
        .unwrap_or(256 << 20)
}

impl DeviceClock {
    /// Set up events and calibrate the delay on `device` (a GPU).
    /// `l2_bytes` overrides the last-level cache size the cold mode flushes (`OPBENCH_L2_BYTES`).
    pub fn new(device: Device, l2_bytes: Option<u64>) -> Result<Self, TchError> {
        if !device.is_gpu() {
            return Err(TchError::Kind(
                "device-side timing needs a GPU (CPU calls complete before they return)".into(),
            ));
        }
        let mut timer = atenx::DeviceTimer::new(device.index)?;
        let lead_timer = atenx::DeviceTimer::new(device.index)?;
        let plant_timer = atenx::DeviceTimer::new(device.index)?;
        let delay = match find_sleep() {
            Some(f) => {
                let cycles = 2_000_000i64;
                device.sync();
                // first call loads the kernel; time the second
                unsafe { f(1000) };
                timer.start()?;
                unsafe { f(cycles) };
                timer.stop()?;
                let ns = timer.elapsed_ms()? * 1e6;
                Delay::Sleep {
                    f,
                    cycles_per_ns: cycles as f64 / ns.max(1.0),
                }
            }
            None => {
                let a = Tensor::f_randn([2048, 2048], (Kind::Float, device.tch()))?;
                drop(a.f_matmul(&a)?);
                timer.start()?;
                for _ in 0..4 {
                    drop(a.f_matmul(&a)?);
                }
                timer.stop()?;
                let ns = timer.elapsed_ms()? * 1e6 / 4.0;
                Delay::Matmul {
                    a,
                    ns_per_op: ns.max(1.0),
                }
            }
        };
        Ok(DeviceClock {
            device,
            timer,
            lead_timer,
            plant_timer,
            delay,
            host_ns_per_call: 20_000.0,
            flush: None,
            coverage: Coverage::default(),
            l2_bytes: last_level_cache(device, l2_bytes),
            plant: DevicePlant::default(),
        })
    }

    /// Plant `pct` percent of extra device time in the warm device-timed modes
    /// (`OPBENCH_PLANT_DEVICE_PCT`) and `launch_ns` a stream-launched call in the `device`
    /// mode (`OPBENCH_PLANT_LAUNCH_NS`), calibration knobs; each needs `at::cuda::sleep`.
    pub fn set_plant(&mut self, pct: f64, launch_ns: f64) -> Result<(), TchError> {
        if (pct > 0.0 || launch_ns > 0.0) && !matches!(self.delay, Delay::Sleep { .. }) {
            return Err(TchError::Kind(
                "OPBENCH_PLANT_DEVICE_PCT and OPBENCH_PLANT_LAUNCH_NS need at::cuda::sleep, \
                 which this libtorch does not export"
                    .into(),
            ));
        }
        self.plant.pct = pct;
        self.plant.launch_ns = launch_ns;
        Ok(())
    }

    /// The lead coverage since the last call, and start counting afresh (once per case;
    /// the device plant's estimate of the case's time starts afresh too).
    pub fn take_coverage(&mut self) -> Coverage {
        self.plant.cases.clear();
        std::mem::take(&mut self.coverage)
    }

    /// The chunks left uncovered since the last call, counting afresh; the plant's estimate
    /// stays (a paired run's samples of one case, between which the other side runs).
    pub fn take_uncovered(&mut self) -> u64 {
        std::mem::take(&mut self.coverage).uncovered
    }

    /// The device ns the planted spins ran since the last call (their own events), counting
    /// afresh; `None` without a device plant.
    pub fn take_planted(&mut self) -> Option<f64> {
        let ran = std::mem::take(&mut self.plant.ran_ns);
        self.plant.on().then_some(ran)
    }

    pub fn delay_name(&self) -> &'static str {
        match self.delay {
            Delay::Sleep { .. } => "at::cuda::sleep",
            Delay::Matmul { .. } => "matmul chain",
        }
    }

    fn lead(&self, ns: f64) -> Result<(), TchError> {
        match &self.delay {
            Delay::Sleep { f, cycles_per_ns } => {
                // SAFETY: see find_sleep; enqueues one spin kernel on the current stream.
                unsafe { f((ns * cycles_per_ns) as i64) };
            }
            Delay::Matmul { a, ns_per_op } => {
                for _ in 0..products(ns, *ns_per_op) {
                    drop(a.f_matmul(a)?);
                }
            }
        }
        Ok(())
    }

    /// Enqueue a lead of `ns` between the lead events.
    fn timed_lead(&mut self, ns: f64) -> Result<(), TchError> {
        self.lead_timer.start()?;
        self.lead(ns)?;
        self.lead_timer.stop()
    }

    /// How long the last timed lead (asked `asked` ns) ran on the device, in ns; the
    /// delay's rate is re-fitted from it. Read after the chunk's own events completed.
    fn lead_ran(&mut self, asked: f64) -> Result<f64, TchError> {
        let ran = self.lead_timer.elapsed_ms()? * 1e6;
        match &mut self.delay {
            Delay::Sleep { cycles_per_ns, .. } => {
                *cycles_per_ns = refit(*cycles_per_ns, asked, ran);
            }
            Delay::Matmul { ns_per_op, .. } => {
                // the products `lead` enqueued, at the rate it enqueued them by
                let ops = products(asked, *ns_per_op).max(1) as f64;
                *ns_per_op = 1.0 / refit(1.0 / *ns_per_op, ops * *ns_per_op, ran);
            }
        }
        Ok(ran)
    }

    /// Enqueue the planted spin of case `case` after a chunk of `chunk` calls (`launched`:
    /// stream launches), between the plant's events; what it was asked (nothing before the
    /// case's first covered chunk).
    fn plant_after(&mut self, case: usize, chunk: u64, launched: bool) -> Result<Spin, TchError> {
        let Some(spin) = self.plant.ask(case, chunk, launched) else {
            return Ok(Spin::default());
        };
        self.plant_timer.start()?;
        self.lead(spin.asked)?;
        self.plant_timer.stop()?;
        Ok(spin)
    }

    /// After a chunk's events completed: the ns its planted spin ran (0 without one), and
    /// what the next spin's ask is corrected by.
    fn spin_ran(&mut self, spin: Spin) -> Result<f64, TchError> {
        if spin.asked <= 0.0 {
            return Ok(0.0);
        }
        let ran = self.plant_timer.elapsed_ms()? * 1e6;
        self.plant.ran(spin, ran);
        Ok(ran)
    }

    /// Device time of `iters` back-to-back calls of `p` (warm: same buffers); `launched`:
    /// each call is launched on the stream (the `device` mode), not a graph replay.
    pub fn time(
        &mut self,
        p: &mut dyn Prepared,
        iters: u64,
        launched: bool,
    ) -> Result<Duration, TchError> {
        // the case's address keys its plant estimate
        let case = std::ptr::from_mut(p).cast::<()>() as usize;
        let mut total_ns = 0.0;
        let mut left = iters;
        while left > 0 {
            let chunk = left.min(CHUNK);
            total_ns += self.behind_lead(
                chunk,
                Some(case),
                |c| {
                    c.device.sync();
                    Ok(())
                },
                |c| {
                    for _ in 0..chunk {
                        p.run()?;
                    }
                    c.plant_after(case, chunk, launched)
                },
            )?;
            left -= chunk;
        }
        Ok(Duration::from_nanos(total_ns.round() as u64))
    }

    /// Device time of `iters` calls, each after an L2 flush (cold): a buffer of twice the
    /// L2 size is overwritten before every call, and each call is timed by its own pair of
    /// events. A call whose enqueue outlasted its lead is flushed and timed again behind a
    /// longer one, as a warm chunk is ([`DeviceClock::time`]).
    pub fn time_cold(&mut self, p: &mut dyn Prepared, iters: u64) -> Result<Duration, TchError> {
        if self.flush.is_none() {
            let n = (2 * self.l2_bytes.max(1 << 20) / 4) as i64;
            self.flush = Some(Tensor::f_zeros([n], (Kind::Float, self.device.tch()))?);
        }
        let mut total_ns = 0.0;
        for _ in 0..iters {
            total_ns += self.behind_lead(
                1,
                None,
                |c| {
                    if let Some(buf) = c.flush.as_mut() {
                        drop(buf.f_fill_(1.0)?);
                    }
                    Ok(())
                },
                |_| p.run().map(|()| Spin::default()),
            )?;
        }
        Ok(Duration::from_nanos(total_ns.round() as u64))
    }

    /// The device ns of `calls` calls that `enqueue` issues between the events, behind a
    /// lead sized by the host's enqueue time per call; `before` readies each try. A try
    /// whose enqueue outlasted the lead as it ran is done again behind one 1.5× that
    /// enqueue, up to [`RETRIES`] tries, the last kept and counted uncovered. `enqueue`
    /// returns the planted spin, which the plant of case `plant` (warm chunks) learns the
    /// calls' own time per call without.
    fn behind_lead(
        &mut self,
        calls: u64,
        plant: Option<usize>,
        mut before: impl FnMut(&mut Self) -> Result<(), TchError>,
        mut enqueue: impl FnMut(&mut Self) -> Result<Spin, TchError>,
    ) -> Result<f64, TchError> {
        let mut lead = (1.25 * self.host_ns_per_call * calls as f64).max(50_000.0);
        let mut tries = 0;
        loop {
            before(self)?;
            self.timed_lead(lead)?;
            let t0 = Instant::now();
            self.timer.start()?;
            let spin = enqueue(self)?;
            self.timer.stop()?;
            let host = t0.elapsed().as_nanos() as f64;
            let device_ns = self.timer.elapsed_ms()? * 1e6;
            let planted = self.spin_ran(spin)?;
            let ran = self.lead_ran(lead)?;
            tries += 1;
            // the lead, as it ran, covered the host's enqueue: the calls ran back to back
            let covered = learn_enqueue(&mut self.host_ns_per_call, host, ran, calls);
            // the plant's estimate too, only from calls that ran back to back: an
            // uncovered chunk's events hold the GPU's wait for the host as well
            if let Some(case) = plant.filter(|_| covered) {
                self.plant.learn(case, calls, device_ns - planted);
            }
            if covered || tries >= RETRIES {
                self.plant.ran_ns += planted;
                self.coverage.chunks += 1;
                self.coverage.uncovered += u64::from(!covered);
                return Ok(device_ns);
            }
            lead = 1.5 * host;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Coverage, DevicePlant, learn_enqueue, refit};

    #[test]
    fn an_enqueue_that_waited_for_the_lead_does_not_size_the_next_one() {
        // 256 calls enqueued in 0.5 ms behind a 1 ms lead: learned, 1.95 µs a call
        let mut per_call = 20_000.0;
        assert!(learn_enqueue(&mut per_call, 500_000.0, 1e6, 256));
        assert!((per_call - 500_000.0 / 256.0).abs() < 1e-9);
        // a step that blocks on the launch queue: its enqueue always outlasts the lead
        // (it waits for it); the leads of the chunks after it stay where they were
        let mut lead = 1.25 * per_call * 256.0;
        for _ in 0..20 {
            let host = lead + 13e6;
            assert!(!learn_enqueue(&mut per_call, host, lead, 256));
            lead = 1.25 * per_call * 256.0;
        }
        assert!((per_call - 500_000.0 / 256.0).abs() < 1e-9, "{per_call}");
    }

    #[test]
    fn a_lead_that_ran_short_raises_the_rate() {
        // asked 1 ms at 0.345 cycles/ns (measured while the clock idled); it ran 0.174 ms
        // at 1.98 GHz: the rate becomes 1.98 cycles/ns
        let rate = refit(0.345, 1e6, 1e6 * 0.345 / 1.98);
        assert!((rate - 1.98).abs() < 1e-9, "{rate}");
        assert_eq!(refit(0.345, 1e6, 0.0), 0.345);
        assert_eq!(refit(0.345, 1e6, f64::NAN), 0.345);
    }

    /// A spin with a fixed cost of 3 µs, planted after alternating 1-call warm samples and
    /// 228-call samples of a 34-µs call (as a paired worker takes them): the big samples'
    /// spins deliver what the plant asks, whatever the small ones do.
    #[test]
    fn a_spin_of_each_chunk_size_delivers_its_own_share() {
        let mut plant = DevicePlant {
            pct: 3.0,
            ..DevicePlant::default()
        };
        let spin_ns = |asked: f64| 3_000.0 + asked.max(0.0);
        let (case, per_call) = (0xbeef, 34_000.0);
        let mut shares = Vec::new();
        for _ in 0..12 {
            for calls in [1u64, 228] {
                let calls_ns = per_call * calls as f64;
                let ran = plant.ask(case, calls, true).map(|s| {
                    let ran = spin_ns(s.asked);
                    plant.ran(s, ran);
                    ran
                });
                plant.learn(case, calls, calls_ns);
                if calls == 228 {
                    shares.push(ran.unwrap_or(0.0) / calls_ns);
                }
            }
        }
        // the first sample of a size is not planted; from the third on, 3% to 0.1%
        assert_eq!(shares[0], 0.0);
        for s in &shares[2..] {
            assert!((s - 0.03).abs() < 0.001, "{shares:?}");
        }
        // no plant: nothing asked
        let mut none = DevicePlant::default();
        none.learn(case, 228, 1e6);
        assert!(none.ask(case, 228, true).is_none());
    }

    /// A launch plant of 500 ns a call, with the spin's fixed 3 µs cost: stream-launched
    /// chunks of 256 calls are planted 500 ns a call whatever the calls' own time; graph
    /// replays nothing; with a device plant too, replays get only the percentage.
    #[test]
    fn a_launch_plant_is_a_fixed_cost_a_stream_launched_call_only() {
        let spin_ns = |asked: f64| 3_000.0 + asked.max(0.0);
        for per_call in [2_000.0, 40_000.0] {
            let mut plant = DevicePlant {
                launch_ns: 500.0,
                ..DevicePlant::default()
            };
            let (case, calls) = (0xcafe, 256u64);
            let mut per_call_planted = Vec::new();
            for _ in 0..6 {
                let ran = plant.ask(case, calls, true).map(|s| {
                    let ran = spin_ns(s.asked);
                    plant.ran(s, ran);
                    ran
                });
                plant.learn(case, calls, per_call * calls as f64);
                per_call_planted.push(ran.unwrap_or(0.0) / calls as f64);
                assert!(
                    plant.ask(case, calls, false).is_none(),
                    "a replay was planted"
                );
            }
            assert_eq!(
                per_call_planted[0], 0.0,
                "the first chunk of a size is not planted"
            );
            for p in &per_call_planted[2..] {
                assert!((p - 500.0).abs() < 1.0, "{per_call}: {per_call_planted:?}");
            }
        }
        let mut both = DevicePlant {
            pct: 10.0,
            launch_ns: 500.0,
            ..DevicePlant::default()
        };
        both.learn(1, 100, 100.0 * 4_000.0);
        let replay = both.ask(1, 100, false).unwrap().asked;
        let launch = both.ask(1, 100, true).unwrap().asked;
        assert!((replay - 100.0 * 400.0).abs() < 1e-6, "{replay}");
        assert!((launch - 100.0 * 900.0).abs() < 1e-6, "{launch}");
    }

    #[test]
    fn a_note_only_when_a_chunk_was_uncovered() {
        assert_eq!(Coverage::default().note(), None);
        let all_covered = Coverage {
            chunks: 12,
            uncovered: 0,
        };
        assert_eq!(all_covered.note(), None);
        let note = Coverage {
            chunks: 12,
            uncovered: 5,
        }
        .note()
        .unwrap();
        assert!(note.starts_with("upper bound: in 5 of 12 chunks"), "{note}");
        assert!(note.contains("after 4 tries"), "{note}");
    }
}
