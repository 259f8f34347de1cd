//! RMSNorm of a Qwen3 decoder step: the input and post-attention norms over E, the final
//! norm, and q_norm / k_norm over each head's D.
//!
//! Variants:
//! - `hf`: transformers' `Qwen3RMSNorm.forward`, op for op: upcast to float32,
//!   `pow(2).mean(-1, keepdim)`, `+ eps`, `rsqrt`, multiply, cast back, multiply by the
//!   weight. Several kernels, as users run it today.
//! - `aten`: `rms_norm(x, [width], weight, eps)`.
//! - `aten_split` (q_norm, k_norm): `aten` over q (k) as the fused step gets them: a
//!   `[T, heads, D]` view of the fused QKV projection's `[T, (H + 2·Hkv)·D]` output, which
//!   is not contiguous; whatever ATen does about that (a copy first) is part of the call.
//! - `fused`: `_fused_rms_norm(x, [width], weight, eps)` where the build has it; an
//!   `unsupported` row with PyTorch's message where it does not.
//!
//! Reference: float64 on the CPU over the whole tensor, `x · rsqrt(mean(x²) + eps) · w`.

use harness::tensors::{f64_cpu, near_one, randn};
use harness::{DType, Device, Failure, Op, Prepared};
use shapes::{Dims, OpKind, Problem};
use tch::{Kind, TchError, Tensor};

/// transformers' `Qwen3RMSNorm.forward`, op for op: upcast to float32, `pow(2).mean(-1,
/// keepdim)`, `+ eps`, `rsqrt`, multiply, cast back, multiply by the weight.
pub fn hf(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor, TchError> {
    let input_kind = x.kind();
    let h = x.f_to_kind(Kind::Float)?;
    let var = h
        .f_pow_tensor_scalar(2)?
        .f_mean_dim(-1, true, None::<Kind>)?;
    let h = h.f_mul(&var.f_add_scalar(eps)?.f_rsqrt()?)?;
    w.f_mul(&h.f_to_kind(input_kind)?)
}

/// ATen's one-call `rms_norm` over the last dimension.
pub fn aten(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor, TchError> {
    let width = *x.size().last().unwrap_or(&1);
    x.f_rms_norm([width], Some(w), eps)
}

/// The reference formula, `x · rsqrt(mean(x²) + eps) · w`, in the inputs' own dtype (the
/// checks pass float64).
pub fn reference(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor, TchError> {
    let ms = x
        .f_pow_tensor_scalar(2)?
        .f_mean_dim(-1, true, None::<Kind>)?;
    x.f_mul(&ms.f_add_scalar(eps)?.f_rsqrt()?)?.f_mul(w)
}

/// The RMSNorm op.
#[derive(Debug, Clone, Copy, Default)]
pub struct RmsNorm;

#[derive(Clone, Copy)]
enum Variant {
    Hf,
    Aten,
    AtenSplit,
    Fused,
}

struct PreparedNorm {
    x: Tensor,
    w: Tensor,
    eps: f64,
    variant: Variant,
}

impl PreparedNorm {
    fn forward(&self) -> Result<Tensor, TchError> {
        let width = *self.x.size().last().unwrap_or(&1);
        match self.variant {
            Variant::Hf => hf(&self.x, &self.w, self.eps),
            Variant::Aten | Variant::AtenSplit => aten(&self.x, &self.w, self.eps),
            Variant::Fused => Ok(self
                .x
                .f_internal_fused_rms_norm([width], Some(&self.w), self.eps)?
                .0),
        }
    }
}

impl Prepared for PreparedNorm {
    fn run(&mut self) -> Result<(), TchError> {
        self.forward().map(drop)
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        self.forward()
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        reference(&f64_cpu(&self.x)?, &f64_cpu(&self.w)?, self.eps)
    }
}

impl Op for RmsNorm {
    fn kind(&self) -> OpKind {
        OpKind::RmsNorm
    }

    fn variants(&self) -> Vec<&'static str> {
        vec!["hf", "aten", "aten_split", "fused"]
    }

    fn applies(&self, variant: &str, problem: &Problem) -> bool {
        variant != "aten_split" || matches!(problem.site, "q_norm" | "k_norm")
    }

    fn prepare(
        &self,
        variant: &str,
        problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let Dims::Norm { rows, width } = problem.dims else {
            return Err(Failure::error(format!("rmsnorm got dims {}", problem.dims)));
        };
        let variant = match variant {
            "hf" => Variant::Hf,
            "aten" => Variant::Aten,
            "aten_split" => Variant::AtenSplit,
            "fused" => Variant::Fused,
            other => return Err(Failure::error(format!("unknown rmsnorm variant `{other}`"))),
        };
        let x = match variant {
            Variant::AtenSplit => split_view(problem, rows, width, dt, device)?,
            _ => randn(&[rows as i64, width as i64], dt, device, 3)?,
        };
        let w = near_one(&[width as i64], 0.1, dt, device, 4)?;
        Ok(Box::new(PreparedNorm {
            x,
            w,
            eps: problem.eps,
            variant,
        }))
    }
}

/// q (site `q_norm`) or k (`k_norm`) as the fused step hands them to the norm: `[T, heads,
/// D]`, a view of the columns of a fused QKV output `[T, (H + 2·Hkv)·D]`.
fn split_view(
    problem: &Problem,
    rows: usize,
    width: usize,
    dt: DType,
    device: Device,
) -> Result<Tensor, Failure> {
    let cfg = shapes::ModelConfig::by_name(&problem.model)?;
    let widths = cfg.qkv_widths();
    let [q, k, _] = widths;
    // the columns the site's heads take in the fused output
    let (first, cols) = match problem.site {
        "q_norm" => (0, q),
        "k_norm" => (q, k),
        other => {
            return Err(Failure::error(format!(
                "aten_split is the fused step's q_norm / k_norm, not `{other}`"
            )));
        }
    };
    let heads = cols / cfg.head_dim;
    if width != cfg.head_dim || rows % heads != 0 {
        return Err(Failure::error(format!(
            "{} rows={rows} width={width} does not match the model's heads",
            problem.site
        )));
    }
    let t = (rows / heads) as i64;
    let all = randn(&[t, widths.iter().sum::<usize>() as i64], dt, device, 3)?;
    Ok(all
        .f_narrow(1, first as i64, cols as i64)?
        .f_view([t, heads as i64, width as i64])?)
}
