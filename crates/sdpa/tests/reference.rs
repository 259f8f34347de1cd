//! Every variant against the float64 reference on random inputs, GQA (H=16, Hkv=8) decode
//! and causal prefill; GPU-only variants must refuse the CPU with a reason.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::{DType, Device, Op, Status, rel_err};
use shapes::{ModelConfig, OpKind, Problem, Step};

fn attn(step: Step) -> Problem {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    shapes::derive(&cfg, step)
        .into_iter()
        .find(|p| p.op == OpKind::Sdpa)
        .unwrap()
}

#[test]
fn cpu_variants_match_float64_and_gpu_variants_say_unsupported() {
    let op = sdpa::Sdpa;
    for step in [Step::decode(2, 100), Step::prefill(2, 80)] {
        let p = attn(step);
        for v in op.variants() {
            // as preflight does it: prepare, then one checked call
            let outcome = op
                .prepare(v, &p, DType::F32, Device::CPU)
                .and_then(|mut pr| pr.check().map(|c| (pr, c)).map_err(harness::Failure::from));
            match outcome {
                Ok((mut prepared, check)) => {
                    assert!(["math", "cpu_flash", "auto"].contains(&v), "{v} ran on CPU");
                    prepared.run().unwrap();
                    // the op's word on its state (the plan's cold cases) is the prepared case's
                    assert_eq!(op.holds_state(v, &p), prepared.state_bytes() > 0);
                    let err = rel_err(&check).unwrap();
                    assert!(err < 1e-5, "{v} {:?} err {err}", step);
                    assert!(prepared.kernel().is_some());
                }
                Err(f) => {
                    assert!(["efficient", "flash", "cudnn"].contains(&v), "{v}: {f:?}");
                    assert_eq!(f.status, Status::Unsupported, "{v}: {}", f.reason);
                    assert!(!f.reason.is_empty());
                }
            }
        }
    }
}

#[test]
fn auto_reports_the_kernel_the_dispatcher_picks() {
    let p = attn(Step::decode(1, 64));
    let prepared = sdpa::Sdpa
        .prepare("auto", &p, DType::F32, Device::CPU)
        .unwrap();
    let k = prepared.kernel().unwrap();
    assert!(["math", "flash"].contains(&k.as_str()), "{k}");
}

#[test]
fn the_causal_reference_is_not_the_non_causal_one() {
    // a prefill output checked against a non-causal reference must fail: the mask matters
    let p = attn(Step::prefill(1, 32));
    let mut causal = sdpa::Sdpa
        .prepare("math", &p, DType::F32, Device::CPU)
        .unwrap();
    let mut q = p.clone();
    if let shapes::Dims::Sdpa { ref mut causal, .. } = q.dims {
        *causal = false;
    }
    let mut open = sdpa::Sdpa
        .prepare("math", &q, DType::F32, Device::CPU)
        .unwrap();
    let wrong = harness::Check {
        output: causal.check().unwrap().output,
        reference: open.check().unwrap().reference,
    };
    assert!(rel_err(&wrong).unwrap() > 1e-2);
}
