//! A Qwen3 decoder forward in tch, at the real shapes of a model file, with random weights.

use std::cell::RefCell;

use shapes::ModelConfig;
use tch::{Kind, TchError, Tensor};

/// How the forward is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// transformers' modeling_qwen3 op for op: composed RMSNorm (float32 upcast), separate
    /// projections, rotate_half RoPE, DynamicCache `cat`, `sdpa(enable_gqa=True)`.
    HfEager,
    /// aten `rms_norm`, fused QKV and gate-up projections, a static cache written with
    /// `index_copy_` (attention over its filled prefix), same RoPE and SDPA.
    Fused,
    /// The float64 reference: the hf-eager structure with no dtype casts anywhere.
    Reference,
}

impl Flavor {
    /// The profile whose plan (shapes::StepPlan) this forward follows; the reference has
    /// hf-eager's structure.
    pub fn profile(self) -> shapes::StepProfile {
        match self {
            Flavor::Fused => shapes::StepProfile::Fused,
            Flavor::HfEager | Flavor::Reference => shapes::StepProfile::HfEager,
        }
    }
}

impl From<shapes::StepProfile> for Flavor {
    /// The forward that writes a profile's step (shapes::StepPlan lists its calls).
    fn from(p: shapes::StepProfile) -> Self {
        match p {
            // transformers' step is hf-eager's structure, run from Python (scripts/peer.py)
            shapes::StepProfile::HfEager | shapes::StepProfile::Transformers => Flavor::HfEager,
            shapes::StepProfile::Fused => Flavor::Fused,
        }
    }
}

pub use crate::weights::{Layer, Mlp, Weights, fuse, random_weights};

/// A layer's KV cache.
#[derive(Debug)]
pub enum Cache {
    /// DynamicCache: `[B, Hkv, L, D]` tensors that `cat` grows (None before the first step).
    Dynamic {
        k: Option<Tensor>,
        v: Option<Tensor>,
    },
    /// StaticCache: `[B, Hkv, Lmax, D]` buffers written in place.
    Static { k: Tensor, v: Tensor },
}

/// RMSNorm as a flavor writes it: the rmsnorm crate's forms.
fn rms_norm(x: &Tensor, w: &Tensor, eps: f64, flavor: Flavor) -> Result<Tensor, TchError> {
    match flavor {
        Flavor::HfEager => rmsnorm::hf(x, w, eps),
        Flavor::Fused => rmsnorm::aten(x, w, eps),
        Flavor::Reference => rmsnorm::reference(x, w, eps),
    }
}

use rope::rotate_half;

/// One call of a layer (an op case's call, or a view): made once, or
/// `ctx.repeat` times in a row (the last result kept).
fn rep<T>(ctx: &StepCtx, mut call: impl FnMut() -> Result<T, TchError>) -> Result<T, TchError> {
    for _ in 1..ctx.repeat {
        drop(call()?);
    }
    call()
}

/// What every layer of one forward shares: shapes, the rotary cos/sin of its positions, the
/// static cache's write positions.
#[derive(Debug)]
pub struct StepCtx {
    b: i64,
    q: i64,
    pos0: i64,
    eps: f64,
    qkv_widths: [i64; 3],
    cos: Tensor,
    sin: Tensor,
    /// The static cache's positions (fused), `None` for a dynamic cache.
    at: Option<Tensor>,
    flavor: Flavor,
    /// How many times each call of a layer is made in a row before the next: 1 (the step
    /// as the model makes it) unless [`StepCtx::blocked`].
    repeat: usize,
    /// An MoE forward's routing, recorded or replayed for a check ([`Routes`]).
    pub routes: RefCell<Routes>,
    /// The routed experts as the profile's plan runs them (moe::experts_fn).
    experts: moe::ExpertsFn,
}

