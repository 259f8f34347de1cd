//! Rotary position embedding of a Qwen3 decoder step (q and k, after q_norm / k_norm), and
//! the cos/sin table the model builds once per forward.
//!
//! Variants:
//! - `rotate_half` (sites `q`, `k`): transformers' `apply_rotary_pos_emb`:
//!   `x·cos + rotate_half(x)·sin` with `rotate_half(x) = cat(−x[D/2:], x[:D/2])` and cos/sin
//!   of shape `[B, 1, q, D]` built as the model builds them (dtype of the activations).
//! - `halves` (sites `q`, `k`): no concatenation: the two halves are written straight into a
//!   preallocated output, `o₁ = x₁·c − x₂·s`, `o₂ = x₂·c + x₁·s`, with `mul(out=)` and
//!   `addcmul_`, from a table whose sine has its first half negated (built once per
//!   forward, like the model's table).
//! - `hf` (site `cache`): `Qwen3RotaryEmbedding.forward`: `inv_freq ⊗ positions`,
//!   `cat(freqs, freqs)`, `cos`, `sin`, cast to the activation dtype.
//!
//! Positions are L..L+q for each sequence, θ from the model file. Reference: float64 on the
//! CPU from the positions and θ directly (so the table is checked too).

use harness::tensors::{f64_cpu, randn};
use harness::{DType, Device, Failure, Op, Prepared, dtype};
use shapes::{Dims, OpKind, Problem};
use tch::{Kind, TchError, Tensor};

/// The RoPE op.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rope;

/// `1 / θ^(2i/D)` for i in 0..D/2, in float32 as transformers keeps `inv_freq`.
fn inv_freq(theta: f64, d: i64, device: tch::Device) -> Result<Tensor, TchError> {
    let exps =
        Tensor::f_arange_start_step(0, d, 2, (Kind::Float, device))?.f_div_scalar(d as f64)?;
    Tensor::f_full([d / 2], theta, (Kind::Float, device))?
        .f_pow(&exps)?
        .f_reciprocal()
}

/// Positions `[B, q]`, all sequences at L..L+q.
fn positions(b: i64, q: i64, l: i64, device: tch::Device) -> Result<Tensor, TchError> {
    Tensor::f_arange_start(l, l + q, (Kind::Int64, device))?
        .f_unsqueeze(0)?
        .f_expand([b, q], false)
}

/// cos and sin `[B, q, D]` as `Qwen3RotaryEmbedding.forward` computes them.
fn hf_table(inv: &Tensor, pos: &Tensor, kind: Kind) -> Result<(Tensor, Tensor), TchError> {
    let b = pos.size()[0];
    let inv_e = inv
        .f_unsqueeze(0)?
        .f_unsqueeze(-1)?
        .f_expand([b, -1, 1], false)?;
    let pos_e = pos.f_unsqueeze(1)?.f_to_kind(Kind::Float)?;
    let freqs = inv_e.f_matmul(&pos_e)?.f_transpose(1, 2)?;
    let emb = Tensor::f_cat(&[&freqs, &freqs], -1)?;
    Ok((emb.f_cos()?.f_to_kind(kind)?, emb.f_sin()?.f_to_kind(kind)?))
}

/// The float64 reference table `[B, q, D]` (duplicated halves).
fn ref_table(theta: f64, d: i64, b: i64, q: i64, l: i64) -> Result<(Tensor, Tensor), TchError> {
    let cpu = tch::Device::Cpu;
    let exps = Tensor::f_arange_start_step(0, d, 2, (Kind::Double, cpu))?.f_div_scalar(d as f64)?;
    let inv = Tensor::f_full([d / 2], theta, (Kind::Double, cpu))?
        .f_pow(&exps)?
        .f_reciprocal()?;
    let pos = Tensor::f_arange_start(l, l + q, (Kind::Double, cpu))?;
    let freqs = pos.f_outer(&inv)?;
    let emb = Tensor::f_cat(&[&freqs, &freqs], -1)?
        .f_unsqueeze(0)?
        .f_expand([b, q, d], false)?;
    Ok((emb.f_cos()?, emb.f_sin()?))
}

/// transformers' `rotate_half`: `cat(-x2, x1)` of the two halves of the last dimension.
pub fn rotate_half(x: &Tensor) -> Result<Tensor, TchError> {
    let d = *x.size().last().unwrap_or(&0);
    let x1 = x.f_narrow(-1, 0, d / 2)?;
    let x2 = x.f_narrow(-1, d / 2, d / 2)?;
    Tensor::f_cat(&[&x2.f_neg()?, &x1], -1)
}

enum Prep {
    RotateHalf {
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
    },
    Halves {
        x1: Tensor,
        x2: Tensor,
        c1: Tensor,
        c2: Tensor,
        s1_neg: Tensor,
        s2: Tensor,
        out: Tensor,
        o1: Tensor,
        o2: Tensor,
    },
    Table {
        inv: Tensor,
        pos: Tensor,
        kind: Kind,
    },
}

struct PreparedRope {
    prep: Prep,
    /// Input `[B, h, q, D]` (none for the table).
    x: Option<Tensor>,
    theta: f64,
    l: i64,
}

