//! What would help: each row's arithmetic against the prediction it changes, the ranking,
//! and the rows a run cannot price, on a published CPU run (quick grid, B = 1, 2, 8).
#![allow(clippy::unwrap_used)]

mod common;

use analysis::fit::fit_run;
use analysis::help::{HOST_SPEEDUP, bandwidth_bound, levers};
use analysis::predict::{Query, predict_with};
use rundir::{OpKind, Phase};
use shapes::{ModelConfig, StepProfile};

const RUN: &str = common::CPU_STACK;

#[test]
fn each_row_is_the_prediction_with_one_thing_changed_and_they_rank_by_tokens_per_s() {
    let run = common::fixture(RUN);
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let q = common::cpu_query(&cfg, Phase::Decode, 1, 128, StepProfile::HfEager);
    let pred = predict_with(&run, &fits, &q).unwrap();
    let rows = common::levers(&run, &fits, &q, &pred, &[]);
    let row = |name: &str| rows.iter().find(|l| l.name.starts_with(name)).unwrap();

    let as_is = row("the step as it is");
    assert_eq!(as_is.predicted_ns, Some(pred.step_ns));
    assert!(
        as_is.measured_ns.is_some(),
        "the decode crate's step is in the run"
    );

    let fused = predict_with(
        &run,
        &fits,
        &Query {
            profile: StepProfile::Fused,
            ..q.clone()
        },
    )
    .unwrap();
    assert_eq!(row("fused kernels").predicted_ns, Some(fused.step_ns));
    let b8 = predict_with(
        &run,
        &fits,
        &Query {
            batch: 8,
            ..q.clone()
        },
    )
    .unwrap();
    let batch8 = row("batch 8");
    assert_eq!(batch8.predicted_ns, Some(b8.step_ns));
    assert!((batch8.tokens_per_s().unwrap() - 8e9 / b8.step_ns).abs() < 1e-6);
    assert!((batch8.per_stream().unwrap() - 1e9 / b8.step_ns).abs() < 1e-9);

    // on the CPU a faster host scales the whole step, down to the bandwidth bound at most
    let bound = bandwidth_bound(&run, &q, &pred).predicted_ns.unwrap();
    let host = row("a host").predicted_ns.unwrap();
    assert_eq!(host, (pred.step_ns / HOST_SPEEDUP).max(bound));
    // the bound: the bytes the step's calls move at the copy ceiling's rate
    let bytes: f64 = pred
        .plan
        .measured
        .iter()
        .map(|c| c.problem.bytes(4) as f64 * c.problem.calls_per_step as f64)
        .sum();
    let gbps = run
        .ok_rows()
        .filter(|r| r.op == OpKind::Ceiling && r.site == "copy")
        .filter_map(|r| r.gbps)
        .fold(0.0, f64::max);
    assert!(
        (bound - bytes / gbps).abs() < 1.0,
        "{bound} vs {}",
        bytes / gbps
    );

    // the fastest SDPA backend only ever takes time away, by its calls' difference
    let sdpa = row("the fastest SDPA backend");
    let saved = pred.step_ns - sdpa.predicted_ns.unwrap();
    assert!(saved >= 0.0 && saved < 0.1 * pred.step_ns, "{saved}");

    // ranked: the query's own batch first, then serving more; in each, priced rows by
    // tokens/s, then the ones this run cannot price
    ranked(&rows, 1);
    // the quick grid has no B = 64: that row says what to run
    let b64 = row("batch 64");
    assert!(b64.predicted_ns.is_none());
    assert!(
        b64.unpriced
            .as_deref()
            .unwrap()
            .contains("OPBENCH_PROFILE=default"),
        "{b64:?}"
    );
    // no bf16 row on the CPU, and graphs are rows that cannot run here: GPU changes
    assert!(rows.iter().all(|l| !l.name.contains("bf16")));
    assert!(
        rows.iter()
            .filter(|l| l.name.contains("graphs"))
            .all(|l| l.predicted_ns.is_none() && l.here.word() == "no")
    );
}

