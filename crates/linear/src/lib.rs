//! Linear projections of a Qwen3 decoder step, at the model's real shapes.
//!
//! Variants (DESIGN.md "linear" sites):
//! - `aten`: `linear(x, w)` with `w` in PyTorch's `[out, in]` layout and no bias (Qwen3 has
//!   none), at q/k/v/o, gate/up/down and lm_head. What transformers' `nn.Linear` runs.
//! - `fused_qkv` (site `qkv_proj`): one GEMM with n = (H + 2·Hkv)·D, then the split into
//!   q, k and v views, as vLLM-style fused projections do.
//! - `fused_gate_up` (site `gate_up_proj`): one GEMM with n = 2·I, then the split into gate
//!   and up views.
//!
//! Decode is GEMV-like (m = B) and memory-bound: the weight read dominates `bytes`. Prefill
//! is a GEMM (m = B·S) and compute-bound. The `gbps` and `gflops` columns show which.
//!
//! Reference: float64 on the CPU for the first 64 rows of x and the first 4096 output
//! columns (the whole output when smaller): rows and columns of a GEMM are independent, so
//! the slice checks the same kernel at the same shape without a float64 GEMM of lm_head's
//! size on every case.

use harness::tensors::{StateCopies, f64_cpu, randn};
use harness::{DType, Device, Failure, Op, Prepared};
use shapes::{Dims, OpKind, Problem};
use tch::{TchError, Tensor};

/// The linear op.
#[derive(Debug, Clone, Copy, Default)]
pub struct Linear;

const CHECK_ROWS: i64 = 64;
const CHECK_COLS: i64 = 4096;

struct PreparedLinear {
    x: Tensor,
    w: Tensor,
    /// Output split after the GEMM (fused variants), as column counts.
    split: Option<Vec<i64>>,
    /// `w` as [`Prepared::run`] reads it (copies of it in turn in the cold modes).
    state: StateCopies,
}

impl PreparedLinear {
    fn forward(&self) -> Result<Tensor, TchError> {
        self.x.f_linear::<Tensor>(&self.w, None)
    }

    /// Rows and columns of the output the check compares.
    fn checked(&self) -> (i64, i64) {
        (
            self.x.size()[0].min(CHECK_ROWS),
            self.w.size()[0].min(CHECK_COLS),
        )
    }
}

impl Prepared for PreparedLinear {
    fn run(&mut self) -> Result<(), TchError> {
        let y = self.x.f_linear::<Tensor>(&self.state.take()[0], None)?;
        if let Some(sizes) = &self.split {
            // views only: what a fused projection's caller does next
            drop(y.f_split_with_sizes(sizes.as_slice(), -1)?);
        }
        Ok(())
    }

    fn output(&mut self) -> Result<Tensor, TchError> {
        let (rows, cols) = self.checked();
        self.forward()?.f_narrow(0, 0, rows)?.f_narrow(1, 0, cols)
    }

    fn reference(&mut self) -> Result<Tensor, TchError> {
        let (rows, cols) = self.checked();
        let x = f64_cpu(&self.x.f_narrow(0, 0, rows)?)?;
        let w = f64_cpu(&self.w.f_narrow(0, 0, cols)?)?;
        x.f_matmul(&w.f_transpose(0, 1)?)
    }

    fn state_bytes(&self) -> u64 {
        self.state.bytes()
    }

    fn spread_state(&mut self, copies: usize) -> Result<(), TchError> {
        self.state.spread(copies)
    }
}

impl Op for Linear {
    fn kind(&self) -> OpKind {
        OpKind::Linear
    }

    /// The weight.
    fn holds_state(&self, _variant: &str, _problem: &Problem) -> bool {
        true
    }

    fn variants(&self) -> Vec<&'static str> {
        vec!["aten", "fused_qkv", "fused_gate_up"]
    }

    fn applies(&self, variant: &str, problem: &Problem) -> bool {
        match variant {
            "fused_qkv" => problem.site == "qkv_proj",
            "fused_gate_up" => problem.site == "gate_up_proj",
            _ => problem.site != "qkv_proj" && problem.site != "gate_up_proj",
        }
    }

    fn prepare(
        &self,
        variant: &str,
        problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let Dims::Linear { m, n, k } = problem.dims else {
            return Err(Failure::error(format!("linear got dims {}", problem.dims)));
        };
        let (m, n, k) = (m as i64, n as i64, k as i64);
        let x = randn(&[m, k], dt, device, 1)?;
        // scaled like a trained layer so outputs stay O(1) in half precision
        let w = randn(&[n, k], dt, device, 2)?.f_mul_scalar(1.0 / (k as f64).sqrt())?;
        let split = match variant {
            "aten" => None,
            "fused_qkv" => Some(qkv_split(problem, n)?),
            "fused_gate_up" => Some(vec![n / 2, n / 2]),
            other => return Err(Failure::error(format!("unknown linear variant `{other}`"))),
        };
        Ok(Box::new(PreparedLinear {
            state: StateCopies::of(&[&w]),
            x,
            w,
            split,
        }))
    }
}

/// q, k, v column counts of a fused QKV output: H·D, Hkv·D, Hkv·D with n = (H + 2·Hkv)·D.
fn qkv_split(problem: &Problem, n: i64) -> Result<Vec<i64>, Failure> {
    let widths = shapes::ModelConfig::by_name(&problem.model)?.qkv_widths();
    if widths.iter().sum::<usize>() as i64 != n {
        return Err(Failure::error(format!(
            "qkv_proj n={n} does not match the model's heads"
        )));
    }
    Ok(widths.iter().map(|&w| w as i64).collect())
}
