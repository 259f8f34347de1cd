//! Ceilings: what this device really does, measured in the run, so a row's `gbps` and
//! `gflops` can be read as a fraction of it. `copy`: a 64 Mi-element device-to-device copy
//! (bytes read + written); `gemm`: a 4096³ matrix product in the run's dtype.

use shapes::{Dims, OpKind, Problem};
use tch::{TchError, Tensor};

use crate::op::{Failure, Op, Prepared};
use crate::tensors::{f64_cpu, randn};
use crate::{Config, DType, Device};

/// The ceiling probes as an [`Op`] (op `ceiling`, variants `copy` and `gemm`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Ceiling;

struct PreparedCeiling {
    a: Tensor,
    b: Tensor,
    gemm: bool,
}

impl Prepared for PreparedCeiling {
    fn run(&mut self) -> Result<(), TchError> {
        if self.gemm {
            self.a.f_matmul(&self.b).map(drop)
        } else {
            self.b.f_copy_(&self.a)
        }
    }
    // a slice is enough: rows of a product and elements of a copy are independent
    fn output(&mut self) -> Result<Tensor, TchError> {
        if self.gemm {
            self.a.f_matmul(&self.b)?.f_narrow(0, 0, 16)
        } else {
            self.b.f_copy_(&self.a)?;
            self.b.f_narrow(0, 0, 1 << 20)
        }
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        if self.gemm {
            f64_cpu(&self.a.f_narrow(0, 0, 16)?)?.f_matmul(&f64_cpu(&self.b)?)
        } else {
            f64_cpu(&self.a.f_narrow(0, 0, 1 << 20)?)
        }
    }
}

impl Op for Ceiling {
    fn kind(&self) -> OpKind {
        OpKind::Ceiling
    }
    fn variants(&self) -> Vec<&'static str> {
        vec!["copy", "gemm"]
    }
    fn problems(&self, _config: &Config) -> Vec<Problem> {
        Problem::ceilings()
    }
    fn applies(&self, variant: &str, problem: &Problem) -> bool {
        variant == problem.site
    }
    fn prepare(
        &self,
        _variant: &str,
        problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        match problem.dims {
            Dims::Copy { numel } => {
                let a = randn(&[numel as i64], dt, device, 11)?;
                let b = a.f_zeros_like()?;
                Ok(Box::new(PreparedCeiling { a, b, gemm: false }))
            }
            Dims::Linear { m, n, k } => {
                let a = randn(&[m as i64, k as i64], dt, device, 12)?;
                let b = randn(&[k as i64, n as i64], dt, device, 13)?
                    .f_mul_scalar(1.0 / (k as f64).sqrt())?;
                Ok(Box::new(PreparedCeiling { a, b, gemm: true }))
            }
            d => Err(Failure::error(format!("ceiling got dims {d}"))),
        }
    }
}