#[test]
fn on_the_cpu_the_transformers_table_prices_what_it_can_and_names_the_rest() {
    let run = common::fixture(RUN);
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let q = common::cpu_query(&cfg, Phase::Decode, 1, 128, StepProfile::Transformers);
    let pred = predict_with(&run, &fits, &q).unwrap();
    let rows = common::levers(&run, &fits, &q, &pred, &[]);
    let row = |name: &str| rows.iter().find(|l| l.name.starts_with(name)).unwrap();
    // the peer's step and the decode crate's fused step measured beside their prices
    for name in ["the step as it is", "fused kernels", "batch 8"] {
        let c = row(name).check().unwrap();
        assert!((0.8..=1.2).contains(&c), "{name}: {c}");
    }
    let b64 = row("batch 64").unpriced.clone().unwrap();
    assert!(b64.contains("OPBENCH_PROFILE=default"), "{b64}");
    let stat = row("static cache alone").unpriced.clone().unwrap();
    assert!(stat.contains("cache_update_static"), "{stat}");
    // graphs, with compile or without, are rows that say they need a GPU, never priced
    let graphs: Vec<_> = rows.iter().filter(|l| l.name.contains("graphs")).collect();
    assert_eq!(graphs.len(), 2, "{graphs:?}");
    for g in graphs {
        assert!(g.predicted_ns.is_none(), "{}", g.name);
        assert!(
            matches!(&g.here, analysis::help::Here::Not(w) if w.contains("need a GPU")),
            "{:?}",
            g.here
        );
    }
}

#[test]
fn on_the_h200_the_transformers_rows_say_what_to_run_and_the_batches_check_within_20_percent() {
    // gen20 (2026-12-02, H200): the peer's rows and the op crates', no graph rows
    let (_dir, run) = common::merged("gen20");
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let q = common::h200_transformers(&run, &cfg);
    let pred = predict_with(&run, &fits, &q).unwrap();
    let rows = common::levers(&run, &fits, &q, &pred, &[]);
    let row = |name: &str| rows.iter().find(|l| l.name.starts_with(name)).unwrap();
    for b in ["batch 8", "batch 64"] {
        let c = row(b).check().unwrap();
        assert!((0.8..=1.2).contains(&c), "{b}: predicted / measured {c}");
    }
    let graphs = row("CUDA/HIP graphs");
    assert!(graphs.predicted_ns.is_none());
    // the command that adds the graph modes' rows into the same run
    let why = graphs.unpriced.as_deref().unwrap();
    assert!(
        why.contains("OPBENCH_MODES=graph,graph_cold") && why.contains("OPBENCH_RUN="),
        "{why}"
    );
    let stat = row("static cache alone");
    assert!(stat.unpriced.as_deref().unwrap().contains("`sdpa_static`"));
}

/// The H200 run made for these rows (`help-2026-12-03/`: qwen3-0.6b at B = 1, 8, 64,
/// L = 1024; every op crate and the decode crate in the pipelined, device and graph modes
/// at f16, the op crates at bf16, the peer with generate() as it is, with a static cache
/// and graphed).
fn h200_levers(batch: usize) -> (analysis::help::Lever, Vec<analysis::help::Lever>) {
    levers_of(&common::fixture("help-2026-12-03"), batch)
}

/// The transformers profile's query on an H200 run at `batch`, L = 1024, f16, priced by
/// the host model predict would pick.
fn h200_query<'a>(run: &rundir::Run, cfg: &'a ModelConfig, batch: usize) -> Query<'a> {
    let q = Query {
        device: "cuda:0".parse().unwrap(),
        dtype: rundir::DType::F16,
        ..common::cpu_query(cfg, Phase::Decode, batch, 1024, StepProfile::Transformers)
    };
    Query {
        host: analysis::predict::HostModel::default_for(run, &q),
        ..q
    }
}

