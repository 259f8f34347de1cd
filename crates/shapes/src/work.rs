//! The work of a whole forward pass: its FLOPs and the weights and cache it reads
//! ([`StepWork`]), the bandwidth and compute floors' input.

use crate::ModelConfig;
use crate::moe::Routing;
use crate::problem::{Phase, Step, StepWork, W, attended_pairs};

/// The work of a whole forward (see [`StepWork`]); an MoE model's counts its router and the
/// experts its tokens hit under uniform routing ([`Routing::Uniform`]).
pub fn step_work(cfg: &ModelConfig, step: Step) -> StepWork {
    let u = |x: usize| W(x as u128);
    let sat = |x: W| u64::try_from(x.0).unwrap_or(u64::MAX);
    let (e, h, hkv, d, i, v) = (
        u(cfg.hidden_size),
        u(cfg.num_attention_heads),
        u(cfg.num_key_value_heads),
        u(cfg.head_dim),
        u(cfg.intermediate_size),
        u(cfg.vocab_size),
    );
    let layers = u(cfg.num_hidden_layers);
    let (b, t) = (u(step.batch), u(step.tokens()));
    let attn = h * d * e + 2 * hkv * d * e + e * h * d;
    // per token's MLP weights multiplied, and the MLP weights the step reads
    let (mlp_token, mlp_read) = match (
        cfg.num_experts,
        cfg.num_experts_per_tok,
        cfg.moe_intermediate_size,
    ) {
        (Some(n), Some(k), Some(mi)) => {
            let hit = Routing::Uniform.experts_hit(step.tokens(), n, k);
            let expert = 3 * e * u(mi);
            (u(n) * e + u(k) * expert, u(n) * e + u(hit) * expert)
        }
        _ => (3 * e * i, 3 * e * i),
    };
    // the input and post-attention norms' weights, and qk-norm's where the family has it
    let norms = 2 * e + u(if cfg.family.qk_norm() { 2 } else { 0 }) * d;
    // q, k and v's biases where the family has them (Qwen2): read once, one add per output
    let bias = u(if cfg.attention_bias { 1 } else { 0 }) * (h + 2 * hkv) * d;
    let pairs = attended_pairs(step.q_len, step.kv_len(), step.phase == Phase::Prefill);
    StepWork {
        flops: sat(
            layers * (2 * t * (attn + mlp_token) + t * bias + 4 * b * h * d * pairs)
                + 2 * b * v * e,
        ),
        weight_elems: sat(layers * (attn + mlp_read + norms + bias) + e + v * e + b * e),
        kv_elems: sat(2 * layers * b * hkv * u(step.kv_len()) * d),
    }
}
