//! Beyond Qwen3: predict composes a Llama and a Qwen2 step from their own runs, checked
//! against the decode crate's steps and the HF step of the same run (the published H200
//! runs of 2026-12-03, read where they lie in results/). A test of the composition's rule
//! on data that holds its truth: the measured steps.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use analysis::fit::fit_run;
use analysis::predict::{HostModel, HostState, Query, at_host_state, predict_with};
use rundir::{Phase, Run};
use shapes::{Family, ModelConfig, StepProfile};

fn published(name: &str) -> Run {
    Run::load(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../results")
            .join(name),
    )
    .unwrap()
}

/// predicted / measured for every profile at B = 1, 8, 64, L = 1024, f16 on the H200.
fn checks(run: &Run, cfg: &ModelConfig) -> Vec<(StepProfile, usize, f64)> {
    let fits = fit_run(run);
    let mut out = Vec::new();
    for profile in [
        StepProfile::Transformers,
        StepProfile::HfEager,
        StepProfile::Fused,
    ] {
        for batch in [1, 8, 64] {
            let q = Query {
                device: "cuda:0".parse().unwrap(),
                dtype: rundir::DType::F16,
                ..common::cpu_query(cfg, Phase::Decode, batch, 1024, profile)
            };
            let q = Query {
                host: HostModel::default_for(run, &q),
                ..q
            };
            let p = predict_with(run, &fits, &q).unwrap();
            let measured = p.measured.as_ref().and_then(|r| r.median_ns).unwrap();
            out.push((profile, batch, p.step_ns / measured));
        }
    }
    out
}

#[test]
fn a_llama_and_a_qwen2_step_are_predicted_within_15_percent_of_each_measured_step() {
    for (run, model, family) in [
        (
            "2026-12-03-nvidia-h200-cuda-torch2.11.0-llama-3.2-1b",
            "llama-3.2-1b",
            Family::Llama,
        ),
        (
            "2026-12-03-nvidia-h200-cuda-torch2.11.0-qwen2.5-0.5b",
            "qwen2.5-0.5b",
            Family::Qwen2,
        ),
    ] {
        let cfg = ModelConfig::builtin(model).unwrap();
        assert_eq!(cfg.family, family);
        // as `opbench predict` reads a run: rows sampled in rounds read pair by pair
        let run = at_host_state(&published(run), HostState::Typical).unwrap();
        let got = checks(&run, &cfg);
        // the HF step (scripts/peer.py) and the decode crate's two steps, each batch
        assert_eq!(got.len(), 9);
        for (profile, batch, ratio) in got {
            assert!(
                (0.85..=1.15).contains(&ratio),
                "{model} {profile} B={batch}: predicted / measured {ratio:.3}"
            );
        }
    }
}
