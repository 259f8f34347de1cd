#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::Path;

use shapes::{Dims, Grid, ModelConfig, OpKind, Phase, ShapesError, Step, builtin_models, derive};

fn find<'a>(ps: &'a [shapes::Problem], op: OpKind, site: &str) -> &'a shapes::Problem {
    ps.iter()
        .find(|p| p.op == op && p.site == site)
        .unwrap_or_else(|| panic!("no {op} {site}"))
}

#[test]
fn every_shipped_model_parses_from_disk_and_embedded() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shapes");
    for name in builtin_models() {
        let disk = ModelConfig::load(&dir.join(format!("{name}.toml"))).unwrap();
        let embedded = ModelConfig::builtin(name).unwrap();
        assert_eq!(disk, embedded);
        assert_eq!(disk.name, name);
        assert!(
            disk.source.contains("huggingface.co/"),
            "{name}: {}",
            disk.source
        );
        assert!(
            disk.source.ends_with("/config.json"),
            "{name}: {}",
            disk.source
        );
    }
    assert_eq!(builtin_models().len(), 15);
    // `all` is every dense Qwen3 model
    let all = ModelConfig::resolve_list("all").unwrap();
    assert_eq!(all.len(), 6);
    assert!(
        all.iter()
            .all(|m| m.family == shapes::Family::Qwen3 && !m.is_moe())
    );
}

#[test]
fn real_values_not_transformers_defaults() {
    let m = ModelConfig::builtin("qwen3-0.6b").unwrap();
    assert_eq!(
        (m.hidden_size, m.intermediate_size, m.num_hidden_layers),
        (1024, 3072, 28)
    );
    assert_eq!(
        (m.num_attention_heads, m.num_key_value_heads, m.head_dim),
        (16, 8, 128)
    );
    assert!(m.tie_word_embeddings);
    let moe = ModelConfig::builtin("qwen3-30b-a3b").unwrap();
    assert!(moe.is_moe());
    assert_eq!(moe.num_key_value_heads, 4);
    assert_eq!(moe.moe_intermediate_size, Some(768));
}

#[test]
fn qwen3_0_6b_decode_dims() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let ps = derive(&cfg, Step::decode(8, 1024));
    // H·D = 2048 != E = 1024
    assert_eq!(
        find(&ps, OpKind::Linear, "q_proj").dims.to_string(),
        "m=8 n=2048 k=1024"
    );
    assert_eq!(
        find(&ps, OpKind::Linear, "k_proj").dims.to_string(),
        "m=8 n=1024 k=1024"
    );
    assert_eq!(
        find(&ps, OpKind::Linear, "o_proj").dims.to_string(),
        "m=8 n=1024 k=2048"
    );
    assert_eq!(
        find(&ps, OpKind::Linear, "down_proj").dims.to_string(),
        "m=8 n=1024 k=3072"
    );
    assert_eq!(
        find(&ps, OpKind::Linear, "lm_head").dims.to_string(),
        "m=8 n=151936 k=1024"
    );
    assert_eq!(
        find(&ps, OpKind::Linear, "qkv_proj").dims.to_string(),
        "m=8 n=4096 k=1024"
    );
    assert_eq!(
        find(&ps, OpKind::Linear, "gate_up_proj").dims.to_string(),
        "m=8 n=6144 k=1024"
    );
    assert_eq!(
        find(&ps, OpKind::RmsNorm, "q_norm").dims.to_string(),
        "rows=128 width=128"
    );
    assert_eq!(
        find(&ps, OpKind::RmsNorm, "k_norm").dims.to_string(),
        "rows=64 width=128"
    );
    let sdpa = find(&ps, OpKind::Sdpa, "attn");
    assert_eq!(sdpa.kv_len, Some(1025));
    assert_eq!(
        sdpa.dims.to_string(),
        "batch=8 q_heads=16 kv_heads=8 q_len=1 kv_len=1025 head_dim=128 causal=0"
    );
    assert_eq!(
        find(&ps, OpKind::KvCache, "v").dims.to_string(),
        "batch=8 kv_heads=8 cache_len=1024 new_len=1 head_dim=128"
    );
    assert_eq!(find(&ps, OpKind::Linear, "q_proj").calls_per_step, 28);
    assert_eq!(find(&ps, OpKind::Linear, "lm_head").calls_per_step, 1);
}

