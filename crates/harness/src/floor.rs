//! The dispatch floor: `a + b` on one-element tensors, the cheapest call that launches a
//! kernel, and `transpose` of a tiny tensor, the cheapest call that launches none (a view:
//! dispatch only). Every other op's time is read against them: what an op costs above the
//! floor is work, what it costs at the floor is dispatch and launch. `opbench predict`
//! prices the kernels and views of a step that no op crate measures at these floors.

use shapes::{OpKind, Problem};
use tch::{TchError, Tensor};

use crate::op::{Failure, Op, Prepared};
use crate::{Config, DType, Device, dtype};

/// The floor as an [`Op`] (op `floor`, variants `add` and `view`, site `add1`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Floor;

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
        vec!["add", "view"]
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
        Ok(Box::new(PreparedAdd {
            a,
            b,
            view: variant == "view",
        }))
    }
}
