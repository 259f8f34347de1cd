//! The routed experts against float64 on the CPU, at Qwen3-30B-A3B's real dims.
#![allow(clippy::unwrap_used)]

use harness::{DType, Device, Op, Status, rel_err};
use shapes::moe::Routing;
use shapes::{ModelConfig, OpKind, Step};

fn problem(b: usize, site: &str) -> shapes::Problem {
    let cfg = ModelConfig::builtin("qwen3-30b-a3b").unwrap();
    shapes::derive(&cfg, Step::decode(b, 128))
        .into_iter()
        .find(|p| p.op == OpKind::Moe && p.site == site)
        .unwrap()
}

#[test]
fn the_per_expert_loop_and_the_grouped_gemm_match_float64_on_the_cpu() {
    for (b, site) in [(1, "experts"), (4, "experts"), (4, "experts_worst")] {
        let p = problem(b, site);
        let mut prepared = moe::Moe
            .prepare("loop", &p, DType::F32, Device::CPU)
            .unwrap();
        let err = rel_err(&prepared.check().unwrap()).unwrap();
        assert!(err < 1e-5, "B={b} {site}: {err}");
        prepared.run().unwrap();
        // the op's word on its state (the plan's cold cases) is the prepared case's
        assert_eq!(moe::Moe.holds_state("loop", &p), prepared.state_bytes() > 0);
        // the weights of the experts hit, gate_up and down, f32
        let hit = if site == "experts_worst" {
            8
        } else {
            prepared
                .note()
                .map(|n| n.split(' ').next().unwrap().parse::<u64>().unwrap())
                .unwrap()
        };
        assert_eq!(
            prepared.state_bytes(),
            hit * 3 * 2048 * 768 * 4,
            "B={b} {site}"
        );
        // the grouped GEMM: as exact, where the build has it (torch 2.11 has a CPU
        // fallback); otherwise libtorch's own reason, classified unsupported
        let mut grouped = moe::Moe
            .prepare("grouped", &p, DType::F32, Device::CPU)
            .unwrap();
        match grouped.check() {
            Ok(c) => assert!(rel_err(&c).unwrap() < 1e-5, "B={b} {site}"),
            Err(e) => assert_eq!(harness::classify(&e).status, Status::Unsupported, "{e}"),
        }
    }
}

/// transformers' loop waits for the device (its `nonzero`s and a comparison read back per
/// expert hit): it says so, and the harness gives it no device-clock or graph row; the
/// grouped GEMMs only queue work.
#[test]
fn the_loop_says_it_waits_for_the_device_and_the_grouped_gemm_does_not() {
    let p = problem(8, "experts");
    let looped = moe::Moe
        .prepare("loop", &p, DType::F32, Device::CPU)
        .unwrap();
    assert!(
        looped
            .waits_for_device()
            .unwrap()
            .contains("waits for the device")
    );
    let grouped = moe::Moe
        .prepare("grouped", &p, DType::F32, Device::CPU)
        .unwrap();
    assert!(grouped.waits_for_device().is_none());
}

/// The router as Qwen3MoeTopKRouter: k distinct experts, weights renormalized to 1; told
/// which experts to take, it takes them with their own renormalized probabilities.
#[test]
fn the_router_picks_the_top_k_and_replays_a_given_choice() {
    let x = harness::tensors::randn(&[5, 64], DType::F32, Device::CPU, 1).unwrap();
    let w = harness::tensors::randn(&[16, 64], DType::F32, Device::CPU, 2).unwrap();
    let (weights, ids) = moe::router(&x, &w, 4, None).unwrap();
    assert_eq!(ids.size(), [5, 4]);
    let sums = Vec::<f32>::try_from(weights.sum_dim_intlist(-1, false, None::<tch::Kind>)).unwrap();
    assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5), "{sums:?}");
    // the top-k of the logits: no other expert scores higher than the 4th chosen
    let logits = x.linear::<tch::Tensor>(&w, None);
    let fourth = logits.gather(-1, &ids, false).min_dim(-1, false).0;
    let above =
        logits
            .gt_tensor(&fourth.unsqueeze(-1))
            .sum_dim_intlist(-1, false, None::<tch::Kind>);
    assert!(Vec::<i64>::try_from(above).unwrap().iter().all(|&n| n == 3));
    // replayed: the same experts, the same weights
    let (again, same) = moe::router(&x, &w, 4, Some(&ids)).unwrap();
    assert!(same.equal(&ids));
    assert!(again.allclose(&weights, 1e-6, 1e-6, false));
}

#[test]
fn uniform_routing_gives_each_token_k_distinct_experts_from_a_fixed_seed() {
    let a = moe::route(64, 128, 8, Routing::Uniform);
    assert_eq!(a, moe::route(64, 128, 8, Routing::Uniform));
    for chosen in &a {
        let mut c = chosen.clone();
        c.sort_unstable();
        c.dedup();
        assert_eq!(c.len(), 8);
        assert!(c.iter().all(|&e| e < 128));
    }
    let hit: std::collections::BTreeSet<usize> = a.iter().flatten().copied().collect();
    // expected 125.9 under uniform routing (shapes::moe); a draw lands near it
    assert!((118..=128).contains(&hit.len()), "{}", hit.len());
    assert!(
        moe::route(3, 128, 8, Routing::Worst)
            .iter()
            .all(|c| *c == (0..8).collect::<Vec<_>>())
    );
}