#[test]
fn prefill_is_causal_and_lm_head_sees_last_token_only() {
    let cfg = ModelConfig::builtin("qwen3-1.7b").unwrap();
    let ps = derive(&cfg, Step::prefill(2, 512));
    assert!(ps.iter().all(|p| p.phase == Phase::Prefill));
    let q = find(&ps, OpKind::Linear, "q_proj");
    assert_eq!(
        q.dims,
        Dims::Linear {
            m: 1024,
            n: 2048,
            k: 2048
        }
    );
    assert_eq!(
        find(&ps, OpKind::Linear, "lm_head").dims,
        Dims::Linear {
            m: 2,
            n: 151936,
            k: 2048
        }
    );
    match find(&ps, OpKind::Sdpa, "attn").dims {
        Dims::Sdpa {
            causal,
            kv_len,
            q_len,
            ..
        } => {
            assert!(causal);
            assert_eq!((q_len, kv_len), (512, 512));
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn flop_and_byte_formulas() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let ps = derive(&cfg, Step::decode(4, 100));
    let q = find(&ps, OpKind::Linear, "q_proj");
    assert_eq!(q.flops(), 2 * 4 * 2048 * 1024);
    assert_eq!(q.bytes(2), (4 * 1024 + 1024 * 2048 + 4 * 2048) * 2);
    let n = find(&ps, OpKind::RmsNorm, "input_norm");
    assert_eq!(n.bytes(4), (2 * 4 * 1024 + 1024) * 4);
    // decode: every query sees all L+1 keys
    let s = find(&ps, OpKind::Sdpa, "attn");
    assert_eq!(s.flops(), 4 * 4 * 16 * 128 * 101);
    assert_eq!(s.bytes(2), (2 * 4 * 16 * 128 + 2 * 4 * 8 * 101 * 128) * 2);
    // causal prefill of 4 tokens: 1+2+3+4 = 10 pairs per head, not 16
    let p = derive(&cfg, Step::prefill(1, 4));
    assert_eq!(find(&p, OpKind::Sdpa, "attn").flops(), 4 * 16 * 128 * 10);
    assert_eq!(find(&ps, OpKind::KvCache, "k").flops(), 0);
    assert_eq!(
        find(&ps, OpKind::KvCache, "k").bytes(2),
        2 * 4 * 8 * 128 * 2
    );
}

#[test]
fn moe_models_have_no_dense_mlp_sites() {
    let cfg = ModelConfig::builtin("qwen3-235b-a22b").unwrap();
    let ps = derive(&cfg, Step::decode(1, 128));
    assert!(
        ps.iter()
            .all(|p| p.site != "gate_proj" && p.site != "gate_up_proj")
    );
    assert!(ps.iter().any(|p| p.site == "q_proj"));
}

#[test]
fn malformed_files_name_file_and_key() {
    let path = Path::new("bad.toml");
    let good = include_str!("../../../shapes/qwen3-0.6b.toml");
    let unknown = format!("{good}\nhiden_size = 3\n");
    let msg = ModelConfig::parse(&unknown, path).unwrap_err().to_string();
    assert!(
        msg.starts_with("bad.toml:") && msg.contains("hiden_size"),
        "{msg}"
    );
    let missing = good.replace("vocab_size = 151936\n", "");
    let msg = ModelConfig::parse(&missing, path).unwrap_err().to_string();
    assert!(
        msg.contains("bad.toml") && msg.contains("vocab_size"),
        "{msg}"
    );
    let wrong_type = good.replace("head_dim = 128", "head_dim = \"128\"");
    let msg = ModelConfig::parse(&wrong_type, path)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("bad.toml"), "{msg}");
    let gqa = good.replace("num_key_value_heads = 8", "num_key_value_heads = 5");
    let msg = ModelConfig::parse(&gqa, path).unwrap_err().to_string();
    assert!(msg.contains("num_key_value_heads"), "{msg}");
    match ModelConfig::builtin("qwen4") {
        Err(ShapesError::UnknownModel { known, .. }) => assert!(known.contains("qwen3-0.6b")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn grid_profiles_and_dedup() {
    let grid = Grid::load_default().unwrap();
    let full = grid.profile("default").unwrap();
    assert_eq!(full.batches, vec![1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(full.decode_ctx, vec![128, 1024, 4096]);
    assert_eq!(full.prefill_len, vec![128, 512, 2048]);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    // linear does not depend on L: 7 decode batches + 2×3 prefill, per site (10 sites)
    assert_eq!(full.problems(&cfg, OpKind::Linear).len(), (7 + 6) * 10);
    // sdpa does: 7×3 decode + 6 prefill
    assert_eq!(full.problems(&cfg, OpKind::Sdpa).len(), 21 + 6);
    assert!(grid.profile("quick").is_ok());
    let err = grid.profile("huge").unwrap_err().to_string();
    assert!(err.contains("huge") && err.contains("quick"), "{err}");
    let bad = Grid::parse("[x]\nbatches = [1]\n", Path::new("g.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        bad.starts_with("g.toml:") && bad.contains("decode_ctx"),
        "{bad}"
    );
}

#[test]
fn a_whole_step_reads_every_weight_once() {
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let ps = derive(&cfg, Step::decode(1, 1024));
    let step = find(&ps, OpKind::Decode, "step");
    let w = step.step_work.unwrap();
    // Qwen3-0.6B: ~0.44B non-embedding parameters + 0.156B tied embedding (lm_head)
    let params = w.weight_elems as f64;
    assert!((0.59e9..0.61e9).contains(&params), "{params}");
    // KV read: 2 · 28 layers · 8 heads · 1025 · 128
    assert_eq!(w.kv_elems, 2 * 28 * 8 * 1025 * 128);
    assert_eq!(step.bytes(2), (w.weight_elems + w.kv_elems) * 2);
    // the step's FLOPs are the projections' and attention's of the per-site problems
    let per_site: u64 = ps
        .iter()
        .filter(|p| p.op == OpKind::Linear && !["qkv_proj", "gate_up_proj"].contains(&p.site))
        .map(|p| p.flops() * p.calls_per_step as u64)
        .sum::<u64>()
        + find(&ps, OpKind::Sdpa, "attn").flops() * 28;
    assert_eq!(step.flops(), per_site);
}

#[test]
fn the_step_plan_counts_what_modeling_qwen3_calls() {
    use shapes::{CallKind, StepPlan, StepProfile};
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let count = |profile, kind| {
        StepPlan::new(&cfg, profile, Step::decode(1, 128))
            .other
            .iter()
            .filter(|c| c.kind == kind)
            .map(|c| c.calls)
            .sum::<usize>()
    };
    // per step: position ids (fused: two); the residual adds, SiLU, the SwiGLU multiply,
    // `contiguous`, the embedding and argmax are the eltwise crate's sites. Views: 8 per
    // layer (fused 12) + 6.
    assert_eq!(count(StepProfile::HfEager, CallKind::Kernel), 1);
    assert_eq!(count(StepProfile::Fused, CallKind::Kernel), 2);
    assert_eq!(count(StepProfile::HfEager, CallKind::View), 8 * 28 + 6);
    assert_eq!(count(StepProfile::Fused, CallKind::View), 12 * 28 + 6);
    // each profile runs one variant per site it calls, never both forms of a projection
    let sites = |profile| -> Vec<&'static str> {
        StepPlan::new(&cfg, profile, Step::decode(1, 128))
            .measured
            .iter()
            .map(|c| c.problem.site)
            .collect()
    };
    assert!(
        sites(StepProfile::HfEager).contains(&"q_proj")
            && !sites(StepProfile::HfEager).contains(&"qkv_proj")
    );
    assert!(
        sites(StepProfile::Fused).contains(&"qkv_proj")
            && !sites(StepProfile::Fused).contains(&"q_proj")
    );
    // the layouts the fused step hands its calls: q/k norms over the split's views, SiLU and
    // the product over the gate_up halves; hf-eager's are contiguous
    let variant = |profile, op, site| {
        StepPlan::new(&cfg, profile, Step::decode(1, 128))
            .measured
            .iter()
            .find(|c| c.problem.op == op && c.problem.site == site)
            .map(|c| c.variant)
    };
    for (op, site, fused, hf) in [
        (OpKind::RmsNorm, "q_norm", "aten_split", "hf"),
        (OpKind::RmsNorm, "input_norm", "aten", "hf"),
        (OpKind::Eltwise, "silu", "chunk", "aten"),
        (OpKind::Eltwise, "swiglu_mul", "chunk", "aten"),
        (OpKind::Eltwise, "residual_add", "aten", "aten"),
        (OpKind::Eltwise, "attn_contiguous", "aten", "aten"),
    ] {
        assert_eq!(variant(StepProfile::Fused, op, site), Some(fused), "{site}");
        assert_eq!(variant(StepProfile::HfEager, op, site), Some(hf), "{site}");
    }
    // transformers: hf-eager's calls made from Python, plus the framework's own work
    let tr = StepPlan::new(&cfg, StepProfile::Transformers, Step::decode(1, 128));
    let hf = StepPlan::new(&cfg, StepProfile::HfEager, Step::decode(1, 128));
    assert_eq!(tr.measured.len(), hf.measured.len());
    for (t, h) in tr.measured.iter().zip(&hf.measured) {
        assert_eq!(t.problem, h.problem);
        assert_eq!(t.variant, format!("py-{}", h.variant));
    }
    assert_eq!(count(StepProfile::Transformers, CallKind::Kernel), 1);
    assert_eq!(count(StepProfile::Transformers, CallKind::View), 8 * 28 + 6);
    let framework: Vec<(&str, usize)> = tr
        .other
        .iter()
        .filter(|c| c.kind == CallKind::Framework)
        .map(|c| (c.name, c.calls))
        .collect();
    assert_eq!(
        framework,
        [("layer_own", 28), ("module_call", 4), ("mask", 1)]
    );
    // the layer's own code is measured in sequence, over every layer in turn where the run
    // has it, else over one layer; a run from before it was measured prices it at the old
    // plan's parts: four module calls and the cache update per layer
    let own = tr.other.iter().find(|c| c.name == "layer_own").unwrap();
    assert_eq!(
        own.in_sequence,
        [("stack", "stack_flat"), ("layer", "layer_flat")]
    );
    assert_eq!(own.stand_in, [("module_call", 4), ("cache_update", 1)]);
    assert!(
        tr.other
            .iter()
            .filter(|c| c.name != "layer_own")
            .all(|c| c.in_sequence.is_empty() && c.stand_in.is_empty())
    );
    assert_eq!(count(StepProfile::HfEager, CallKind::Framework), 0);
    assert_eq!(
        "transformers".parse::<StepProfile>().unwrap(),
        StepProfile::Transformers
    );
    assert!(
        !StepProfile::ALL.contains(&StepProfile::Transformers),
        "the decode crate builds tch steps only"
    );
}

/// (hit, flops, bf16 bytes) of the routed experts and the router's (flops, bf16 bytes),
/// per layer, computed by hand: T·k routed tokens; flops 6·T·k·E·I (gate, up, down) +
/// 2·T·k·I (SiLU, product) + 2·T·k·E (the weighted combine); bytes 2·(3·hit·E·I +
/// 3·T·k·(E + I)); hit under uniform routing round(N·(1 − ((N − k)/N)^T)).
#[test]
fn moe_sites_against_hand_computed_values() {
    use shapes::moe::Routing;
    // Qwen3-30B-A3B: E = 2048, I = 768, N = 128, k = 8, 48 layers.
    // T = 1: 8 experts hit; 6·8·2048·768 + 2·8·768 + 2·8·2048 = 75,542,528 flops;
    //   2·(3·8·2048·768 + 3·8·2816) = 75,632,640 bytes.
    // T = 64: 128·(1 − (120/128)^64) = 125.94 → 126 hit; 64 × 75,542,528 flops;
    //   2·(3·126·2048·768 + 3·512·2816) = 1,197,735,936 bytes; worst (8 hit) 84,148,224.
    // Qwen3-235B-A22B: E = 4096, I = 1536, N = 128, k = 8, 94 layers.
    // T = 1: 302,080,000 flops, 302,260,224 bytes; T = 64: 126 hit, 19,333,120,000 flops,
    //   4,773,642,240 bytes; worst 319,291,392.
    let cases = [
        (
            "qwen3-30b-a3b",
            48,
            1,
            (8, 75_542_528, 75_632_640),
            75_632_640,
        ),
        (
            "qwen3-30b-a3b",
            48,
            64,
            (126, 4_834_721_792, 1_197_735_936),
            84_148_224,
        ),
        (
            "qwen3-235b-a22b",
            94,
            1,
            (8, 302_080_000, 302_260_224),
            302_260_224,
        ),
        (
            "qwen3-235b-a22b",
            94,
            64,
            (126, 19_333_120_000, 4_773_642_240),
            319_291_392,
        ),
    ];
    for (name, layers, b, (hit, flops, bytes), worst_bytes) in cases {
        let cfg = ModelConfig::builtin(name).unwrap();
        let ps = derive(&cfg, Step::decode(b, 1024));
        let experts = find(&ps, OpKind::Moe, "experts");
        assert!(
            matches!(experts.dims, Dims::Experts { hit: h, tokens, top_k: 8, experts: 128, .. } if h == hit && tokens == b),
            "{name} B={b}: {}",
            experts.dims
        );
        assert_eq!(
            (experts.flops(), experts.bytes(2), experts.calls_per_step),
            (flops, bytes, layers),
            "{name} B={b}"
        );
        let worst = find(&ps, OpKind::Moe, "experts_worst");
        assert_eq!(
            (worst.flops(), worst.bytes(2), worst.calls_per_step),
            (flops, worst_bytes, 0),
            "{name} B={b}"
        );
        // the router: T × E → N
        let router = find(&ps, OpKind::Linear, "router");
        let e = cfg.hidden_size as u64;
        let t = b as u64;
        assert_eq!(router.dims.to_string(), format!("m={b} n=128 k={e}"));
        assert_eq!(router.flops(), 2 * t * 128 * e);
        assert_eq!(router.bytes(2), 2 * (t * e + 128 * e + t * 128));
        // no dense MLP sites
        for site in ["gate_proj", "up_proj", "down_proj", "gate_up_proj"] {
            assert!(!ps.iter().any(|p| p.site == site), "{name}: {site}");
        }
        assert_eq!(Routing::Worst.experts_hit(b, 128, 8), 8);
    }
    // uniform routing: k experts from one token, all of them from many
    assert_eq!(Routing::Uniform.experts_hit(1, 128, 8), 8);
    assert_eq!(Routing::Uniform.experts_hit(4096, 128, 8), 128);
    assert_eq!(Routing::Uniform.experts_hit(0, 128, 8), 0);
}

#[test]
fn an_moe_step_plans_its_router_and_experts_and_not_the_worst_case_bound() {
    use shapes::{StepPlan, StepProfile};
    let cfg = ModelConfig::builtin("qwen3-30b-a3b").unwrap();
    for (profile, experts) in [
        (StepProfile::HfEager, "loop"),
        (StepProfile::Fused, "grouped"),
        (StepProfile::Transformers, "py-grouped"),
    ] {
        // transformers 5.x's default experts implementation runs the grouped GEMMs' kernels
        if profile == StepProfile::Transformers {
            assert_eq!(
                profile.kernel_variant(OpKind::Moe, "experts"),
                Some("grouped")
            );
        }
        let plan = StepPlan::new(&cfg, profile, Step::decode(8, 1024));
        let of = |op: OpKind, site: &str| {
            plan.measured
                .iter()
                .find(|c| c.problem.op == op && c.problem.site == site)
                .map(|c| (c.variant, c.problem.calls_per_step))
        };
        assert_eq!(of(OpKind::Moe, "experts"), Some((experts, 48)), "{profile}");
        assert_eq!(of(OpKind::Moe, "experts_worst"), None, "{profile}");
        assert!(of(OpKind::Linear, "router").is_some_and(|(_, calls)| calls == 48));
        assert_eq!(of(OpKind::Linear, "gate_proj"), None);
        // the routing's softmax, top-k, sum, division and cast per layer, at the dispatch
        // floor
        let routing = plan.other.iter().find(|u| u.name == "routing").unwrap();
        assert_eq!(routing.calls, 5 * 48);
    }
    // a dense model has none
    let dense = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let plan = StepPlan::new(&dense, StepProfile::HfEager, Step::decode(8, 1024));
    assert!(!plan.other.iter().any(|u| u.name == "routing"));
}

/// The MoE step's work by hand (Qwen3-30B-A3B, B = 1, L = 1024): per layer the attention's
/// projections (4096·2048 + 2·512·2048 + 2048·4096), the router (128·2048), the 8 experts hit
/// (8 · 3·2048·768) and the norms (2·2048 + 2·128); then the final norm, the untied lm_head
/// (151936·2048) and the token's embedding row.
#[test]
fn the_moe_step_reads_its_attention_router_and_the_experts_hit() {
    let cfg = ModelConfig::builtin("qwen3-30b-a3b").unwrap();
    let step = shapes::derive(&cfg, Step::decode(1, 1024))
        .into_iter()
        .find(|p| p.op == OpKind::Decode)
        .unwrap();
    let w = step.step_work.unwrap();
    let layer: u64 = 18_874_368 + 262_144 + 8 * 3 * 2048 * 768 + 4352;
    assert_eq!(w.weight_elems, 48 * layer + 2048 + 151_936 * 2048 + 2048);
    // FLOPs: 2 per weight multiplied per token (the router and the token's 8 experts),
    // attention over 1025 positions, the lm_head
    let per_token: u64 = 18_874_368 + 262_144 + 8 * 3 * 2048 * 768;
    assert_eq!(
        w.flops,
        48 * (2 * per_token + 4 * 32 * 128 * 1025) + 2 * 151_936 * 2048
    );
    // at B = 64 the experts hit are 126 of 128 (uniform routing's expectation)
    let wide = shapes::derive(&cfg, Step::decode(64, 1024))
        .into_iter()
        .find(|p| p.op == OpKind::Decode)
        .unwrap()
        .step_work
        .unwrap();
    let layer64: u64 = 18_874_368 + 262_144 + 126 * 3 * 2048 * 768 + 4352;
    assert_eq!(
        wide.weight_elems,
        48 * layer64 + 2048 + 151_936 * 2048 + 64 * 2048
    );
}
