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
    // the check compares against an independent float64 product, so corrupting the
    // prepared output path must show up as a large error
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let p = shapes::derive(&cfg, Step::decode(4, 128))
        .into_iter()
        .find(|p| p.site == "k_proj" && p.op == OpKind::Linear)
        .unwrap();
    let mut prepared = linear::Linear
        .prepare("aten", &p, DType::F32, Device::CPU)
        .unwrap();
    let mut check = prepared.check().unwrap();
    check.output = check.output.transpose(0, 1).contiguous().transpose(0, 1) * 1.01;
    assert!(rel_err(&check).unwrap() > 5e-3);
}
