//! A whole Qwen3 decode step, measured end to end, so the per-op model can be checked
//! against the real thing.
//!
//! [`model::forward`] is a Qwen3 decoder written with tch at the real shapes of any dense
//! model file — embedding; per layer input RMSNorm, q/k/v projections, q_norm/k_norm,
//! RoPE, cache update, SDPA with GQA, o_proj, residual, post RMSNorm, SwiGLU MLP,
//! residual; final norm; lm_head on the last token; greedy argmax. Weights are random from
//! a fixed seed: nothing is downloaded, and timing does not depend on the values.
//!
//! Variants (op `decode`, site `step`) are the profiles `opbench predict` composes:
//! - `hf-eager`: transformers' modeling_qwen3 op for op (composed RMSNorm, separate
//!   projections, rotate_half RoPE, DynamicCache `cat`, `sdpa(enable_gqa=True)`).
//! - `fused`: aten `rms_norm`, fused QKV and gate-up projections, a static cache written
//!   with `index_copy_` (attention over its filled prefix).
//!
//! Sites: `step` (the whole forward); at each decode step also one decoder layer of it
//! (layer 0, from the same L-long cache), [`LAYER_REPEATS`] layers per timed call and
//! reported per layer: `layer` makes each call once, in the model's order (the calls in
//! their sequence); `layer_blocked` makes each call [`LAYER_REPEATS`] times in a row before
//! the next (each call as its op case repeats it). Their ratio at a host-bound batch is
//! the profile's own context factor ([`StepProfile::layer_context`]), measured in the
//! process that measures the step. And `layer_beside` ([`Op::beside`]): the same layer as
//! `layer`, timed once before every sample of the step at the step's batch, so that it
//! sees the host in the state the step's samples saw (the H200's host switches between
//! states ~1.9× apart within seconds; `predict --host-model controlled` prices the step's
//! host costs at it).
//!
//! A decode case is one step of B sequences at cache length L (every timed call starts from
//! the same L-long cache); a prefill case is the whole prompt of S tokens into an empty
//! cache (time to first token). Each row's note gives the weight and KV-cache footprint; a
//! case that does not fit is an `oom` row.
//!
//! Reference: the float64 CPU forward of the same weights, inputs and cache for the first
//! sequence; its logits are compared with the case's.

pub mod model;
pub mod weights;

use std::cell::RefCell;
use std::rc::Rc;

use harness::{Config, DType, Device, Failure, Op, Prepared, dtype};
use model::{
    Cache, Flavor, Routes, StepCtx, Weights, forward, forward_routed, fuse, layer_forward,
    random_weights,
};
use shapes::{Dims, ModelConfig, OpKind, Phase, Problem, StepProfile};
use tch::{Kind, TchError, Tensor};

/// The whole-step op.
#[derive(Debug, Default)]
pub struct Decode {
    /// The last model built, reused across the cases of one model, dtype and device.
    weights: RefCell<Option<(String, Rc<RefCell<Weights>>)>>,
    /// Its float64 CPU copy, made on the first check.
    reference: RefCell<Option<(String, Rc<Weights>)>>,
}

/// Largest relative logit error a whole forward may show against float64 (the one table's
/// step bound, [`DType::tolerance`]).
pub fn tolerance(dt: DType) -> f64 {
    dt.tolerance(shapes::Check::Step)
}

pub use shapes::LAYER_REPEATS;

/// One decoder layer of a profile's step (sites `layer`, `layer_blocked`).
struct PreparedLayer {
    weights: Rc<RefCell<Weights>>,
    reference: Rc<Weights>,
    hs: Tensor,
    cache: Cache,
    cache_init: (Tensor, Tensor),
    ctx: StepCtx,
    pos0: i64,
    blocked: bool,
    note: String,
    tol: f64,
    /// The routing the checked call chose (an MoE layer), for its reference.
    routes: Routes,
}

