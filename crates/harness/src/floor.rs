//! The dispatch floor: `a + b` on one-element tensors, the cheapest call there is. Every
//! other op's time is read against it: what an op costs above the floor is work, what it
//! costs at the floor is dispatch and launch.

use shapes::{OpKind, Problem};
use tch::{TchError, Tensor};

use crate::op::{Check, Failure, Op, Prepared};
use crate::{Config, DType, Device, dtype};

/// The floor as an [`Op`] (op `floor`, variant `add`, site `add1`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Floor;

struct PreparedAdd {
    a: Tensor,
    b: Tensor,
}

impl Prepared for PreparedAdd {
    fn run(&mut self) -> Result<(), TchError> {
        self.a.f_add(&self.b).map(drop)
    }
    fn check(&mut self) -> Result<Check, TchError> {
        let output = self.a.f_add(&self.b)?;
        let cpu = |t: &Tensor| {
            t.f_to_device(tch::Device::Cpu)?
                .f_to_kind(tch::Kind::Double)
        };
        let reference = cpu(&self.a)?.f_add(&cpu(&self.b)?)?;
        Ok(Check { output, reference })
    }
}

impl Op for Floor {
    fn kind(&self) -> OpKind {
        OpKind::Floor
    }
    fn variants(&self) -> Vec<&'static str> {
        vec!["add"]
    }
    fn problems(&self, _config: &Config) -> Vec<Problem> {
        vec![Problem::floor()]
    }
    fn prepare(
        &self,
        _variant: &str,
        _problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let opts = (dtype::kind(dt), device.tch());
        let a = Tensor::f_full([1], 1.5, opts)?;
        let b = Tensor::f_full([1], 0.25, opts)?;
        Ok(Box::new(PreparedAdd { a, b }))
    }
}
