//! The routed experts of a Qwen3 MoE layer (Qwen3-30B-A3B, Qwen3-235B-A22B; issue 33), as
//! transformers 5.17 computes them: the router ([`router`], Qwen3MoeTopKRouter: a linear to
//! `num_experts` logits, softmax in float32, top-k, the k weights renormalized), then T
//! tokens each sent to its k experts with its routing weight, every expert a SwiGLU MLP
//! (`gate_up` [N, 2I, E], `down` [N, E, I], as transformers 5.x stores them), the k outputs
//! weighted and added back into the token's row. Sites (shapes::moe): `experts` under
//! uniform random routing (seed 7: each token's k distinct experts drawn uniformly; the
//! note gives the experts actually hit), `experts_worst` with every token on experts 0..k.
//! The op case holds the weights of the experts hit only (their ids renumbered 0..hit), so
//! its loop and its groups run over those; the decode crate's step holds all N.
//!
//! Variants, each the function the decode crate's MoE step calls:
//! - `loop` ([`experts_loop`]): Qwen3MoeExperts.forward, transformers' eager loop, call for
//!   call: `one_hot` of the routing, the experts hit by `nonzero` (a device→host sync), and
//!   per expert hit a sync on `expert_idx == num_experts`, its mask `expert_mask[expert_idx]`
//!   (a 0-d index tensor: PyTorch reads it on the host, a sync, and selects a view),
//!   `torch.where` over it (a `nonzero`, a sync), index its tokens, `linear` by its gate_up
//!   (`gate_up_proj[expert_idx]`: a sync and a view, no copy), `chunk`, `silu(gate) · up`,
//!   `linear` by its down (a sync and a view), times its routing weights, `index_add_`.
//!   1 + 5·hit syncs per call: on a host-bound GPU each one waits for the queued kernels.
//! - `grouped` ([`experts_grouped`]): transformers' `grouped_mm` experts implementation —
//!   the routed rows sorted by expert on the device, `histc` and `cumsum` for the groups'
//!   ends, two grouped GEMMs (`torch._grouped_mm`), the weights applied, the order
//!   restored, the k rows of each token summed: no sync. Where the build and device have
//!   it: transformers 5.17's integrations/moe.py says torch ≥ 2.9 has a CPU kernel and runs
//!   it on CUDA SM80+ (≤ 2.8: Hopper only); torch 2.11 ran it here on the CPU. A build
//!   without it gets a row that says why (`unsupported` or `error`, libtorch's message).
//!   Not run on ROCm.
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

/// Qwen3MoeTopKRouter: `x` [T, E] by the router's `weight` [N, E] to logits, softmax in
/// float32 (float64 for a float64 `x`), top-k, the k weights renormalized to sum to 1 and
/// cast back to the logits' dtype. Returns (weights [T, k], expert ids [T, k]).
///
/// `chosen`: take these expert ids instead of the top-k (their probabilities gathered and
/// renormalized the same way) — the float64 reference of a whole step routes as the
/// checked forward did, so a near-tie that rounding breaks differently is not a mismatch.
pub fn router(
    x: &Tensor,
    weight: &Tensor,
    top_k: i64,
    chosen: Option<&Tensor>,
) -> Result<(Tensor, Tensor), TchError> {
    let logits = x.f_linear::<Tensor>(weight, None)?;
    let soft = if x.kind() == Kind::Double {
        Kind::Double
    } else {
        Kind::Float
    };
    let probs = logits.f_softmax(-1, soft)?;
    let (top, ids) = match chosen {
        Some(ids) => (probs.f_gather(-1, ids, false)?, ids.shallow_clone()),
        None => probs.f_topk(top_k, -1, true, true)?,
    };
    let top = top.f_div(&top.f_sum_dim_intlist(-1, true, None::<Kind>)?)?;
    Ok((top.f_to_kind(logits.kind())?, ids))
}

/// Qwen3MoeExperts.forward, transformers 5.17's eager loop, call for call: `x` [T, E], the
/// routing's `ids` and `weights` [T, k], `gate_up` [N, 2I, E], `down` [N, E, I]. Syncs
/// with the device 1 + 5·(experts hit) times, as transformers does (its three indexings by
/// a 0-d tensor each read the index on the host).
pub fn experts_loop(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: &Tensor,
    down: &Tensor,
) -> Result<Tensor, TchError> {
    let n = gate_up.size()[0];
    let mut out = x.f_zeros_like()?;
    // [N, k, T]: which (slot, token) each expert got
    let mask = ids.f_one_hot(n)?.f_permute([2, 1, 0])?;
    let hit = mask
        .f_sum_dim_intlist([-1, -2].as_slice(), false, None::<Kind>)?
        .f_gt(0)?
        .f_nonzero()?;
    for j in 0..hit.size()[0] {
        let e = hit.f_get(j)?.f_get(0)?;
        // transformers' `if expert_idx == self.num_experts: continue` (a sync)
        if e.f_eq(n)?.f_is_nonzero()? {
            continue;
        }
        // `t[expert_idx]` with a 0-d index tensor: PyTorch reads the index on the host (a
        // sync) and selects a view — for the mask and each weight, as transformers indexes
        let at = mask.f_select(0, e.f_int64_value(&[])?)?;
        // torch.where(expert_mask[expert_idx]): its nonzero (a sync)
        let pos = at.f_nonzero()?;
        let (slot, token) = (pos.f_select(1, 0)?, pos.f_select(1, 1)?);
        // hidden_states[token_idx]: advanced indexing
        let xs = x.f_index(&[Some(&token)])?;
        let gu = xs.f_linear::<Tensor>(&gate_up.f_select(0, e.f_int64_value(&[])?)?, None)?;
        let h = swiglu(&gu)?;
        let y = h.f_linear::<Tensor>(&down.f_select(0, e.f_int64_value(&[])?)?, None)?;
        let w = weights
            .f_index(&[Some(&token), Some(&slot)])?
            .f_unsqueeze(-1)?;
        let y = y.f_mul(&w)?;
        drop(out.f_index_add_(0, &token, &y.f_to_kind(out.kind())?)?);
    }
    Ok(out)
}