impl PreparedLayer {
    /// Layer 0 once, from the L-long cache (left as it was).
    fn layer(&mut self) -> Result<Tensor, TchError> {
        let w = self.weights.borrow();
        layer_forward(
            &w,
            &w.layers[0],
            &mut self.cache,
            &self.hs,
            &self.ctx,
            false,
        )
    }
}

impl Prepared for PreparedLayer {
    fn run(&mut self) -> Result<(), TchError> {
        // LAYER_REPEATS layers' worth of calls either way: blocked, one pass repeats each
        let passes = if self.blocked { 1 } else { LAYER_REPEATS };
        for _ in 0..passes {
            drop(self.layer()?);
        }
        Ok(())
    }

    fn output(&mut self) -> Result<Tensor, TchError> {
        *self.ctx.routes.borrow_mut() = Routes::Record(Vec::new());
        let out = self.layer();
        self.routes = self.ctx.routes.take().into_replay();
        out?.f_narrow(0, 0, 1)
    }

    fn reference(&mut self) -> Result<Tensor, TchError> {
        let c = |t: &Tensor| {
            t.f_narrow(0, 0, 1)?
                .f_to_device(tch::Device::Cpu)?
                .f_to_kind(Kind::Double)
        };
        let hs = c(&self.hs)?;
        let mut cache = Cache::Dynamic {
            k: Some(c(&self.cache_init.0)?),
            v: Some(c(&self.cache_init.1)?),
        };
        let q = hs.size()[1];
        let ctx = StepCtx::new(&self.reference, 1, q, self.pos0, Flavor::Reference, false)?;
        *ctx.routes.borrow_mut() = std::mem::take(&mut self.routes);
        layer_forward(
            &self.reference,
            &self.reference.layers[0],
            &mut cache,
            &hs,
            &ctx,
            false,
        )
    }

    fn note(&self) -> Option<String> {
        Some(self.note.clone())
    }

    fn calls_per_run(&self) -> u64 {
        LAYER_REPEATS as u64
    }

    fn graph_calls(&self) -> u64 {
        1
    }

    fn tolerance(&self) -> Option<f64> {
        Some(self.tol)
    }

    fn waits_for_device(&self) -> Option<String> {
        waits(&self.weights.borrow().cfg, self.ctx.flavor())
    }
}

/// Why an MoE step or layer of a flavor waits for the device: hf-eager runs transformers'
/// expert loop ([`shapes::moe::waits_for_device`]).
fn waits(cfg: &ModelConfig, flavor: Flavor) -> Option<String> {
    let variant = flavor.profile().variant(OpKind::Moe, "experts")?;
    (cfg.is_moe() && shapes::moe::waits_for_device(OpKind::Moe, variant)).then(|| {
        format!(
            "its MoE layers run the experts' `{variant}`, which waits for the device per expert hit"
        )
    })
}

struct PreparedStep {
    weights: Rc<RefCell<Weights>>,
    reference: Rc<Weights>,
    ids: Tensor,
    caches: Vec<Cache>,
    /// The cache contents at L (before any step), to rebuild the reference's cache.
    cache_init: Vec<(Tensor, Tensor)>,
    pos0: i64,
    flavor: Flavor,
    note: String,
    tol: f64,
    /// Layers the check runs ([`check_layers`]), and the routing its forward chose.
    check_layers: usize,
    routes: Routes,
}

impl Prepared for PreparedStep {
    fn run(&mut self) -> Result<(), TchError> {
        let w = self.weights.borrow();
        let logits = forward(
            &w,
            &self.ids,
            self.pos0,
            &mut self.caches,
            self.flavor,
            false,
        )?;
        // greedy choice of the next token, as generate() makes it
        drop(logits.f_argmax(-1, false)?);
        Ok(())
    }

    fn output(&mut self) -> Result<Tensor, TchError> {
        let w = self.weights.borrow();
        let (logits, routes) = forward_routed(
            &w,
            &self.ids,
            self.pos0,
            &mut self.caches[..self.check_layers],
            self.flavor,
            false,
            Routes::Record(Vec::new()),
        )?;
        self.routes = routes.into_replay();
        logits.f_narrow(0, 0, 1)
    }

