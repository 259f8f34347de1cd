//! criterion's measurements, one per kind of clock (as nvbench keeps one measure per kind):
//! the host modes report wall-clock time (criterion's own `WallTime`), the device modes the
//! time GPU events read ([`DeviceEvents`]). So criterion's report, its saved estimates and
//! its throughput say which clock made each figure; before, GPU-event time passed through
//! `WallTime` and read as the host's.
//!
//! The harness times through `iter_custom` ([`super::time_case`]): each sample's time comes
//! from [`crate::devtime::DeviceClock`] (events behind a lead, so that a host-bound call's
//! events do not time the host). [`DeviceEvents`]'s own `start`/`end` bracket a routine
//! with a bare pair of events, for a caller that uses criterion's `iter`.

use std::time::Duration;

use criterion::Throughput;
use criterion::measurement::{Measurement, ValueFormatter};

/// GPU-event time of the device at an index (c10's device-generic events, CUDA or HIP).
#[derive(Debug, Clone, Copy)]
pub struct DeviceEvents {
    device: usize,
}

impl DeviceEvents {
    /// The measurement of GPU `device` (its index among the backend's devices).
    pub fn new(device: usize) -> Self {
        DeviceEvents { device }
    }
}

impl Measurement for DeviceEvents {
    /// The event pair of one routine; `None` where it could not be made or recorded.
    type Intermediate = Option<atenx::DeviceTimer>;
    type Value = Duration;

    fn start(&self) -> Self::Intermediate {
        let mut timer = atenx::DeviceTimer::new(self.device).ok()?;
        timer.start().ok()?;
        Some(timer)
    }

    /// Without events (no GPU, or an event that failed) the time is zero, which criterion
    /// reports as a measurement that took no time instead of analysing it.
    fn end(&self, timer: Self::Intermediate) -> Self::Value {
        timer
            .and_then(|mut t| {
                t.stop().ok()?;
                t.elapsed_ms().ok()
            })
            .map_or(Duration::ZERO, |ms| {
                Duration::from_secs_f64(ms.max(0.0) / 1e3)
            })
    }

    fn add(&self, v1: &Self::Value, v2: &Self::Value) -> Self::Value {
        *v1 + *v2
    }

    fn zero(&self) -> Self::Value {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Self::Value) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &EventsFormatter
    }
}

/// Nanoseconds of GPU events, scaled as criterion scales wall time, each unit marked
/// `(GPU)`; throughput per second of the device's time.
#[derive(Debug, Clone, Copy)]
pub struct EventsFormatter;

/// The unit (marked as GPU-event time) and its divisor for a typical value in ns.
fn time_unit(ns: f64) -> (&'static str, f64) {
    if ns < 1e3 {
        ("ns (GPU)", 1.0)
    } else if ns < 1e6 {
        ("µs (GPU)", 1e3)
    } else if ns < 1e9 {
        ("ms (GPU)", 1e6)
    } else {
        ("s (GPU)", 1e9)
    }
}

/// A rate's unit and divisor for `per_s` things a second, in steps of `step` (1024 for
/// bytes, as criterion scales them; else 1000).
fn rate_unit(per_s: f64, step: f64, units: [&'static str; 4]) -> (&'static str, f64) {
    let mut at = 0;
    let mut div = 1.0;
    while at < 3 && per_s >= div * step {
        at += 1;
        div *= step;
    }
    (units[at], div)
}

impl ValueFormatter for EventsFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (unit, div) = time_unit(typical);
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }

    fn scale_throughputs(
        &self,
        typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let (per, step, units) = match *throughput {
            Throughput::Bytes(b) => (b as f64, 1024.0, ["B/s", "KiB/s", "MiB/s", "GiB/s"]),
            Throughput::BytesDecimal(b) => (b as f64, 1e3, ["B/s", "KB/s", "MB/s", "GB/s"]),
            Throughput::Bits(b) => (b as f64, 1e3, ["b/s", "Kb/s", "Mb/s", "Gb/s"]),
            Throughput::Elements(e) | Throughput::ElementsAndBytes { elements: e, .. } => {
                (e as f64, 1e3, ["elem/s", "Kelem/s", "Melem/s", "Gelem/s"])
            }
        };
        let (unit, div) = rate_unit(per * 1e9 / typical, step, units);
        values.iter_mut().for_each(|v| *v = per * 1e9 / *v / div);
        unit
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_event_time_reads_as_such_in_criterions_units() {
        let f = EventsFormatter;
        let mut v = [1_500.0, 2_000.0];
        assert_eq!(f.scale_values(1_500.0, &mut v), "µs (GPU)");
        assert_eq!(v, [1.5, 2.0]);
        let mut v = [2.5e6];
        assert_eq!(f.scale_values(2.5e6, &mut v), "ms (GPU)");
        assert_eq!(v, [2.5]);
        // 1 MB in 1 ms of device time: 1 GB/s, as criterion writes bytes (binary) or
        // decimal bytes
        let mut v = [1e6];
        let unit = f.scale_throughputs(1e6, &Throughput::BytesDecimal(1_000_000), &mut v);
        assert_eq!((unit, v), ("GB/s", [1.0]));
        let mut v = [1e6];
        let unit = f.scale_throughputs(1e6, &Throughput::Bytes(1 << 30), &mut v);
        assert_eq!(unit, "GiB/s");
        assert!((v[0] - 1000.0).abs() < 1e-9, "{v:?}");
        let mut v = [1e3];
        let unit = f.scale_throughputs(1e3, &Throughput::Elements(10), &mut v);
        assert_eq!((unit, v), ("Melem/s", [10.0]));
        // the value is the device's ns, summed as durations
        let m = DeviceEvents::new(0);
        let sum = m.add(&Duration::from_nanos(700), &Duration::from_nanos(300));
        assert_eq!(m.to_f64(&sum), 1_000.0);
        assert_eq!(m.zero(), Duration::ZERO);
    }
}