/// The transformers profile's levers on an H200 run at `batch`, L = 1024.
fn levers_of(
    run: &rundir::Run,
    batch: usize,
) -> (analysis::help::Lever, Vec<analysis::help::Lever>) {
    let fits = fit_run(run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let q = h200_query(run, &cfg, batch);
    let pred = predict_with(run, &fits, &q).unwrap();
    let bound = bandwidth_bound(run, &q, &pred);
    let rows = levers(run, &fits, &q, &pred, &bound, &[]);
    (bound, rows)
}

#[test]
fn on_the_h200_every_row_is_present_and_each_measured_change_checks_within_20_percent() {
    for batch in [1, 8, 64] {
        let (bound, rows) = h200_levers(batch);
        assert!(bound.predicted_ns.is_some());
        let names: Vec<&str> = rows.iter().map(|l| l.name.as_str()).collect();
        let mut want = vec![
            "the step as it is",
            "CUDA/HIP graphs",
            "static cache alone",
            "fused kernels",
            "the fastest SDPA backend",
            "bf16 weights",
            "a host 1.5× faster",
        ];
        want.extend([8, 64].iter().filter(|&&b| b > batch).map(|b| match b {
            8 => "batch 8",
            _ => "batch 64",
        }));
        for w in &want {
            assert!(
                names.iter().any(|n| n.starts_with(w)),
                "B={batch}: no {w} in {names:?}"
            );
        }
        // each priced change with a measured counterpart: within ±20% of it
        let mut checked = 0;
        for l in &rows {
            if let Some(c) = l.check() {
                assert!((0.8..=1.2).contains(&c), "B={batch} {}: {c}", l.name);
                checked += 1;
            }
        }
        // graphs, fused, bf16, the step itself, and the larger batches
        assert!(
            checked >= 4 + want.len() - 7,
            "B={batch}: {checked} checked"
        );
        // ranked by tokens/s, the unpriced last, the query's batch before the others
        ranked(&rows, batch);
        // a run from before the static cache's parts were measured: its generate()
        // from a prompt stands beside the row, which names the parts to measure
        let stat = rows
            .iter()
            .find(|l| l.name == "static cache alone")
            .unwrap();
        assert!(stat.predicted_ns.is_none() && stat.measured_ns.is_some());
        assert!(stat.unpriced.as_deref().unwrap().contains("mask_static"));
    }
}

#[test]
fn graphs_are_the_calls_replayed_with_a_static_cache_plus_generates_own_loop() {
    let run = common::fixture("help-2026-12-03");
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let base = Query {
        device: "cuda:0".parse().unwrap(),
        dtype: rundir::DType::F16,
        ..common::cpu_query(&cfg, Phase::Decode, 64, 1024, StepProfile::Transformers)
    };
    let (_, rows) = h200_levers(64);
    let graphs = rows
        .iter()
        .find(|l| l.name == analysis::help::COMPILED)
        .unwrap();
    let at = |profile| {
        predict_with(
            &run,
            &fits,
            &Query {
                profile,
                mode: rundir::Mode::Graph,
                ..base.clone()
            },
        )
        .unwrap()
    };
    let (hf, fused) = (at(StepProfile::HfEager), at(StepProfile::Fused));
    let cache = |p: &analysis::predict::Prediction| -> f64 {
        p.components
            .iter()
            .filter(|c| c.op == Some(OpKind::KvCache))
            .map(|c| c.calls as f64 * c.per_call_ns)
            .sum()
    };
    // at B = 64 the DynamicCache's cats are a large part of the replayed step
    assert!(
        cache(&hf) > 0.2 * hf.step_ns,
        "{} of {}",
        cache(&hf),
        hf.step_ns
    );
    let lp = analysis::help::peer_token(&run, &base, "generate_loop").unwrap();
    let want = hf.step_ns - cache(&hf) + cache(&fused) + lp;
    assert!((graphs.predicted_ns.unwrap() - want).abs() < 1e-6);
    assert!(graphs.measured_ns.is_some());
}

#[test]
fn a_family_opbench_cannot_compose_is_refused_with_its_reason() {
    let run = common::fixture(RUN);
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("gemma-3-1b").unwrap();
    let q = common::cpu_query(&cfg, Phase::Decode, 1, 128, StepProfile::HfEager);
    let e = predict_with(&run, &fits, &q).unwrap_err().to_string();
    assert!(e.contains("gemma family") && e.contains("GeGLU"), "{e}");
}

/// The second lease's help run (published in results/): the static cache's parts measured.
fn help2() -> rundir::Run {
    rundir::Run::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../results/2026-12-03-nvidia-h200-cuda-torch2.11.0-help2"),
    )
    .unwrap()
}

