//! The element-wise calls of a Qwen3 decoder step, between the ops the other crates measure,
//! at the model's real shapes and with the layouts the step hands them.
//!
//! Sites (DESIGN.md notation, T = B·q tokens):
//! - `residual_add`: `hidden + attention output` and `hidden + MLP output`, `[T, E]`, twice
//!   per layer.
//! - `silu`: `act_fn(gate)`, `[T, I]`.
//! - `swiglu_mul`: `act_fn(gate) * up`, `[T, I]`.
//! - `attn_contiguous`: `attn_output.transpose(1, 2).contiguous()` from `[B, H, q, D]`. In
//!   decode (q = 1) the transposed view is contiguous already, so the call launches no
//!   kernel and costs the host only; in prefill it is a copy.
//! - `embedding` (once per step): `embed_tokens(input_ids)`, the step's T rows gathered from
//!   the `[V, E]` table.
//! - `argmax` (once per step): the greedy choice of the next token over the last position's
//!   logits `[B, V]`.
//!
//! Variants:
//! - `aten`: contiguous inputs, as separate projections (transformers) make them.
//! - `chunk` (`silu`, `swiglu_mul`): the gate and up halves are `chunk(2, -1)` views of one
//!   fused gate_up output `[T, 2·I]`, as the fused step makes them: strided inputs, which
//!   ATen runs through its non-vectorized element-wise kernel.
//!
//! Reference: the same formula in float64 on the CPU (SiLU as `x · sigmoid(x)`; argmax's
//! indices compared as numbers, on logits with a clear winner per row).

use harness::tensors::{f64_cpu, randn};
use harness::{DType, Device, Failure, Op, Prepared};
use shapes::{Dims, OpKind, Problem};
use tch::{TchError, Tensor};

/// The element-wise op.
#[derive(Debug, Clone, Copy, Default)]
pub struct Eltwise;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Site {
    ResidualAdd,
    Silu,
    SwigluMul,
    AttnContiguous,
    Embedding,
    Argmax,
}

struct PreparedEltwise {
    site: Site,
    /// The first operand: the residual, the gate, SiLU's output, the attention output.
    a: Tensor,
    /// The second operand of a binary site (the branch's output, up); the token ids of
    /// `embedding` (whose `a` is the table).
    b: Option<Tensor>,
}

impl PreparedEltwise {
    fn second(&self) -> Result<&Tensor, TchError> {
        self.b
            .as_ref()
            .ok_or_else(|| TchError::Kind("a binary site without its second operand".into()))
    }

    fn forward(&self) -> Result<Tensor, TchError> {
        match self.site {
            Site::ResidualAdd => self.a.f_add(self.second()?),
            Site::Silu => self.a.f_silu(),
            Site::SwigluMul => self.a.f_mul(self.second()?),
            Site::AttnContiguous => self.a.f_transpose(1, 2)?.f_contiguous(),
            Site::Embedding => Tensor::f_embedding(&self.a, self.second()?, -1, false, false),
            Site::Argmax => self.a.f_argmax(-1, false),
        }
    }
}

impl Prepared for PreparedEltwise {
    fn run(&mut self) -> Result<(), TchError> {
        self.forward().map(drop)
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        self.forward()
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        let a = f64_cpu(&self.a)?;
        match self.site {
            Site::ResidualAdd => a.f_add(&f64_cpu(self.second()?)?),
            Site::Silu => a.f_mul(&a.f_sigmoid()?),
            Site::SwigluMul => a.f_mul(&f64_cpu(self.second()?)?),
            Site::AttnContiguous => a.f_transpose(1, 2)?.f_contiguous(),
            Site::Embedding => {
                let ids = self.second()?.f_to_device(tch::Device::Cpu)?;
                Tensor::f_embedding(&a, &ids, -1, false, false)
            }
            Site::Argmax => a.f_argmax(-1, false)?.f_to_kind(tch::Kind::Double),
        }
    }
}

impl Op for Eltwise {
    fn kind(&self) -> OpKind {
        OpKind::Eltwise
    }

