//! The forward is right: a tiny configuration matches the float64 reference, and the two
//! profiles give the same logits on the same weights.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::Path;

use decode::model::{Cache, Flavor, Mlp, Routes, forward, forward_routed, fuse, random_weights};
use harness::{DType, Device, Op, rel_err};
use shapes::{ModelConfig, OpKind, Step};
use tch::{Kind, Tensor};

/// A tiny dense model's file; [`tiny_moe`] adds experts to it.
const TINY: &str = r#"
source = "test"
hidden_size = 64
intermediate_size = 96
num_hidden_layers = 3
num_attention_heads = 4
num_key_value_heads = 2
head_dim = 32
vocab_size = 257
rope_theta = 10000.0
rms_norm_eps = 1e-6
max_position_embeddings = 512
tie_word_embeddings = false
"#;

fn tiny() -> ModelConfig {
    let text = format!("name = \"tiny\"{TINY}");
    ModelConfig::parse(&text, Path::new("tiny.toml")).unwrap()
}

fn caches(n: usize, flavor: Flavor, kv: Option<(&Tensor, &Tensor)>, lmax: i64) -> Vec<Cache> {
    (0..n)
        .map(|_| match (flavor, kv) {
            (Flavor::Fused, _) => {
                let s = kv.map(|(k, _)| k.size()).unwrap_or(vec![2, 2, 0, 32]);
                let mk = |t: Option<&Tensor>| {
                    let buf = Tensor::zeros(
                        [s[0], s[1], lmax, s[3]],
                        (t.map_or(Kind::Float, |t| t.kind()), tch::Device::Cpu),
                    );
                    if let Some(t) = t {
                        buf.narrow(2, 0, t.size()[2]).copy_(t);
                    }
                    buf
                };
                Cache::Static {
                    k: mk(kv.map(|x| x.0)),
                    v: mk(kv.map(|x| x.1)),
                }
            }
            (_, Some((k, v))) => Cache::Dynamic {
                k: Some(k.shallow_clone()),
                v: Some(v.shallow_clone()),
            },
            (_, None) => Cache::Dynamic { k: None, v: None },
        })
        .collect()
}

#[test]
fn tiny_model_matches_float64_and_profiles_agree() {
    let cfg = tiny();
    let mut w = random_weights(&cfg, Kind::Float, tch::Device::Cpu, false).unwrap();
    let (q_before, bytes_before) = (w.layers[0].q.copy(), w.bytes());
    for l in w.layers.iter_mut() {
        fuse(l).unwrap();
    }
    // fusing keeps the values and adds no memory: q is a view into qkv
    let l0 = &w.layers[0];
    assert!(l0.q.equal(&q_before));
    assert_eq!(w.bytes(), bytes_before);
    let qkv = l0.qkv.as_ref().unwrap();
    assert_eq!(l0.q.data_ptr(), qkv.data_ptr());
    let Mlp::Dense { up, .. } = &l0.mlp else {
        panic!("a dense model's MLP")
    };
    assert!(l0.v.is_contiguous() && up.is_contiguous());
    let r = w.to_reference(3).unwrap();
    // prefill 5 tokens, then decode one, through each flavor
    let ids = Tensor::from_slice(&[3i64, 17, 250, 9, 0, 1, 2, 3, 4, 5]).view([2, 5]);
    let next = Tensor::from_slice(&[42i64, 7]).view([2, 1]);
    let mut out = Vec::new();
    for flavor in [Flavor::HfEager, Flavor::Fused, Flavor::Reference] {
        let weights = if flavor == Flavor::Reference { &r } else { &w };
        let mut c = caches(3, flavor, None, 6);
        let first = forward(weights, &ids, 0, &mut c, flavor, true).unwrap();
        let second = forward(weights, &next, 5, &mut c, flavor, true).unwrap();
        out.push((first.to_kind(Kind::Double), second.to_kind(Kind::Double)));
    }
    let err = |a: &Tensor, b: &Tensor| {
        rel_err(&harness::Check {
            output: a.shallow_clone(),
            reference: b.shallow_clone(),
        })
        .unwrap()
    };
    for (i, name) in ["hf-eager", "fused"].iter().enumerate() {
        assert!(
            err(&out[i].0, &out[2].0) < 1e-5,
            "{name} prefill {}",
            err(&out[i].0, &out[2].0)
        );
        assert!(
            err(&out[i].1, &out[2].1) < 1e-5,
            "{name} decode {}",
            err(&out[i].1, &out[2].1)
        );
    }
    assert!(err(&out[0].1, &out[1].1) < 1e-5);
    // the decode step really used the cache: a fresh forward of the new token alone differs
    let mut empty = caches(3, Flavor::Reference, None, 1);
    let alone = forward(&r, &next, 0, &mut empty, Flavor::Reference, false).unwrap();
    assert!(err(&alone, &out[2].1) > 1e-2);
}

