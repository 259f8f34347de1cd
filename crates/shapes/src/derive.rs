//! Every problem of one decoder step, site by site.

use crate::ModelConfig;
use crate::problem::*;
use crate::work::step_work;

/// Every problem of one step of `cfg`, site by site (DESIGN.md's table).
///
/// MoE models get their attention and norm sites, the router and the routed experts
/// ([`crate::moe::sites`]) in place of the dense MLP.
pub fn derive(cfg: &ModelConfig, step: Step) -> Vec<Problem> {
    let (e, h, hkv, d, i, v) = (
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
        cfg.intermediate_size,
        cfg.vocab_size,
    );
    let layers = cfg.num_hidden_layers;
    let (b, q, l) = (step.batch, step.q_len, step.cache_len);
    let t = step.tokens();
    let mk = |op, site, kv_len, dims, calls| Problem {
        op,
        site,
        model: cfg.name.clone(),
        phase: step.phase,
        batch: b,
        q_len: q,
        kv_len,
        dims,
        calls_per_step: calls,
        rope_theta: cfg.rope_theta,
        eps: cfg.rms_norm_eps,
        cache_len: l,
        step_work: None,
    };
    let lin =
        |site, m, n, k, calls| mk(OpKind::Linear, site, None, Dims::Linear { m, n, k }, calls);
    let norm = |site, rows, width, calls| {
        mk(
            OpKind::RmsNorm,
            site,
            None,
            Dims::Norm { rows, width },
            calls,
        )
    };
    let rope = |site, heads, calls| {
        let dims = Dims::Rope {
            batch: b,
            heads,
            seq: q,
            head_dim: d,
        };
        mk(OpKind::Rope, site, None, dims, calls)
    };

    let mut out = vec![
        lin("q_proj", t, h * d, e, layers),
        lin("k_proj", t, hkv * d, e, layers),
        lin("v_proj", t, hkv * d, e, layers),
        lin("o_proj", t, e, h * d, layers),
    ];
    if !cfg.is_moe() {
        out.push(lin("gate_proj", t, i, e, layers));
        out.push(lin("up_proj", t, i, e, layers));
        out.push(lin("down_proj", t, e, i, layers));
    }
    // logits of the last token of each sequence only
    out.push(lin("lm_head", b, v, e, 1));
    out.push(lin("qkv_proj", t, (h + 2 * hkv) * d, e, layers));
    if !cfg.is_moe() {
        out.push(lin("gate_up_proj", t, 2 * i, e, layers));
    }

    out.push(norm("input_norm", t, e, layers));
    out.push(norm("post_norm", t, e, layers));
    out.push(norm("final_norm", t, e, 1));
    if cfg.family.qk_norm() {
        out.push(norm("q_norm", t.saturating_mul(h), d, layers));
        out.push(norm("k_norm", t.saturating_mul(hkv), d, layers));
    }

    out.push(rope("q", h, layers));
    out.push(rope("k", hkv, layers));
    out.push(rope("cache", 0, 1));

    out.extend(attention_sites(cfg, step, &mk));
    out.extend(eltwise_sites(cfg, step, &mk));
    out.extend(crate::moe::sites(cfg, step, |op, site, dims, calls| {
        mk(op, site, None, dims, calls)
    }));
    out
}

/// A problem of `op` at `site` (its attention length, dims and calls per step).
type Make<'a> = &'a dyn Fn(OpKind, &'static str, Option<usize>, Dims, usize) -> Problem;

/// The attention over the cache, the cache's appends, and the whole step.
fn attention_sites(cfg: &ModelConfig, step: Step, mk: Make<'_>) -> Vec<Problem> {
    let (h, hkv, d) = (
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
    );
    let layers = cfg.num_hidden_layers;
    let (b, q, l) = (step.batch, step.q_len, step.cache_len);
    let mut out = Vec::new();
    out.push(mk(
        OpKind::Sdpa,
        "attn",
        Some(step.kv_len()),
        Dims::Sdpa {
            batch: b,
            q_heads: h,
            kv_heads: hkv,
            q_len: q,
            kv_len: step.kv_len(),
            head_dim: d,
            causal: step.phase == Phase::Prefill,
        },
        layers,
    ));
    {
        let mut step_problem = mk(
            OpKind::Decode,
            "step",
            Some(step.kv_len()),
            Dims::Step {
                batch: b,
                q_len: q,
                cache_len: l,
                layers,
            },
            1,
        );
        step_problem.step_work = Some(step_work(cfg, step));
        out.push(step_problem);
    }
    for site in ["k", "v"] {
        out.push(mk(
            OpKind::KvCache,
            site,
            Some(step.kv_len()),
            Dims::KvCache {
                batch: b,
                kv_heads: hkv,
                cache_len: l,
                new_len: q,
                head_dim: d,
            },
            layers,
        ));
    }
    out
}

/// The element-wise calls between the ops: the residual adds, the MLP's activation and
/// product, the attention output's copy, the embedding and the greedy argmax.
fn eltwise_sites(cfg: &ModelConfig, step: Step, mk: Make<'_>) -> Vec<Problem> {
    let (e, h, d, i, v) = (
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.head_dim,
        cfg.intermediate_size,
        cfg.vocab_size,
    );
    let layers = cfg.num_hidden_layers;
    let (b, q, t) = (step.batch, step.q_len, step.tokens());
    let mut out = Vec::new();
    let elt = |site, dims, calls| mk(OpKind::Eltwise, site, None, dims, calls);
    // hidden + attention output, hidden + MLP output
    out.push(elt(
        "residual_add",
        Dims::Elementwise {
            numel: t.saturating_mul(e),
        },
        2 * layers,
    ));
    if !cfg.is_moe() {
        let numel = t.saturating_mul(i);
        out.push(elt("silu", Dims::Unary { numel }, layers));
        out.push(elt("swiglu_mul", Dims::Elementwise { numel }, layers));
    }
    // attn_output.transpose(1, 2).contiguous(): a copy in prefill; at q = 1 the transposed
    // view is contiguous already, so nothing is copied (numel 0) and no kernel runs
    let moved = if q == 1 {
        0
    } else {
        t.saturating_mul(h).saturating_mul(d)
    };
    out.push(elt("attn_contiguous", Dims::Copy { numel: moved }, layers));
    // once per step: the embedding lookup of the step's tokens, and the greedy choice of
    // the next token from the last position's logits
    out.push(elt("embedding", Dims::Gather { rows: t, width: e }, 1));
    out.push(elt("argmax", Dims::Reduce { rows: b, width: v }, 1));
    out
}
