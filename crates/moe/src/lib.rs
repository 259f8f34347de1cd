//! The routed experts of a Qwen3 MoE layer (Qwen3-30B-A3B, Qwen3-235B-A22B; issue 33): T
//! tokens, each sent to its k experts with its routing weight, every expert a SwiGLU MLP
//! (`gate_up` [2I, E], `down` [E, I], as transformers 5.x stores them), the k outputs
//! weighted and added back into the token's row. Sites (shapes::moe): `experts` under
//! uniform random routing (seed 7: each token's k distinct experts drawn uniformly; the
//! note gives the experts actually hit), `experts_worst` with every token on experts 0..k.
//! Only the experts hit hold weights.
//!
//! Variants:
//! - `loop`: a per-expert loop from tch, as transformers' experts module runs it once the
//!   routing is known: for each expert hit, `index_select` its tokens, `linear` by its
//!   gate_up, `chunk`, `silu(gate) · up`, `linear` by its down, times the routing weights,
//!   `index_add_` into the output. The routing lives on the host (no sync per call, unlike
//!   transformers' `nonzero` over the expert mask, which the peer measures).
//! - `grouped`: the same as two grouped GEMMs (`torch._grouped_mm` over the tokens sorted
//!   by expert, one group per expert hit), as transformers' `grouped_mm` experts
//!   implementation runs them. Where the build and device have it: transformers 5.17's
//!   integrations/moe.py says torch ≥ 2.9 has a CPU kernel and runs it on CUDA SM80+
//!   (≤ 2.8: Hopper only); torch 2.11 ran it here on the CPU. A build without it gets a row
//!   that says why (`unsupported` or `error`, libtorch's message). Not run on ROCm.
//!
//! Reference: float64 on the CPU, the same routing, expert by expert.

use harness::tensors::{StateCopies, f64_cpu, randn};
use harness::{DType, Device, Failure, Op, Prepared};
use shapes::moe::Routing;
use shapes::{Dims, OpKind, Problem};
use tch::{Kind, TchError, Tensor};

/// The routing of `tokens` tokens to `top_k` of `experts` experts each: per token its
/// experts, distinct. Uniform: drawn from a fixed seed (xorshift, a partial shuffle per
/// token); worst: experts 0..k for every token.
pub fn route(tokens: usize, experts: usize, top_k: usize, routing: Routing) -> Vec<Vec<usize>> {
    let top_k = top_k.min(experts);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ 7;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..tokens)
        .map(|_| match routing {
            Routing::Worst => (0..top_k).collect(),
            Routing::Uniform => {
                let mut all: Vec<usize> = (0..experts).collect();
                for i in 0..top_k {
                    let j = i + (next() % (experts - i) as u64) as usize;
                    all.swap(i, j);
                }
                all.truncate(top_k);
                all
            }
        })
        .collect()
}

/// The routed-experts op.
#[derive(Debug, Clone, Copy, Default)]
pub struct Moe;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Loop,
    Grouped,
}

/// One expert hit: its tokens (rows of x) and their routing weights, on the device.
struct Expert {
    tokens: Tensor,
    weights: Tensor,
}

struct PreparedMoe {
    x: Tensor,
    /// gate_up [h, 2I, E] and down [h, E, I] of the h experts hit, in `experts` order.
    state: StateCopies,
    experts: Vec<Expert>,
    /// Grouped: the routed rows sorted by expert, their weights, and the groups' ends.
    sorted_tokens: Tensor,
    sorted_weights: Tensor,
    offsets: Tensor,
    variant: Variant,
    hit: usize,
    expected_hit: usize,
}

impl PreparedMoe {
    fn forward_with(&self, gate_up: &Tensor, down: &Tensor) -> Result<Tensor, TchError> {
        let mut out = self.x.f_zeros_like()?;
        match self.variant {
            Variant::Loop => {
                for (j, e) in self.experts.iter().enumerate() {
                    let xs = self.x.f_index_select(0, &e.tokens)?;
                    let gu = xs.f_linear(&gate_up.get(j as i64), None::<Tensor>)?;
                    let h = swiglu(&gu)?;
                    let y = h.f_linear(&down.get(j as i64), None::<Tensor>)?;
                    let y = y.f_mul(&e.weights)?;
                    drop(out.f_index_add_(0, &e.tokens, &y)?);
                }
                Ok(out)
            }
            Variant::Grouped => {
                let xs = self.x.f_index_select(0, &self.sorted_tokens)?;
                let gu = xs.f_internal_grouped_mm(
                    &gate_up.f_transpose(-2, -1)?,
                    Some(&self.offsets),
                    None::<&Tensor>,
                    None::<Kind>,
                )?;
                let h = swiglu(&gu)?;
                let y = h.f_internal_grouped_mm(
                    &down.f_transpose(-2, -1)?,
                    Some(&self.offsets),
                    None::<&Tensor>,
                    None::<Kind>,
                )?;
                let y = y.f_mul(&self.sorted_weights)?;
                drop(out.f_index_add_(0, &self.sorted_tokens, &y)?);
                Ok(out)
            }
        }
    }

    /// The next copy of the weights: gate_up and down.
    fn weights(&mut self) -> Result<[Tensor; 2], TchError> {
        match self.state.take() {
            [a, b] => Ok([a.shallow_clone(), b.shallow_clone()]),
            _ => Err(TchError::Kind("moe: the state is gate_up and down".into())),
        }
    }

