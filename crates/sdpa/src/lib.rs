//! Scaled dot-product attention at Qwen3's GQA shapes: which kernel does this build give
//! me, and what does the fallback cost?
//!
//! Variants, each forced explicitly (only `auto` lets the dispatcher choose):
//! - `math`: `_scaled_dot_product_attention_math(..., enable_gqa=True)`, the composite
//!   fallback (matmul, softmax, matmul).
//! - `efficient`: `_scaled_dot_product_efficient_attention`. It takes no GQA (not on ROCm
//!   either): K/V are expanded to H heads in prepare, and the row says so.
//! - `flash`: `_scaled_dot_product_flash_attention` through the `atenx` shim (tch cannot
//!   wrap it). Called with the GQA shapes first; if the kernel refuses them, K/V are
//!   expanded to H heads and the row says so.
//! - `cudnn`: `_scaled_dot_product_cudnn_attention` through `atenx`, same GQA handling.
//! - `cpu_flash`: `_scaled_dot_product_flash_attention_for_cpu`, same GQA handling.
//! - `auto`: `scaled_dot_product_attention(..., enable_gqa=True)` as transformers calls
//!   it; the `kernel` column records what `_fused_sdp_choice` reports for that exact case.
//!
//! Inputs follow transformers' layout: q is `[B, q, H, D]` transposed to `[B, H, q, D]`;
//! K/V are the contiguous cache `[B, Hkv, L+q, D]`. Decode (q = 1) is not causal, prefill
//! is. A variant the build or device lacks becomes an `unsupported` row carrying PyTorch's
//! own message.
//!
//! Reference: float64 on the CPU for the first sequence and the last (up to) 64 queries,
//! which attend to the most keys, against all keys with the causal offset of the cache.

use harness::tensors::{StateCopies, f64_cpu, randn};
use harness::{DType, Device, Failure, Op, Prepared};
use shapes::{Dims, OpKind, Problem};
use tch::{Kind, TchError, Tensor};

/// The SDPA op.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sdpa;

const CHECK_QUERIES: i64 = 64;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    Math,
    Efficient,
    Flash,
    Cudnn,
    CpuFlash,
    Auto,
}

struct PreparedSdpa {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool,
    variant: Variant,
    kernel: Option<String>,
    note: Option<String>,
    /// K and V as the kernel gets them (expanded to H heads where it needs that); copies of
    /// them in turn in the cold modes.
    state: StateCopies,
}

fn call(
    variant: Variant,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    causal: bool,
) -> Result<Tensor, TchError> {
    match variant {
        Variant::Math => Ok(
            Tensor::f_internal_scaled_dot_product_attention_math::<Tensor>(
                q, k, v, None, 0.0, causal, None, None, true,
            )?
            .0,
        ),
        Variant::Efficient => Ok(Tensor::f_internal_scaled_dot_product_efficient_attention::<
            Tensor,
        >(q, k, v, None, false, 0.0, causal, None)?
        .0),
        Variant::Flash => atenx::sdpa_flash(q, k, v, causal, None),
        Variant::Cudnn => atenx::sdpa_cudnn(q, k, v, causal, None),
        Variant::CpuFlash => Ok(
            Tensor::f_internal_scaled_dot_product_flash_attention_for_cpu::<Tensor>(
                q, k, v, 0.0, causal, None, None,
            )?
            .0,
        ),
        Variant::Auto => {
            Tensor::f_scaled_dot_product_attention::<Tensor>(q, k, v, None, 0.0, causal, None, true)
        }
    }
}

/// K or V `[B, Hkv, S, D]` repeated to `[B, H, S, D]` (what `repeat_kv` does).
fn expand_heads(t: &Tensor, heads: i64) -> Result<Tensor, TchError> {
    let groups = heads / t.size()[1];
    t.f_repeat_interleave_self_int(groups, 1, None)?
        .f_contiguous()
}

impl PreparedSdpa {
    fn forward(&mut self) -> Result<Tensor, TchError> {
        let kv = self.state.take();
        call(self.variant, &self.q, &kv[0], &kv[1], self.causal)
    }
}

impl Prepared for PreparedSdpa {
    fn run(&mut self) -> Result<(), TchError> {
        self.forward().map(drop)
    }

    fn state_bytes(&self) -> u64 {
        self.state.bytes()
    }

    fn spread_state(&mut self, copies: usize) -> Result<(), TchError> {
        self.state.spread(copies)
    }

    fn output(&mut self) -> Result<Tensor, TchError> {
        let ql = self.q.size()[2];
        let n = ql.min(CHECK_QUERIES);
        self.forward()?.f_narrow(0, 0, 1)?.f_narrow(2, ql - n, n)
    }