/// A tiny MoE model: [`tiny`] with 8 experts of width 32, 2 per token.
fn tiny_moe() -> ModelConfig {
    let text = format!(
        "name = \"tiny-moe\"\nmoe_intermediate_size = 32\nnum_experts = 8\nnum_experts_per_tok = 2{TINY}"
    );
    ModelConfig::parse(&text, Path::new("tiny-moe.toml")).unwrap()
}

/// An MoE model's forward: transformers' loop (hf-eager) and its grouped GEMMs (fused)
/// match float64 through every layer, and the reference routed as the forward chose
/// agrees with one that chose for itself when no near-tie separates them; the check of
/// a step runs its first layers only.
#[test]
fn an_moe_forward_matches_float64_by_the_loop_and_the_grouped_gemm() {
    let cfg = tiny_moe();
    let mut w = random_weights(&cfg, Kind::Float, tch::Device::Cpu, false).unwrap();
    for l in w.layers.iter_mut() {
        fuse(l).unwrap();
    }
    assert!(matches!(w.layers[0].mlp, Mlp::Moe { top_k: 2, .. }));
    // every weight counted: attention, norms, router, 8 experts' gate_up and down
    let layer = 64 * 128 + 2 * 64 * 64 + 128 * 64 + 2 * 64 + 2 * 32 + 8 * 64 + 8 * 3 * 64 * 32;
    assert_eq!(w.bytes(), 4 * (3 * layer + 2 * 257 * 64 + 64));
    let r = w.to_reference(3).unwrap();
    let ids = Tensor::from_slice(&[3i64, 17, 250, 9, 0, 1, 2, 3, 4, 5]).view([2, 5]);
    let next = Tensor::from_slice(&[42i64, 7]).view([2, 1]);
    let f64s = |t: Tensor| t.to_kind(Kind::Double);
    let err = |a: &Tensor, b: &Tensor| {
        rel_err(&harness::Check {
            output: a.shallow_clone(),
            reference: b.shallow_clone(),
        })
        .unwrap()
    };
    let mut want = caches(3, Flavor::Reference, None, 6);
    drop(forward(&r, &ids, 0, &mut want, Flavor::Reference, true).unwrap());
    let (want, _) = forward_routed(
        &r,
        &next,
        5,
        &mut want,
        Flavor::Reference,
        true,
        Routes::Off,
    )
    .unwrap();
    for flavor in [Flavor::HfEager, Flavor::Fused] {
        let mut c = caches(3, flavor, None, 6);
        drop(forward(&w, &ids, 0, &mut c, flavor, true).unwrap());
        let (got, routes) = forward_routed(
            &w,
            &next,
            5,
            &mut c,
            flavor,
            true,
            Routes::Record(Vec::new()),
        )
        .unwrap();
        // one [q, k] choice per layer, of the first sequence
        let Routes::Record(chosen) = &routes else {
            panic!("recorded")
        };
        assert_eq!(chosen.len(), 3);
        assert_eq!(chosen[0].size(), [1, 2]);
        assert!(err(&f64s(got.shallow_clone()), &want) < 1e-5, "{flavor:?}");
        // the reference replaying those choices gives the same logits
        let mut again = caches(3, Flavor::Reference, None, 6);
        drop(forward(&r, &ids, 0, &mut again, Flavor::Reference, true).unwrap());
        let mut replay = routes.into_replay();
        // the prefill's routing is the reference's own; replay the decode step's only
        let (first, _) = forward_routed(
            &r,
            &next.narrow(0, 0, 1),
            5,
            &mut again
                .iter()
                .map(|c| match c {
                    Cache::Dynamic { k, v } => Cache::Dynamic {
                        k: k.as_ref().map(|t| t.narrow(0, 0, 1)),
                        v: v.as_ref().map(|t| t.narrow(0, 0, 1)),
                    },
                    Cache::Static { .. } => unreachable!(),
                })
                .collect::<Vec<_>>(),
            Flavor::Reference,
            false,
            std::mem::take(&mut replay),
        )
        .unwrap();
        assert!(
            err(&f64s(got.narrow(0, 0, 1)), &first) < 1e-5,
            "{flavor:?} replayed"
        );
    }
}

