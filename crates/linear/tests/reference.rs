//! Every variant against the float64 reference, at real (small-batch) Qwen3 shapes.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::{DType, Device, Op, rel_err};
use shapes::{ModelConfig, OpKind, Step};

#[test]
fn every_variant_matches_float64_at_decode_and_prefill() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let op = linear::Linear;
    let mut checked = 0;
    for step in [Step::decode(2, 128), Step::prefill(1, 16)] {
        for p in shapes::derive(&cfg, step)
            .iter()
            .filter(|p| p.op == OpKind::Linear)
        {
            for v in op.variants() {
                if !op.applies(v, p) {
                    continue;
                }
                let mut prepared = op.prepare(v, p, DType::F32, Device::CPU).unwrap();
                prepared.run().unwrap();
                // the op's word on its state (the plan's cold cases) is the prepared case's
                assert_eq!(op.holds_state(v, p), prepared.state_bytes() > 0);
                let err = rel_err(&prepared.check().unwrap()).unwrap();
                assert!(err < 1e-5, "{v} {} err {err}", p.site);
                checked += 1;
            }
        }
    }
    // 8 aten sites + 2 fused sites, two steps
    assert_eq!(checked, 20);
}

#[test]
fn variants_apply_to_their_sites_only() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let ps = shapes::derive(&cfg, Step::decode(1, 128));
    let op = linear::Linear;
    let site = |s: &str| {
        ps.iter()
            .find(|p| p.site == s && p.op == OpKind::Linear)
            .unwrap()
    };
    assert!(op.applies("fused_qkv", site("qkv_proj")));
    assert!(!op.applies("aten", site("qkv_proj")));
    assert!(!op.applies("fused_qkv", site("q_proj")));
    assert!(op.applies("fused_gate_up", site("gate_up_proj")));
}

#[test]
fn a_wrong_weight_is_caught_by_the_reference() {
    // two weight rows swapped (a layout bug) moves 2 of 1024 output columns: a small
    // error the f32 tolerance must still catch, while rounding-sized noise must pass
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let p = shapes::derive(&cfg, Step::decode(4, 128))
        .into_iter()
        .find(|p| p.site == "k_proj" && p.op == OpKind::Linear)
        .unwrap();
    let mut prepared = linear::Linear
        .prepare("aten", &p, DType::F32, Device::CPU)
        .unwrap();
    let check = prepared.check().unwrap();
    let tol = harness::dtype::tolerance(DType::F32);
    assert!(rel_err(&check).unwrap() < tol);
    let cols = check.output.size()[1];
    let mut order: Vec<i64> = (0..cols).collect();
    order.swap(0, 1);
    let order = tch::Tensor::from_slice(&order);
    let swapped = harness::Check {
        output: check.output.index_select(1, &order),
        reference: check.reference.shallow_clone(),
    };
    let err = rel_err(&swapped).unwrap();
    assert!(err > tol, "swapped rows gave {err}, tolerance {tol}");
    let noisy = harness::Check {
        output: &check.output * (1.0 + 1e-7),
        reference: check.reference.shallow_clone(),
    };
    assert!(rel_err(&noisy).unwrap() < tol);
}
