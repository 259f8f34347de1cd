//! Every variant against the float64 reference at Qwen3's element-wise sites.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::{DType, Device, Op, rel_err};
use shapes::{ModelConfig, OpKind, Problem, Step};

fn problems(step: Step) -> Vec<Problem> {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    shapes::derive(&cfg, step)
        .into_iter()
        .filter(|p| p.op == OpKind::Eltwise)
        .collect()
}

#[test]
fn every_variant_matches_float64() {
    let op = eltwise::Eltwise;
    for step in [Step::decode(4, 128), Step::prefill(2, 16)] {
        let ps = problems(step);
        let sites: Vec<_> = ps.iter().map(|p| p.site).collect();
        assert_eq!(
            sites,
            [
                "residual_add",
                "silu",
                "swiglu_mul",
                "attn_contiguous",
                "embedding",
                "argmax"
            ]
        );
        for p in &ps {
            for v in op.variants() {
                if !op.applies(v, p) {
                    assert!(v == "chunk" && !matches!(p.site, "silu" | "swiglu_mul"));
                    continue;
                }
                let mut prepared = op.prepare(v, p, DType::F32, Device::CPU).unwrap();
                let err = rel_err(&prepared.check().unwrap()).unwrap();
                assert!(err < 1e-6, "{v} {} err {err}", p.site);
                prepared.run().unwrap();
                // the op's word on its state (the plan's cold cases) is the prepared case's
                assert_eq!(op.holds_state(v, p), prepared.state_bytes() > 0);
            }
        }
    }
}

/// In decode the attention output's transpose is contiguous already: `contiguous()` hands
/// back the same storage (no copy); in prefill it copies.
#[test]
fn attn_contiguous_copies_only_in_prefill() {
    let op = eltwise::Eltwise;
    for (step, copies) in [(Step::decode(4, 128), false), (Step::prefill(2, 16), true)] {
        let p = problems(step)
            .into_iter()
            .find(|p| p.site == "attn_contiguous")
            .unwrap();
        let mut prepared = op.prepare("aten", &p, DType::F32, Device::CPU).unwrap();
        // both kept alive, so a copy cannot reuse the first one's storage
        let (a, b) = (prepared.output().unwrap(), prepared.output().unwrap());
        assert_eq!(a.data_ptr() != b.data_ptr(), copies, "{:?}", step.phase);
    }
}

#[test]
fn a_wrong_site_or_variant_is_a_failure_not_a_panic() {
    let op = eltwise::Eltwise;
    let p = problems(Step::decode(1, 16)).remove(0);
    assert!(op.prepare("chunk", &p, DType::F32, Device::CPU).is_err());
    assert!(
        op.prepare("vectorized", &p, DType::F32, Device::CPU)
            .is_err()
    );
    let mut wrong = p.clone();
    wrong.site = "gelu";
    assert!(op.prepare("aten", &wrong, DType::F32, Device::CPU).is_err());
}