#[test]
fn the_op_checks_both_profiles_at_real_shapes() {
    // Qwen3-0.6B at B=2, L=16 on the CPU, through the same preflight the bench uses
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let op = decode::Decode::default();
    for step in [Step::decode(2, 16), Step::prefill(1, 8)] {
        let p = shapes::derive(&cfg, step)
            .into_iter()
            .find(|p| p.op == OpKind::Decode)
            .unwrap();
        for v in op.variants() {
            let (mut prepared, err) = harness::preflight(&op, v, &p, DType::F32, Device::CPU, None)
                .unwrap_or_else(|r| panic!("{v}: {:?}", r.failure));
            assert!(err < decode::tolerance(DType::F32), "{v} {err}");
            prepared.run().unwrap();
            assert!(prepared.note().unwrap().contains("KV cache"));
        }
    }
}

/// After every decode step the op measures one decoder layer of it twice: its calls once
/// each in order (`layer`) and each repeated in a row (`layer_blocked`); both check against
/// the float64 layer, make the same calls per timed run, and the repetition changes no
/// value. Prefill gets no layer cases.
#[test]
fn the_layer_cases_check_and_repeat_calls_without_changing_them() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let op = decode::Decode::default();
    let mut config = harness::Config::from_env().unwrap();
    config.models = vec![cfg.clone()];
    let problems = op.problems(&config);
    let sites = |phase: shapes::Phase| -> Vec<&str> {
        let mut s: Vec<&str> = problems
            .iter()
            .filter(|p| p.phase == phase)
            .map(|p| p.site)
            .collect();
        s.dedup();
        s
    };
    assert!(sites(shapes::Phase::Decode).contains(&"layer_blocked"));
    assert!(
        !sites(shapes::Phase::Prefill)
            .iter()
            .any(|s| s.starts_with("layer")),
        "{:?}",
        sites(shapes::Phase::Prefill)
    );
    let step = shapes::derive(&cfg, Step::decode(2, 16))
        .into_iter()
        .find(|p| p.op == OpKind::Decode)
        .unwrap();
    // the layer timed beside a step is a case of its own, at the step's batch; not beside a
    // layer
    let prefill = shapes::derive(&cfg, Step::prefill(1, 8))
        .into_iter()
        .find(|p| p.op == OpKind::Decode)
        .unwrap();
    for v in op.variants() {
        // a prefill's layer beside it: the prompt's S tokens through one layer from an
        // empty cache, checked like the step's
        let layer = op.beside(v, &prefill).unwrap();
        assert_eq!((layer.phase, layer.q_len), (shapes::Phase::Prefill, 8));
        let (mut prepared, err) = harness::preflight(&op, v, &layer, DType::F32, Device::CPU, None)
            .unwrap_or_else(|r| panic!("{v} prefill layer: {:?}", r.failure));
        assert!(
            err < decode::tolerance(DType::F32),
            "{v} prefill layer {err}"
        );
        prepared.run().unwrap();
        let profile: shapes::StepProfile = v.parse().unwrap();
        let (_, sequence, alone) = profile.layer_context();
        let beside = op.beside(v, &step).unwrap();
        assert_eq!((v, beside.site), profile.layer_beside());
        assert_eq!(beside.batch, step.batch);
        assert_eq!(beside.calls_per_step, cfg.num_hidden_layers);
        assert!(op.beside(v, &beside).is_none(), "{v}");
        assert!(!sites(shapes::Phase::Decode).contains(&beside.site));
        let mut outs = Vec::new();
        for site in [sequence, alone, beside.site] {
            let p = shapes::Problem {
                site,
                ..step.clone()
            };
            let (mut prepared, err) = harness::preflight(&op, v, &p, DType::F32, Device::CPU, None)
                .unwrap_or_else(|r| panic!("{v} {site}: {:?}", r.failure));
            assert!(err < decode::tolerance(DType::F32), "{v} {site} {err}");
            assert_eq!(prepared.calls_per_run(), decode::LAYER_REPEATS as u64);
            assert!(prepared.note().unwrap().contains("one decoder layer"));
            prepared.run().unwrap();
            outs.push(prepared.output().unwrap());
        }
        // the same inputs (fixed seed): blocked repetition leaves the layer's output as is,
        // and the layer beside the step is the layer — within the decode crate's f32
        // tolerance, the one every case is checked by: libtorch's CPU kernels split work by
        // thread, and the first runs in a fresh clone's test pass twice differed beyond
        // float32 rounding for the fused profile (never on a rerun)
        for other in [&outs[1], &outs[2]] {
            let check = harness::Check {
                output: other.shallow_clone(),
                reference: outs[0].shallow_clone(),
            };
            let err = harness::rel_err(&check).unwrap();
            assert!(err < decode::tolerance(DType::F32), "{v}: {err}");
        }
    }
}

