//! Every variant against the float64 reference: decode at a long cache (large positions,
//! where a wrong table shows) and prefill.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::{DType, Device, Op, rel_err};
use shapes::{ModelConfig, OpKind, Step};

#[test]
fn every_variant_matches_float64() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let op = rope::Rope;
    let mut checked = 0;
    for step in [Step::decode(3, 4096), Step::prefill(2, 24)] {
        for p in shapes::derive(&cfg, step)
            .iter()
            .filter(|p| p.op == OpKind::Rope)
        {
            for v in op.variants().into_iter().filter(|v| op.applies(v, p)) {
                let mut prepared = op.prepare(v, p, DType::F32, Device::CPU).unwrap();
                prepared.run().unwrap();
                // the op's word on its state (the plan's cold cases) is the prepared case's
                assert_eq!(op.holds_state(v, p), prepared.state_bytes() > 0);
                let err = rel_err(&prepared.check().unwrap()).unwrap();
                // the table is float32 as in transformers: angles up to L·1 rad lose ~L·2⁻²⁴
                assert!(
                    err < harness::dtype::tolerance(DType::F32),
                    "{v} {} err {err}",
                    p.site
                );
                checked += 1;
            }
        }
    }
    // (q, k) × two variants + cache, two steps
    assert_eq!(checked, 10);
}

#[test]
fn a_wrong_position_offset_is_caught() {
    // the reference is built from L; a problem whose cache length is off by one must fail
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let mut p = shapes::derive(&cfg, Step::decode(1, 100))
        .into_iter()
        .find(|p| p.op == OpKind::Rope && p.site == "q")
        .unwrap();
    let mut prepared = rope::Rope
        .prepare("rotate_half", &p, DType::F32, Device::CPU)
        .unwrap();
    let good = prepared.check().unwrap();
    p.cache_len = 101;
    let mut shifted = rope::Rope
        .prepare("rotate_half", &p, DType::F32, Device::CPU)
        .unwrap();
    let bad = harness::Check {
        output: good.output,
        reference: shifted.check().unwrap().reference,
    };
    assert!(rel_err(&bad).unwrap() > 1e-2);
}
