//! The mixture-of-experts MLP of Qwen3-30B-A3B and Qwen3-235B-A22B (issue 33), as
//! transformers' Qwen3MoeSparseMoeBlock computes it for T tokens: the router (a linear of the
//! hidden state to `num_experts` logits), softmax and top-k with the k weights renormalized,
//! each token's hidden state sent to its k experts, every expert a SwiGLU MLP of width
//! `moe_intermediate_size` over the tokens routed to it, and the k outputs combined,
//! weighted, back into the token's row.
//!
//! How many experts a step touches sets what it reads: T·k routed tokens over N experts.
//! [`Routing::Uniform`] is the expectation of uniform random routing (each token's k
//! distinct experts drawn uniformly): an expert escapes one token with probability
//! (N − k)/N, so N·(1 − ((N − k)/N)^T) experts are hit, rounded to the nearest — k at
//! T = 1, nearly all N from a few dozen tokens on. [`Routing::Worst`] puts every token on
//! the same k experts (k hit, T tokens each): the fewest weights read, the largest GEMMs.

use crate::ModelConfig;
use crate::problem::{Dims, OpKind, Problem, Step};

/// How the step's tokens spread over the experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// Uniform random routing, at its expected number of experts hit.
    Uniform,
    /// Every token on the same k experts.
    Worst,
}

impl Routing {
    pub fn as_str(self) -> &'static str {
        match self {
            Routing::Uniform => "uniform",
            Routing::Worst => "worst",
        }
    }

    /// Experts hit by `tokens` tokens routed to `top_k` of `experts` each.
    pub fn experts_hit(self, tokens: usize, experts: usize, top_k: usize) -> usize {
        let top_k = top_k.min(experts);
        if tokens == 0 || top_k == 0 {
            return 0;
        }
        match self {
            Routing::Worst => top_k,
            Routing::Uniform => {
                let miss = (experts - top_k) as f64 / experts as f64;
                let hit = experts as f64 * (1.0 - miss.powi(tokens.min(i32::MAX as usize) as i32));
                (hit.round() as usize).clamp(top_k, experts)
            }
        }
    }
}

/// The MoE sites of one step, per decoder layer (`calls_per_step` = layers): the router's
/// linear, and the routed experts under uniform routing; `experts_worst` is the same block
/// with every token on one set of k experts — a bound beside the step, never part of it
/// (`calls_per_step` 0). Empty for a dense model.
pub fn sites(
    cfg: &ModelConfig,
    step: Step,
    mk: impl Fn(OpKind, &'static str, Dims, usize) -> Problem,
) -> Vec<Problem> {
    let (Some(experts), Some(top_k), Some(inter)) = (
        cfg.num_experts,
        cfg.num_experts_per_tok,
        cfg.moe_intermediate_size,
    ) else {
        return Vec::new();
    };
    let (e, layers, t) = (cfg.hidden_size, cfg.num_hidden_layers, step.tokens());
    let block = |routing: Routing| Dims::Experts {
        tokens: t,
        experts,
        top_k,
        hit: routing.experts_hit(t, experts, top_k),
        width: e,
        inter,
    };
    vec![
        mk(
            OpKind::Linear,
            "router",
            Dims::Linear {
                m: t,
                n: experts,
                k: e,
            },
            layers,
        ),
        mk(OpKind::Moe, "experts", block(Routing::Uniform), layers),
        mk(OpKind::Moe, "experts_worst", block(Routing::Worst), 0),
    ]
}

/// Whether a variant of an op waits for the device inside its call: transformers' expert
/// loop (`loop`: a `nonzero` over the expert mask, and per expert hit a comparison read
/// back and another `nonzero`). Such a call's pipelined time holds its kernels; it has no
/// device-clock or graph time, and a step that makes it cannot run ahead of the device.
pub fn waits_for_device(op: OpKind, variant: &str) -> bool {
    op == OpKind::Moe && variant == "loop"
}
