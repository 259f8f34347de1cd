//! A Qwen3 decoder forward in tch, at the real shapes of a model file, with random weights.

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

/// One decoder layer's weights (PyTorch's `[out, in]` layout, no biases).
#[derive(Debug)]
pub struct Layer {
    pub input_norm: Tensor,
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub o: Tensor,
    pub q_norm: Tensor,
    pub k_norm: Tensor,
    pub post_norm: Tensor,
    pub gate: Tensor,
    pub up: Tensor,
    pub down: Tensor,
    /// `cat(q, k, v)` and `cat(gate, up)` along the output dim, for the fused flavor.
    pub qkv: Option<Tensor>,
    pub gate_up: Option<Tensor>,
}

/// A model's weights on one device in one dtype.
#[derive(Debug)]
pub struct Weights {
    pub cfg: ModelConfig,
    pub embed: Tensor,
    pub layers: Vec<Layer>,
    pub final_norm: Tensor,
    /// The embedding itself when `tie_word_embeddings` (every Qwen3 up to 4B).
    pub lm_head: Tensor,
    /// RoPE inverse frequencies, float32 as transformers keeps them (float64 for the
    /// reference).
    pub inv_freq: Tensor,
}

/// Weights drawn from a fixed seed: projections N(0, 1/fan_in), norms 1 + N(0, 0.1²),
/// embeddings N(0, 1). No weights are downloaded; the shapes are the model's.
pub fn random_weights(
    cfg: &ModelConfig,
    kind: Kind,
    device: tch::Device,
    fused: bool,
) -> Result<Weights, TchError> {
    tch::manual_seed(1234);
    let (e, h, hkv, d, i, v) = (
        cfg.hidden_size as i64,
        cfg.num_attention_heads as i64,
        cfg.num_key_value_heads as i64,
        cfg.head_dim as i64,
        cfg.intermediate_size as i64,
        cfg.vocab_size as i64,
    );
    let lin = |out: i64, inp: i64| -> Result<Tensor, TchError> {
        Tensor::f_randn([out, inp], (Kind::Float, device))?
            .f_mul_scalar(1.0 / (inp as f64).sqrt())?
            .f_to_kind(kind)
    };
    let norm = |n: i64| -> Result<Tensor, TchError> {
        Tensor::f_randn([n], (Kind::Float, device))?
            .f_mul_scalar(0.1)?
            .f_add_scalar(1.0)?
            .f_to_kind(kind)
    };
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
    for _ in 0..cfg.num_hidden_layers {
        let mut l = Layer {
            input_norm: norm(e)?,
            q: lin(h * d, e)?,
            k: lin(hkv * d, e)?,
            v: lin(hkv * d, e)?,
            o: lin(e, h * d)?,
            q_norm: norm(d)?,
            k_norm: norm(d)?,
            post_norm: norm(e)?,
            gate: lin(i, e)?,
            up: lin(i, e)?,
            down: lin(e, i)?,
            qkv: None,
            gate_up: None,
        };
        if fused {
            fuse(&mut l)?;
        }
        layers.push(l);
    }
    let embed = Tensor::f_randn([v, e], (Kind::Float, device))?.f_to_kind(kind)?;
    let lm_head = if cfg.tie_word_embeddings {
        embed.shallow_clone()
    } else {
        lin(v, e)?
    };
    let exps =
        Tensor::f_arange_start_step(0, d, 2, (Kind::Float, device))?.f_div_scalar(d as f64)?;
    let inv_freq = Tensor::f_full([d / 2], cfg.rope_theta, (Kind::Float, device))?
        .f_pow(&exps)?
        .f_reciprocal()?;
    Ok(Weights {
        cfg: cfg.clone(),
        embed,
        layers,
        final_norm: norm(e)?,
        lm_head,
        inv_freq,
    })
}