/// transformers 5.17's `grouped_mm` experts implementation: the T·k routed rows sorted by
/// expert on the device, the groups' ends, two grouped GEMMs (`torch._grouped_mm` over all
/// N experts' weights), the weights applied, the order restored, each token's k rows
/// summed. No sync. The groups' ends come from one `searchsorted` of the sorted ids (tch
/// exposes `histc` without its range; transformers makes them with `histc` and `cumsum`).
/// transformers' sentinel masking for expert parallelism is kept (its comparison, clamp
/// and three `masked_fill`s run either way).
pub fn experts_grouped(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: &Tensor,
    down: &Tensor,
) -> Result<Tensor, TchError> {
    let (n, k) = (gate_up.size()[0], ids.size()[1]);
    let (t, e) = (x.size()[0], x.size()[1]);
    let device = x.device();
    let sample_weights = weights.f_reshape([-1])?;
    let flat = ids.f_reshape([-1])?;
    let (mut ids_g, perm) = flat.f_sort(0, false)?;
    let mut rows = x.f_index_select(0, &perm.f_floor_divide_scalar(k)?)?;
    let weights_g = sample_weights.f_index_select(0, &perm)?;
    let bounds = Tensor::f_arange(n, (ids_g.kind(), device))?;
    let offsets = bounds.f_searchsorted(&ids_g, true, true, "right", None::<Tensor>)?;
    let sentinel = ids_g.f_ge(n)?.f_unsqueeze(-1)?;
    drop(ids_g.f_clamp_max_(n - 1)?);
    drop(rows.f_masked_fill_(&sentinel, 0.0)?);
    let grouped = |a: &Tensor, w: &Tensor| {
        a.f_internal_grouped_mm(
            &w.f_transpose(-2, -1)?,
            Some(&offsets),
            None::<&Tensor>,
            None::<Kind>,
        )
    };
    let gu = grouped(&rows, gate_up)?.f_masked_fill(&sentinel, 0.0)?;
    let h = swiglu(&gu)?;
    let y = grouped(&h, down)?.f_masked_fill(&sentinel, 0.0)?;
    let y = y.f_mul(&weights_g.f_unsqueeze(-1)?)?;
    let mut inv = perm.f_empty_like()?;
    let s = perm.size()[0];
    drop(inv.f_index_put_(
        &[Some(&perm)],
        &Tensor::f_arange(s, (Kind::Int64, device))?,
        false,
    )?);
    y.f_index_select(0, &inv)?
        .f_view([t, k, e])?
        .f_sum_dim_intlist(1, false, None::<Kind>)
}

/// `silu(gate) · up` of a [rows, 2I] gate_up output.
fn swiglu(gu: &Tensor) -> Result<Tensor, TchError> {
    let halves = gu.f_chunk(2, -1)?;
    let [gate, up] = halves.as_slice() else {
        return Err(TchError::Kind("chunk(2) gave fewer than two halves".into()));
    };
    gate.f_silu()?.f_mul(up)
}

/// The function that computes the routed experts as the op's variant `variant` does
/// ([`experts_loop`] for `loop`, [`experts_grouped`] for `grouped`): what the decode
/// crate's MoE step calls for the variant its profile's plan names.
pub fn experts_fn(variant: &str) -> Option<ExpertsFn> {
    Variant::ALL
        .into_iter()
        .find(|v| v.name() == variant)
        .map(Variant::experts)
}

/// The routed-experts op.
#[derive(Debug, Clone, Copy, Default)]
pub struct Moe;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Loop,
    Grouped,
}

/// An experts implementation's signature: x, ids, weights, gate_up, down.
pub type ExpertsFn = fn(&Tensor, &Tensor, &Tensor, &Tensor, &Tensor) -> Result<Tensor, TchError>;

impl Variant {
    const ALL: [Variant; 2] = [Variant::Loop, Variant::Grouped];