#[test]
fn a_static_cache_swaps_the_dynamic_caches_parts_host_and_device_apart() {
    let run = help2();
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    for batch in [1, 8, 64] {
        let q = h200_query(&run, &cfg, batch);
        let pred = predict_with(&run, &fits, &q).unwrap();
        let (_, rows) = levers_of(&run, batch);
        let stat = rows
            .iter()
            .find(|l| l.name == "static cache alone")
            .unwrap();
        // by hand: what a static cache changes, like for like from Python: its update and
        // SDPA per layer and its mask in, DynamicCache's update (beyond its cats), its two
        // cats, SDPA and mask out; at the smallest batch's time (scaled) on the host and at
        // this batch's on the device; generate()'s loop on top
        let row = |op: OpKind, variant: &str, site: &str, b: usize| {
            run.ok_rows()
                .find(|r| {
                    r.op == op
                        && r.variant == variant
                        && r.site == site
                        && r.batch == b
                        && r.dtype == q.dtype
                })
                .and_then(|r| r.median_ns)
                .unwrap()
        };
        let hf = |site: &str, b: usize| row(OpKind::Decode, "transformers", site, b);
        let change = |b: usize| {
            28.0 * (hf("cache_update_static", b) + hf("sdpa_static", b)
                - hf("cache_update", b)
                - row(OpKind::KvCache, "py-cat", "k", b)
                - row(OpKind::KvCache, "py-cat", "v", b)
                - row(OpKind::Sdpa, "py-auto", "attn", b))
                + hf("mask_static", b)
                - hf("mask", b)
        };
        let host = pred.host_ns + change(1) * pred.host_scale();
        let device = pred.device_ns + change(batch);
        let peer = |b: usize, site: &str| {
            analysis::help::peer_token(
                &run,
                &Query {
                    batch: b,
                    ..q.clone()
                },
                site,
            )
            .unwrap()
        };
        let want = host.max(device) + peer(batch, "generate_loop");
        assert!(
            (stat.predicted_ns.unwrap() - want).abs() < 1e-6,
            "B={batch}"
        );
        // checked against generate() from a static cache of L, sampled in the same run
        assert_eq!(
            stat.measured_ns,
            Some(peer(batch, "generate_static_from_l"))
        );
        assert!(stat.unpriced.is_none());
        // every row of the first lease's table is here too, priced or measured
        for name in [
            analysis::help::COMPILED,
            "fused kernels",
            "bf16 weights",
            "the step as it is",
        ] {
            let l = rows.iter().find(|l| l.name == name).unwrap();
            assert!(
                l.predicted_ns.is_some() && l.measured_ns.is_some(),
                "B={batch} {name}"
            );
        }
    }
}

#[test]
fn graphs_are_checked_against_the_graphed_generate_from_the_steps_l_where_the_run_has_it() {
    let mut run = help2();
    let graphs = |run: &rundir::Run| graphs_row(run, 8);
    // before 2026-12-04 only the graphed generate() from a prompt of 16
    let old = graphs(&run);
    let prompt16 = run
        .ok_rows()
        .find(|r| r.site == "generate_graph" && r.batch == 8 && r.dtype == rundir::DType::F16)
        .unwrap()
        .clone();
    assert_eq!(old.measured_ns, prompt16.median_ns);
    // a planted row at the step's L, 3.0 ms a token: the check reads it, the price stays
    let mut from_l = prompt16;
    from_l.key.series.site = "generate_graph_from_l".into();
    from_l.key.series.kv_len = Some(1025);
    from_l.median_ns = Some(3.0e6);
    run.results.push(from_l);
    let new = graphs(&run);
    assert_eq!(new.measured_ns, Some(3.0e6));
    assert_eq!(new.predicted_ns, old.predicted_ns);
}