impl StepCtx {
    /// The shared part of a forward of `b` sequences of `q` tokens at `pos0..pos0+q`;
    /// `static_cache`: the layers' caches are static (their write positions are made).
    pub fn new(
        w: &Weights,
        b: i64,
        q: i64,
        pos0: i64,
        flavor: Flavor,
        static_cache: bool,
    ) -> Result<StepCtx, TchError> {
        let cfg = &w.cfg;
        let kind = w.embed.kind();
        let device = w.embed.device();
        let pos = Tensor::f_arange_start(pos0, pos0 + q, (Kind::Int64, device))?
            .f_unsqueeze(0)?
            .f_expand([b, q], false)?;
        // rotary embedding as transformers computes it: inv_freq ⊗ positions in float32
        // (float64 for the reference), cos/sin cast to the model dtype
        let inv_kind = if flavor == Flavor::Reference {
            Kind::Double
        } else {
            Kind::Float
        };
        let inv_e = w
            .inv_freq
            .f_unsqueeze(0)?
            .f_unsqueeze(-1)?
            .f_expand([b, -1, 1], false)?;
        let freqs = inv_e
            .f_matmul(&pos.f_unsqueeze(1)?.f_to_kind(inv_kind)?)?
            .f_transpose(1, 2)?;
        let emb = Tensor::f_cat(&[&freqs, &freqs], -1)?;
        let cos = emb.f_cos()?.f_to_kind(kind)?.f_unsqueeze(1)?;
        let sin = emb.f_sin()?.f_to_kind(kind)?.f_unsqueeze(1)?;
        let experts = flavor
            .profile()
            .variant(shapes::OpKind::Moe, "experts")
            .and_then(moe::experts_fn)
            .ok_or_else(|| TchError::Kind(format!("no experts implementation for {flavor:?}")))?;
        // StaticCache writes the step's tokens at their positions
        let at = if static_cache {
            Some(Tensor::f_arange_start(
                pos0,
                pos0 + q,
                (Kind::Int64, device),
            )?)
        } else {
            None
        };
        Ok(StepCtx {
            b,
            q,
            pos0,
            eps: cfg.rms_norm_eps,
            qkv_widths: cfg.qkv_widths().map(|c| c as i64),
            cos,
            sin,
            at,
            flavor,
            repeat: 1,
            routes: RefCell::default(),
            experts,
        })
    }

    /// How the forward is written.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The same, with every call of a layer made `n` times in a row before the next (each
    /// call as its op case repeats it alone).
    pub fn blocked(self, n: usize) -> StepCtx {
        StepCtx {
            repeat: n.max(1),
            ..self
        }
    }
}

/// One forward: `ids` `[B, q]` at positions `pos0..pos0+q` against `caches` (one per
/// layer). Returns the logits of the last token of each sequence, `[B, V]`.
///
/// A dynamic cache is replaced by its concatenation only when `keep` is true; timing keeps
/// it false so every call is a step at the same cache length. A static cache is written in
/// place at the step's positions (the same positions every call).
pub fn forward(
    w: &Weights,
    ids: &Tensor,
    pos0: i64,
    caches: &mut [Cache],
    flavor: Flavor,
    keep: bool,
) -> Result<Tensor, TchError> {
    forward_routed(w, ids, pos0, caches, flavor, keep, Routes::Off).map(|(logits, _)| logits)
}

/// [`forward`] over as many layers as `caches` holds, recording or replaying an MoE
/// model's routing ([`Routes`]); returns the logits and the routes.
pub fn forward_routed(
    w: &Weights,
    ids: &Tensor,
    pos0: i64,
    caches: &mut [Cache],
    flavor: Flavor,
    keep: bool,
    routes: Routes,
) -> Result<(Tensor, Routes), TchError> {
    let (b, q) = (ids.size()[0], ids.size()[1]);
    let static_cache = matches!(caches.first(), Some(Cache::Static { .. }));
    let ctx = StepCtx::new(w, b, q, pos0, flavor, static_cache)?;
    *ctx.routes.borrow_mut() = routes;
    let mut hs = Tensor::f_embedding(&w.embed, ids, -1, false, false)?;
    for (layer, cache) in w.layers.iter().zip(caches.iter_mut()) {
        hs = layer_forward(w, layer, cache, &hs, &ctx, keep)?;
    }
    let hs = rms_norm(&hs, &w.final_norm, w.cfg.rms_norm_eps, flavor)?;
    let last = hs.f_narrow(1, q - 1, 1)?;
    let logits = last
        .f_linear::<Tensor>(&w.lm_head, None)?
        .f_squeeze_dim(1)?;
    Ok((logits, ctx.routes.take()))
}