    fn name(self) -> &'static str {
        match self {
            Variant::Loop => "loop",
            Variant::Grouped => "grouped",
        }
    }

    /// The function this variant times (the one the decode crate's step calls).
    fn experts(self) -> ExpertsFn {
        match self {
            Variant::Loop => experts_loop,
            Variant::Grouped => experts_grouped,
        }
    }
}

struct PreparedMoe {
    x: Tensor,
    /// The routing: [T, k] expert ids (renumbered 0..hit) and weights, on the device.
    ids: Tensor,
    weights: Tensor,
    /// gate_up [hit, 2I, E] and down [hit, E, I] of the experts hit.
    state: StateCopies,
    variant: Variant,
    hit: usize,
    expected_hit: usize,
}

impl PreparedMoe {
    /// The next copy of the weights: gate_up and down.
    fn experts(&mut self) -> Result<[Tensor; 2], TchError> {
        match self.state.take() {
            [a, b] => Ok([a.shallow_clone(), b.shallow_clone()]),
            _ => Err(TchError::Kind("moe: the state is gate_up and down".into())),
        }
    }

    fn forward(&mut self) -> Result<Tensor, TchError> {
        let [gate_up, down] = self.experts()?;
        (self.variant.experts())(&self.x, &self.ids, &self.weights, &gate_up, &down)
    }
}

impl Prepared for PreparedMoe {
    fn run(&mut self) -> Result<(), TchError> {
        self.forward().map(drop)
    }
    fn output(&mut self) -> Result<Tensor, TchError> {
        self.forward()
    }
    fn reference(&mut self) -> Result<Tensor, TchError> {
        let [gate_up, down] = self.experts()?.map(|t| f64_cpu(&t));
        let ids = self.ids.f_to_device(tch::Device::Cpu)?;
        experts_loop(
            &f64_cpu(&self.x)?,
            &ids,
            &f64_cpu(&self.weights)?,
            &gate_up?,
            &down?,
        )
    }
    fn state_bytes(&self) -> u64 {
        self.state.bytes()
    }
    fn waits_for_device(&self) -> Option<String> {
        shapes::moe::waits_for_device(OpKind::Moe, self.variant.name()).then(|| {
            "transformers' expert loop waits for the device 1 + 5 times per expert hit".into()
        })
    }
    fn spread_state(&mut self, copies: usize) -> Result<(), TchError> {
        self.state.spread(copies)
    }
    fn note(&self) -> Option<String> {
        let how = match self.variant {
            Variant::Loop => "transformers' eager loop, 1 + 5 per expert hit device syncs",
            Variant::Grouped => "transformers' grouped_mm implementation, no sync",
        };
        Some(format!(
            "{} experts hit by this routing (the problem's bytes count {}); {how}",
            self.hit, self.expected_hit
        ))
    }
}

impl Op for Moe {
    fn kind(&self) -> OpKind {
        OpKind::Moe
    }

    /// The experts' weights.
    fn holds_state(&self, _variant: &str, _problem: &Problem) -> bool {
        true
    }

    fn variants(&self) -> Vec<&'static str> {
        Variant::ALL.iter().map(|v| v.name()).collect()
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
        let variant = Variant::ALL
            .into_iter()
            .find(|v| v.name() == variant)
            .ok_or_else(|| Failure::error(format!("unknown moe variant `{variant}`")))?;
        let routing = match problem.site {
            "experts_worst" => Routing::Worst,
            _ => Routing::Uniform,
        };
        let routes = route(tokens, experts, top_k, routing);
        // the experts hit, renumbered 0..hit in expert order
        let mut number = vec![None; experts];
        for &e in routes.iter().flatten() {
            number[e] = Some(());
        }
        let mut renumber = vec![0i64; experts];
        let mut hit = 0usize;
        for (e, seen) in number.iter().enumerate() {
            if seen.is_some() {
                renumber[e] = hit as i64;
                hit += 1;
            }
        }
        let flat: Vec<i64> = routes.iter().flatten().map(|&e| renumber[e]).collect();
        let (t, k, e, i) = (tokens as i64, top_k as i64, width as i64, inter as i64);
        let x = randn(&[t, e], dt, device, 3)?;
        // routing weights: a softmax over the k chosen, as Qwen3-MoE renormalizes them
        let weights = randn(&[t, k], DType::F32, device, 5)?
            .f_softmax(-1, Kind::Float)?
            .f_to_kind(harness::dtype::kind(dt))?;
        let ids = Tensor::from_slice(&flat)
            .f_view([t, k])?
            .f_to_device(device.tch())?;
        let gate_up = randn(&[hit as i64, 2 * i, e], dt, device, 11)?
            .f_mul_scalar((1.0 / width as f64).sqrt())?;
        let down = randn(&[hit as i64, e, i], dt, device, 13)?
            .f_mul_scalar((1.0 / inter as f64).sqrt())?;
        Ok(Box::new(PreparedMoe {
            x,
            ids,
            weights,
            state: StateCopies::of(&[&gate_up, &down]),
            variant,
            hit,
            expected_hit,
        }))
    }
}