#[test]
fn graphs_price_the_attention_the_static_caches_graph_runs_where_the_peer_timed_it() {
    let mut run = common::fixture("help-2026-12-03");
    let graphs = |run: &rundir::Run| graphs_row(run, 64);
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    let hf = predict_with(
        &run,
        &fits,
        &Query {
            profile: StepProfile::HfEager,
            mode: rundir::Mode::Graph,
            ..h200_query(&run, &cfg, 64)
        },
    )
    .unwrap();
    let sdpa: Vec<_> = hf
        .components
        .iter()
        .filter(|c| c.op == Some(OpKind::Sdpa))
        .collect();
    let (sdpa_ns, calls) = sdpa.iter().fold((0.0, 0), |(ns, n), c| {
        (ns + c.calls as f64 * c.per_call_ns, n + c.calls)
    });
    assert_eq!(calls, 28, "one attention a layer");
    // without the row: SDPA over the filled cache, as the op crate timed it
    let old = graphs(&run).predicted_ns.unwrap();
    // a planted row of the graphed static attention, 300 µs a call at B = 64 (none at B = 8)
    let mut row = run
        .ok_rows()
        .find(|r| r.site == "mask" && r.batch == 64 && r.dtype == rundir::DType::F16)
        .unwrap()
        .clone();
    row.key.series.site = "sdpa_static_graph".into();
    row.median_ns = Some(300e3);
    run.results.push(row);
    let new = graphs(&run).predicted_ns.unwrap();
    let want = old - sdpa_ns + 28.0 * 300e3;
    assert!((new - want).abs() < 1e-3 * want, "{new} vs {want}");
    // another batch keeps its own price
    let at8 = |run: &rundir::Run| graphs_row(run, 8).predicted_ns;
    let mut without = run.clone();
    without.results.pop();
    assert_eq!(at8(&run), at8(&without));
}

/// The graphs row of `run`'s levers at `batch`.
fn graphs_row(run: &rundir::Run, batch: usize) -> analysis::help::Lever {
    let (_, rows) = levers_of(run, batch);
    rows.into_iter()
        .find(|l| l.name == analysis::help::COMPILED)
        .unwrap()
}

#[test]
fn one_streams_remedies_rank_before_serving_more_sequences() {
    // help5 (the H200, 2026-12-06) at B = 1: batch 64 serves 95× the tokens, but no single
    // stream gets them; the remedies for the one stream come first, graphs on top
    let run = rundir::Run::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../results/2026-12-06-nvidia-h200-cuda-torch2.11.0-help5"),
    )
    .unwrap();
    let (_, rows) = levers_of(&run, 1);
    let first_more = rows.iter().position(|l| l.batch != 1).expect("batch rows");
    assert!(
        rows[first_more..].iter().all(|l| l.batch != 1),
        "{:?}",
        rows.iter().map(|l| (&l.name, l.batch)).collect::<Vec<_>>()
    );
    assert!(rows[0].name.contains("graphs"), "{}", rows[0].name);
    let more = &rows[first_more..];
    assert!(
        more.windows(2)
            .all(|w| w[0].tokens_per_s() >= w[1].tokens_per_s()),
        "serving more ranks by tokens/s in all"
    );
}