    fn variants(&self) -> Vec<&'static str> {
        vec!["aten", "chunk"]
    }

    fn applies(&self, variant: &str, problem: &Problem) -> bool {
        variant != "chunk" || matches!(problem.site, "silu" | "swiglu_mul")
    }

    fn prepare(
        &self,
        variant: &str,
        problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let (site, chunk) = site_of(variant, problem)?;
        let t = problem.batch.saturating_mul(problem.q_len).max(1);
        // the `[T, width]` rows of an element-wise site's `numel` elements
        let rows = |numel: usize| -> Result<(i64, i64), Failure> {
            if numel % t != 0 {
                return Err(Failure::error(format!(
                    "eltwise {}: {numel} elements are not {t} tokens' rows",
                    problem.site
                )));
            }
            Ok((t as i64, (numel / t) as i64))
        };
        // the gate and up halves of one fused gate_up output, or two separate outputs
        let pair = |numel: usize, seed: i64| -> Result<(Tensor, Tensor), Failure> {
            let (t, width) = rows(numel)?;
            if chunk {
                let both = randn(&[t, 2 * width], dt, device, seed)?;
                let mut halves = both.f_chunk(2, -1)?;
                let up = halves.pop();
                let gate = halves.pop();
                match (gate, up) {
                    (Some(g), Some(u)) => Ok((g, u)),
                    _ => Err(Failure::error("chunk(2) gave fewer than two halves")),
                }
            } else {
                Ok((
                    randn(&[t, width], dt, device, seed)?,
                    randn(&[t, width], dt, device, seed + 1)?,
                ))
            }
        };
        let (a, b) = match (site, problem.dims) {
            (Site::ResidualAdd, Dims::Elementwise { numel }) => {
                let (a, b) = pair(numel, 21)?;
                (a, Some(b))
            }
            (Site::Silu, Dims::Unary { numel }) => (pair(numel, 23)?.0, None),
            (Site::SwigluMul, Dims::Elementwise { numel }) => {
                let (gate, up) = pair(numel, 25)?;
                // SiLU's output is a fresh contiguous tensor in both steps
                (gate.f_silu()?, Some(up))
            }
            // counts the elements it copies (none at q = 1); its shape is the model's
            (Site::AttnContiguous, Dims::Copy { numel }) => {
                let cfg = shapes::ModelConfig::by_name(&problem.model)?;
                let (h, d) = (cfg.num_attention_heads as i64, cfg.head_dim as i64);
                let (b, q) = (problem.batch as i64, problem.q_len as i64);
                if numel != 0 && numel as i64 != b * q * h * d {
                    return Err(Failure::error(format!(
                        "attn_contiguous: {numel} elements are not the model's B·q·H·D"
                    )));
                }
                (randn(&[b, h, q, d], dt, device, 27)?, None)
            }
            // `rows` token rows gathered from the `[V, width]` table
            (Site::Embedding, Dims::Gather { rows, width }) => {
                let vocab = shapes::ModelConfig::by_name(&problem.model)?.vocab_size as i64;
                let table = randn(&[vocab, width as i64], dt, device, 29)?;
                tch::manual_seed(30);
                let ids =
                    Tensor::f_randint(vocab, [rows as i64], (tch::Kind::Int64, device.tch()))?;
                (table, Some(ids))
            }
            // logits with one clear winner per row, so the reference cannot tie in float64
            // where the rounded dtype does
            (Site::Argmax, Dims::Reduce { rows, width }) => {
                let (rows, width) = (rows as i64, width as i64);
                let logits = randn(&[rows, width], dt, device, 31)?;
                tch::manual_seed(32);
                let win = Tensor::f_randint(width, [rows, 1], (tch::Kind::Int64, device.tch()))?;
                let bump = Tensor::f_full([rows, 1], 100.0, (logits.kind(), device.tch()))?;
                (logits.f_scatter(-1, &win, &bump)?, None)
            }
            (_, dims) => {
                return Err(Failure::error(format!(
                    "eltwise {} got dims {dims}",
                    problem.site
                )));
            }
        };
        Ok(Box::new(PreparedEltwise { site, a, b }))
    }
}

/// The site a case times and whether its gate and up come as the halves of one fused
/// output (`chunk`), each checked against the variant.
fn site_of(variant: &str, problem: &Problem) -> Result<(Site, bool), Failure> {
    let chunk = match variant {
        "aten" => false,
        "chunk" => true,
        other => return Err(Failure::error(format!("unknown eltwise variant `{other}`"))),
    };
    let site = match problem.site {
        "residual_add" => Site::ResidualAdd,
        "silu" => Site::Silu,
        "swiglu_mul" => Site::SwigluMul,
        "attn_contiguous" => Site::AttnContiguous,
        "embedding" => Site::Embedding,
        "argmax" => Site::Argmax,
        other => return Err(Failure::error(format!("unknown eltwise site `{other}`"))),
    };
    if chunk && !matches!(site, Site::Silu | Site::SwigluMul) {
        return Err(Failure::error(format!(
            "`chunk` is the fused step's SiLU and product, not `{}`",
            problem.site
        )));
    }
    Ok((site, chunk))
}
