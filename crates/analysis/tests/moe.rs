//! Qwen3-30B-A3B's MoE decode step composed from the op crates' rows and checked against
//! the decode crate's measured step (issue 33), on the H200 run of 2026-12-01
//! (fixtures/moe-2026-12-01/moe, bf16, L = 1024); and the H200 prefill of qwen3-0.6b.
#![allow(clippy::unwrap_used)]

mod common;

use analysis::predict::{DeviceSource, HostModel, Prediction, Query, predict};
use rundir::{DType, DeviceId, Mode, OpKind, Phase, Run};
use shapes::{ModelConfig, StepProfile};

fn query(
    cfg: &ModelConfig,
    phase: Phase,
    batch: usize,
    ctx: usize,
    profile: StepProfile,
    dtype: DType,
    host: HostModel,
) -> Query<'_> {
    Query {
        device: "cuda:0".parse::<DeviceId>().unwrap(),
        dtype,
        host,
        ..common::cpu_query(cfg, phase, batch, ctx, profile)
    }
}

fn ratio(p: &Prediction) -> f64 {
    p.step_ns / p.measured.as_ref().unwrap().median_ns.unwrap()
}

fn run(name: &str) -> Run {
    common::fixture(&format!("moe-2026-12-01/{name}"))
}

#[test]
fn the_moe_step_is_priced_within_three_percent_at_every_batch_on_the_h200() {
    let run = run("moe");
    let cfg = ModelConfig::by_name("qwen3-30b-a3b").unwrap();
    // predicted / measured (controlled host model): hf-eager 0.996 / 0.974 / 0.979,
    // fused 1.008 / 1.023 / 1.027 at B = 1 / 8 / 64
    for profile in [StepProfile::HfEager, StepProfile::Fused] {
        for b in [1, 8, 64] {
            let q = query(
                &cfg,
                Phase::Decode,
                b,
                1024,
                profile,
                DType::BF16,
                HostModel::Controlled,
            );
            let p = predict(&run, &q).unwrap();
            let r = ratio(&p);
            assert!((r - 1.0).abs() < 0.15, "{profile} B={b}: {r}");
            let experts = p
                .components
                .iter()
                .find(|c| c.op == Some(OpKind::Moe))
                .unwrap();
            assert_eq!(experts.calls, 48);
            if profile == StepProfile::HfEager {
                // transformers' loop waits for its kernels: all of it on the host's path
                assert_eq!(experts.variant, "loop");
                assert_eq!(experts.device_source, DeviceSource::Waited);
                assert_eq!(experts.device_ns, 0.0);
            } else {
                assert_eq!(experts.variant, "grouped");
                assert_eq!(experts.device_source, DeviceSource::Events);
            }
        }
    }
    // the rows priced as each was measured alone, in other processes, miss by far: the
    // step's own host state is what the controlled model brings (hf-eager at B = 64 +47.8%)
    let q = query(
        &cfg,
        Phase::Decode,
        64,
        1024,
        StepProfile::HfEager,
        DType::BF16,
        HostModel::AsMeasured,
    );
    let alone = ratio(&predict(&run, &q).unwrap());
    assert!(alone - 1.0 > 0.3, "priced as measured alone: {alone}");
}

#[test]
fn the_h200_run_has_no_device_row_of_the_uniform_loop() {
    let run = run("moe");
    let loop_device = run
        .results
        .iter()
        .filter(|r| {
            r.key.op == OpKind::Moe && r.key.variant == "loop" && r.key.mode == Mode::Device
        })
        .collect::<Vec<_>>();
    // execution 1 timed the worst-case loop in device mode before the loop said it waits
    // (a lead kernel stalls each wait: 23 s for 10 samples); every uniform one is absent
    assert!(
        loop_device.iter().all(|r| r.key.site == "experts_worst"),
        "{}",
        loop_device.len()
    );
}