    fn reference(&mut self) -> Result<Tensor, TchError> {
        let ids = self.ids.f_narrow(0, 0, 1)?.f_to_device(tch::Device::Cpu)?;
        let mut caches = self
            .cache_init
            .iter()
            .take(self.check_layers)
            .map(|(k, v)| {
                let c = |t: &Tensor| {
                    t.f_narrow(0, 0, 1)?
                        .f_to_device(tch::Device::Cpu)?
                        .f_to_kind(Kind::Double)
                };
                Ok(if self.pos0 == 0 {
                    Cache::Dynamic { k: None, v: None }
                } else {
                    Cache::Dynamic {
                        k: Some(c(k)?),
                        v: Some(c(v)?),
                    }
                })
            })
            .collect::<Result<Vec<_>, TchError>>()?;
        forward_routed(
            &self.reference,
            &ids,
            self.pos0,
            &mut caches,
            Flavor::Reference,
            false,
            std::mem::take(&mut self.routes),
        )
        .map(|(logits, _)| logits)
    }

    fn note(&self) -> Option<String> {
        Some(self.note.clone())
    }

    fn graph_calls(&self) -> u64 {
        1
    }

    fn tolerance(&self) -> Option<f64> {
        Some(self.tol)
    }

    fn waits_for_device(&self) -> Option<String> {
        waits(&self.weights.borrow().cfg, self.flavor)
    }
}

impl Decode {
    fn weights_for(
        &self,
        cfg: &ModelConfig,
        dt: DType,
        device: Device,
    ) -> Result<Rc<RefCell<Weights>>, TchError> {
        let key = format!("{}/{dt}/{device}", cfg.name);
        let mut slot = self.weights.borrow_mut();
        if let Some((k, w)) = slot.as_ref() {
            if *k == key {
                return Ok(w.clone());
            }
        }
        // free the previous model before making the next
        *slot = None;
        *self.reference.borrow_mut() = None;
        let w = Rc::new(RefCell::new(random_weights(
            cfg,
            dtype::kind(dt),
            device.tch(),
            false,
        )?));
        *slot = Some((key, w.clone()));
        Ok(w)
    }

    fn reference_for(&self, w: &Rc<RefCell<Weights>>, key: &str) -> Result<Rc<Weights>, TchError> {
        let mut slot = self.reference.borrow_mut();
        if let Some((k, r)) = slot.as_ref() {
            if k == key {
                return Ok(r.clone());
            }
        }
        let layers = check_layers(&w.borrow().cfg);
        let r = Rc::new(w.borrow().to_reference(layers)?);
        *slot = Some((key.to_string(), r.clone()));
        Ok(r)
    }
}

/// Layers a step's check runs against float64 on the CPU: all of a dense model's; the first
/// [`MOE_CHECK_LAYERS`] of an MoE model's (Qwen3-30B-A3B in float64 is 244 GB), the same
/// code over the same weights, every layer of them timed.
pub fn check_layers(cfg: &ModelConfig) -> usize {
    if cfg.is_moe() {
        MOE_CHECK_LAYERS.min(cfg.num_hidden_layers)
    } else {
        cfg.num_hidden_layers
    }
}

/// See [`check_layers`].
pub const MOE_CHECK_LAYERS: usize = 2;

/// One decoder layer of the step `step`, at `site`: the same shape, called once per
/// decoder layer of a forward.
fn layer_of(step: &Problem, site: &'static str) -> Problem {
    let layers = match step.dims {
        Dims::Step { layers, .. } => layers,
        _ => 1,
    };
    Problem {
        site,
        calls_per_step: layers,
        step_work: None,
        ..step.clone()
    }
}

impl Op for Decode {
    fn kind(&self) -> OpKind {
        OpKind::Decode
    }