/// `rows` in [`analysis::help::rank`]'s order: the query's `batch` first, then the others;
/// in each, those that gain, the step as it is, those that gain nothing, those with no
/// figure; in each of those, those that can run here, then the unchecked, then those that
/// cannot; in each of those, by tokens/s.
fn ranked(rows: &[analysis::help::Lever], batch: usize) {
    use analysis::help::AS_IS;
    let base = rows
        .iter()
        .find(|l| l.name == AS_IS)
        .expect("the step as it is");
    let split = rows
        .iter()
        .position(|l| l.batch != batch)
        .unwrap_or(rows.len());
    assert!(rows[split..].iter().all(|l| l.batch != batch));
    let class = |l: &analysis::help::Lever| match () {
        _ if l.name == AS_IS => 1,
        _ if l.tokens_per_s().is_none() => 3,
        _ if l.no_gain(base) => 2,
        _ => 0,
    };
    let here = |l: &analysis::help::Lever| match l.here.word() {
        "yes" => 0,
        "?" => 1,
        _ => 2,
    };
    let names = |part: &[analysis::help::Lever]| {
        part.iter()
            .map(|l| (l.name.clone(), class(l), l.here.word()))
            .collect::<Vec<_>>()
    };
    for part in [&rows[..split], &rows[split..]] {
        for w in part.windows(2) {
            let (a, b) = ((class(&w[0]), here(&w[0])), (class(&w[1]), here(&w[1])));
            assert!(a <= b, "out of order: {:?}", names(part));
            if a == b {
                if let (Some(x), Some(y)) = (w[0].tokens_per_s(), w[1].tokens_per_s()) {
                    assert!(x >= y, "tokens/s: {:?}", names(part));
                }
            }
        }
    }
}

/// A change that gains nothing (≤ 1.00×, or its priced interval holding the step as it is)
/// never ranks above one that gains, whether it runs here or not: planted rows.
#[test]
fn a_change_with_no_gain_ranks_below_every_change_that_gains() {
    use analysis::help::{AS_IS, Here, Lever, rank};
    let row = |name: &str, ns: f64, here: Here, interval: Option<(f64, f64)>| Lever {
        name: name.into(),
        action: String::new(),
        batch: 1,
        predicted_ns: Some(ns),
        measured_ns: None,
        unpriced: None,
        verdict: None,
        derived: None,
        interval,
        here,
    };
    let yes = || Here::Runs("planted".into());
    let no = || Here::Not("planted".into());
    let mut rows = vec![
        row("flat, runs here", 99.9, yes(), None),
        row("knob within its interval", 95.0, yes(), Some((90.0, 101.0))),
        row(AS_IS, 100.0, yes(), None),
        row("slower", 120.0, yes(), None),
        row("gains, not here", 80.0, no(), None),
        row("gains, here", 90.0, yes(), None),
        row("knob beyond its interval", 94.0, yes(), Some((92.0, 96.0))),
    ];
    let base = rows[2].clone();
    assert!(rows[0].no_gain(&base) && rows[1].no_gain(&base) && rows[3].no_gain(&base));
    assert!(!rows[4].no_gain(&base) && !rows[6].no_gain(&base) && !base.no_gain(&base));
    rank(&mut rows, 1);
    let order: Vec<&str> = rows.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        order,
        [
            "gains, here",
            "knob beyond its interval",
            "gains, not here",
            AS_IS,
            "knob within its interval",
            "flat, runs here",
            "slower"
        ]
    );
    ranked(&rows, 1);
}

#[test]
fn a_stalled_backend_row_saves_no_more_than_the_steps_attention() {
    // tch's `auto` SDPA at the step's shape read 90× the others in a contended CPU run
    // (2026-12-06): the fastest backend's row may take away the attention, never more
    let mut run = common::fixture(RUN);
    for r in run.results.iter_mut() {
        if r.op == OpKind::Sdpa && r.variant == "auto" && r.phase == Phase::Decode {
            r.median_ns = r.median_ns.map(|x| x * 1000.0);
        }
    }
    let fits = fit_run(&run);
    let cfg = ModelConfig::builtin("qwen3-0.6b").unwrap();
    // the transformers step calls SDPA from Python (`py-auto`); tch's rows price the backends
    let q = common::cpu_query(&cfg, Phase::Decode, 1, 128, StepProfile::Transformers);
    let pred = predict_with(&run, &fits, &q).unwrap();
    let rows = common::levers(&run, &fits, &q, &pred, &[]);
    let sdpa = rows
        .iter()
        .find(|l| l.name.starts_with("the fastest SDPA backend"))
        .unwrap();
    let attention = common::op_ns(&pred, OpKind::Sdpa, |c| c.per_call_ns);
    let step = sdpa.predicted_ns.unwrap();
    assert!(
        step > 0.0 && step >= pred.step_ns - attention - 1.0,
        "{step} {attention}"
    );
}