impl PreparedRope {
    /// One call: the new tensor it returns, or `None` when the result is written into the
    /// preallocated `out` (so the timed call allocates no extra handle).
    fn forward(&mut self) -> Result<Option<Tensor>, TchError> {
        match &mut self.prep {
            Prep::RotateHalf { x, cos, sin } => {
                x.f_mul(cos)?.f_add(&rotate_half(x)?.f_mul(sin)?).map(Some)
            }
            Prep::Halves {
                x1,
                x2,
                c1,
                c2,
                s1_neg,
                s2,
                o1,
                o2,
                ..
            } => {
                // the returned handles alias o1 / o2; dropping them frees no storage
                drop(x1.f_mul_out(o1, c1)?);
                drop(o1.f_addcmul_(x2, s1_neg)?);
                drop(x2.f_mul_out(o2, c2)?);
                drop(o2.f_addcmul_(x1, s2)?);
                Ok(None)
            }
            Prep::Table { inv, pos, kind } => {
                let (cos, sin) = hf_table(inv, pos, *kind)?;
                // one tensor out, so the check can compare both
                Tensor::f_cat(&[&cos, &sin], -1).map(Some)
            }
        }
    }

    /// One call's result as a tensor, for the check.
    fn result(&mut self) -> Result<Tensor, TchError> {
        match (self.forward()?, &self.prep) {
            (Some(t), _) => Ok(t),
            (None, Prep::Halves { out, .. }) => Ok(out.shallow_clone()),
            (None, _) => Err(TchError::Kind("rope: no output".into())),
        }
    }
}

impl Prepared for PreparedRope {
    fn run(&mut self) -> Result<(), TchError> {
        self.forward().map(drop)
    }

    fn output(&mut self) -> Result<Tensor, TchError> {
        self.result()
    }

    fn reference(&mut self) -> Result<Tensor, TchError> {
        Ok(match &self.x {
            Some(x) => {
                let s = x.size();
                let (b, q, d) = (s[0], s[2], s[3]);
                let (cos, sin) = ref_table(self.theta, d, b, q, self.l)?;
                let (cos, sin) = (cos.f_unsqueeze(1)?, sin.f_unsqueeze(1)?);
                let x = f64_cpu(x)?;
                x.f_mul(&cos)?.f_add(&rotate_half(&x)?.f_mul(&sin)?)?
            }
            None => {
                let Prep::Table { pos, inv, .. } = &self.prep else {
                    return Err(TchError::Kind("rope: table without positions".into()));
                };
                let (b, q) = (pos.size()[0], pos.size()[1]);
                let d = 2 * inv.size()[0];
                let (cos, sin) = ref_table(self.theta, d, b, q, self.l)?;
                Tensor::f_cat(&[&cos, &sin], -1)?
            }
        })
    }
}

impl Op for Rope {
    fn kind(&self) -> OpKind {
        OpKind::Rope
    }

    fn variants(&self) -> Vec<&'static str> {
        vec!["rotate_half", "halves", "hf"]
    }

    fn applies(&self, variant: &str, problem: &Problem) -> bool {
        (variant == "hf") == (problem.site == "cache")
    }

    fn prepare(
        &self,
        variant: &str,
        problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let Dims::Rope {
            batch,
            heads,
            seq,
            head_dim,
        } = problem.dims
        else {
            return Err(Failure::error(format!("rope got dims {}", problem.dims)));
        };
        let (b, h, q, d) = (batch as i64, heads as i64, seq as i64, head_dim as i64);
        let l = problem.cache_len as i64;
        let dev = device.tch();
        let kind = dtype::kind(dt);
        let inv = inv_freq(problem.rope_theta, d, dev)?;
        let pos = positions(b, q, l, dev)?;
        let (prep, x) = match variant {
            "hf" => (Prep::Table { inv, pos, kind }, None),
            "rotate_half" | "halves" => {
                let (cos, sin) = hf_table(&inv, &pos, kind)?;
                let (cos, sin) = (cos.f_unsqueeze(1)?, sin.f_unsqueeze(1)?);
                // q/k come out of q_norm as [B, q, h, D] and are transposed, as in the model
                let x = randn(&[b, q, h, d], dt, device, 5)?.f_transpose(1, 2)?;
                let prep = if variant == "rotate_half" {
                    Prep::RotateHalf {
                        x: x.shallow_clone(),
                        cos,
                        sin,
                    }
                } else {
                    let half = |t: &Tensor, i: i64| t.f_narrow(-1, i * (d / 2), d / 2);
                    let out = Tensor::f_empty([b, h, q, d], (kind, dev))?;
                    Prep::Halves {
                        x1: half(&x, 0)?,
                        x2: half(&x, 1)?,
                        c1: half(&cos, 0)?,
                        c2: half(&cos, 1)?,
                        s1_neg: half(&sin, 0)?.f_neg()?,
                        s2: half(&sin, 1)?,
                        o1: half(&out, 0)?,
                        o2: half(&out, 1)?,
                        out,
                    }
                };
                (prep, Some(x))
            }
            other => return Err(Failure::error(format!("unknown rope variant `{other}`"))),
        };
        Ok(Box::new(PreparedRope {
            prep,
            x,
            theta: problem.rope_theta,
            l,
        }))
    }
}