    fn variants(&self) -> Vec<&'static str> {
        StepProfile::ALL.iter().map(|p| p.as_str()).collect()
    }

    /// Every step problem of the grid, and after each decode step its one layer, in
    /// sequence and blocked ([`LAYER_REPEATS`]).
    fn problems(&self, config: &Config) -> Vec<Problem> {
        let mut out = Vec::new();
        for p in config
            .models
            .iter()
            .flat_map(|m| config.profile.problems(m, OpKind::Decode))
        {
            let layer = p.phase == Phase::Decode;
            out.push(p.clone());
            if layer {
                let (_, sequence, alone) = StepProfile::HfEager.layer_context();
                out.extend([sequence, alone].map(|site| layer_of(&p, site)));
            }
        }
        out
    }

    /// Beside each step's samples (decode or prefill), one decoder layer of the same step and
    /// batch in sequence (site [`StepProfile::layer_beside`]): the layer in the step's own
    /// host state, which `predict --host-model controlled` prices the step's host costs at.
    fn beside(&self, variant: &str, problem: &Problem) -> Option<Problem> {
        let profile: StepProfile = variant.parse().ok()?;
        let (_, site) = profile.layer_beside();
        (problem.site == "step").then(|| layer_of(problem, site))
    }

    fn prepare(
        &self,
        variant: &str,
        problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let (batch, q_len, cache_len, profile, cfg) = step_target(variant, problem)?;
        let flavor = Flavor::from(profile);
        let weights = self.weights_for(&cfg, dt, device)?;
        if flavor == Flavor::Fused {
            for l in weights.borrow_mut().layers.iter_mut() {
                fuse(l)?;
            }
        }
        let reference = self.reference_for(&weights, &format!("{}/{dt}/{device}", cfg.name))?;
        let (b, q, l) = (batch as i64, q_len as i64, cache_len as i64);
        let (hkv, d) = (cfg.num_key_value_heads as i64, cfg.head_dim as i64);
        let kind = dtype::kind(dt);
        let dev = device.tch();
        tch::manual_seed(99);
        let ids = Tensor::f_randint(cfg.vocab_size as i64, [b, q], (Kind::Int64, dev))?;
        // a layer case needs its one layer's cache
        let layers = if problem.site == "step" {
            cfg.num_hidden_layers
        } else {
            1
        };
        let (mut caches, mut cache_init) =
            make_caches(layers, [b, hkv, l, q, d], (kind, dev), flavor)?;
        if problem.site != "step" {
            let (_, sequence, alone) = profile.layer_context();
            let (_, beside) = profile.layer_beside();
            let blocked = match problem.site {
                s if s == sequence || s == beside => false,
                s if s == alone => true,
                other => return Err(Failure::error(format!("decode: no site {other}"))),
            };
            let hs = Tensor::f_randn([b, q, cfg.hidden_size as i64], (Kind::Float, dev))?
                .f_to_kind(kind)?;
            let static_cache = flavor == Flavor::Fused;
            let ctx = StepCtx::new(&weights.borrow(), b, q, l, flavor, static_cache)?;
            let ctx = if blocked {
                ctx.blocked(LAYER_REPEATS)
            } else {
                ctx
            };
            let how = layer_how(blocked, problem.site == beside);
            return Ok(Box::new(PreparedLayer {
                weights,
                reference,
                hs,
                cache: caches.swap_remove(0),
                cache_init: cache_init.swap_remove(0),
                ctx,
                pos0: l,
                blocked,
                note: format!(
                    "one decoder layer of the {variant} step (layer 0, from the L-long cache): {how}; \
                     {LAYER_REPEATS} layers per timed call, reported per layer"
                ),
                tol: tolerance(dt),
                routes: Routes::Off,
            }));
        }
        let weight_bytes = weights.borrow().bytes();
        let kv_bytes =
            2 * cfg.num_hidden_layers as u64 * (b * hkv * (l + q) * d) as u64 * dt.size() as u64;
        let check = check_layers(&cfg);
        let note = step_note(&cfg, problem.phase, (weight_bytes, kv_bytes), check);
        Ok(Box::new(PreparedStep {
            weights,
            reference,
            ids,
            caches,
            cache_init,
            pos0: l,
            flavor,
            note,
            tol: tolerance(dt),
            check_layers: check,
            routes: Routes::Off,
        }))
    }
}