/// A layer's q, k and v of its normed input `x`: one fused GEMM split three ways, or three
/// GEMMs; each with its bias where the family has one (Qwen2).
fn project_qkv(
    layer: &Layer,
    x: &Tensor,
    ctx: &StepCtx,
) -> Result<(Tensor, Tensor, Tensor), TchError> {
    if let (Some(qkv), Flavor::Fused) = (&layer.qkv, ctx.flavor) {
        let all = rep(ctx, || x.f_linear(qkv, layer.qkv_bias.as_ref()))?;
        let parts = rep(ctx, || all.f_split_with_sizes(ctx.qkv_widths, -1))?;
        return Ok((
            parts[0].shallow_clone(),
            parts[1].shallow_clone(),
            parts[2].shallow_clone(),
        ));
    }
    let bias_of = |i: usize| layer.bias.as_ref().map(|b| &b[i]);
    Ok((
        rep(ctx, || x.f_linear(&layer.q, bias_of(0)))?,
        rep(ctx, || x.f_linear(&layer.k, bias_of(1)))?,
        rep(ctx, || x.f_linear(&layer.v, bias_of(2)))?,
    ))
}

/// One decoder layer of a forward: `hs` `[B, q, hidden]` in, the layer's output out. Every
/// call is made once, or several times in a row under [`StepCtx::blocked`].
pub fn layer_forward(
    w: &Weights,
    layer: &Layer,
    cache: &mut Cache,
    hs: &Tensor,
    ctx: &StepCtx,
    keep: bool,
) -> Result<Tensor, TchError> {
    let cfg = &w.cfg;
    let (b, q, pos0, eps, flavor) = (ctx.b, ctx.q, ctx.pos0, ctx.eps, ctx.flavor);
    let (h, hkv, d) = (
        cfg.num_attention_heads as i64,
        cfg.num_key_value_heads as i64,
        cfg.head_dim as i64,
    );
    let (cos, sin) = (&ctx.cos, &ctx.sin);
    let rope = |x: &Tensor| -> Result<Tensor, TchError> {
        x.f_mul(cos)?.f_add(&rotate_half(x)?.f_mul(sin)?)
    };
    let residual = hs.shallow_clone();
    let x = rep(ctx, || rms_norm(hs, &layer.input_norm, eps, flavor))?;
    let (qs, ks, vs) = project_qkv(layer, &x, ctx)?;
    // qk-norm where the family has it (Qwen3); Llama's layout goes straight to RoPE
    let qk_norm = cfg.family.qk_norm();
    let heads = |t: &Tensor, n: i64, norm: &Tensor| -> Result<Tensor, TchError> {
        let t = rep(ctx, || t.f_view([b, q, n, d]))?;
        let t = if qk_norm {
            rep(ctx, || rms_norm(&t, norm, eps, flavor))?
        } else {
            t
        };
        rep(ctx, || t.f_transpose(1, 2))
    };
    let qs = heads(&qs, h, &layer.q_norm)?;
    let ks = heads(&ks, hkv, &layer.k_norm)?;
    let vs = rep(ctx, || vs.f_view([b, q, hkv, d]))?;
    let vs = rep(ctx, || vs.f_transpose(1, 2))?;
    let qs = rep(ctx, || rope(&qs))?;
    let ks = rep(ctx, || rope(&ks))?;
    let (k_all, v_all) = match cache {
        Cache::Dynamic { k, v } => {
            let (k_all, v_all) = match (k.as_ref(), v.as_ref()) {
                (Some(kc), Some(vc)) => (
                    rep(ctx, || Tensor::f_cat(&[kc, &ks], -2))?,
                    rep(ctx, || Tensor::f_cat(&[vc, &vs], -2))?,
                ),
                // DynamicCache stores the first update as it is
                _ => (ks, vs),
            };
            if keep {
                *k = Some(k_all.shallow_clone());
                *v = Some(v_all.shallow_clone());
            }
            (k_all, v_all)
        }
        Cache::Static { k, v } => {
            let at = ctx
                .at
                .as_ref()
                .ok_or_else(|| TchError::Kind("static cache without positions".into()))?;
            let k = rep(ctx, || k.f_index_copy_(2, at, &ks))?;
            let v = rep(ctx, || v.f_index_copy_(2, at, &vs))?;
            (
                rep(ctx, || k.f_narrow(2, 0, pos0 + q))?,
                rep(ctx, || v.f_narrow(2, 0, pos0 + q))?,
            )
        }
    };
    let attn = rep(ctx, || {
        Tensor::f_scaled_dot_product_attention::<Tensor>(
            &qs,
            &k_all,
            &v_all,
            None,
            0.0,
            q > 1,
            None,
            true,
        )
    })?;
    let attn = rep(ctx, || attn.f_transpose(1, 2))?;
    let attn = rep(ctx, || attn.f_contiguous())?;
    let attn = rep(ctx, || attn.f_reshape([b, q, h * d]))?;
    let o = rep(ctx, || attn.f_linear::<Tensor>(&layer.o, None))?;
    let hs = rep(ctx, || residual.f_add(&o))?;

    let residual = hs.shallow_clone();
    let x = rep(ctx, || rms_norm(&hs, &layer.post_norm, eps, flavor))?;
    let mlp = mlp_forward(cfg, layer, &x, ctx)?;
    rep(ctx, || residual.f_add(&mlp))
}

