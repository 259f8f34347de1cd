//! generate() as the user runs it, with a static cache, and with CUDA graphs: the peer's
//! rows on the H200 (tests/fixtures/generate-2026-12-01): `g` in one lease, `g1` and `g2`
//! (an A/A pair of the same build, two processes) in a later one.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use rundir::{Run, Status};

fn load(name: &str) -> (tempfile::TempDir, Run) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/generate-2026-12-01")
        .join(name);
    let tmp = tempfile::tempdir().unwrap();
    for f in ["env.json", "results.csv.gz", "samples.csv.gz"] {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    let run = Run::load(tmp.path()).unwrap();
    (tmp, run)
}

/// ns per new token of `site` at batch `b`.
fn per_token(run: &Run, site: &str, b: usize) -> f64 {
    let r = run
        .results
        .iter()
        .find(|r| r.key.site == site && r.key.batch == b)
        .unwrap();
    assert_eq!(r.status, Status::Ok, "{r:?}");
    r.median_ns.unwrap()
}

#[test]
fn on_the_h200_graphs_make_generate_four_to_six_times_faster_and_a_static_cache_alone_does_not() {
    let (_t, run) = load("g");
    // ms per new token, B = 1: 21.58 eager, 25.27 static, 3.74 graphed (46, 40, 267 tokens/s);
    // B = 8: 20.38, 25.12, 4.69 (393, 318, 1,706 tokens/s)
    for (b, speedup) in [(1, 5.76), (8, 4.34)] {
        let (eager, stat, graph) = (
            per_token(&run, "generate", b),
            per_token(&run, "generate_static", b),
            per_token(&run, "generate_graph", b),
        );
        assert!(
            ((eager / graph) - speedup).abs() < 0.01,
            "B={b}: {}",
            eager / graph
        );
        assert!(
            stat > eager,
            "B={b}: a static cache alone is no faster here"
        );
    }
}

#[test]
fn the_graphs_speedup_is_far_beyond_what_two_processes_of_one_build_differ_by() {
    // the A/A pair: the same build in two processes of one lease read generate() 34.4 and
    // 24.7 ms per token at B = 1 (1.39×), the graphed one 5.75 and 4.63 ms (1.24×); within
    // each process the graphs made it 5.98× and 5.32× (g2 at B = 8: 5.72×; g1's B = 8 was
    // cut by the call's time limit), and the static cache alone was slower in both
    let (_a, g1) = load("g1");
    let (_b, g2) = load("g2");
    let aa = per_token(&g1, "generate", 1) / per_token(&g2, "generate", 1);
    assert!((aa - 1.393).abs() < 0.005, "{aa}");
    let aa_graph = per_token(&g1, "generate_graph", 1) / per_token(&g2, "generate_graph", 1);
    assert!((aa_graph - 1.240).abs() < 0.005, "{aa_graph}");
    for (run, b) in [(&g1, 1), (&g2, 1), (&g2, 8)] {
        let speedup = per_token(run, "generate", b) / per_token(run, "generate_graph", b);
        assert!(speedup > 5.0 && speedup > 3.0 * aa, "B={b}: {speedup}");
        assert!(per_token(run, "generate_static", b) > per_token(run, "generate", b));
    }
    assert!(g1.results.iter().all(|r| r.key.batch == 1));
}