/// Give a layer the concatenated QKV and gate-up weights a fused forward uses. The separate
/// q, k, v, gate and up become row slices of them (contiguous views, same values), so both
/// flavors run from one copy of the weights: fusing adds no device memory.
pub fn fuse(l: &mut Layer) -> Result<(), TchError> {
    if l.qkv.is_none() {
        let qkv = Tensor::f_cat(&[&l.q, &l.k, &l.v], 0)?;
        let (nq, nk, nv) = (l.q.size()[0], l.k.size()[0], l.v.size()[0]);
        l.q = qkv.f_narrow(0, 0, nq)?;
        l.k = qkv.f_narrow(0, nq, nk)?;
        l.v = qkv.f_narrow(0, nq + nk, nv)?;
        l.qkv = Some(qkv);
        let gate_up = Tensor::f_cat(&[&l.gate, &l.up], 0)?;
        let (ng, nu) = (l.gate.size()[0], l.up.size()[0]);
        l.gate = gate_up.f_narrow(0, 0, ng)?;
        l.up = gate_up.f_narrow(0, ng, nu)?;
        l.gate_up = Some(gate_up);
    }
    Ok(())
}

impl Weights {
    /// A float64 CPU copy (for the reference forward); the inverse frequencies are
    /// recomputed in float64.
    pub fn to_reference(&self) -> Result<Weights, TchError> {
        let c = |t: &Tensor| t.f_to_device(tch::Device::Cpu)?.f_to_kind(Kind::Double);
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok(Layer {
                    input_norm: c(&l.input_norm)?,
                    q: c(&l.q)?,
                    k: c(&l.k)?,
                    v: c(&l.v)?,
                    o: c(&l.o)?,
                    q_norm: c(&l.q_norm)?,
                    k_norm: c(&l.k_norm)?,
                    post_norm: c(&l.post_norm)?,
                    gate: c(&l.gate)?,
                    up: c(&l.up)?,
                    down: c(&l.down)?,
                    qkv: None,
                    gate_up: None,
                })
            })
            .collect::<Result<Vec<_>, TchError>>()?;
        let embed = c(&self.embed)?;
        let lm_head = if self.cfg.tie_word_embeddings {
            embed.shallow_clone()
        } else {
            c(&self.lm_head)?
        };
        let d = self.cfg.head_dim as i64;
        let exps = Tensor::f_arange_start_step(0, d, 2, (Kind::Double, tch::Device::Cpu))?
            .f_div_scalar(d as f64)?;
        let inv_freq = Tensor::f_full(
            [d / 2],
            self.cfg.rope_theta,
            (Kind::Double, tch::Device::Cpu),
        )?
        .f_pow(&exps)?
        .f_reciprocal()?;
        Ok(Weights {
            cfg: self.cfg.clone(),
            embed,
            layers,
            final_norm: c(&self.final_norm)?,
            lm_head,
            inv_freq,
        })
    }

    /// Bytes the weights take on their device (tied lm_head counted once). The same for
    /// every flavor: fused QKV and gate-up share storage with the separate projections.
    pub fn bytes(&self) -> u64 {
        let size = |t: &Tensor| harness::tensors::bytes_of(&[t]);
        let mut total = size(&self.embed) + size(&self.final_norm);
        if !self.cfg.tie_word_embeddings {
            total += size(&self.lm_head);
        }
        for l in &self.layers {
            for t in [
                &l.input_norm,
                &l.q,
                &l.k,
                &l.v,
                &l.o,
                &l.q_norm,
                &l.k_norm,
                &l.post_norm,
                &l.gate,
                &l.up,
                &l.down,
            ] {
                total += size(t);
            }
        }
        total
    }
}

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
    let cfg = &w.cfg;
    let (b, q) = (ids.size()[0], ids.size()[1]);
    let (h, hkv, d) = (
        cfg.num_attention_heads as i64,
        cfg.num_key_value_heads as i64,
        cfg.head_dim as i64,
    );
    let eps = cfg.rms_norm_eps;
    let qkv_widths = cfg.qkv_widths().map(|c| c as i64);
    let kind = w.embed.kind();
    let device = w.embed.device();

    let mut hs = Tensor::f_embedding(&w.embed, ids, -1, false, false)?;

    // Qwen3RotaryEmbedding.forward: once per forward
    let pos = Tensor::f_arange_start(pos0, pos0 + q, (Kind::Int64, device))?
        .f_unsqueeze(0)?
        .f_expand([b, q], false)?;
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
    let rope = |x: &Tensor| -> Result<Tensor, TchError> {
        x.f_mul(&cos)?.f_add(&rotate_half(x)?.f_mul(&sin)?)
    };
    // StaticCache's cache_position: made once per forward
    let at = match caches.first() {
        Some(Cache::Static { .. }) => Some(Tensor::f_arange_start(
            pos0,
            pos0 + q,
            (Kind::Int64, device),
        )?),
        _ => None,
    };

    for (layer, cache) in w.layers.iter().zip(caches.iter_mut()) {
        let residual = hs.shallow_clone();
        let x = rms_norm(&hs, &layer.input_norm, eps, flavor)?;
        let (qs, ks, vs) = match (&layer.qkv, flavor) {
            (Some(qkv), Flavor::Fused) => {
                let all = x.f_linear::<Tensor>(qkv, None)?;
                let parts = all.f_split_with_sizes(qkv_widths, -1)?;
                (
                    parts[0].shallow_clone(),
                    parts[1].shallow_clone(),
                    parts[2].shallow_clone(),
                )
            }
            _ => (
                x.f_linear::<Tensor>(&layer.q, None)?,
                x.f_linear::<Tensor>(&layer.k, None)?,
                x.f_linear::<Tensor>(&layer.v, None)?,
            ),
        };
        let qs =
            rms_norm(&qs.f_view([b, q, h, d])?, &layer.q_norm, eps, flavor)?.f_transpose(1, 2)?;
        let ks =
            rms_norm(&ks.f_view([b, q, hkv, d])?, &layer.k_norm, eps, flavor)?.f_transpose(1, 2)?;
        let vs = vs.f_view([b, q, hkv, d])?.f_transpose(1, 2)?;
        let qs = rope(&qs)?;
        let ks = rope(&ks)?;
        let (k_all, v_all) = match cache {
            Cache::Dynamic { k, v } => {
                let (k_all, v_all) = match (k.as_ref(), v.as_ref()) {
                    (Some(kc), Some(vc)) => (
                        Tensor::f_cat(&[kc, &ks], -2)?,
                        Tensor::f_cat(&[vc, &vs], -2)?,
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
                let at = at
                    .as_ref()
                    .ok_or_else(|| TchError::Kind("static cache without positions".into()))?;
                let k = k.f_index_copy_(2, at, &ks)?;
                let v = v.f_index_copy_(2, at, &vs)?;
                (k.f_narrow(2, 0, pos0 + q)?, v.f_narrow(2, 0, pos0 + q)?)
            }
        };
        let attn = Tensor::f_scaled_dot_product_attention::<Tensor>(
            &qs,
            &k_all,
            &v_all,
            None,
            0.0,
            q > 1,
            None,
            true,
        )?;
        let attn = attn
            .f_transpose(1, 2)?
            .f_contiguous()?
            .f_reshape([b, q, h * d])?;
        hs = residual.f_add(&attn.f_linear::<Tensor>(&layer.o, None)?)?;

        let residual = hs.shallow_clone();
        let x = rms_norm(&hs, &layer.post_norm, eps, flavor)?;
        let act = match (&layer.gate_up, flavor) {
            (Some(gu), Flavor::Fused) => {
                let both = x.f_linear::<Tensor>(gu, None)?;
                let halves = both.f_chunk(2, -1)?;
                halves[0].f_silu()?.f_mul(&halves[1])?
            }
            _ => x
                .f_linear::<Tensor>(&layer.gate, None)?
                .f_silu()?
                .f_mul(&x.f_linear::<Tensor>(&layer.up, None)?)?,
        };
        hs = residual.f_add(&act.f_linear::<Tensor>(&layer.down, None)?)?;
    }
    let hs = rms_norm(&hs, &w.final_norm, eps, flavor)?;
    let last = hs.f_narrow(1, q - 1, 1)?;
    last.f_linear::<Tensor>(&w.lm_head, None)?.f_squeeze_dim(1)
}