/// A layer's MLP on the post-attention norm's output `x`: dense (gate, up, SiLU, down; one
/// gate-up matmul in the fused flavor) or mixture-of-experts (router, then the experts).
fn mlp_forward(
    cfg: &ModelConfig,
    layer: &Layer,
    x: &Tensor,
    ctx: &StepCtx,
) -> Result<Tensor, TchError> {
    let (b, q, flavor) = (ctx.b, ctx.q, ctx.flavor);
    match &layer.mlp {
        Mlp::Dense {
            gate,
            up,
            down,
            gate_up,
        } => {
            let act = match (gate_up, flavor) {
                (Some(gu), Flavor::Fused) => {
                    let both = rep(ctx, || x.f_linear::<Tensor>(gu, None))?;
                    let halves = rep(ctx, || both.f_chunk(2, -1))?;
                    let s = rep(ctx, || halves[0].f_silu())?;
                    rep(ctx, || s.f_mul(&halves[1]))?
                }
                _ => {
                    let g = rep(ctx, || x.f_linear::<Tensor>(gate, None))?;
                    let s = rep(ctx, || g.f_silu())?;
                    let u = rep(ctx, || x.f_linear::<Tensor>(up, None))?;
                    rep(ctx, || s.f_mul(&u))?
                }
            };
            rep(ctx, || act.f_linear::<Tensor>(down, None))
        }
        Mlp::Moe {
            router,
            gate_up,
            down,
            top_k,
        } => {
            let e = cfg.hidden_size as i64;
            let flat = rep(ctx, || x.f_view([-1, e]))?;
            let chosen = ctx.routes.borrow_mut().replay();
            let (weights, ids) = rep(ctx, || moe::router(&flat, router, *top_k, chosen.as_ref()))?;
            ctx.routes.borrow_mut().record(&ids, q)?;
            // the plan's variant: transformers' eager loop for hf-eager (and the float64
            // reference), its grouped_mm implementation for fused
            let out = rep(ctx, || (ctx.experts)(&flat, &ids, &weights, gate_up, down))?;
            rep(ctx, || out.f_view([b, q, e]))
        }
    }
}

/// The experts an MoE forward chose, per layer, for the first sequence: recorded by the
/// forward a check compares, replayed by its float64 reference (so a near-tie of the
/// router's top-k that rounding breaks the other way is not a mismatch; the reference
/// still computes and renormalizes its own probabilities of those experts).
#[derive(Debug, Default)]
pub enum Routes {
    /// Neither (timed calls).
    #[default]
    Off,
    /// Each layer's `[q, k]` expert ids of the first sequence, on the CPU.
    Record(Vec<Tensor>),
    /// The recorded ids, taken in layer order.
    Replay(std::collections::VecDeque<Tensor>),
}

impl Routes {
    fn replay(&mut self) -> Option<Tensor> {
        match self {
            Routes::Replay(ids) => ids.pop_front(),
            _ => None,
        }
    }

    fn record(&mut self, ids: &Tensor, q: i64) -> Result<(), TchError> {
        if let Routes::Record(all) = self {
            all.push(ids.f_narrow(0, 0, q)?.f_to_device(tch::Device::Cpu)?);
        }
        Ok(())
    }

    /// What was recorded, to replay.
    pub fn into_replay(self) -> Routes {
        match self {
            Routes::Record(all) => Routes::Replay(all.into()),
            other => other,
        }
    }
}