#[test]
fn a_llama_layout_skips_qk_norm_and_still_matches_float64() {
    let llama = ModelConfig::parse(
        &format!("name = \"tiny-llama\"\nfamily = \"llama\"{TINY}"),
        Path::new("tiny-llama.toml"),
    )
    .unwrap();
    assert!(!llama.family.qk_norm());
    let ids = Tensor::from_slice(&[3i64, 17, 250, 9, 0]).view([1, 5]);
    // one set of weights, read through each layout (the tests run in parallel threads:
    // two draws from a seed need not agree)
    let mut w = random_weights(&llama, Kind::Float, tch::Device::Cpu, false).unwrap();
    let r = w.to_reference(3).unwrap();
    let run = |w: &decode::model::Weights, flavor: Flavor| {
        let mut c = caches(3, flavor, None, 6);
        forward(w, &ids, 0, &mut c, flavor, true)
            .unwrap()
            .to_kind(Kind::Double)
    };
    let err = |a: &Tensor, b: &Tensor| {
        rel_err(&harness::Check {
            output: a.shallow_clone(),
            reference: b.shallow_clone(),
        })
        .unwrap()
    };
    let (eager, reference) = (run(&w, Flavor::HfEager), run(&r, Flavor::Reference));
    let e = err(&eager, &reference);
    assert!(e < 1e-5, "{e}");
    // Qwen3's layout on the same weights normalizes q and k: other logits
    w.cfg = tiny();
    let qwen = run(&w, Flavor::HfEager);
    assert!(err(&eager, &qwen) > 1e-3, "{}", err(&eager, &qwen));
}

#[test]
fn a_qwen2_layout_adds_its_bias_in_both_flavors_and_matches_float64() {
    let qwen2 = ModelConfig::parse(
        &format!("name = \"tiny-qwen2\"\nfamily = \"qwen2\"\nattention_bias = true{TINY}"),
        Path::new("tiny-qwen2.toml"),
    )
    .unwrap();
    // two sequences: the fused flavor's static cache helper holds two
    let ids = Tensor::from_slice(&[3i64, 17, 250, 9, 0, 1, 2, 3, 4, 5]).view([2, 5]);
    let mut w = random_weights(&qwen2, Kind::Float, tch::Device::Cpu, false).unwrap();
    assert!(w.layers.iter().all(|l| l.bias.is_some()));
    let r = w.to_reference(3).unwrap();
    let run = |w: &decode::model::Weights, flavor: Flavor| {
        let mut c = caches(3, flavor, None, 6);
        forward(w, &ids, 0, &mut c, flavor, true)
            .unwrap()
            .to_kind(Kind::Double)
    };
    let err = |a: &Tensor, b: &Tensor| {
        rel_err(&harness::Check {
            output: a.shallow_clone(),
            reference: b.shallow_clone(),
        })
        .unwrap()
    };
    let (eager, reference) = (run(&w, Flavor::HfEager), run(&r, Flavor::Reference));
    assert!(
        err(&eager, &reference) < 1e-5,
        "{}",
        err(&eager, &reference)
    );
    // the fused QKV carries the three biases as one
    for l in w.layers.iter_mut() {
        fuse(l).unwrap();
    }
    assert!(w.layers.iter().all(|l| l.qkv_bias.is_some()));
    let fused = run(&w, Flavor::Fused);
    assert!(
        err(&fused, &reference) < 1e-5,
        "{}",
        err(&fused, &reference)
    );
    // the bias counts: without it the logits differ
    for l in w.layers.iter_mut() {
        l.bias = None;
        l.qkv_bias = None;
    }
    let none = run(&w, Flavor::HfEager);
    assert!(err(&none, &reference) > 1e-3, "{}", err(&none, &reference));
}
