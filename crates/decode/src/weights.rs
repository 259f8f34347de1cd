//! A model's weights for the Qwen3 decoder forward ([`crate::model`]): drawn at random at
//! the model file's shapes, fused for the fused flavor, copied to float64 for the
//! reference, and counted in bytes.

use shapes::ModelConfig;
use tch::{Kind, TchError, Tensor};

/// One decoder layer's weights (PyTorch's `[out, in]` layout; biases on q, k and v only
/// where the family has them, Qwen2's).
#[derive(Debug)]
pub struct Layer {
    pub input_norm: Tensor,
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    /// q, k and v's biases (`attention_bias`); views of `qkv_bias` once fused.
    pub bias: Option<[Tensor; 3]>,
    /// `cat` of the three biases, for the fused flavor.
    pub qkv_bias: Option<Tensor>,
    pub o: Tensor,
    pub q_norm: Tensor,
    pub k_norm: Tensor,
    pub post_norm: Tensor,
    pub mlp: Mlp,
    /// `cat(q, k, v)` along the output dim, for the fused flavor.
    pub qkv: Option<Tensor>,
}

/// A decoder layer's MLP.
#[derive(Debug)]
pub enum Mlp {
    /// A dense model's SwiGLU; `gate_up` is `cat(gate, up)` for the fused flavor.
    Dense {
        gate: Tensor,
        up: Tensor,
        down: Tensor,
        gate_up: Option<Tensor>,
    },
    /// An MoE model's block (Qwen3MoeSparseMoeBlock, crate moe): the router `[N, E]`, every
    /// expert's `gate_up` `[N, 2I, E]` and `down` `[N, E, I]`, as transformers 5.x stores them.
    Moe {
        router: Tensor,
        gate_up: Tensor,
        down: Tensor,
        top_k: i64,
    },
}

impl Mlp {
    fn tensors(&self) -> Vec<&Tensor> {
        match self {
            Mlp::Dense { gate, up, down, .. } => vec![gate, up, down],
            Mlp::Moe {
                router,
                gate_up,
                down,
                ..
            } => vec![router, gate_up, down],
        }
    }
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
    let experts = |n: usize, out: i64, inp: i64| -> Result<Tensor, TchError> {
        Tensor::f_randn([n as i64, out, inp], (Kind::Float, device))?
            .f_mul_scalar(1.0 / (inp as f64).sqrt())?
            .f_to_kind(kind)
    };
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
    for _ in 0..cfg.num_hidden_layers {
        let mlp = match (
            cfg.num_experts,
            cfg.num_experts_per_tok,
            cfg.moe_intermediate_size,
        ) {
            (Some(n), Some(k), Some(mi)) => Mlp::Moe {
                router: lin(n as i64, e)?,
                gate_up: experts(n, 2 * mi as i64, e)?,
                down: experts(n, e, mi as i64)?,
                top_k: k as i64,
            },
            _ => Mlp::Dense {
                gate: lin(i, e)?,
                up: lin(i, e)?,
                down: lin(e, i)?,
                gate_up: None,
            },
        };
        let bias = |n: i64| -> Result<Tensor, TchError> {
            Tensor::f_randn([n], (Kind::Float, device))?
                .f_mul_scalar(0.1)?
                .f_to_kind(kind)
        };
        let mut l = Layer {
            input_norm: norm(e)?,
            q: lin(h * d, e)?,
            k: lin(hkv * d, e)?,
            v: lin(hkv * d, e)?,
            bias: if cfg.attention_bias {
                Some([bias(h * d)?, bias(hkv * d)?, bias(hkv * d)?])
            } else {
                None
            },
            qkv_bias: None,
            o: lin(e, h * d)?,
            q_norm: norm(d)?,
            k_norm: norm(d)?,
            post_norm: norm(e)?,
            mlp,
            qkv: None,
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

/// Give a layer the concatenated QKV and (dense) gate-up weights a fused forward uses. The
/// separate q, k, v, gate and up become row slices of them (contiguous views, same values),
/// so both flavors run from one copy of the weights: fusing adds no device memory. An MoE
/// layer's experts are grouped already.
pub fn fuse(l: &mut Layer) -> Result<(), TchError> {
    if l.qkv.is_none() {
        let qkv = Tensor::f_cat(&[&l.q, &l.k, &l.v], 0)?;
        let (nq, nk, nv) = (l.q.size()[0], l.k.size()[0], l.v.size()[0]);
        l.q = qkv.f_narrow(0, 0, nq)?;
        l.k = qkv.f_narrow(0, nq, nk)?;
        l.v = qkv.f_narrow(0, nq + nk, nv)?;
        l.qkv = Some(qkv);
        if let Some([bq, bk, bv]) = &l.bias {
            let all = Tensor::f_cat(&[bq, bk, bv], 0)?;
            l.bias = Some([
                all.f_narrow(0, 0, nq)?,
                all.f_narrow(0, nq, nk)?,
                all.f_narrow(0, nq + nk, nv)?,
            ]);
            l.qkv_bias = Some(all);
        }
        if let Mlp::Dense {
            gate, up, gate_up, ..
        } = &mut l.mlp
        {
            let both = Tensor::f_cat(&[&*gate, &*up], 0)?;
            let (ng, nu) = (gate.size()[0], up.size()[0]);
            *gate = both.f_narrow(0, 0, ng)?;
            *up = both.f_narrow(0, ng, nu)?;
            *gate_up = Some(both);
        }
    }
    Ok(())
}

impl Weights {
    /// A float64 CPU copy of the first `layers` layers (for the reference forward, which
    /// runs as many layers as it is given caches); the inverse frequencies are recomputed
    /// in float64.
    pub fn to_reference(&self, layers: usize) -> Result<Weights, TchError> {
        let c = |t: &Tensor| t.f_to_device(tch::Device::Cpu)?.f_to_kind(Kind::Double);
        let layers = self
            .layers
            .iter()
            .take(layers)
            .map(|l| {
                Ok(Layer {
                    input_norm: c(&l.input_norm)?,
                    q: c(&l.q)?,
                    k: c(&l.k)?,
                    v: c(&l.v)?,
                    bias: match &l.bias {
                        Some([q, k, v]) => Some([c(q)?, c(k)?, c(v)?]),
                        None => None,
                    },
                    qkv_bias: None,
                    o: c(&l.o)?,
                    q_norm: c(&l.q_norm)?,
                    k_norm: c(&l.k_norm)?,
                    post_norm: c(&l.post_norm)?,
                    mlp: match &l.mlp {
                        Mlp::Dense { gate, up, down, .. } => Mlp::Dense {
                            gate: c(gate)?,
                            up: c(up)?,
                            down: c(down)?,
                            gate_up: None,
                        },
                        Mlp::Moe {
                            router,
                            gate_up,
                            down,
                            top_k,
                        } => Mlp::Moe {
                            router: c(router)?,
                            gate_up: c(gate_up)?,
                            down: c(down)?,
                            top_k: *top_k,
                        },
                    },
                    qkv: None,
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
            ]
            .into_iter()
            .chain(l.bias.iter().flatten())
            .chain(l.mlp.tensors())
            {
                total += size(t);
            }
        }
        total
    }
}
