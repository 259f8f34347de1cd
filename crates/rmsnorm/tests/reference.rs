//! Every variant against the float64 reference at Qwen3 norm sites.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::{DType, Device, Op, Status, rel_err};
use shapes::{ModelConfig, OpKind, Step};

#[test]
fn every_variant_matches_float64_or_says_unsupported() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let op = rmsnorm::RmsNorm;
    let ps: Vec<_> = shapes::derive(&cfg, Step::decode(4, 128))
        .into_iter()
        .filter(|p| p.op == OpKind::RmsNorm)
        .collect();
    assert_eq!(ps.len(), 5);
    for p in &ps {
        for v in op.variants() {
            if !op.applies(v, p) {
                assert_eq!(v, "aten_split");
                assert!(!matches!(p.site, "q_norm" | "k_norm"), "{}", p.site);
                continue;
            }
            let mut prepared = op.prepare(v, p, DType::F32, Device::CPU).unwrap();
            match prepared.check() {
                Ok(check) => {
                    let err = rel_err(&check).unwrap();
                    assert!(err < 1e-5, "{v} {} err {err}", p.site);
                    prepared.run().unwrap();
                    // the op's word on its state (the plan's cold cases) is the prepared case's
                    assert_eq!(op.holds_state(v, p), prepared.state_bytes() > 0);
                }
                // only _fused_rms_norm may be missing from a build, and it must say so
                Err(e) => {
                    assert_eq!(v, "fused", "{e}");
                    assert_eq!(harness::classify(&e).status, Status::Unsupported, "{e}");
                }
            }
        }
    }
}

#[test]
fn hf_in_half_precision_stays_within_tolerance() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let p = shapes::derive(&cfg, Step::decode(2, 128))
        .into_iter()
        .find(|p| p.op == OpKind::RmsNorm && p.site == "q_norm")
        .unwrap();
    let mut prepared = rmsnorm::RmsNorm
        .prepare("hf", &p, DType::BF16, Device::CPU)
        .unwrap();
    let err = rel_err(&prepared.check().unwrap()).unwrap();
    assert!(
        err > 0.0 && err < harness::dtype::tolerance(DType::BF16),
        "{err}"
    );
}
