//! generate() as the user runs it, with a static cache, and with CUDA graphs: the peer's
//! rows on the H200 (tests/fixtures/generate-2026-12-01).
#![allow(clippy::unwrap_used)]

use std::path::Path;

use rundir::{Run, Status};

#[test]
fn on_the_h200_graphs_make_generate_four_to_six_times_faster_and_a_static_cache_alone_does_not() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/generate-2026-12-01/g");
    let tmp = tempfile::tempdir().unwrap();
    for f in ["env.json", "results.csv.gz", "samples.csv.gz"] {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    let run = Run::load(tmp.path()).unwrap();
    let per_token = |site: &str, b: usize| {
        let r = run
            .results
            .iter()
            .find(|r| r.key.site == site && r.key.batch == b)
            .unwrap();
        assert_eq!(r.status, Status::Ok, "{r:?}");
        r.median_ns.unwrap()
    };
    // ms per new token, B = 1: 21.58 eager, 25.27 static, 3.74 graphed (46, 40, 267 tokens/s);
    // B = 8: 20.38, 25.12, 4.69 (393, 318, 1,706 tokens/s)
    for (b, speedup) in [(1, 5.76), (8, 4.34)] {
        let (eager, stat, graph) = (
            per_token("generate", b),
            per_token("generate_static", b),
            per_token("generate_graph", b),
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