#[test]
fn the_h200_prefill_is_within_15_percent_in_two_of_four_cases_and_varies_by_process() {
    let cfg = ModelConfig::by_name("qwen3-0.6b").unwrap();
    let one = run("prefill");
    let mut firsts = std::collections::BTreeMap::new();
    // one execution, f16, B = 1: S = 128 hf-eager +4.8%, fused −30.7%; S = 1024 hf-eager
    // −22.5%, fused +4.2%, priced as measured (predict's default where the run has no layer
    // rows: the prefill has no layer beside it to set the host's state)
    for (s, profile) in [
        (128, StepProfile::HfEager),
        (128, StepProfile::Fused),
        (1024, StepProfile::HfEager),
        (1024, StepProfile::Fused),
    ] {
        let q = query(
            &cfg,
            Phase::Prefill,
            1,
            s,
            profile,
            DType::F16,
            HostModel::AsMeasured,
        );
        let r = ratio(&predict(&one, &q).unwrap());
        firsts.insert((s, profile), r);
    }
    let within = firsts.values().filter(|r| (*r - 1.0).abs() < 0.15).count();
    assert!(within >= 2, "{firsts:?}");
    // a second process in the same lease, S = 128 only: hf-eager −20.0%, fused −39.6%
    let two = run("prefill128");
    let mut seconds = Vec::new();
    for profile in [StepProfile::HfEager, StepProfile::Fused] {
        let q = query(
            &cfg,
            Phase::Prefill,
            1,
            128,
            profile,
            DType::F16,
            HostModel::AsMeasured,
        );
        let r = ratio(&predict(&two, &q).unwrap());
        // the same rows of another process move the prediction by more than 5%
        seconds.push((firsts[&(128, profile)] - r).abs());
    }
    assert!(seconds.iter().any(|d| *d > 0.05), "{seconds:?}");
}

#[test]
fn transformers_own_moe_step_is_its_grouped_gemms_and_its_loop_costs_the_same_as_tchs() {
    // the peer's HF step, same lease: transformers' default experts implementation
    // (grouped_mm) 73.0 / 111.7 / 71.8 ms at B = 1 / 8 / 64, its eager loop 221 / 592 /
    // 1415 ms; the tch fused step (grouped GEMMs) 58.2 / 64.2 / 61.7, hf-eager (the loop)
    // 157 / 671 / 1385
    let hf = run("hfmoe");
    let tch = run("moe");
    let median = |run: &Run, variant: &str, site: &str, b: usize| -> f64 {
        run.results
            .iter()
            .find(|r| {
                r.key.op == OpKind::Decode
                    && r.key.variant == variant
                    && r.key.site == site
                    && r.key.batch == b
                    && r.key.mode == Mode::Pipelined
                    && r.is_ok()
            })
            .and_then(|r| r.median_ns)
            .unwrap()
            / 1e6
    };
    for b in [1, 8, 64] {
        // grouped GEMMs take the step far below the loop over experts
        let (grouped, eager) = (
            median(&hf, "transformers", "step", b),
            median(&hf, "transformers", "step_experts_eager", b),
        );
        assert!(eager > 2.0 * grouped, "B={b}: {grouped} {eager}");
    }
    // the default read 16-74% over tch's grouped step; the loop 2-41% over tch's loop at
    // B = 1 and 64, and 12% under it at B = 8 — each in its own process, with no A/A pair:
    // within the host's state spread, recorded here, not claimed as the code's difference
    for b in [1, 8, 64] {
        let default = median(&hf, "transformers", "step", b) / median(&tch, "fused", "step", b);
        assert!((1.1..1.8).contains(&default), "B={b}: {default}");
    }
    let looped = median(&hf, "transformers", "step_experts_eager", 64)
        / median(&tch, "hf-eager", "step", 64);
    assert!((0.8..1.25).contains(&looped), "{looped}");
}

#[test]
fn with_a_layer_beside_it_the_h200_prefill_is_priced_within_a_tenth() {
    // prefill2 (a later lease): predicted / measured with the layer timed beside the
    // prefill's samples (controlled, predict's default where the run has it): hf-eager
    // 0.917 / 1.007, fused 0.961 / 1.037 at S = 128 / 1024; priced as measured the same rows
    // read 1.049 / 1.155 and 0.941 / 1.162
    let run = run("prefill2");
    let cfg = ModelConfig::by_name("qwen3-0.6b").unwrap();
    // |predicted / measured − 1| summed: controlled, as measured
    let mut misses = [0.0; 2];
    for (s, profile) in [
        (128, StepProfile::HfEager),
        (1024, StepProfile::HfEager),
        (128, StepProfile::Fused),
        (1024, StepProfile::Fused),
    ] {
        for host in [HostModel::Controlled, HostModel::AsMeasured] {
            let q = query(&cfg, Phase::Prefill, 1, s, profile, DType::F16, host);
            let p = predict(&run, &q).unwrap();
            let r = ratio(&p);
            misses[usize::from(host == HostModel::AsMeasured)] += (r - 1.0).abs();
            if host == HostModel::Controlled {
                assert_eq!(HostModel::default_for(&run, &q), HostModel::Controlled);
                assert!((r - 1.0).abs() < 0.10, "S={s} {profile}: {r}");
                assert!(
                    p.host_speed.is_some(),
                    "S={s} {profile}: priced at the layer beside it"
                );
            }
        }
    }
    // the layer beside the prefill prices it closer than the rows as measured alone
    assert!(misses[0] < misses[1], "{misses:?}");
}