    fn reference(&mut self) -> Result<Tensor, TchError> {
        let (h, ql) = (self.q.size()[1], self.q.size()[2]);
        let n = ql.min(CHECK_QUERIES);
        let q = f64_cpu(&self.q.f_narrow(0, 0, 1)?.f_narrow(2, ql - n, n)?)?;
        let k = expand_heads(&f64_cpu(&self.k.f_narrow(0, 0, 1)?)?, h)?;
        let v = expand_heads(&f64_cpu(&self.v.f_narrow(0, 0, 1)?)?, h)?;
        let kv = k.size()[2];
        let d = q.size()[3] as f64;
        let mut scores = q.f_matmul(&k.f_transpose(2, 3)?)?.f_div_scalar(d.sqrt())?;
        if self.causal {
            // query i of the last n sits at position kv - n + i and sees keys 0..=that
            let qi = Tensor::f_arange_start(kv - n, kv, (Kind::Int64, tch::Device::Cpu))?
                .f_unsqueeze(1)?;
            let kj = Tensor::f_arange(kv, (Kind::Int64, tch::Device::Cpu))?.f_unsqueeze(0)?;
            let masked = kj.f_gt_tensor(&qi)?;
            scores = scores.f_masked_fill(&masked, f64::NEG_INFINITY)?;
        }
        scores.f_softmax(-1, Kind::Double)?.f_matmul(&v)
    }

    fn kernel(&self) -> Option<String> {
        self.kernel.clone()
    }

    fn note(&self) -> Option<String> {
        self.note.clone()
    }
}

impl Op for Sdpa {
    fn kind(&self) -> OpKind {
        OpKind::Sdpa
    }

    /// The KV cache.
    fn holds_state(&self, _variant: &str, _problem: &Problem) -> bool {
        true
    }

    fn variants(&self) -> Vec<&'static str> {
        vec!["math", "efficient", "flash", "cudnn", "cpu_flash", "auto"]
    }

    fn prepare(
        &self,
        variant: &str,
        problem: &Problem,
        dt: DType,
        device: Device,
    ) -> Result<Box<dyn Prepared>, Failure> {
        let Dims::Sdpa {
            batch,
            q_heads,
            kv_heads,
            q_len,
            kv_len,
            head_dim,
            causal,
        } = problem.dims
        else {
            return Err(Failure::error(format!("sdpa got dims {}", problem.dims)));
        };
        let variant = match variant {
            "math" => Variant::Math,
            "efficient" => Variant::Efficient,
            "flash" => Variant::Flash,
            "cudnn" => Variant::Cudnn,
            "cpu_flash" => Variant::CpuFlash,
            "auto" => Variant::Auto,
            other => return Err(Failure::error(format!("unknown sdpa variant `{other}`"))),
        };
        let (b, h, hkv) = (batch as i64, q_heads as i64, kv_heads as i64);
        let (ql, kv, d) = (q_len as i64, kv_len as i64, head_dim as i64);
        let q = randn(&[b, ql, h, d], dt, device, 8)?.f_transpose(1, 2)?;
        let k = randn(&[b, hkv, kv, d], dt, device, 9)?;
        let v = randn(&[b, hkv, kv, d], dt, device, 10)?;
        let expanded = |note: &str| -> Result<(Tensor, Tensor, Option<String>), TchError> {
            Ok((
                expand_heads(&k, h)?,
                expand_heads(&v, h)?,
                Some(note.to_string()),
            ))
        };
        let (k_in, v_in, note) = match variant {
            Variant::Efficient => {
                expanded("K/V expanded to H heads in prepare (no GQA in this kernel)")?
            }
            // flash, cudnn and cpu_flash take GQA shapes on some builds: try those first
            Variant::Flash | Variant::Cudnn | Variant::CpuFlash => {
                match call(variant, &q, &k, &v, causal) {
                    Ok(_) => (k.shallow_clone(), v.shallow_clone(), None),
                    Err(gqa_err) => {
                        let (ke, ve, note) = expanded(
                            "K/V expanded to H heads in prepare (kernel refused GQA shapes)",
                        )?;
                        // a backend that is missing altogether fails the same way again:
                        // report its own reason for the expanded call
                        match call(variant, &q, &ke, &ve, causal) {
                            Ok(_) => (ke, ve, note),
                            Err(e) => {
                                let mut f = harness::classify(&e);
                                if f.status == harness::Status::Error {
                                    f = harness::classify(&gqa_err);
                                }
                                return Err(f);
                            }
                        }
                    }
                }
            }
            Variant::Math | Variant::Auto => (k.shallow_clone(), v.shallow_clone(), None),
        };
        let kernel = match variant {
            Variant::Auto => {
                let choice = Tensor::f_internal_fused_sdp_choice::<Tensor>(
                    &q, &k, &v, None, 0.0, causal, None, true,
                )?;
                Some(atenx::sdp_backend_name(choice).to_string())
            }
            Variant::Math => Some("math".into()),
            Variant::Efficient => Some("efficient".into()),
            Variant::Flash => Some("flash".into()),
            Variant::Cudnn => Some("cudnn".into()),
            Variant::CpuFlash => Some("flash".into()),
        };
        Ok(Box::new(PreparedSdpa {
            state: StateCopies::of(&[&k_in, &v_in]),
            q,
            k,
            v,
            causal,
            variant,
            kernel,
            note,
        }))
    }
}
