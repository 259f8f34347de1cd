//! The build-independent host-speed control: a fixed piece of CPU work that never calls
//! torch, timed right before every sample next to the dispatch floor's control.
//!
//! The dispatch floor's `add` (the torch control) moves with the host's speed *and* with
//! the build under test: a libtorch whose every call costs 15% more makes the control 15%
//! slower too, and dividing by it hides exactly the regression a launch-bound decode feels
//! first. This control is plain Rust — a pointer chase through a 64 KiB table mixed with
//! integer hashing, the kind of work a dispatcher does (dependent loads, branches, no
//! floating point, no allocation, no system call) — so only the host can move it: a slow
//! host state, a descheduled vCPU, a lower clock. `opbench compare` takes the torch
//! control over this one, at equal host speed, as the build's own dispatch cost, and adds
//! its change between builds to every host-bound case's change against the torch control.
//!
//! This module never touches tch.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Instant;

/// Entries of the chase table (64 KiB of u32: L2-resident on every current CPU).
const TABLE: usize = 16 * 1024;
/// Steps per measurement: ~30–80 µs on current x86 and Arm cores.
const STEPS: u32 = 20_000;

/// The control's work, built once per process (a fixed permutation: every run of every
/// build does the same work).
#[derive(Debug, Clone)]
pub struct HostControl {
    next: Vec<u32>,
    steps: u32,
}

impl Default for HostControl {
    fn default() -> Self {
        Self::new()
    }
}

impl HostControl {
    /// A single-cycle permutation of the table from a fixed seed (Sattolo's algorithm), so
    /// the chase visits every entry before it repeats.
    pub fn new() -> Self {
        Self::with(TABLE, STEPS)
    }

    /// The same chase through `entries` entries, `steps` steps a pass (a probe's other
    /// sizes, `examples/state_probe.rs`).
    pub fn with(entries: usize, steps: u32) -> Self {
        let mut next: Vec<u32> = (0..entries as u32).collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in (1..entries).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let j = (x % i as u64) as usize;
            next.swap(i, j);
        }
        HostControl { next, steps }
    }

    /// The process's one control (its table is built once).
    pub fn shared() -> &'static HostControl {
        static CONTROL: OnceLock<HostControl> = OnceLock::new();
        CONTROL.get_or_init(HostControl::new)
    }

    /// One pass of the work; returns a value that depends on every step.
    pub fn work(&self) -> u64 {
        let mut at = 0u32;
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for _ in 0..self.steps {
            at = self.next[at as usize];
            h ^= u64::from(at);
            h = h.wrapping_mul(0x0100_0000_01B3);
            if h & 1 == 0 {
                h = h.rotate_left(5);
            }
        }
        h
    }

    /// The control's time in ns: the faster of two passes (the first may pay a cache
    /// refill after the sample before it).
    pub fn time_ns(&self) -> f64 {
        self.pass_ns().min(self.pass_ns())
    }

    /// One pass's time in ns.
    pub fn pass_ns(&self) -> f64 {
        let t0 = Instant::now();
        black_box(self.work());
        t0.elapsed().as_nanos() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_is_fixed_and_visits_the_whole_table() {
        let a = HostControl::new();
        let b = HostControl::new();
        assert_eq!(a.work(), b.work(), "the same work in every process");
        // a single cycle: from 0, the chase returns to 0 only after TABLE steps
        let (mut at, mut n) = (a.next[0], 1usize);
        while at != 0 {
            at = a.next[at as usize];
            n += 1;
        }
        assert_eq!(n, TABLE);
        let t = a.time_ns();
        assert!(t.is_finite() && t > 0.0, "{t}");
    }

    #[test]
    fn a_busier_host_reads_slower() {
        // the control scales with the work done: two passes take about twice one
        let c = HostControl::new();
        let one = (0..5).map(|_| c.time_ns()).fold(f64::INFINITY, f64::min);
        let t0 = Instant::now();
        for _ in 0..5 {
            black_box(c.work());
            black_box(c.work());
        }
        let two = t0.elapsed().as_nanos() as f64 / 5.0;
        assert!(two > 1.3 * one, "one {one} ns, two {two} ns");
    }
}