/// A step case's batch, query length, cache length, profile and model, each checked: a
/// model whose family opbench cannot compose is `unsupported`.
fn step_target(
    variant: &str,
    problem: &Problem,
) -> Result<(usize, usize, usize, StepProfile, ModelConfig), Failure> {
    let Dims::Step {
        batch,
        q_len,
        cache_len,
        ..
    } = problem.dims
    else {
        return Err(Failure::error(format!("decode got dims {}", problem.dims)));
    };
    let profile: StepProfile = variant
        .parse()
        .map_err(|e| Failure::error(format!("decode profile: {e}")))?;
    let cfg = ModelConfig::by_name(&problem.model)?;
    if let Some(why) = cfg.family.not_composed() {
        return Err(Failure::unsupported(format!(
            "{} ({} family): {why}",
            cfg.name, cfg.family
        )));
    }
    Ok((batch, q_len, cache_len, profile, cfg))
}

/// A whole step's note: what it is, the bytes its weights and cache take, how far the
/// check against float64 went.
fn step_note(
    cfg: &ModelConfig,
    phase: Phase,
    (weight_bytes, kv_bytes): (u64, u64),
    check: usize,
) -> String {
    let what = if phase == Phase::Prefill {
        "prefill (time to first token)"
    } else {
        "one decode step"
    };
    let checked = if check < cfg.num_hidden_layers {
        format!(
            "; checked through its first {check} of {} layers, routed as the forward chose",
            cfg.num_hidden_layers
        )
    } else {
        String::new()
    };
    format!(
        "{what}; weights {:.0} MiB, KV cache {:.0} MiB; random weights, fixed seed{checked}",
        weight_bytes as f64 / 1048576.0,
        kv_bytes as f64 / 1048576.0
    )
}

/// How a layer case makes its calls, for its note.
fn layer_how(blocked: bool, beside: bool) -> String {
    if blocked {
        format!(
            "each call made {LAYER_REPEATS} times in a row before the next (as its op case repeats it)"
        )
    } else if beside {
        "each call made once, in the model's order, timed once before every sample of \
         the step at this batch (the step's own host state)"
            .to_string()
    } else {
        "each call made once, in the model's order".to_string()
    }
}

/// Each of `layers` layers' cache of L random keys and values (`[b, hkv, l, q, d]`), as
/// the flavor keeps it (a static buffer of L + q, or the tensors), and its initial tensors.
#[allow(clippy::type_complexity)]
fn make_caches(
    layers: usize,
    [b, hkv, l, q, d]: [i64; 5],
    (kind, dev): (Kind, tch::Device),
    flavor: Flavor,
) -> Result<(Vec<Cache>, Vec<(Tensor, Tensor)>), TchError> {
    let mut caches = Vec::with_capacity(layers);
    let mut cache_init = Vec::with_capacity(layers);
    for _ in 0..layers {
        let k = Tensor::f_randn([b, hkv, l, d], (Kind::Float, dev))?.f_to_kind(kind)?;
        let v = Tensor::f_randn([b, hkv, l, d], (Kind::Float, dev))?.f_to_kind(kind)?;
        caches.push(match flavor {
            Flavor::Fused => {
                let buf = |t: &Tensor| -> Result<Tensor, TchError> {
                    let out = Tensor::f_zeros([b, hkv, l + q, d], (kind, dev))?;
                    out.f_narrow(2, 0, l)?.f_copy_(t)?;
                    Ok(out)
                };
                Cache::Static {
                    k: buf(&k)?,
                    v: buf(&v)?,
                }
            }
            _ if l == 0 => Cache::Dynamic { k: None, v: None },
            _ => Cache::Dynamic {
                k: Some(k.shallow_clone()),
                v: Some(v.shallow_clone()),
            },
        });
        cache_init.push((k, v));
    }
    Ok((caches, cache_init))
}
