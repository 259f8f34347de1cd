//! The planted slowdown reads what it plants: a host spin of a percentage of each call's
//! own time, its own clock reads inside the slowdown, not on top of it.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use harness::Device;
use harness::op::Prepared;
use harness::timing::{Mode, Plant, PlantScope, planted_total, time_calls_planted};
use tch::{TchError, Tensor};

/// A call of a fixed length: a spin of `ns` on the host, as a short dispatch-bound torch
/// call takes.
struct Spin {
    ns: u64,
}

impl Prepared for Spin {
    fn run(&mut self) -> Result<(), TchError> {
        let t = Instant::now();
        while t.elapsed() < Duration::from_nanos(self.ns) {
            std::hint::spin_loop();
        }
        Ok(())
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        Ok(Tensor::from(0.0))
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        Ok(Tensor::from(0.0))
    }
}

fn per_call(p: &mut Spin, plant: Plant, iters: u64) -> f64 {
    let t = time_calls_planted(p, Device::CPU, Mode::Pipelined, iters, None, plant).unwrap();
    t.total.as_nanos() as f64 / iters as f64
}

#[test]
fn a_ten_percent_plant_on_a_two_microsecond_call_reads_ten_percent() {
    let plant = Plant {
        ns: 0,
        pct: 10.0,
        scope: PlantScope::Torch,
    };
    let mut call = Spin { ns: 2_000 };
    // planted and not, alternating, the median of the pairs' ratios (the machine's state
    // moves both alike)
    let mut ratios: Vec<f64> = (0..41)
        .map(|_| {
            let base = per_call(&mut call, Plant::default(), 500);
            per_call(&mut call, plant, 500) / base
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    // a plant that spun 10% after its own clock reads read +16% or more here (4 reads of
    // ~40 ns on a 2-µs call)
    assert!((1.06..=1.14).contains(&median), "{median}");
}

#[test]
fn the_plants_deadline_takes_its_own_clock_reads_off() {
    let plant = Plant {
        ns: 100,
        pct: 10.0,
        scope: PlantScope::Op,
    };
    let ns = Duration::from_nanos;
    // 2100 ns between the reads around the call, 40 ns a read: the call took 2060 ns; it
    // grows by 100 ns and 206 ns; the reads outside the deadline, 60 ns, come off
    assert_eq!(
        planted_total(plant, ns(2100), ns(40)),
        ns(2060 + 100 + 206 - 60)
    );
    // a call shorter than the reads: nothing to plant beyond the fixed spin
    assert_eq!(planted_total(plant, ns(30), ns(40)), ns(100 - 60));
}