    fn forward(&mut self) -> Result<Tensor, TchError> {
        let [gate_up, down] = self.weights()?;
        self.forward_with(&gate_up, &down)
    }
}

/// `silu(gate) · up` of a [rows, 2I] gate_up output.
fn swiglu(gu: &Tensor) -> Result<Tensor, TchError> {
    let halves = gu.f_chunk(2, -1)?;
    let [gate, up] = halves.as_slice() else {
        return Err(TchError::Kind("chunk(2) gave fewer than two halves".into()));
    };
    gate.f_silu()?.f_mul(up)
}

impl Prepared for PreparedMoe {
    fn run(&mut self) -> Result<(), TchError> {
        self.forward().map(drop)
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        self.forward()
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        let [gate_up, down] = self.weights()?.map(|t| f64_cpu(&t));
        let (gate_up, down) = (gate_up?, down?);
        let x = f64_cpu(&self.x)?;
        let mut out = x.f_zeros_like()?;
        for (j, e) in self.experts.iter().enumerate() {
            let tokens = e.tokens.f_to_device(tch::Device::Cpu)?;
            let w = f64_cpu(&e.weights)?;
            let xs = x.f_index_select(0, &tokens)?;
            let gu = xs.f_matmul(&gate_up.get(j as i64).f_transpose(0, 1)?)?;
            let h = swiglu(&gu)?;
            let y = h
                .f_matmul(&down.get(j as i64).f_transpose(0, 1)?)?
                .f_mul(&w)?;
            drop(out.f_index_add_(0, &tokens, &y)?);
        }
        Ok(out)
    }
    fn state_bytes(&self) -> u64 {
        self.state.bytes()
    }
    fn spread_state(&mut self, copies: usize) -> Result<(), TchError> {
        self.state.spread(copies)
    }
    fn note(&self) -> Option<String> {
        Some(format!(
            "{} experts hit by this routing (the problem's bytes count {})",
            self.hit, self.expected_hit
        ))
    }
}

impl Op for Moe {
    fn kind(&self) -> OpKind {
        OpKind::Moe
    }

    fn variants(&self) -> Vec<&'static str> {
        vec!["loop", "grouped"]
    }

    fn prepare(
        &self,
        variant: &str,
        problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let Dims::Experts {
            tokens,
            experts,
            top_k,
            hit: expected_hit,
            width,
            inter,
        } = problem.dims
        else {
            return Err(Failure::error(format!("moe got dims {}", problem.dims)));
        };
        let variant = match variant {
            "loop" => Variant::Loop,
            "grouped" => Variant::Grouped,
            other => return Err(Failure::error(format!("unknown moe variant `{other}`"))),
        };
        let routing = match problem.site {
            "experts_worst" => Routing::Worst,
            _ => Routing::Uniform,
        };
        let routes = route(tokens, experts, top_k, routing);
        // each expert hit: its (token, slot) pairs, in expert order
        let mut by_expert: Vec<Vec<(usize, usize)>> = vec![Vec::new(); experts];
        for (t, chosen) in routes.iter().enumerate() {
            for (slot, &e) in chosen.iter().enumerate() {
                by_expert[e].push((t, slot));
            }
        }
        let hit_lists: Vec<Vec<(usize, usize)>> =
            by_expert.into_iter().filter(|v| !v.is_empty()).collect();
        let hit = hit_lists.len();
        let (t, k, e, i) = (tokens as i64, top_k as i64, width as i64, inter as i64);
        let x = randn(&[t, e], dt, device, 3)?;
        // routing weights: a softmax over the k chosen, as Qwen3-MoE renormalizes them
        let weights = randn(&[t, k], DType::F32, Device::CPU, 5)?.f_softmax(-1, Kind::Float)?;
        let weights: Vec<f32> = Vec::<f32>::try_from(weights.f_flatten(0, -1)?)
            .map_err(|e| Failure::error(e.to_string()))?;
        let scale = (1.0 / width as f64).sqrt();
        let gate_up = randn(&[hit as i64, 2 * i, e], dt, device, 11)?.f_mul_scalar(scale)?;
        let down = randn(&[hit as i64, e, i], dt, device, 13)?
            .f_mul_scalar((1.0 / inter as f64).sqrt())?;
        let on = |v: Vec<i64>| Tensor::from_slice(&v).f_to_device(device.tch());
        let column = |v: Vec<f32>| -> Result<Tensor, TchError> {
            let n = v.len() as i64;
            Tensor::from_slice(&v)
                .f_view([n, 1])?
                .f_to_kind(harness::dtype::kind(dt))?
                .f_to_device(device.tch())
        };
        let mut experts_hit = Vec::with_capacity(hit);
        let (mut all_tokens, mut all_weights, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        for pairs in &hit_lists {
            let toks: Vec<i64> = pairs.iter().map(|&(t, _)| t as i64).collect();
            let ws: Vec<f32> = pairs.iter().map(|&(t, s)| weights[t * top_k + s]).collect();
            all_tokens.extend(&toks);
            all_weights.extend(&ws);
            ends.push(all_tokens.len() as i32);
            experts_hit.push(Expert {
                tokens: on(toks)?,
                weights: column(ws)?,
            });
        }
        Ok(Box::new(PreparedMoe {
            x,
            state: StateCopies::of(&[&gate_up, &down]),
            experts: experts_hit,
            sorted_tokens: on(all_tokens)?,
            sorted_weights: column(all_weights)?,
            offsets: Tensor::from_slice(&ends).f_to_device(device.tch())?,
            variant,
            hit,
            expected_hit,
        }))
    }
}
