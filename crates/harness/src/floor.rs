//! The dispatch floor: `a + b` on one-element tensors, the cheapest call that launches a
//! kernel, and `transpose` of a tiny tensor, the cheapest call that launches none (a view:
//! dispatch only). Every other op's time is read against them: what an op costs above the
//! floor is work, what it costs at the floor is dispatch and launch. `opbench predict`
//! prices the kernels and views of a step that no op crate measures at these floors.
//!
//! `mixed` and `blocked` measure what a call costs the host inside a step of different ops
//! against repeated alone: both make the same eight kinds of one-element call a decoder
//! layer makes ([`MIX`]: add, mul, neg, rsqrt, SiLU, cat, mean, a 1×8·8×8 linear) equally
//! often — [`ROUNDS`] of each per timed unit; `blocked` makes each kind's calls in a row
//! (each call as an op case's tight loop sees it), `mixed` switches kind on every call (as
//! a step does). In `graph` mode their difference is the device's cost of switching
//! kernels, which `opbench predict` adds per kernel call; in `pipelined` mode their ratio is
//! the host's context factor (`predict --host-model context`).

use shapes::{OpKind, Problem};
use tch::{TchError, Tensor};

use crate::op::{Failure, Op, Prepared};
use crate::{Config, DType, Device, dtype};

/// The floor as an [`Op`] (op `floor`, variants `add` and `view`, site `add1`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Floor;

/// The kinds of one-element call `mixed` and `blocked` make, in order.
pub const MIX: [&str; 8] = [
    "add", "mul", "neg", "rsqrt", "silu", "cat", "mean", "linear",
];

/// Calls of each kind per timed unit (one [`Prepared::run`]) of `mixed` and `blocked`.
pub const ROUNDS: usize = 64;

/// One call of kind `i` of [`MIX`] on `a`, `b` (`[1, 1]`), `x` (`[1, 8]`), `w` (`[8, 8]`).
fn mix_call(i: usize, a: &Tensor, b: &Tensor, x: &Tensor, w: &Tensor) -> Result<Tensor, TchError> {
    match i % MIX.len() {
        0 => a.f_add(b),
        1 => a.f_mul(b),
        2 => a.f_neg(),
        3 => b.f_rsqrt(),
        4 => a.f_silu(),
        5 => Tensor::f_cat(&[a, b], 1),
        6 => x.f_mean_dim(-1, true, None::<tch::Kind>),
        _ => x.f_linear::<Tensor>(w, None),
    }
}

struct PreparedMix {
    t: [Tensor; 4],
    /// Switch kind on every call (`mixed`), or make each kind's calls in a row (`blocked`).
    mixed: bool,
}

impl PreparedMix {
    /// Every kind once, flattened and concatenated (what the check compares).
    fn all(t: &[Tensor; 4]) -> Result<Tensor, TchError> {
        let outs = (0..MIX.len())
            .map(|i| mix_call(i, &t[0], &t[1], &t[2], &t[3])?.f_reshape([-1]))
            .collect::<Result<Vec<_>, _>>()?;
        Tensor::f_cat(&outs, 0)
    }
}

impl Prepared for PreparedMix {
    fn run(&mut self) -> Result<(), TchError> {
        let [a, b, x, w] = &self.t;
        for c in 0..ROUNDS * MIX.len() {
            let kind = if self.mixed { c } else { c / ROUNDS };
            drop(mix_call(kind, a, b, x, w)?);
        }
        Ok(())
    }
    fn calls_per_run(&self) -> u64 {
        (ROUNDS * MIX.len()) as u64
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        Self::all(&self.t)
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        let [a, b, x, w] = &self.t;
        let cpu = crate::tensors::f64_cpu;
        Self::all(&[cpu(a)?, cpu(b)?, cpu(x)?, cpu(w)?])
    }
    fn note(&self) -> Option<String> {
        Some(format!(
            "{ROUNDS} calls of each of {} kinds of one-element call ({}) per timed unit, {}",
            MIX.len(),
            MIX.join(", "),
            if self.mixed {
                "switching kind on every call".to_string()
            } else {
                format!("{ROUNDS} calls of a kind in a row")
            }
        ))
    }
}

struct PreparedAdd {
    a: Tensor,
    b: Tensor,
    view: bool,
}

impl PreparedAdd {
    fn forward(&self) -> Result<Tensor, TchError> {
        if self.view {
            // metadata only: no kernel, no storage allocated
            self.a.f_transpose(0, 1)
        } else {
            self.a.f_add(&self.b)
        }
    }
}

impl Prepared for PreparedAdd {
    fn run(&mut self) -> Result<(), TchError> {
        self.forward().map(drop)
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        self.forward()
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        let cpu = |t: &Tensor| {
            t.f_to_device(tch::Device::Cpu)?
                .f_to_kind(tch::Kind::Double)
        };
        if self.view {
            cpu(&self.a)?.f_transpose(0, 1)
        } else {
            cpu(&self.a)?.f_add(&cpu(&self.b)?)
        }
    }
}

impl Op for Floor {
    fn kind(&self) -> OpKind {
        OpKind::Floor
    }
    fn variants(&self) -> Vec<&'static str> {
        vec!["add", "view", "mixed", "blocked"]
    }
    fn problems(&self, _config: &Config) -> Vec<Problem> {
        vec![Problem::floor()]
    }
    fn prepare(
        &self,
        variant: &str,
        _problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let opts = (dtype::kind(dt), device.tch());
        let a = Tensor::f_full([1, 1], 1.5, opts)?;
        let b = Tensor::f_full([1, 1], 0.25, opts)?;
        match variant {
            "add" | "view" => Ok(Box::new(PreparedAdd {
                a,
                b,
                view: variant == "view",
            })),
            "mixed" | "blocked" => {
                let x = crate::tensors::randn(&[1, 8], dt, device, 31)?;
                let w = crate::tensors::randn(&[8, 8], dt, device, 32)?.f_mul_scalar(0.35)?;
                Ok(Box::new(PreparedMix {
                    t: [a, b, x, w],
                    mixed: variant == "mixed",
                }))
            }
            other => Err(Failure::error(format!("unknown floor variant `{other}`"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mixed` and `blocked` check against float64 like every case, and time the same calls.
    #[test]
    fn mixed_and_blocked_make_the_same_checked_calls() {
        for v in ["mixed", "blocked"] {
            let mut p = Floor
                .prepare(v, &Problem::floor(), DType::F32, Device::CPU)
                .unwrap();
            let err = crate::rel_err(&p.check().unwrap()).unwrap();
            assert!(err < 1e-6, "{v} {err}");
            assert_eq!(p.calls_per_run(), (ROUNDS * MIX.len()) as u64);
            p.run().unwrap();
            assert!(p.note().unwrap().contains("8 kinds"), "{:?}", p.note());
        }
        assert!(
            Floor
                .prepare("tiny", &Problem::floor(), DType::F32, Device::CPU)
                .is_err()
        );
    }
}
